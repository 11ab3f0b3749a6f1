"""The sandbox's rootfs cache: built once per machine, whoever asks for it at the same time."""

import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib import rootfs  # noqa: E402


def test_two_callers_at_once_get_one_build_and_the_same_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(rootfs, "CACHE_ROOT", tmp_path)
    monkeypatch.setattr(rootfs, "customise", lambda root: None)
    builds = []

    def debootstrap(argv, **kwargs):
        if argv[0] != "debootstrap":
            return subprocess.CompletedProcess(argv, 0)
        target = Path(argv[-2])
        builds.append(target)
        target.mkdir(parents=True)
        time.sleep(0.3)  # long enough for the other caller to arrive mid-build
        (target / "etc").mkdir()
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(rootfs.subprocess, "run", debootstrap)
    results = []

    def ask():
        results.append(rootfs.ensure_rootfs(lambda message: None))

    callers = [threading.Thread(target=ask), threading.Thread(target=ask)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(builds) == 1
    assert results[0] == results[1] == rootfs.rootfs_path()
    assert (rootfs.rootfs_path() / ".gpufleet-rootfs-complete").exists()
    assert not rootfs.rootfs_path().with_name(rootfs.rootfs_path().name + ".building").exists()
