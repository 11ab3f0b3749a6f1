# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Engines in containers: image references pinned by digest, the run argument list per runtime and
GPU vendor, the unit's start/stop commands and --env-file lines."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._container import (
    ContainerError,
    container_drift,
    env_file_lines,
    gpu_access_mode,
    host_group_ids,
    image_problems,
    parse_image_reference,
    pull_reference,
    run_argv,
    unit_commands,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import get_profile, profile_names

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("reference", "expected"), [
    ("lmsysorg/sglang@" + DIGEST, {"registry": "docker.io", "repository": "lmsysorg/sglang", "tag": None, "digest": DIGEST}),
    ("ubuntu:24.04", {"registry": "docker.io", "repository": "library/ubuntu", "tag": "24.04", "digest": None}),
    ("10.232.0.1:5000/vllm/vllm-openai-rocm:v0.34.0@" + DIGEST,
     {"registry": "10.232.0.1:5000", "repository": "vllm/vllm-openai-rocm", "tag": "v0.34.0", "digest": DIGEST}),
    ("localhost/sglang", {"registry": "localhost", "repository": "sglang", "tag": None, "digest": None}),
    ("mirror.example.com/docker.io/lmsysorg/sglang:v0.6.0-cu130",
     {"registry": "mirror.example.com", "repository": "docker.io/lmsysorg/sglang", "tag": "v0.6.0-cu130", "digest": None}),
])
def test_references_split_as_the_distribution_grammar_does(reference, expected):
    parsed = parse_image_reference(reference)
    assert {key: parsed[key] for key in expected} == expected
    assert parsed["pinned"] is (expected["digest"] is not None)


@pytest.mark.parametrize("reference", [
    "", "Lmsysorg/SGLang", "lmsysorg/sglang@sha256:abc", "lmsysorg/sglang@md5:" + "a" * 32, "lmsysorg/sglang:-bad",
    "lmsysorg/sglang latest", "registry:5000/",
])
def test_malformed_references_are_refused_with_the_reference_named(reference):
    with pytest.raises(ContainerError):
        parse_image_reference(reference)


def test_a_tag_alone_is_refused_and_the_message_says_how_to_find_the_digest():
    [problem] = image_problems("lmsysorg/sglang:v0.6.0")
    assert "'lmsysorg/sglang:v0.6.0' is not pinned" in problem
    assert "v0.6.0" in problem and "docker.io/lmsysorg/sglang@sha256:..." in problem


def test_a_tag_beside_the_digest_is_kept_for_people_but_the_digest_is_pulled():
    reference = "10.232.0.1:5000/lmsysorg/sglang:v0.6.0@" + DIGEST
    assert image_problems(reference) == []
    assert pull_reference(reference) == "10.232.0.1:5000/lmsysorg/sglang@" + DIGEST


def test_a_cuda_image_on_the_rocm_profile_is_refused_but_a_mirror_path_is_not():
    [problem] = image_problems("vllm/vllm-openai@" + DIGEST, expected_repository="vllm/vllm-openai-rocm")
    assert "is a vllm-openai image, the hardware profile runs vllm/vllm-openai-rocm" in problem
    assert image_problems("mirror.site:5000/hub/vllm/vllm-openai-rocm@" + DIGEST, expected_repository="vllm/vllm-openai-rocm") == []


def spec(**changes):
    base = {
        "runtime": "podman", "binary": "/usr/bin/podman", "name": "sglang",
        "image": "10.232.0.1:5000/lmsysorg/sglang:v0.6.0@" + DIGEST,
        "command": ["python3", "-m", "sglang.launch_server", "--port", "30000"],
        "env_files": ["/etc/gpufleet/sglang/sglang.env"],
        "mounts": [{"source": "/srv/models/moonshotai--Kimi-K3.1-Pro/current", "target": "/models/Kimi-K3.1-Pro"}],
        "publish": [{"host_ip": "127.0.0.1", "host_port": 30000, "container_port": 30000}],
        "gpu_access": "nvidia-cdi", "stop_timeout": 120,
    }
    base.update(changes)
    return base


def test_the_guide_s_sglang_container_on_podman_with_cdi():
    argv = run_argv(spec())
    assert argv[:6] == ["/usr/bin/podman", "run", "--rm", "--name", "sglang", "--pull=never"]
    joined = " ".join(argv)
    assert "--publish 127.0.0.1:30000:30000" in joined
    assert "--ipc host" in joined
    assert "--device nvidia.com/gpu=all" in joined
    assert "--mount type=bind,source=/srv/models/moonshotai--Kimi-K3.1-Pro/current,target=/models/Kimi-K3.1-Pro,readonly" in joined
    assert "--stop-timeout 120" in joined
    # The image by digest only, then the engine's own command.
    at = argv.index("10.232.0.1:5000/lmsysorg/sglang@" + DIGEST)
    assert argv[at + 1:] == ["python3", "-m", "sglang.launch_server", "--port", "30000"]


def test_docker_uses_the_nvidia_runtime_s_gpus_flag_podman_refuses_it():
    assert "--gpus all" in " ".join(run_argv(spec(runtime="docker", binary="/usr/bin/docker", gpu_access="nvidia-gpus")))
    with pytest.raises(ContainerError, match="podman reaches NVIDIA GPUs through CDI"):
        run_argv(spec(gpu_access="nvidia-gpus"))


def test_amd_gpus_through_the_profile_s_kfd_and_dri_with_the_render_and_video_groups():
    mi355x = get_profile("hardware", "mi355x")
    argv = " ".join(run_argv(spec(gpu_access=gpu_access_mode(mi355x["container_gpu_access"], "podman"), devices=mi355x["container_devices"],
                                  groups=mi355x["container_groups"], security_opts=mi355x["container_security_opts"])))
    assert "--device /dev/kfd --device /dev/dri --group-add video --group-add render" in argv
    assert "--security-opt seccomp=unconfined" in argv
    assert "nvidia" not in argv.replace("nvidia-", "")


def test_amd_gpus_without_their_devices_or_groups_are_refused():
    with pytest.raises(ContainerError, match="amd-kfd needs the GPU device nodes and the groups"):
        run_argv(spec(gpu_access="amd-kfd", devices=["/dev/kfd", "/dev/dri"]))


# getent's group database on a Debian 12 host after the rocm stage (render made by groupadd --system).
HOST_GROUPS = {"root": ["x", "0", ""], "video": ["x", "44", "vllm"], "render": ["x", "993", "vllm"]}


def test_the_device_groups_are_joined_by_their_host_ids():
    assert host_group_ids(["video", "render"], HOST_GROUPS) == ["44", "993"]
    argv = " ".join(run_argv(spec(gpu_access="amd-kfd", devices=["/dev/kfd", "/dev/dri"],
                                  groups=host_group_ids(["video", "render"], HOST_GROUPS))))
    assert "--group-add 44 --group-add 993" in argv
    assert host_group_ids([], HOST_GROUPS) == []


def test_a_device_group_the_host_lacks_is_named():
    with pytest.raises(ContainerError, match="the host has no group render, which the GPU devices belong to"):
        host_group_ids(["video", "render"], {"video": ["x", "44", ""]})


def test_a_cpu_host_gets_no_devices():
    argv = run_argv(spec(gpu_access="none"))
    assert "--device" not in argv and "--gpus" not in argv


def test_publishing_needs_a_host_address_and_ipv6_is_bracketed():
    with pytest.raises(ContainerError, match="needs a host address"):
        run_argv(spec(publish=[{"host_ip": "", "host_port": 30000, "container_port": 30000}]))
    assert "[::1]:30000:30000" in run_argv(spec(publish=[{"host_ip": "::1", "host_port": 30000, "container_port": 30000}]))


def test_host_networking_publishes_nothing():
    with pytest.raises(ContainerError, match="publishes nothing"):
        run_argv(spec(network="host"))
    argv = run_argv(spec(network="host", publish=[]))
    assert argv[argv.index("--network") + 1] == "host"


def test_a_private_ipc_namespace_needs_a_sized_shm():
    with pytest.raises(ContainerError, match="shm_size"):
        run_argv(spec(ipc="private"))
    assert "--shm-size 32g" in " ".join(run_argv(spec(ipc="private", shm_size="32g")))


def test_an_unpinned_image_never_reaches_a_command_line():
    with pytest.raises(ContainerError, match="has no digest"):
        run_argv(spec(image="lmsysorg/sglang:latest"))


@pytest.mark.parametrize(("changes", "message"), [
    ({"runtime": "containerd"}, "runtime must be one of docker, podman"),
    ({"name": "bad name"}, "container name"),
    ({"mounts": [{"source": "relative", "target": "/models/x"}]}, "absolute"),
    ({"mounts": [{"source": "/a,b", "target": "/models/x"}]}, "comma"),
    ({"gpu_access": "intel"}, "gpu_access must be one of"),
])
def test_bad_specs_are_refused(changes, message):
    with pytest.raises(ContainerError, match=message):
        run_argv(spec(**changes))


def test_unit_commands_remove_a_leftover_then_run_then_stop_with_the_engine_s_timeout():
    podman = unit_commands(spec())
    assert podman["pre"] == ["/usr/bin/podman", "rm", "--force", "--ignore", "sglang"]
    assert podman["stop"] == ["/usr/bin/podman", "stop", "--time", "120", "sglang"]
    assert podman["timeout_stop_sec"] == 150
    docker = unit_commands(spec(runtime="docker", binary="/usr/bin/docker"))
    assert docker["pre"] == ["/usr/bin/docker", "rm", "--force", "sglang"]
    assert docker["start"][0:2] == ["/usr/bin/docker", "run"]


def test_env_file_lines_are_literal_and_refuse_line_breaks():
    assert env_file_lines({"B": 'say "hi"', "A": "1"}) == ["A=1", 'B=say "hi"']
    with pytest.raises(ContainerError, match="line break"):
        env_file_lines({"A": "x\ny"})
    with pytest.raises(ContainerError, match="name"):
        env_file_lines({"1A": "x"})


@pytest.mark.parametrize(("profile", "runtime", "mode"), [
    ("nvidia", "podman", "nvidia-cdi"), ("nvidia", "docker", "nvidia-gpus"), ("amd", "docker", "amd-kfd"), ("none", "podman", "none"),
])
def test_the_profile_s_gpu_access_per_runtime(profile, runtime, mode):
    assert gpu_access_mode(profile, runtime) == mode


def test_every_hardware_profile_has_a_gpu_access_both_runtimes_can_give():
    for name in profile_names("hardware"):
        for runtime in ("docker", "podman"):
            assert gpu_access_mode(get_profile("hardware", name)["container_gpu_access"], runtime)
    with pytest.raises(ContainerError, match="no GPU access"):
        gpu_access_mode("intel", "podman")


def _inspect(image_name, ports, running=True):
    return [{"Id": "c0ffee", "ImageName": image_name, "State": {"Running": running, "Status": "running" if running else "exited"},
             "NetworkSettings": {"Ports": ports}}]


UNIT_IMAGE = "10.232.14.1:5000/lmsysorg/sglang:v0.5@" + DIGEST
LOOPBACK = [{"host_ip": "127.0.0.1", "host_port": 30000, "container_port": 8000}]


def test_a_container_started_from_its_unit_has_no_drift():
    inspect = _inspect("10.232.14.1:5000/lmsysorg/sglang@" + DIGEST, {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "30000"}]})
    assert container_drift(inspect, UNIT_IMAGE, LOOPBACK) == []


def test_another_image_and_a_port_on_every_address_are_both_named():
    other = "10.232.14.1:5000/lmsysorg/sglang@sha256:" + "cd" * 32
    inspect = _inspect(other, {"8000/tcp": [{"HostIp": "", "HostPort": "30000"}]})
    assert container_drift(inspect, UNIT_IMAGE, LOOPBACK) == [
        "runs image %s, the unit runs 10.232.14.1:5000/lmsysorg/sglang@%s" % (other, DIGEST),
        "publishes 0.0.0.0:30000->8000/tcp, the unit publishes 127.0.0.1:30000->8000/tcp",
    ]


def test_docker_s_config_image_and_a_tag_only_reference_are_read():
    inspect = [{"Config": {"Image": "10.232.14.1:5000/lmsysorg/sglang:v0.5"}, "State": {"Running": True},
                "NetworkSettings": {"Ports": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "30000"}]}}}]
    assert container_drift(inspect, UNIT_IMAGE, LOOPBACK) == [
        "runs image 10.232.14.1:5000/lmsysorg/sglang:v0.5, the unit runs 10.232.14.1:5000/lmsysorg/sglang@" + DIGEST]


def test_no_container_or_a_stopped_one_is_drift():
    assert container_drift([], UNIT_IMAGE, LOOPBACK) == ["no container of this unit is running"]
    stopped = _inspect("10.232.14.1:5000/lmsysorg/sglang@" + DIGEST, {}, running=False)
    assert container_drift(stopped, UNIT_IMAGE, LOOPBACK) == [
        "the container is exited, not running",
        "publishes none, the unit publishes 127.0.0.1:30000->8000/tcp"]


def test_host_networking_expects_no_published_port():
    inspect = _inspect("10.232.14.1:5000/lmsysorg/sglang@" + DIGEST, {})
    assert container_drift(inspect, UNIT_IMAGE, [], network="host") == []


def test_the_real_podman_capture_matches_the_unit_that_started_it():
    import json
    from pathlib import Path
    capture = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / "container"
                          / "podman_4.3.1_inspect_sglang.json").read_text())
    image = capture[0]["ImageName"]
    unit_image = image.replace("lmsysorg/sglang@", "lmsysorg/sglang:v0.5-cpu-standin@")
    published = [{"host_ip": "127.0.0.1", "host_port": 30000, "container_port": 30000}]
    assert container_drift(capture, unit_image, published) == []
    moved = [{"host_ip": "127.0.0.1", "host_port": 30001, "container_port": 30000}]
    assert container_drift(capture, unit_image, moved) == [
        "publishes 127.0.0.1:30000->30000/tcp, the unit publishes 127.0.0.1:30001->30000/tcp"]
    other = image.split("@")[0] + "@sha256:" + "0" * 64
    assert container_drift(capture, other, published) == ["runs image %s, the unit runs %s" % (image, other)]
