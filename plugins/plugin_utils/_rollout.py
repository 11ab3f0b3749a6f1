# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout role's decisions (controller side, pure).

* :func:`serial_batches`: the play's hosts split into batches exactly as ansible-core splits them for ``serial``.
* :func:`batch_report`: at the end of a batch, what became of each host of the play (including the hosts that
  became unreachable, which run no task of their own) and whether the rollout must stop before the next batch.
* :func:`restore_problems`: what a recorded state lacks for a restore of the whole serving state.
* :func:`engine_label`: the engine of a record or a deployment in a few words (the summaries and messages).
"""

from __future__ import annotations

import re

# What a restore of the whole serving state needs from the state file, and where it is in it.
RESTORE_KEYS = (
    ("revision", ("revision",)),
    ("model_path", ("model_path",)),
    ("model", ("model",)),
    ("engine.unit", ("engine", "unit")),
    ("engine.unit_file", ("engine", "unit_file")),
    ("engine.unit_content", ("engine", "unit_content")),
    ("engine.env_file", ("engine", "env_file")),
    ("engine.env_content", ("engine", "env_content")),
    ("engine.url", ("engine", "url")),
    ("engine.ready_timeout", ("engine", "ready_timeout")),
)
# What each runtime adds: the venv the engine runs from, or the image (by digest) and the runtime
# that runs it. Records made before container engines have no runtime: they are venv records of vLLM.
RUNTIME_KEYS = {
    "venv": (("vllm_version", ("vllm_version",)), ("engine.venv", ("engine", "venv"))),
    "container": (("engine.image", ("engine", "image")), ("engine.container_engine", ("engine", "container_engine"))),
}
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
IMAGE_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
BEFORE_DEPLOYMENT = "failed or unreachable before the deployment"


def _batch_size(value, total):
    """ansible-core's pct_to_int: N, or N% of the play's hosts (at least 1)."""
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = int(text[:-1])
        except ValueError as exc:
            raise ValueError("serial %r: expected a number or a percentage" % value) from exc
        return int((percent / 100.0) * total) or 1
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError("serial %r: expected a number or a percentage" % value) from exc


def serial_batches(hosts, serial):
    """The batches of a play over ``hosts`` (in play order) with the play keyword ``serial`` (scalar or list).

    Same rules as ansible-core's PlaybookExecutor: each list item sizes one batch, the last one repeats, and a
    size of 0 or less (or no serial) puts every remaining host in one batch.
    """
    remaining = list(hosts)
    total = len(remaining)
    sizes = list(serial) if isinstance(serial, (list, tuple)) else ([serial] if serial not in (None, "") else [])
    if not sizes:
        sizes = [-1]
    batches, item = [], 0
    while remaining:
        size = _batch_size(sizes[item], total)
        if size <= 0:
            batches.append(remaining)
            break
        batches.append(remaining[:size])
        remaining = remaining[size:]
        item = min(item + 1, len(sizes) - 1)
    return batches


def batch_report(play_hosts, serial, active, outcomes, finished, started=None, max_fail_percentage=100):
    """What became of the hosts of the play at the end of the batch that ``active`` (its remaining hosts) is in.

    ``outcomes`` maps a host to its ``rollout_outcome`` (missing or empty: none); ``finished`` lists the hosts
    that reached the end of the play in this run, ``started`` those that read their state (the first rollout
    task). A host of this or an earlier batch that is neither active nor finished and has no outcome dropped
    out: after it started, it became unreachable (a host failing a stage always gets an outcome: the rescue
    sets it); before, it failed or became unreachable ahead of the deployment (fact gathering, a plan stage). ``stop`` is true when the hosts this
    batch lost (failed or unreachable) exceed ``max_fail_percentage`` of it and later batches exist: ansible-core
    counts only failed hosts against max_fail_percentage, so a lost connection alone would not stop the rollout.
    """
    hosts = list(play_hosts)
    active = [host for host in active if host in hosts]
    if not active:
        raise ValueError("no active host of the play: the report is made by a host still in the batch")
    outcomes = {host: value for host, value in dict(outcomes or {}).items() if value not in (None, "")}
    finished = set(finished or [])
    started = set(hosts if started is None else started)
    batches = serial_batches(hosts, serial)
    index = next(number for number, batch in enumerate(batches) if active[0] in batch)
    batch = batches[index]
    lost = [host for host in batch if host not in active]
    rows = []
    for number, members in enumerate(batches):
        for host in members:
            if number > index:
                outcome = "not started"
            elif host in outcomes:
                outcome = outcomes[host]
            elif host in active or host in finished:
                outcome = "not deployed in this run"
            elif host in started:
                outcome = "unreachable"
            else:
                outcome = BEFORE_DEPLOYMENT
            rows.append({"host": host, "batch": number + 1, "outcome": outcome})
    unreachable = [row["host"] for row in rows if row["outcome"] == "unreachable"]
    try:
        limit = float(max_fail_percentage)
    except (TypeError, ValueError) as exc:
        raise ValueError("max_fail_percentage %r: expected a number" % (max_fail_percentage,)) from exc
    later = [host for members in batches[index + 1:] for host in members]
    stop = bool(later) and len(lost) * 100.0 / len(batch) > limit
    lines = ["batch %d of %d: %s" % (index + 1, len(batches), ", ".join(batch))]
    lines += ["%s: %s" % (row["host"], row["outcome"]) for row in rows]
    if stop:
        lines.append("stopping the rollout: batch %d lost %d of %d host(s) (%s), more than max_fail_percentage %s; "
                     "not started: %s" % (index + 1, len(lost), len(batch), ", ".join(lost), _number(limit),
                                          ", ".join(later)))
    return {
        "batch": batch, "batch_number": index + 1, "batches": len(batches), "hosts": rows, "lost": lost,
        "unreachable": unreachable, "not_started": later, "stop": stop, "lines": lines,
    }


def _number(value):
    return str(int(value)) if float(value).is_integer() else str(value)


def _engine_of(state):
    engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
    return engine.get("name") or "vllm", engine.get("runtime") or "venv"


def restore_problems(state):
    """Why ``state`` (the parsed state file, or None) cannot be restored as a whole; empty when it can."""
    if state is None:
        return ["no verified state recorded"]
    if not isinstance(state, dict):
        return ["the state file does not hold a JSON object"]
    name, runtime = _engine_of(state)
    problems = []
    if name not in ENGINES:
        problems.append("the recorded engine %r is none of %s" % (name, ", ".join(ENGINES)))
    if runtime not in RUNTIME_KEYS:
        problems.append("the recorded runtime %r is none of %s" % (runtime, ", ".join(RUNTIME_KEYS)))
    missing = []
    for key_name, path in RESTORE_KEYS + RUNTIME_KEYS.get(runtime, ()):
        value = state
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None or (isinstance(value, str) and not value.strip() and key_name != "engine.env_content"):
            missing.append(key_name)
    if missing:
        problems.insert(0, "the recorded state lacks %s (recorded before full-state records: a verified run of "
                           "deploy_b300.yml records them)" % ", ".join(missing))
    revision = state.get("revision")
    if isinstance(revision, str) and revision and not COMMIT.match(revision):
        problems.append("the recorded revision %r is not a 40-hex commit" % revision)
    image = (state.get("engine") or {}).get("image") if runtime == "container" else None
    if isinstance(image, str) and image and not IMAGE_DIGEST.search(image):
        problems.append("the recorded image %r is not pinned by digest" % image)
    return problems


def engine_label(engine, version=None):
    """``vLLM 0.32.0``, ``vLLM 0.32.0 in vllm/vllm-openai-rocm@sha256:0123456789ab`` or ``SGLang in
    lmsysorg/sglang@sha256:0123456789ab``: a record's ``engine`` (``version`` its ``vllm_version``) or
    a role's ``*_deployment`` fact."""
    engine = engine if isinstance(engine, dict) else {}
    name = engine.get("name") or engine.get("engine") or "vllm"
    label = ENGINES.get(name, str(name))
    version = version or engine.get("version")
    if name == "vllm" and version:
        label += " %s" % version
    image = engine.get("image") or ""
    if (engine.get("runtime") or "venv") == "container" and image:
        repository, digest = (image.split("@", 1) + [""])[:2]
        repository = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
        short = repository.split("/", 1)[1] if "." in repository.split("/", 1)[0] or ":" in repository.split("/", 1)[0] else repository
        label += " in %s%s" % (short, ("@" + digest[:19]) if digest else "")
    return label
