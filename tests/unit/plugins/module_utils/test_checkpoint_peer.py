"""Fleet staging: the peer file service, the source rule, and several hosts staging one revision.

The fleet tests run real peer servers on loopback ports and the real huggingface_hub against the
sandbox model hub served in-process (see test_checkpoint_lifecycle), one layout per "host".
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_peer as peer_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_stage as stage_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_stage import promote
from test_checkpoint_lifecycle import BIG, REPO, do_pin, do_stage, env, faults, fetched_files, hub, mark, requests_since  # noqa: F401  # pylint: disable=unused-import

TOKEN = "run-token-0123456789"


def shard(size, path):
    return {"path": path, "size": size}


# -- pure parts ----------------------------------------------------------------------------


def test_the_token_is_compared_by_its_hash_and_nothing_else_passes():
    digest = peer_mod.token_digest(TOKEN)
    assert peer_mod.authorized("Bearer " + TOKEN, digest)
    for header in (None, "", TOKEN, "Bearer", "Bearer wrong", "Basic " + TOKEN):
        assert not peer_mod.authorized(header, digest)


@pytest.mark.parametrize("header,size,expected", [
    (None, 10, (0, 10)), ("bytes=4-", 10, (4, 10)), ("bytes=2-5", 10, (2, 6)), ("bytes=0-99", 10, (0, 10)),
    ("bytes=10-", 10, None), ("bytes=-5", 10, None), ("bytes=1-2,4-5", 10, None), ("items=1-", 10, None),
])
def test_ranges(header, size, expected):
    assert peer_mod.parse_range(header, size) == expected


def test_owners_are_balanced_by_size_and_the_same_on_every_host():
    batches = [[shard(100, "a")], [shard(90, "b")], [shard(60, "c")], [shard(40, "d")], [shard(1, "e"), shard(1, "f")]]
    owners = peer_mod.assign_owners(batches, ["h2", "h1", "h3"])
    assert owners == peer_mod.assign_owners(list(reversed(batches)), ["h3", "h2", "h1"])
    assert owners["e"] == owners["f"]
    load = {}
    for batch in batches:
        load[owners[batch[0]["path"]]] = load.get(owners[batch[0]["path"]], 0) + sum(e["size"] for e in batch)
    assert sorted(load.values()) == [100, 92, 100] or max(load.values()) - min(load.values()) <= 10


@pytest.mark.parametrize("workers, members, expected", [(4, 1, 4), (4, 2, 2), (4, 3, 2), (4, 4, 1), (4, 8, 1), (16, 8, 2), (1, 1, 1)])
def test_the_fleet_shares_one_hosts_origin_transfers(workers, members, expected):
    assert peer_mod.fleet_origin_workers(workers, members) == expected


def test_source_rule():
    batch = [shard(10, "s1")]
    owners = {"s1": "h2"}
    alive = {"h1": True, "h2": True, "h3": True}

    def choose(statuses, excluded=(), running=None, me="h1"):
        return peer_mod.choose_source(batch, me, ["h1", "h2", "h3"], owners, statuses, set(excluded), running or {}, lambda m: alive[m])

    nobody = {"h2": {"verified": []}, "h3": {"verified": []}}
    # The owner fetches it from the origin; the others wait for the owner.
    assert choose(nobody, me="h2") == ("origin", None)
    assert choose(nobody) == ("wait", "h2")
    # A holder serves it; among holders, the one this host fetches least from.
    both = {"h2": {"verified": ["s1"]}, "h3": {"verified": ["s1"]}}
    assert choose(both, running={"h2": 2, "h3": 0}) == ("peer", "h3")
    assert choose(both, excluded=["h3"], running={"h2": 2}) == ("peer", "h2")
    # A holder that served it corrupted is never asked again; the owner itself may be that holder.
    assert choose({"h2": {"verified": ["s1"]}, "h3": {"verified": []}}, excluded=["h2"])[0] in ("origin", "wait")
    # The owner is gone: its batches move to a live member, the same one for every host.
    alive["h2"] = False
    picks = set(choose(nobody, me=me)[1] or me for me in ("h1", "h3"))
    assert len(picks) == 1 and picks <= {"h1", "h3"}


def test_fleet_eta_is_the_slowest_host_still_fetching():
    hosts = [{"state": "present"}, {"state": "downloading", "bytes_total": 100, "bytes_verified": 50, "rate_bytes_per_s": 10},
             {"state": "downloading", "bytes_total": 100, "bytes_verified": 90, "rate_bytes_per_s": 1}]
    assert peer_mod.fleet_eta(hosts) == 10.0
    assert peer_mod.fleet_eta(hosts + [{"state": "downloading", "bytes_total": 10, "bytes_verified": 0}]) is None


# -- the server ----------------------------------------------------------------------------


@pytest.fixture
def staged_host(hub, env):  # noqa: F811
    layout = layout_mod.Layout(env / "seed" / "big")
    commit = hub["revs"][BIG]["A"]
    do_pin(hub, layout, BIG, commit)
    do_stage(hub, layout, BIG, commit)
    return layout, commit


def start_server(layout, port=0):
    server = peer_mod.PeerServer(layout, "127.0.0.1", port, peer_mod.token_digest(TOKEN))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server


def get(server, path, token=TOKEN, headers=None):
    url = "http://127.0.0.1:%d%s" % (server.server_address[1], path)
    request = urllib.request.Request(url, headers=dict(headers or {}, **({"Authorization": "Bearer " + token} if token else {})))
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_server_answers_only_with_the_token_and_only_for_manifest_files(staged_host):
    layout, commit = staged_host
    server = start_server(layout)
    try:
        shard_path = "model-00001-of-00002.safetensors"
        data = Path(layout.revision_dir(commit), shard_path).read_bytes()
        assert get(server, "/v1/file/%s/%s" % (commit, shard_path), token=None)[0] == 401
        assert get(server, "/v1/file/%s/%s" % (commit, shard_path), token="wrong")[0] == 401
        assert get(server, "/v1/file/%s/%s" % (commit, shard_path)) == (200, data)
        assert get(server, "/v1/file/%s/%s" % (commit, shard_path), headers={"Range": "bytes=1000-"}) == (206, data[1000:])
        assert get(server, "/v1/file/%s/%s" % (commit, shard_path), headers={"Range": "bytes=%d-" % len(data)})[0] == 416
        # Anything not in the pinned manifest does not exist for the server.
        for rel in ("../manifests/%s.json" % commit, "%2e%2e/%2e%2e/.lock", "extra.bin"):
            assert get(server, "/v1/file/%s/%s" % (commit, rel))[0] == 404
        assert get(server, "/v1/file/%s/%s" % ("0" * 40, shard_path))[0] == 404
        status = peer_mod.PeerClient("seed", "http://127.0.0.1:%d" % server.server_address[1], TOKEN, 5).status(commit)
        assert status["state"] == "present" and shard_path in status["verified"]
        assert server.stats["refused"] == {"127.0.0.1": 2}
    finally:
        server.shutdown()
        server.server_close()


def test_a_changed_file_is_no_longer_served(staged_host):
    layout, commit = staged_host
    server = start_server(layout)
    try:
        path = os.path.join(layout.revision_dir(commit), "model-00002-of-00002.safetensors")
        st = os.stat(path)
        with open(path, "r+b") as handle:
            handle.write(b"\0\0\0\0")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: the stamp's ctime still tells
        assert get(server, "/v1/file/%s/model-00002-of-00002.safetensors" % commit)[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_serve_records_its_pid_and_stop_leaves_nothing_listening(staged_host, tmp_path):
    layout, _commit = staged_host
    run_file = str(tmp_path / "run" / "peer.json")
    ready = threading.Event()
    probe = peer_mod.PeerServer(layout, "127.0.0.1", 0, "x")
    port = probe.server_address[1]
    probe.server_close()
    outcome = {}

    stop = threading.Event()

    def run():
        outcome.update(peer_mod.serve(layout, "127.0.0.1", port, TOKEN, 30, run_file, ready=ready, stop_event=stop))

    thread = threading.Thread(target=run)
    thread.start()
    assert ready.wait(10)
    record = layout_mod.read_json(run_file)
    assert record["pid"] == os.getpid() and record["port"] == port and peer_mod.listening_on(port)
    assert TOKEN not in Path(run_file).read_text()
    # The drift check's view: a running service is a change to undo.
    assert peer_mod.stop(run_file, port, check_mode=True)["changed"]
    # In a test the pid is pytest's own: stop it through the event rather than with a signal.
    stop.set()
    thread.join(timeout=10)
    assert not os.path.exists(run_file) and not peer_mod.listening_on(port)
    assert outcome["timed_out"] is False
    assert not peer_mod.stop(run_file, port, check_mode=True)["changed"]


# -- several hosts -------------------------------------------------------------------------


class Fleet:
    """N layouts, each with its peer server on a loopback port, pinned to one commit."""

    def __init__(self, hub, root, names, commit):  # noqa: F811
        self.hub = hub
        self.commit = commit
        self.layouts = dict((name, layout_mod.Layout(root / name / "big")) for name in names)
        self.servers = {}
        for name, layout in self.layouts.items():
            do_pin(hub, layout, BIG, commit)
            self.servers[name] = start_server(layout)
        self.peers = [{"name": name, "url": "http://127.0.0.1:%d" % server.server_address[1]}
                      for name, server in self.servers.items()]

    def stage(self, name, members=None, **options):
        """Stage on ``name`` with ``members`` (default: every host) as the run's staging hosts."""
        peers = [p for p in self.peers if members is None or p["name"] in members]
        return do_stage(self.hub, self.layouts[name], BIG, self.commit, peers=peers, peer_name=name,
                        peer_token=TOKEN, **options)

    def stage_all(self, names=None, **options):
        """One run on ``names`` at once, as the role starts them: those hosts are the run's staging hosts."""
        names = names or list(self.layouts)
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            return dict(zip(names, pool.map(lambda n: self.stage(n, members=names, **options), names)))

    def close(self):
        for server in self.servers.values():
            server.shutdown()
            server.server_close()


@pytest.fixture
def fleet(hub, env):  # noqa: F811
    made = []

    def make(names, commit=None):
        made.append(Fleet(hub, env / "fleet", names, commit or hub["revs"][BIG]["A"]))
        return made[-1]

    yield make
    for item in made:
        item.close()


def lfs_files(hub):  # noqa: F811
    return ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def test_three_hosts_take_each_shard_once_from_the_origin(hub, fleet):  # noqa: F811
    group = fleet(["h1", "h2", "h3"])
    before = mark(hub)
    results = group.stage_all()
    assert all(r["state"] == "staged" for r in results.values())
    fetched = fetched_files(requests_since(hub, before))
    for path in lfs_files(hub):
        assert fetched.count(path) == 1, fetched
    total = results["h1"]["total_bytes"]
    assert sum(r["bytes_by_source"].get("origin", 0) for r in results.values()) <= 1.05 * total
    assert sum(sum(v for k, v in r["bytes_by_source"].items() if k != "origin") for r in results.values()) >= total
    for name in group.layouts:
        assert promote(group.layouts[name], group.commit)["changed"]


def test_a_host_joining_later_fetches_everything_from_peers(hub, fleet):  # noqa: F811
    group = fleet(["h1", "h2", "j1"])
    group.stage_all(["h1", "h2"])
    before = mark(hub)
    joined = group.stage("j1")
    assert joined["state"] == "staged" and "origin" not in joined["bytes_by_source"]
    assert fetched_files(requests_since(hub, before)) == []


def test_a_corrupted_file_from_a_peer_is_refused_named_and_fetched_again(hub, fleet, tmp_path):  # noqa: F811
    group = fleet(["h1", "h2"])
    group.stage("h1", members=["h1"])
    bad = "model-00001-of-00002.safetensors"
    corrupt = tmp_path / "corrupt.bin"
    shutil.copyfile(os.path.join(group.layouts["h1"].revision_dir(group.commit), bad), corrupt)
    with open(corrupt, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff" * 16)
    catalog = group.servers["h1"].catalog
    real = catalog.verified
    # Silent damage on the peer that its own checks did not see: it serves wrong bytes as verified.
    catalog.verified = lambda commit, manifest=None: dict(real(commit, manifest), **{bad: str(corrupt)})
    staged = group.stage("h2")
    assert staged["state"] == "staged"
    assert staged["refused_peers"] and staged["refused_peers"][0]["peer"] == "h1" and staged["refused_peers"][0]["path"] == bad
    assert staged["bytes_by_source"].get("origin", 0) == os.path.getsize(corrupt)
    assert any(e["event"] == "corrupt" and "from peer h1" in e["detail"] for e in staged["events"])


class _CutOff(peer_mod._PeerHandler):
    """A peer whose first transfer of each file dies a quarter of the way in."""

    cut = set()

    def _send_file(self, commit, rel):
        if rel in self.cut or not rel.endswith(".safetensors"):
            return super()._send_file(commit, rel)
        self.cut.add(rel)
        path = self.server.catalog.verified(commit).get(rel)
        size = os.path.getsize(path)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with open(path, "rb") as handle:
            self.wfile.write(handle.read(size // 4))
        self.wfile.flush()
        self.connection.shutdown(2)


def test_a_peer_cut_off_mid_transfer_costs_only_a_resume_from_another(hub, fleet):  # noqa: F811
    group = fleet(["h1", "h2", "h3"])
    group.stage_all(["h1", "h2"])
    for name in ("h1", "h2"):
        group.servers[name].RequestHandlerClass = _CutOff
    ranges = []
    real = peer_mod._PeerHandler._send_file

    def spy(self, commit, rel):
        ranges.append(self.headers.get("Range"))
        return real(self, commit, rel)

    peer_mod._PeerHandler._send_file = spy
    try:
        before = mark(hub)
        staged = group.stage("h3")
    finally:
        peer_mod._PeerHandler._send_file = real
    assert staged["state"] == "staged" and fetched_files(requests_since(hub, before)) == []
    cut = [e for e in staged["events"] if e["event"] == "peer_error"]
    assert sorted(e["path"] for e in cut) == lfs_files(hub)
    # What the first peer sent before it died was kept: the next source was asked for the rest only.
    resumed = [r for r in ranges if r]
    assert len(resumed) == 2 and all(r.startswith("bytes=") and r != "bytes=0-" for r in resumed), ranges


def test_an_unreachable_owner_hands_its_files_to_the_live_hosts(hub, fleet):  # noqa: F811
    group = fleet(["h1", "h2", "h3"])
    group.servers["h3"].shutdown()
    group.servers["h3"].server_close()
    started = time.monotonic()
    # h3 was to be one of the run's hosts, but its service is down.
    results = dict(zip(["h1", "h2"], ThreadPoolExecutor(2).map(lambda n: group.stage(n, stall_seconds=3), ["h1", "h2"])))
    assert all(r["state"] == "staged" for r in results.values())
    assert time.monotonic() - started < 120


# -- an upgrade on one host ----------------------------------------------------------------


def test_an_upgrade_takes_unchanged_files_from_the_served_revision(hub, env):  # noqa: F811
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit_a, commit_b = hub["revs"][REPO]["A"], hub["revs"][REPO]["B"]
    do_pin(hub, layout, REPO, commit_a)
    do_stage(hub, layout, REPO, commit_a)
    promote(layout, commit_a)
    served = dict((f["path"], f) for f in layout_mod.read_json(layout.manifest_path(commit_a))["files"])
    do_pin(hub, layout, REPO, commit_b)
    wanted = layout_mod.read_json(layout.manifest_path(commit_b))["files"]
    unchanged = sorted(f["path"] for f in wanted if f["path"] in served
                       and (f["sha256"], f["git_oid"], f["size"]) == (served[f["path"]]["sha256"], served[f["path"]]["git_oid"], served[f["path"]]["size"]))
    assert unchanged and len(unchanged) < len(wanted)
    before = mark(hub)
    staged = do_stage(hub, layout, REPO, commit_b)
    assert staged["state"] == "staged"
    assert sorted(fetched_files(requests_since(hub, before))) == sorted(set(f["path"] for f in wanted) - set(unchanged))
    assert staged["bytes_reused_locally"] == sum(f["size"] for f in wanted if f["path"] in unchanged)
    # A copy, not a link: the served revision's files and its stamp are untouched, and both verify.
    for path in unchanged:
        assert os.stat(os.path.join(layout.revision_dir(commit_a), path)).st_nlink == 1
    for commit in (commit_a, commit_b):
        assert stage_mod.staged_state(layout, layout_mod.read_json(layout.manifest_path(commit)), False, 2)["ok"]


# -- the status poller and the stop ----------------------------------------------------------


class _FlakyClient:
    """A peer whose status answers as scripted: a dict, or an exception."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.timeout = 1

    def status(self, commit):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_one_unanswered_poll_keeps_a_holder_three_forget_it():
    batches = [[shard(10, "s1")]]
    sources = peer_mod.FleetSources("h1", [{"name": "h1", "url": "x"}, {"name": "h2", "url": "http://h2"}], TOKEN, "c" * 40, batches)
    holder = {"state": "present", "verified": ["s1"]}
    late = peer_mod.PeerError("h2: status: timed out")
    sources.clients["h2"] = _FlakyClient([holder, late, late, late])
    sources.poll_once()
    assert sources.source_for(batches[0], set(), {}) == ("peer", "h2")
    for _poll in range(2):
        sources.poll_once()
        assert sources.source_for(batches[0], set(), {}) == ("peer", "h2") and sources.owner_alive("h2")
    sources.poll_once()
    assert not sources.owner_alive("h2")
    assert sources.source_for(batches[0], set(), {}) == ("origin", None)


def test_stop_ends_a_serving_process_by_its_run_file_and_nothing_listens(staged_host, tmp_path):
    import subprocess
    import sys

    layout, _commit = staged_host
    probe = peer_mod.PeerServer(layout, "127.0.0.1", 0, "x")
    port = probe.server_address[1]
    probe.server_close()
    run_file = tmp_path / "peer.json"
    code = ("import sys; from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as L, "
            "_checkpoint_peer as P; P.serve(L.Layout(sys.argv[1]), '127.0.0.1', int(sys.argv[2]), 'tok', 60, sys.argv[3])")
    child = subprocess.Popen([sys.executable, "-c", code, layout.model_dir, str(port), str(run_file)],
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    try:
        deadline = time.monotonic() + 20
        while not run_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        record = layout_mod.read_json(str(run_file))
        assert record["pid"] == child.pid and peer_mod.listening_on(port)
        # A run file whose pid was reused by another process is never acted on.
        layout_mod.write_json_atomic(str(tmp_path / "reused.json"), dict(record, start_ticks=record["start_ticks"] - 1))
        assert not peer_mod.stop(str(tmp_path / "reused.json"), port + 1)["was_running"] and child.poll() is None
        result = peer_mod.stop(str(run_file), port)
        assert result["was_running"] and result["changed"] and not result["listening"]
        assert child.wait(timeout=10) == 0 and not run_file.exists()
        assert not peer_mod.stop(str(run_file), port)["changed"]
    finally:
        if child.poll() is None:
            child.kill()


def test_a_file_is_copied_or_reflinked_byte_for_byte(tmp_path):
    source = tmp_path / "a.bin"
    source.write_bytes(os.urandom(100000))
    assert stage_mod.clone_or_copy(str(source), str(tmp_path / "b.bin")) in ("reflink", "copy")
    assert (tmp_path / "b.bin").read_bytes() == source.read_bytes()
