"""``--image``: each runtime's argv, its quoting, the inventory's values, and the container
checklist (/dev/shm, RDMA devices, libibverbs, NCCL against the node's)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodetune.ansible.inventory import Host
from nodetune.check.model import Status
from nodetune.cli import main
from nodetune.collective.plan import Options
from nodetune.container import probe as cp
from nodetune.container import runtime as ct
from nodetune.errors import InputError
from nodetune.remote.session import shell_command

RUN = "0123456789abcdef0123456789abcdef"
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
SERVE = ["python3", "worker.py", "serve"]


def host(**vars_: object) -> Host:
    return Host("gpu-1", ("gpu_nodes",), dict(vars_))


def test_podman_argv_runs_as_training_jobs_run() -> None:
    c = ct.config(host(), IMAGE)
    argv = ct.run_argv(c, SERVE, run_id=RUN, rank=1, workdir="/tmp/nodetune-validate.ab12CD34",
                       env={"NCCL_DEBUG": "INFO", "NODETUNE_RUN_ID": RUN}, gpus=True,
                       rdma_devices=["uverbs0", "rdma_cm"])
    assert argv == [
        "podman", "run", "--rm", "-i", "--name", f"nodetune-{RUN}-rank1",
        "--label", f"nodetune.run={RUN}", "--network", "host", "--pull", "never",
        "--ipc", "host", "--device", "nvidia.com/gpu=all",
        "--device", "/dev/infiniband/uverbs0", "--device", "/dev/infiniband/rdma_cm",
        "--ulimit", "memlock=-1:-1", "--cap-add", "IPC_LOCK",
        "-v", "/tmp/nodetune-validate.ab12CD34:/tmp/nodetune-validate.ab12CD34:ro",
        "-w", "/tmp/nodetune-validate.ab12CD34",
        "-e", "NCCL_DEBUG=INFO", "-e", f"NODETUNE_RUN_ID={RUN}", "-e", "SSH_CONNECTION",
        IMAGE, *SERVE]


def test_docker_argv_takes_gpus_and_shm_size() -> None:
    c = ct.config(host(nodetune_container_runtime="docker", nodetune_container_shm_size="16g",
                       nodetune_container_mounts=["/opt/venv:/opt/venv:ro"]), IMAGE)
    argv = ct.run_argv(c, SERVE, run_id=RUN, rank=0, workdir="/tmp/w", env={}, gpus=True)
    assert argv[:2] == ["docker", "run"]
    assert "--gpus" in argv and argv[argv.index("--gpus") + 1] == "all"
    assert argv[argv.index("--shm-size") + 1] == "16g" and "--ipc" not in argv
    assert argv[argv.index("-v", argv.index("-w")) + 1] == "/opt/venv:/opt/venv:ro"
    # no RDMA device on the node: no device, no memlock, no capability
    assert "IPC_LOCK" not in argv and "/dev/infiniband" not in " ".join(argv)
    assert argv[-4:] == [IMAGE, *SERVE]


def test_no_gpu_no_toolkit_device() -> None:
    argv = ct.run_argv(ct.config(host(), IMAGE), SERVE, run_id=RUN, rank=0, workdir=None,
                       env={}, gpus=False, probe=True)
    assert "nvidia.com/gpu=all" not in argv and "-i" not in argv and "-w" not in argv
    assert argv[argv.index("--name") + 1] == f"nodetune-{RUN}-probe0"


def test_pyxis_and_oci_srun_args() -> None:
    pyxis = ct.config(host(nodetune_container_runtime="pyxis",
                           nodetune_container_mounts=["/data:/data"]), IMAGE, launcher="slurm")
    assert ct.srun_args(pyxis, workdir="/tmp/w", env={"NCCL_DEBUG": "INFO"}) == [
        "--container-image", IMAGE, "--container-mounts", "/tmp/w:/tmp/w:ro,/data:/data",
        "--container-workdir", "/tmp/w", "--no-container-remap-root",
        "--export=ALL,NCCL_DEBUG=INFO"]
    oci = ct.config(host(nodetune_container_runtime="oci"), "/srv/bundles/pytorch",
                    launcher="slurm")
    assert ct.srun_args(oci, workdir="/tmp/w", env={}) == [
        "--container", "/srv/bundles/pytorch", "--chdir=/tmp/w"]
    with pytest.raises(ValueError, match="srun --export"):
        ct.srun_args(pyxis, workdir="/tmp/w", env={"NCCL_IB_HCA": "mlx5_0,mlx5_1"})
    with pytest.raises(ValueError, match="bundle path"):
        ct.srun_args(ct.config(host(nodetune_container_runtime="oci"), IMAGE,
                               launcher="slurm"), workdir="/tmp/w", env={})


def test_each_value_is_one_shell_word() -> None:
    c = ct.config(host(), IMAGE)
    env = {"NCCL_SOCKET_IFNAME": "=eth1 $(reboot); `id`"}
    argv = ct.run_argv(c, SERVE, run_id=RUN, rank=0, workdir="/tmp/w", env=env, gpus=False)
    assert shlex.split(shell_command(argv)) == argv
    assert "NCCL_SOCKET_IFNAME==eth1 $(reboot); `id`" in argv
    with pytest.raises(ValueError):
        ct.run_argv(c, SERVE, run_id=RUN, rank=0, workdir="/tmp/w", env={"A;B": "1"},
                    gpus=False)
    with pytest.raises(ValueError):
        ct.run_argv(c, SERVE, run_id=RUN, rank=0, workdir="/tmp/w", env={}, gpus=False,
                    rdma_devices=["../sda"])


@pytest.mark.parametrize(("vars_", "said"), [
    ({"nodetune_container_runtime": "lxc"}, "nodetune_container_runtime 'lxc'"),
    ({"nodetune_container_runtime": "pyxis"}, "does not run under --launcher ssh"),
    ({"nodetune_container_shm_size": "1g; reboot"}, "nodetune_container_shm_size"),
    ({"nodetune_container_python": "python3 -c x"}, "nodetune_container_python"),
    ({"nodetune_container_mounts": ["relative:/x"]}, "nodetune_container_mounts"),
    ({"nodetune_container_mounts": "/a:/b"}, "must be a list"),
    # the checklist's /dev/shm mark: read before any node is touched, not at its probe
    ({"nodetune_min_shm": "lots"}, "nodetune_min_shm"),
])
def test_bad_values_name_host_and_variable(vars_: dict[str, object], said: str) -> None:
    with pytest.raises(InputError) as err:
        ct.configs([host(**vars_)], IMAGE)
    assert err.value.host == "gpu-1" and said in err.value.message


@pytest.mark.parametrize("image", ["-v/:/host", "img with space", "a;b", "$(id)", ""])
def test_bad_image_refused(image: str) -> None:
    with pytest.raises(InputError, match="--image"):
        Options(image=image).check()


def test_cli_bad_runtime_exits_2_before_any_node(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    inv = tmp_path / "hosts.yml"
    # unresolvable addresses: any connection attempt would fail with exit 3, not 2
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        node-a:\n"
                   "          ansible_host: node-a.invalid\n        node-b:\n"
                   "          ansible_host: node-b.invalid\n"
                   "          nodetune_container_runtime: dockerr\n")
    res = CliRunner().invoke(main, ["validate", str(inv), "--image", IMAGE, "--json"])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["error"]["host"] == "node-b"
    assert "nodetune_container_runtime 'dockerr'" in doc["error"]["message"]
    slurm = CliRunner().invoke(main, ["validate", str(inv), "--image", IMAGE, "--launcher",
                                      "slurm", "--json"])
    assert slurm.exit_code == 2
    checked = CliRunner().invoke(main, ["check", str(inv), "--image", IMAGE, "--json"])
    assert checked.exit_code == 2, checked.output
    assert json.loads(checked.stdout)["error"]["host"] == "node-b"
    bad_image = CliRunner().invoke(main, ["check", str(inv), "--image", "-v/:/h", "--json"])
    assert bad_image.exit_code == 2 and "--image" in json.loads(bad_image.stdout)["error"][
        "message"]


def test_rm_and_left_name_this_run_only() -> None:
    podman = ct.config(host(), IMAGE)
    assert ct.rm_argv(podman, RUN, 1) == ["podman", "rm", "-f", "-t", "0", "--ignore",
                                          f"nodetune-{RUN}-rank1", f"nodetune-{RUN}-probe1"]
    assert ct.left_argv(podman, RUN)[-3] == f"label=nodetune.run={RUN}"
    docker = ct.rm_argv(ct.config(host(nodetune_container_runtime="docker"), IMAGE), RUN, 0)
    assert docker[:2] == ["sh", "-c"] and docker[-2:] == [f"nodetune-{RUN}-rank0",
                                                          f"nodetune-{RUN}-probe0"]
    with pytest.raises(ValueError):
        ct.name("x; rm -rf /", 0)


# --- the checklist -----------------------------------------------------------------------

NODE = {"gpu": True, "rdma": ["rdma_cm", "uverbs0"], "ibverbs": True, "torch": "2.3.0",
        "cuda": "12.4", "nccl": "2.20.5"}
GOOD = {**NODE, "shm": 32 << 30}


def by_name(results: tuple[object, ...]) -> dict[str, object]:
    return {r.name: r for r in results}  # type: ignore[attr-defined]


def test_a_good_container_passes_every_check() -> None:
    results = cp.judge(NODE, GOOD)
    assert {r.name: r.status for r in results} == {
        "container.torch": Status.PASS, "container.shm": Status.PASS,
        "container.rdma": Status.PASS, "container.libibverbs": Status.PASS,
        "container.nccl": Status.PASS}


def test_default_64mb_shm_fails_naming_dev_shm() -> None:
    r = by_name(cp.judge(NODE, {**GOOD, "shm": 64 << 20}))["container.shm"]
    assert r.status is Status.FAIL  # type: ignore[attr-defined]
    assert "/dev/shm inside the container is 64.0 MiB" in r.message  # type: ignore[attr-defined]
    # the inventory's own floor is honoured
    assert by_name(cp.judge(NODE, {**GOOD, "shm": 64 << 20}, min_shm=32 << 20))[
        "container.shm"].status is Status.PASS  # type: ignore[attr-defined]


def test_rdma_devices_and_libibverbs_missing_fail_where_the_node_has_rdma() -> None:
    got = by_name(cp.judge(NODE, {**GOOD, "rdma": ["rdma_cm"], "ibverbs": False}))
    assert got["container.rdma"].status is Status.FAIL  # type: ignore[attr-defined]
    assert "uverbs0" in got["container.rdma"].message  # type: ignore[attr-defined]
    assert got["container.libibverbs"].status is Status.FAIL  # type: ignore[attr-defined]
    # a node without RDMA: neither is asked for
    plain = by_name(cp.judge({**NODE, "rdma": []}, {**GOOD, "rdma": [], "ibverbs": False}))
    assert plain["container.rdma"].status is Status.SKIP  # type: ignore[attr-defined]
    assert plain["container.libibverbs"].status is Status.SKIP  # type: ignore[attr-defined]


def test_nccl_differing_from_the_nodes_fails() -> None:
    r = by_name(cp.judge(NODE, {**GOOD, "nccl": "2.21.5"}))["container.nccl"]
    assert r.status is Status.FAIL  # type: ignore[attr-defined]
    assert "2.21.5 differs from the node's 2.20.5" in r.message  # type: ignore[attr-defined]
    cpu = by_name(cp.judge({**NODE, "nccl": None}, {**GOOD, "nccl": None}))["container.nccl"]
    assert cpu.status is Status.SKIP  # type: ignore[attr-defined]


def test_a_cpu_build_of_torch_fails_where_the_node_has_gpus() -> None:
    cpu = {**GOOD, "cuda": None, "nccl": None}
    r = by_name(cp.judge(NODE, cpu))["container.torch"]
    assert r.status is Status.FAIL and "CPU build" in r.message  # type: ignore[attr-defined]
    # a node without GPUs (the lab's): a CPU build is what it can use
    lab = by_name(cp.judge({**NODE, "gpu": False, "nccl": None}, cpu))["container.torch"]
    assert lab.status is Status.PASS  # type: ignore[attr-defined]


def test_no_torch_in_the_image_fails() -> None:
    inside = {"shm": 1 << 30, "rdma": [], "torch_error": "ModuleNotFoundError: torch"}
    r = by_name(cp.judge({"rdma": []}, inside))["container.torch"]
    assert r.status is Status.FAIL and "ModuleNotFoundError" in r.message  # type: ignore


def test_probe_line_parsed_and_report_names_image() -> None:
    line = "noise\n" + cp.MARK + json.dumps(GOOD) + "\n"
    assert cp.parse(line) == GOOD and cp.parse("nothing") is None
    probed = cp.Probed(host="gpu-1", container=ct.config(host(), IMAGE), digest="sha256:ab",
                       node=NODE, inside=GOOD, results=cp.judge(NODE, GOOD))
    doc = probed.to_dict()
    assert (doc["image"], doc["digest"], doc["torch"], doc["cuda"], doc["nccl"],
            doc["shm"]) == (IMAGE, "sha256:ab", "2.3.0", "12.4", "2.20.5", "32.0 GiB")
    assert cp.image_result(probed).status is Status.PASS
    missing = cp.Probed(host="gpu-1", container=probed.container, missing="not there")
    assert cp.image_result(missing).status is Status.FAIL


def test_an_image_fault_blames_no_node() -> None:
    """A missing image or a container that fails the checklist is the image's fault: the
    node it happened on is named (exit 3 / exit 1) but not blamed, so --drain-unreachable
    drains nothing for it; a node's own launch failure still is."""
    from nodetune.errors import ExitCode, ImageCheckFailed, ImageError, LaunchError
    from nodetune.validate.verb import blamed_host
    names = ("gpu-1", "gpu-2")
    missing = ImageError("image pytorch:24.10 is not on the node and cannot be pulled",
                         host="gpu-1")
    small = ImageCheckFailed("/dev/shm 64.0 MiB in the container", host="gpu-2")
    assert missing.exit_code == ExitCode.INFRASTRUCTURE and small.exit_code == ExitCode.CHECK_FAILED
    assert blamed_host(missing, names) is None and blamed_host(small, names) is None
    assert blamed_host(LaunchError("the worker died", host="gpu-1"), names) == "gpu-1"


def test_the_digest_is_the_registrys_else_the_image_id() -> None:
    assert cp._digest("sha256:aa sha256:bb\n") == "sha256:aa"  # podman: digest, id
    assert cp._digest("[] sha256:bb\n") == "sha256:bb"  # docker, no repo digest
    assert cp._digest("[nvcr.io/nvidia/pytorch@sha256:cc] sha256:bb") == \
        "nvcr.io/nvidia/pytorch@sha256:cc"
    assert cp._digest("") is None


def test_the_images_fault_leaves_every_node_to_slurm_as_it_was() -> None:
    """validate --image --drain --drain-unreachable: a missing image or a container that
    fails the checklist drains (or resumes) no node; a node's own fault is left to the
    verdicts."""
    from nodetune.errors import ImageCheckFailed, ImageError, LaunchError
    from nodetune.validate.verb import left_alone

    names = ("gpu-1", "gpu-2")
    small = ImageCheckFailed("container.shm: 64.0 MiB, expected >= 1.0 GiB", host="gpu-1")
    held = left_alone(small, names)
    assert held is not None and set(held) == set(names)
    assert all("training image's" in why and "container.shm" in why for why in held.values())
    assert left_alone(ImageError("no image nvcr.io/x:1", host="gpu-2"), names) is not None
    assert left_alone(LaunchError("the worker died", host="gpu-1"), names) is None
