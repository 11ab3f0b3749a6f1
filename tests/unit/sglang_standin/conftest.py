# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for the SGLang stand-in tests (helpers live in sglang_standin_helpers.py so test modules can import them)."""

import contextlib
import os
import signal

import pytest
from sglang_standin_helpers import FakeBackend, StandIn, alive, load_standin


@pytest.fixture(scope="session")
def standin_module():
    return load_standin()


@pytest.fixture
def backend(tmp_path):
    """A fake ``vllm`` for this test; killed at teardown if the stand-in left it running."""
    fake = FakeBackend(tmp_path)
    yield fake
    with contextlib.suppress(FileNotFoundError, ValueError):
        pid = fake.pid()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launch(backend):
    """Factory: start the stand-in with these flags (and extra environment); all are torn down after the test."""
    started = []

    def start(*args, env=None):
        standin = StandIn(backend, *args, env=env)
        started.append(standin)
        return standin

    yield start
    for standin in started:
        standin.close()
