# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one way this collection hides secrets in text it reports (private to this collection).

Every module that may echo a token, an API key or a credential header uses ``redact`` or
``scrub``, so a reader sees one placeholder, the one Ansible itself prints for ``no_log``
values.
"""

from __future__ import annotations

REDACTED = "********"


def _secret_list(secrets):
    """``secrets`` (one string or an iterable of them) without empties, longest first, so
    that a secret containing another is replaced whole."""
    if isinstance(secrets, str):
        secrets = [secrets]
    return sorted({str(secret) for secret in secrets or () if secret}, key=lambda item: (-len(item), item))


def redact(text, secrets):
    """``text`` with every secret (a string or an iterable of strings) replaced by REDACTED."""
    if not text:
        return text
    for secret in _secret_list(secrets):
        text = text.replace(secret, REDACTED)
    return text


def scrub(value, secrets):
    """A copy of a result (dicts, lists, strings) with every secret redacted from its strings."""
    secrets = _secret_list(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {key: scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    return value
