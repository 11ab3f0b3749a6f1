# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang stand-in for GPU-less sandbox hosts: NOT SGLang.

Only ``python3 -m sglang.launch_server`` exists here. It takes SGLang's launch flags, answers
SGLang's readiness endpoints itself and hands the model to a real vLLM OpenAI server (CPU build)
that it starts as a subprocess. See tools/sglang_standin/README.md for what is imitated and what
is not. Stdlib only, Python 3.9+.
"""

# A local version label, so nothing can mistake this package for a released SGLang.
__version__ = "0+standin"
