# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""No task file includes itself, directly or through a cycle (ansible-core dies at ~246 nested includes).

The graph: every YAML task list and playbook of the checkout (roles, playbooks, molecule, tools), one edge per
include_tasks / import_tasks / include_role / import_role (tasks_from) / import_playbook / play ``roles:``
entry, with relative names resolved as Ansible resolves them: in a role, against the role's tasks/ (or
handlers/) directory, then the including file's directory; elsewhere, against the including file's directory
(a playbook's directory plus the directories of the includes that led there), then the directories above it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTION = "gpufleet.serving"
SKIPPED_DIRS = {".git", ".venv", ".tmp", ".collections", ".ci", "node_modules", "output", "fixtures", "changelogs"}
PREFIXES = ("ansible.builtin.", "ansible.legacy.")
TASK_INCLUDES = {"include_tasks", "import_tasks"}
ROLE_INCLUDES = {"include_role", "import_role"}
PLAY_SECTIONS = ("pre_tasks", "tasks", "post_tasks", "handlers")
BLOCK_SECTIONS = ("block", "rescue", "always")


class _AnyTagLoader(yaml.SafeLoader):
    """Safe loading that accepts Ansible's tags (!unsafe, !vault) as their plain values."""


def _untagged(loader, _suffix, node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)


_AnyTagLoader.add_multi_constructor("!", _untagged)


def _action(task):
    """(short action name, its value) of a task dict, for the include actions only."""
    for key, value in task.items():
        short = key
        for prefix in PREFIXES:
            if key.startswith(prefix):
                short = key[len(prefix):]
        if short in TASK_INCLUDES | ROLE_INCLUDES | {"import_playbook"}:
            return short, value
    return None, None


def _role_of(path, root):
    """(role directory, 'tasks' or 'handlers') when ``path`` is a role's task file, else (None, None)."""
    parts = path.relative_to(root).parts
    if len(parts) >= 4 and parts[0] == "roles" and parts[2] in ("tasks", "handlers"):
        return root / "roles" / parts[1], parts[2]
    return None, None


def _first_existing(candidates):
    for candidate in candidates:
        for name in (candidate, candidate.with_name(candidate.name + ".yml"), candidate.with_name(candidate.name + ".yaml")):
            if name.is_file():
                return name.resolve()
    return None


class IncludeGraph:
    def __init__(self, root):
        self.root = Path(root).resolve()
        self.edges = {}  # file (relative str) -> [(target file, task name)]
        self.unresolved = []  # (file, task name, target) for static names that match no file
        self.templated = []  # (file, task name, target) that only run time can resolve
        self.files = []
        for path in sorted(self._yaml_files()):
            self._add_file(path)

    def _yaml_files(self):
        for directory, subdirs, names in os.walk(self.root):
            subdirs[:] = [name for name in subdirs if name not in SKIPPED_DIRS]
            for name in names:
                if name.endswith((".yml", ".yaml")):
                    yield Path(directory) / name

    def _rel(self, path):
        return str(path.relative_to(self.root))

    def _add_file(self, path):
        try:
            data = yaml.load(path.read_text(), Loader=_AnyTagLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError:
            return
        if not isinstance(data, list) or not data or not all(isinstance(item, dict) for item in data):
            return
        self.files.append(self._rel(path))
        self.edges.setdefault(self._rel(path), [])
        is_playbook = any("hosts" in item or _action(item)[0] == "import_playbook" for item in data)
        if not is_playbook:
            self._walk(path, data)
            return
        for play in data:
            kind, value = _action(play)
            if kind == "import_playbook":
                self._edge(path, play.get("name", "import_playbook"), self._resolve_relative(path, value))
                continue
            for entry in play.get("roles") or []:
                name = entry if isinstance(entry, str) else (entry.get("role") or entry.get("name"))
                self._role_edge(path, "roles: %s" % name, name, "main")
            for section in PLAY_SECTIONS:
                self._walk(path, play.get(section) or [])

    def _walk(self, path, tasks):
        for task in tasks:
            if not isinstance(task, dict):
                continue
            for section in BLOCK_SECTIONS:
                self._walk(path, task.get(section) or [])
            kind, value = _action(task)
            name = task.get("name", kind)
            if kind in TASK_INCLUDES:
                target = value if isinstance(value, str) else (value or {}).get("file") or (value or {}).get("_raw_params")
                self._edge(path, name, self._resolve_task_file(path, target))
            elif kind in ROLE_INCLUDES and isinstance(value, dict):
                self._role_edge(path, name, value.get("name"), value.get("tasks_from") or "main")
            elif kind == "import_playbook":
                self._edge(path, name, self._resolve_relative(path, value))

    def _edge(self, path, name, resolved):
        status, target = resolved
        if status == "file":
            self.edges[self._rel(path)].append((self._rel(target), str(name)))
        elif status == "templated":
            self.templated.append((self._rel(path), str(name), target))
        elif status == "missing":
            self.unresolved.append((self._rel(path), str(name), target))

    def _role_edge(self, path, name, role, tasks_from):
        if not role or "{{" in str(role) or "{{" in str(tasks_from):
            self.templated.append((self._rel(path), str(name), "%s/%s" % (role, tasks_from)))
            return
        short = role[len(COLLECTION) + 1:] if role.startswith(COLLECTION + ".") else role
        role_dir = self.root / "roles" / short
        if "." in short or not role_dir.is_dir():
            return  # a role of another collection: not ours to check
        target = _first_existing([role_dir / "tasks" / tasks_from])
        self._edge(path, name, ("file", target) if target else ("missing", "%s tasks_from %s" % (role, tasks_from)))

    def _resolve_task_file(self, path, target):
        if not isinstance(target, str) or not target.strip():
            return "missing", repr(target)
        if "{{" in target:
            return "templated", target
        role_dir, kind = _role_of(path, self.root)
        if role_dir is not None:
            candidates = [role_dir / kind / target, path.parent / target]
        else:
            candidates = [path.parent / target] + [parent / target for parent in path.parent.parents if self.root in (parent, *parent.parents)]
        found = _first_existing(candidates)
        if found is None or self.root not in found.parents:
            return "missing", target
        return "file", found

    def _resolve_relative(self, path, target):
        if not isinstance(target, str):
            return "missing", repr(target)
        if "{{" in target:
            return "templated", target
        found = _first_existing([path.parent / target])
        if found is None or self.root not in found.parents:
            return "missing", target
        return "file", found

    def cycles(self):
        """Every distinct cycle, each as [a, b, ..., a] with the edge's task name, found by depth-first search."""
        found, seen = [], set()
        state = {}  # node -> 1 on the current path, 2 done

        def visit(node, stack):
            state[node] = 1
            stack.append(node)
            for target, name in self.edges.get(node, []):
                if state.get(target) == 1:
                    cycle = stack[stack.index(target):] + [target]
                    key = frozenset(zip(cycle, cycle[1:]))
                    if key not in seen:
                        seen.add(key)
                        found.append((cycle, name))
                elif state.get(target) is None:
                    visit(target, stack)
            stack.pop()
            state[node] = 2

        for node in sorted(self.edges):
            if node not in state:
                visit(node, [])
        return found


def describe(cycles):
    return "\n".join("%s (closed by task %r)" % (" -> ".join(cycle), name) for cycle, name in cycles)


@pytest.fixture(scope="module")
def repo_graph():
    return IncludeGraph(REPO)


def test_no_task_file_or_playbook_includes_itself(repo_graph):
    cycles = repo_graph.cycles()
    assert cycles == [], "task files that include themselves (Ansible dies at ~246 nested includes):\n" + describe(cycles)


def test_the_graph_sees_the_collections_includes(repo_graph):
    """The check above must be able to fail: it finds the real edges of roles, playbooks and Molecule."""
    edges = {(source, target) for source, targets in repo_graph.edges.items() for target, _name in targets}
    for edge in [
        ("roles/checkpoint/tasks/main.yml", "roles/checkpoint/tasks/stage.yml"),
        ("roles/checkpoint/tasks/stage.yml", "roles/checkpoint/tasks/download.yml"),
        ("molecule/checkpoint/side_effect.yml", "molecule/checkpoint/tasks/bad_input.yml"),
        ("molecule/checkpoint/tasks/bad_input.yml", "molecule/checkpoint/tasks/links.yml"),
        ("molecule/checkpoint/converge.yml", "roles/checkpoint/tasks/main.yml"),
        ("molecule/checkpoint/verify.yml", "roles/checkpoint/tasks/verify.yml"),
        ("playbooks/rollback.yml", "roles/checkpoint/tasks/rollback.yml"),
        ("tools/sandbox/demo.yml", "playbooks/deploy_b300.yml"),
    ]:
        assert edge in edges, edge


def test_every_static_include_names_an_existing_file(repo_graph):
    assert repo_graph.unresolved == [], repo_graph.unresolved


# roles/checkpoint/tasks/download_wait.yml as it was at commit aa06082 (issue 13): it included itself after every
# poll, and ansible-core 2.19 died with RecursionError at about poll 243 of a long download.
OLD_DOWNLOAD_WAIT = """---
- name: Count the progress checks
  ansible.builtin.set_fact:
    __checkpoint_poll: "{{ __checkpoint_poll | int + 1 }}"

- name: Check the download job
  ansible.builtin.async_status:
    jid: "{{ __checkpoint_download_job.ansible_job_id }}"
  register: __checkpoint_download

- name: Wait before the next progress check
  ansible.builtin.wait_for:
    timeout: "{{ checkpoint_progress_interval }}"
  when: not __checkpoint_download.finished

- name: Go on waiting
  ansible.builtin.include_tasks: download_wait.yml
  when: not __checkpoint_download.finished
"""


def test_the_old_self_including_download_wait_is_caught(tmp_path):
    shutil.copytree(REPO / "roles" / "checkpoint", tmp_path / "roles" / "checkpoint")
    tasks = tmp_path / "roles" / "checkpoint" / "tasks"
    (tasks / "download_wait.yml").write_text(OLD_DOWNLOAD_WAIT)
    with (tasks / "download.yml").open("a") as handle:
        handle.write("\n- name: Report progress until the download ends\n  ansible.builtin.include_tasks: download_wait.yml\n")
    cycles = IncludeGraph(tmp_path).cycles()
    assert cycles == [(["roles/checkpoint/tasks/download_wait.yml"] * 2, "Go on waiting")], describe(cycles)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cycles_through_several_files_roles_and_playbooks_are_named(tmp_path):
    # A role: main -> sub/a (relative to tasks/) -> b (relative to the including file's directory) -> main.
    write(tmp_path / "roles/r/tasks/main.yml", "---\n- name: To a\n  ansible.builtin.include_tasks: sub/a.yml\n")
    write(tmp_path / "roles/r/tasks/sub/a.yml", "---\n- name: To b\n  ansible.builtin.import_tasks: b.yml\n")
    write(tmp_path / "roles/r/tasks/sub/b.yml",
          "---\n- name: Guarded\n  when: false\n  block:\n    - name: Back to main\n      include_tasks:\n        file: main.yml\n")
    # A role entering another that enters it back through include_role tasks_from.
    write(tmp_path / "roles/p/tasks/main.yml", "---\n- name: To q\n  ansible.builtin.include_role:\n    name: %s.q\n    tasks_from: x\n" % COLLECTION)
    write(tmp_path / "roles/q/tasks/x.yml", "---\n- name: To p\n  ansible.builtin.import_role:\n    name: p\n")
    # Molecule-style: the playbook names tasks/one.yml; one.yml names two.yml beside it; two.yml names one.yml.
    write(tmp_path / "molecule/s/side_effect.yml",
          "---\n- name: Play\n  hosts: all\n  tasks:\n    - name: One\n      ansible.builtin.include_tasks: tasks/one.yml\n")
    write(tmp_path / "molecule/s/tasks/one.yml", "---\n- name: Two\n  ansible.builtin.include_tasks: two.yml\n")
    write(tmp_path / "molecule/s/tasks/two.yml", "---\n- name: One again\n  ansible.builtin.include_tasks: one.yml\n")
    # A playbook importing itself, and a harmless diamond (no cycle).
    write(tmp_path / "playbooks/self.yml", "---\n- name: Again\n  ansible.builtin.import_playbook: self.yml\n")
    write(tmp_path / "playbooks/top.yml", "---\n- name: P\n  hosts: all\n  roles:\n    - role: r2\n    - r2\n")
    write(tmp_path / "roles/r2/tasks/main.yml", "---\n- name: L\n  ansible.builtin.include_tasks: leaf.yml\n- name: L2\n  import_tasks: leaf.yml\n")
    write(tmp_path / "roles/r2/tasks/leaf.yml", "---\n- name: Nothing\n  ansible.builtin.debug:\n    msg: leaf\n")
    found = {tuple(cycle): name for cycle, name in IncludeGraph(tmp_path).cycles()}
    assert found == {
        ("molecule/s/tasks/one.yml", "molecule/s/tasks/two.yml", "molecule/s/tasks/one.yml"): "One again",
        ("playbooks/self.yml", "playbooks/self.yml"): "Again",
        ("roles/p/tasks/main.yml", "roles/q/tasks/x.yml", "roles/p/tasks/main.yml"): "To p",
        ("roles/r/tasks/main.yml", "roles/r/tasks/sub/a.yml", "roles/r/tasks/sub/b.yml", "roles/r/tasks/main.yml"): "Back to main",
    }


def test_missing_and_templated_targets_are_told_apart(tmp_path):
    write(tmp_path / "roles/r/tasks/main.yml",
          "---\n- name: Typo\n  ansible.builtin.include_tasks: mian.yml\n"
          "- name: Per item\n  ansible.builtin.include_tasks: \"{{ item }}.yml\"\n  loop: [a]\n"
          "- name: Other collection\n  ansible.builtin.include_role:\n    name: community.general.x\n")
    graph = IncludeGraph(tmp_path)
    assert graph.unresolved == [("roles/r/tasks/main.yml", "Typo", "mian.yml")]
    assert graph.templated == [("roles/r/tasks/main.yml", "Per item", "{{ item }}.yml")]
    assert graph.cycles() == []
