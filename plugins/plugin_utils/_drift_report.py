# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Drift report: task results in, per-host findings and the fleet verdict out.

Pure logic for the ``gpufleet.serving.drift_report`` callback (which feeds it events) and lookup
(which reads the verdict back). Per host it keeps only what a nightly check must show:

- changes: results that would change something (``changed: true`` in check mode), with the task,
  module, loop item, what kind of thing changes and the diff;
- unhealthy: results that carry ``healthy: false``, with their problems;
- failed: failed tasks that are not ignored, with their message;
- unreachable: the connection error.

Skipped and unchanged results are not recorded. Results hidden by ``no_log`` are recorded as
"hidden": the task and module are named, their values never (no item label, no diff, no message).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile

from ansible_collections.gpufleet.serving.plugins.module_utils._deploy_stages import DEPLOY_STAGES

HOST_SCHEMA = "gpufleet.serving/drift-report/v1"
SUMMARY_SCHEMA = "gpufleet.serving/drift-summary/v1"
# Exported by the callback at playbook start; the lookup (in the same process tree) reads it back.
RUN_ENV = "GPUFLEET_DRIFT_REPORT_RUN"
# ansible-runner sets this to the run's artifact directory.
RUNNER_ARTIFACT_ENV = "AWX_ISOLATED_DATA_DIR"
DEFAULT_REPORT_DIR = os.path.join("reports", "drift")
# Stage tags of deploy.yml and drift_check.yml, in order, plus the drift check's GPU probe.
STAGES = DEPLOY_STAGES + ("gpu_health",)
HIDDEN = "hidden by no_log"
MAX_TEXT = 2000
MAX_DIFF = 20000

# What a change is about, by module (short name). Files under a systemd directory are unit files.
KIND_BY_MODULE = {
    "apt": "package",
    "package": "package",
    "dpkg_selections": "package hold",
    "apt_repository": "repository",
    "deb822_repository": "repository",
    "apt_key": "repository",
    "pip": "python package",
    "systemd": "service",
    "systemd_service": "service",
    "service": "service",
    "template": "file",
    "copy": "file",
    "file": "file",
    "lineinfile": "file",
    "blockinfile": "file",
    "replace": "file",
    "modprobe": "kernel module",
    "reboot": "reboot",
    "checkpoint_promote": "served revision",
    "checkpoint_stage": "checkpoint files",
    "checkpoint_pin": "checkpoint manifest",
    "command": "command",
    "shell": "command",
    "debug": "note",
}
TEMP_SOURCE = re.compile(r"/ansible-(local|tmp)-[^/]*/")
UNIT_DIRS = ("/etc/systemd/", "/lib/systemd/", "/usr/lib/systemd/", "/run/systemd/")


def short_module(action):
    """'ansible.builtin.apt' -> 'apt'; '' for no action."""
    return (action or "").rsplit(".", 1)[-1]


def clip(text, limit=MAX_TEXT):
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + "\n... (%d more characters)" % (len(text) - limit)


def stage_of(tags, role, stages=STAGES):
    """The first stage tag the task carries; else its role's short name; else 'play'."""
    tag_set = set(tags or ())
    for stage in stages:
        if stage in tag_set:
            return stage
    if role:
        return role.rsplit(".", 1)[-1]
    return "play"


def is_hidden(result):
    return bool(result.get("_ansible_no_log")) or "censored" in result


def change_target(result):
    for key in ("dest", "path", "name", "unit", "commit"):
        value = result.get(key)
        if isinstance(value, str) and value:
            return value
    # template and copy in check mode return no dest; their diff names the file they would write.
    diff = result.get("diff")
    for item in diff if isinstance(diff, list) else [diff]:
        header = item.get("before_header") if isinstance(item, dict) else None
        if isinstance(header, str) and header.startswith("/"):
            return header
    return None


def change_kind(module, target):
    kind = KIND_BY_MODULE.get(module, "other")
    if kind == "file" and target and target.startswith(UNIT_DIRS):
        return "unit file"
    return kind


def _lines(value):
    if value is None:
        return []
    if not isinstance(value, str):
        value = json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"
    return value.splitlines(True)


def render_diff(diff):
    """Ansible's diff structure (a dict or a list of dicts) as unified diff text; None when empty."""
    if not diff:
        return None
    parts = []
    for item in diff if isinstance(diff, list) else [diff]:
        if not isinstance(item, dict):
            continue
        if item.get("prepared"):
            parts.append(str(item["prepared"]).rstrip("\n"))
            continue
        if "before" not in item and "after" not in item:
            continue
        before, after = _lines(item.get("before")), _lines(item.get("after"))
        if before == after:
            continue
        before_header = str(item.get("before_header") or "before")
        after_header = str(item.get("after_header") or "after")
        # template/copy name the controller's temporary source file: say what it is instead.
        if TEMP_SOURCE.search(after_header):
            after_header = "%s (as the role writes it)" % before_header
        text = "".join(difflib.unified_diff(before, after, before_header, after_header))
        if text:
            parts.append(text.rstrip("\n"))
    if not parts:
        return None
    return clip("\n".join(parts), MAX_DIFF)


def problem_text(problem):
    """One line per problem: strings stay; gpu_health's dicts read '[code] GPU n: message'."""
    if isinstance(problem, dict):
        where = "" if problem.get("gpu") is None else "GPU %s: " % problem["gpu"]
        code = "[%s] " % problem["code"] if problem.get("code") else ""
        message = problem.get("message") or problem.get("msg") or json.dumps(problem, sort_keys=True, default=str)
        return clip("%s%s%s" % (code, where, message))
    return clip(problem)


def failure_message(result):
    msg = result.get("msg")
    if not msg and result.get("stderr"):
        msg = result["stderr"]
    if not msg and "rc" in result:
        msg = "exited with rc %s" % result["rc"]
    return clip(msg or "failed without a message")


def new_host(name):
    return {"host": name, "unreachable": None, "changes": [], "unhealthy": [], "failed": []}


class DriftCollector:
    """Accumulates the findings of one run; the callback feeds it, reports come out of it."""

    def __init__(self, stages=STAGES):
        self.stages = tuple(stages)
        self.hosts = {}

    def host(self, name):
        if name not in self.hosts:
            self.hosts[name] = new_host(name)
        return self.hosts[name]

    def record(self, event, host, task, result, ignore_errors=False):
        """Record one task result.

        event: 'ok', 'failed', 'unreachable' or 'skipped'; task: {name, action, role, tags, no_log,
        handler}; result: the callback's result dict (loops carry their items in 'results').
        """
        entry_host = self.host(host)
        if event == "unreachable":
            entry_host["unreachable"] = clip(result.get("msg") or "unreachable")
            return
        if event not in ("ok", "failed"):
            return
        role = task.get("role")
        base = {
            "stage": stage_of(task.get("tags"), role, self.stages),
            "role": role,
            "task": task.get("name") or short_module(task.get("action")),
            "module": short_module(task.get("action")),
        }
        if task.get("handler"):
            base["handler"] = True
        hidden = bool(task.get("no_log")) or is_hidden(result)
        items = result.get("results")
        if isinstance(items, list) and items:
            for item in items:
                if isinstance(item, dict):
                    self._record_one(entry_host, base, item, event, ignore_errors, hidden or is_hidden(item), in_loop=True)
            if event == "failed" and not any(isinstance(i, dict) and i.get("failed") for i in items) and not ignore_errors:
                self._add_failure(entry_host, base, result, hidden, None)
            return
        self._record_one(entry_host, base, result, event, ignore_errors, hidden, in_loop=False)

    def _record_one(self, entry_host, base, result, event, ignore_errors, hidden, in_loop):
        item = None
        if in_loop and not hidden:
            item = result.get("_ansible_item_label", result.get("item"))
            if item is not None and not isinstance(item, str):
                item = json.dumps(item, sort_keys=True, default=str)
        failed = bool(result.get("failed", event == "failed" and not in_loop))
        if not failed and result.get("changed"):
            change = dict(base, item=item)
            if hidden:
                change.update(kind=change_kind(base["module"], None), target=None, diff=None, msg=HIDDEN, hidden=True)
            else:
                target = change_target(result)
                message = result.get("msg") if isinstance(result.get("msg"), str) else None
                change.update(kind=change_kind(base["module"], target), target=target, diff=render_diff(result.get("diff")),
                              msg=clip(message) if message else None)
            entry_host["changes"].append(change)
        if not hidden and result.get("healthy") is False:
            # A probe's verdict is reported by its problems, not a second time as a failed task.
            problems = result.get("problems") or []
            texts = list(dict.fromkeys(problem_text(p) for p in (problems if isinstance(problems, list) else [problems])))
            seen = {text for entry in entry_host["unhealthy"] for text in entry["problems"]}
            # The same problem from an earlier probe (preflight runs gpu_health too) is named once.
            fresh = [text for text in texts or ["healthy: false, no problem given"] if text not in seen]
            if fresh:
                entry_host["unhealthy"].append(dict(base, item=item, problems=fresh))
            return
        if failed and not ignore_errors:
            self._add_failure(entry_host, base, result, hidden, item)

    def _add_failure(self, entry_host, base, result, hidden, item):
        entry_host["failed"].append(dict(base, item=item, msg=HIDDEN if hidden else failure_message(result),
                                         **({"hidden": True} if hidden else {})))


def host_status(report):
    if report["unreachable"]:
        return "unreachable"
    flags = []
    if report["changes"]:
        flags.append("drifted")
    if report["unhealthy"] or report["failed"]:
        flags.append("unhealthy")
    return ", ".join(flags) or "clean"


def host_report(raw, run):
    report = {
        "schema": HOST_SCHEMA,
        "run_id": run.get("run_id"),
        "generated_at": run.get("generated_at"),
        "host": raw["host"],
        "status": host_status(raw),
        "drifted": bool(raw["changes"]),
        "unhealthy": bool(raw["unhealthy"] or raw["failed"]),
        "reachable": not raw["unreachable"],
        "unreachable": raw["unreachable"],
        "changes": raw["changes"],
        "problems": raw["unhealthy"],
        "failed": raw["failed"],
    }
    report["counts"] = {"changes": len(raw["changes"]), "problems": sum(len(u["problems"]) for u in raw["unhealthy"]),
                        "failed": len(raw["failed"])}
    return report


def summarize(reports, run, complete):
    """The fleet summary of host reports (host name -> host_report), with the verdict."""
    hosts = {}
    for name in sorted(reports):
        report = reports[name]
        hosts[name] = dict(status=report["status"], **report["counts"])
    totals = {
        "hosts": len(hosts),
        "clean": sum(1 for h in hosts.values() if h["status"] == "clean"),
        "drifted": sum(1 for r in reports.values() if r["drifted"]),
        "unhealthy": sum(1 for r in reports.values() if r["unhealthy"]),
        "unreachable": sum(1 for r in reports.values() if not r["reachable"]),
    }
    summary = {
        "schema": SUMMARY_SCHEMA,
        "run_id": run.get("run_id"),
        "started_at": run.get("started_at"),
        "generated_at": run.get("generated_at"),
        "playbook": run.get("playbook"),
        "check_mode": run.get("check_mode"),
        "report_dir": run.get("report_dir"),
        "complete": bool(complete),
        "hosts": hosts,
        "totals": totals,
    }
    summary.update(verdict(summary))
    return summary


def verdict(summary):
    """Whether the run is clean, and a message naming each host that is not (for the final task)."""
    hosts = summary.get("hosts") or {}
    bad = {name: h for name, h in hosts.items() if h["status"] != "clean"}
    if not hosts:
        return {"clean": False, "message": "the drift check saw no host: nothing was checked"}
    if not bad:
        return {"clean": True, "message": "no drift: %d host(s) clean" % len(hosts)}
    lines = ["%d of %d host(s) not clean (report: %s):" % (len(bad), len(hosts), summary.get("report_dir"))]
    for name, h in sorted(bad.items()):
        if h["status"] == "unreachable":
            lines.append("  %s: unreachable" % name)
        else:
            lines.append("  %s: %s - %d change(s), %d problem(s), %d failed task(s)"
                         % (name, h["status"], h["changes"], h["problems"], h["failed"]))
    return {"clean": False, "message": "\n".join(lines)}


# ---------------------------------------------------------------------------------------------- #
# Markdown

def _md_escape(text):
    return re.sub(r"([|`])", r"\\\1", str(text)).replace("\n", " ")


def _fence(text):
    fence = "```"
    while fence in text:
        fence += "`"
    return "%sdiff\n%s\n%s" % (fence, text, fence)


def _where(entry):
    parts = [entry["stage"], entry["task"], entry["module"]]
    if entry.get("item") is not None:
        parts.append("item %s" % entry["item"])
    return " / ".join(_md_escape(p) for p in parts)


def host_markdown(report):
    out = ["## %s: %s" % (report["host"], report["status"]), ""]
    if report["unreachable"]:
        out += ["Unreachable: %s" % _md_escape(report["unreachable"]), ""]
    if report["changes"]:
        out += ["### Would change (%d)" % len(report["changes"]), ""]
        for change in report["changes"]:
            target = " `%s`" % change["target"] if change.get("target") else ""
            handler = " (handler)" if change.get("handler") else ""
            out.append("- **%s**%s: %s%s" % (change["kind"], target, _where(change), handler))
            if change.get("msg"):
                out.append("  - %s" % _md_escape(change["msg"]))
            if change.get("diff"):
                out += ["", _fence(change["diff"]), ""]
        out.append("")
    if report["problems"]:
        out += ["### Unhealthy (%d)" % report["counts"]["problems"], ""]
        for entry in report["problems"]:
            out.append("- %s" % _where(entry))
            out += ["  - %s" % _md_escape(p) for p in entry["problems"]]
        out.append("")
    if report["failed"]:
        out += ["### Failed tasks (%d)" % len(report["failed"]), ""]
        for entry in report["failed"]:
            out.append("- %s: %s" % (_where(entry), _md_escape(entry["msg"])))
        out.append("")
    if report["status"] == "clean":
        out += ["Nothing would change; every probe is healthy.", ""]
    return "\n".join(out)


def summary_markdown(summary, reports):
    out = [
        "# Drift report",
        "",
        "Run %s, %s; playbook %s; %s." % (summary["run_id"], summary["generated_at"], summary.get("playbook"),
                                          "complete" if summary["complete"] else "in progress"),
        "",
        "**%s**" % _md_escape(summary["message"].splitlines()[0]),
        "",
        "| host | status | changes | problems | failed tasks |",
        "|---|---|---:|---:|---:|",
    ]
    for name, h in summary["hosts"].items():
        out.append("| %s | %s | %d | %d | %d |" % (name, h["status"], h["changes"], h["problems"], h["failed"]))
    out.append("")
    for name in sorted(reports):
        if reports[name]["status"] != "clean":
            out.append(host_markdown(reports[name]))
    return "\n".join(out).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------- #
# Files

def resolve_report_dir(configured, environ, cwd):
    """The configured directory; else the ansible-runner artifact directory's drift_report; else ./reports/drift."""
    if configured:
        path = configured
    elif environ.get(RUNNER_ARTIFACT_ENV):
        path = os.path.join(environ[RUNNER_ARTIFACT_ENV], "drift_report")
    else:
        path = DEFAULT_REPORT_DIR
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def safe_name(host):
    """A host name as a file name (inventory names may hold characters a path cannot)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "_"


def _write(path, text):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_reports(collector, run, complete):
    """Writes hosts/<host>.json and .md, summary.json and summary.md under run['report_dir']; returns the summary.

    Host files of hosts not in this run are removed, so the directory always describes one run.
    """
    directory = run["report_dir"]
    hosts_dir = os.path.join(directory, "hosts")
    os.makedirs(hosts_dir, exist_ok=True)
    reports = {name: host_report(raw, run) for name, raw in collector.hosts.items()}
    summary = summarize(reports, run, complete)
    keep = set()
    for name, report in reports.items():
        base = safe_name(name)
        keep.update((base + ".json", base + ".md"))
        _write(os.path.join(hosts_dir, base + ".json"), json.dumps(report, indent=2, sort_keys=True) + "\n")
        _write(os.path.join(hosts_dir, base + ".md"), "# Drift report\n\n" + host_markdown(report))
    for entry in os.listdir(hosts_dir):
        if entry not in keep and entry.endswith((".json", ".md")):
            os.unlink(os.path.join(hosts_dir, entry))
    _write(os.path.join(directory, "summary.md"), summary_markdown(summary, reports))
    # summary.json last: a reader that finds this run's summary finds its host files too.
    _write(os.path.join(directory, "summary.json"), json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def read_summary(run):
    """The summary this run wrote, checked to be this run's; raises ValueError saying what is wrong."""
    path = os.path.join(run["report_dir"], "summary.json")
    try:
        with open(path, encoding="utf-8") as handle:
            summary = json.load(handle)
    except FileNotFoundError:
        raise ValueError("%s does not exist: the drift_report callback wrote no report in this run" % path) from None
    except (OSError, ValueError) as exc:
        raise ValueError("cannot read %s: %s" % (path, exc)) from None
    if summary.get("schema") != SUMMARY_SCHEMA or summary.get("run_id") != run.get("run_id"):
        raise ValueError("%s belongs to run %s, not to this run %s" % (path, summary.get("run_id"), run.get("run_id")))
    return summary
