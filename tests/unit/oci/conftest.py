# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for the tools/oci/ociimage.py tests (helpers live in oci_helpers.py so test modules can import them)."""

import os
import shutil

import pytest
from oci_helpers import REGISTRY_BIN, REGISTRY_MISSING, Registry, load_ociimage, make_tree


@pytest.fixture(scope="session")
def oci():
    return load_ociimage()


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree")


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    if not (os.path.exists(REGISTRY_BIN) and os.access(REGISTRY_BIN, os.X_OK)):
        pytest.skip(REGISTRY_MISSING)
    reg = Registry(tmp_path_factory.mktemp("registry"))
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture
def skopeo():
    path = shutil.which("skopeo")
    if path is None:
        pytest.skip("skopeo not installed (optional: Debian's skopeo package, a containers/image client like podman's)")
    if os.geteuid() != 0:
        pytest.skip("the skopeo pull into a private containers-storage (vfs) needs root")
    return path
