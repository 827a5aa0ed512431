"""Size parsing, pair selection, environment, the worker's command line and launch spec."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host, Inventory
from nodetune.collective import plan, worker_cmd
from nodetune.collective.answers import NodeProbe
from nodetune.collective.datapath import Interfaces
from nodetune.errors import InputError, LaunchError
from nodetune.measure.host_env import host_env
from nodetune.measure.sizes import parse_sizes
from nodetune.remote.ssh import shell_command


def host(name: str, groups: tuple[str, ...] = ("gpu_nodes",), **vars_: Any) -> Host:
    return Host(name=name, groups=groups, vars=vars_)


def inv(*hosts: Host, limit: str | None = None) -> Inventory:
    return Inventory(source=Path("inv"), hosts=hosts, groups=("gpu_nodes",), limit=limit)


@pytest.mark.parametrize(("spec", "sizes"), [
    ("1M:1G", (1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30)),
    ("1M:64M", (1 << 20, 4 << 20, 16 << 20, 64 << 20)),
    ("1M:8M:2", (1 << 20, 2 << 20, 4 << 20, 8 << 20)),
    ("64M", (64 << 20,)),
    ("4K,1M", (4096, 1 << 20)),
    ("1MiB:1MiB", (1 << 20,)),
    ("1m:2m:2", (1 << 20, 2 << 20)),
    ("10", (8,)),  # rounded down to whole float32 elements
])
def test_parse_sizes(spec: str, sizes: tuple[int, ...]) -> None:
    assert parse_sizes(spec) == sizes


@pytest.mark.parametrize("spec", ["", "1G:1M", "1M:1G:1", "1M:1G:x", "1T", "abc", "0", "1M:2M:3:4",
                                  "-1M", "1:2:3:4", "1M:1G:1.5"])
def test_bad_sizes_are_input_errors(spec: str) -> None:
    with pytest.raises(InputError):
        parse_sizes(spec)


def test_too_many_sizes() -> None:
    with pytest.raises(InputError, match="at most 40"):
        parse_sizes("1:1024G:2")


@pytest.mark.parametrize("opts", [
    plan.Options(iters=0), plan.Options(warmup=-1), plan.Options(nproc_per_node=0),
    plan.Options(timeout=0), plan.Options(backend="mpi"), plan.Options(sizes="1G:1M"),
])
def test_option_checks(opts: plan.Options) -> None:
    with pytest.raises(InputError):
        opts.check()


def test_pair_is_the_selections_first_two_hosts_whatever_their_groups() -> None:
    """The selection is already the verb's targets (nodetune.ansible.targets); a fleet pair of a
    gpu_nodes host and a partner of another group is a pair, not "needs two hosts"."""
    pair = plan.select_pair(inv(host("a"), host("p", ("rack_b",)), host("c")))
    assert (pair.master.name, pair.other.name, pair.skipped) == ("a", "p", ("c",))


def test_one_host_is_an_input_error_naming_limit() -> None:
    with pytest.raises(InputError, match=r"--limit 'a'.*found 1"):
        plan.select_pair(inv(host("a"), limit="a"))


def test_master_address_order() -> None:
    pair = plan.Pair(host("a", ansible_host="10.0.0.1"), host("b"))
    assert plan.master_address(pair, None) == "10.0.0.1"
    assert plan.master_address(pair, "192.168.1.1") == "192.168.1.1"
    pair = plan.Pair(host("a", ansible_host="10.0.0.1", nodetune_validate_master_addr="ib0-a"),
                     host("b"))
    assert plan.master_address(pair, None) == "ib0-a"
    local = plan.Pair(host("gpu0", ansible_connection="local"), host("gpu1"))
    assert plan.master_address(local, None) == "127.0.0.1"


def test_host_env_from_inventory() -> None:
    h = host("a", nodetune_env={"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_NVLS_ENABLE": 0,
                                "NCCL_IB_DISABLE": False},
             nodetune_cuda_visible_devices=1)
    assert host_env(h) == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_NVLS_ENABLE": "0",
                                "NCCL_IB_DISABLE": "0", "CUDA_VISIBLE_DEVICES": "1"}
    with pytest.raises(InputError, match="mapping"):
        host_env(host("a", nodetune_env="NCCL_DEBUG=INFO"))


@pytest.mark.parametrize("name", ["NCCL DEBUG", "1NCCL", "A=B", "X;rm -rf /", ""])
def test_a_bad_environment_variable_name_is_bad_input_naming_host_and_variable(
        name: str) -> None:
    with pytest.raises(InputError, match=r"nodetune_env: .* is not an environment variable "
                                         r"name") as err:
        host_env(host("node-7", nodetune_env={name: "1"}))
    assert err.value.host == "node-7"


def test_worker_env_adds_debug_and_interface_but_keeps_inventory_choices() -> None:
    env = worker_cmd.worker_env({}, backend="gloo", iface="eth0", force_ring=False)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "eth0"
    env = worker_cmd.worker_env({"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN",
                           "NCCL_DEBUG_SUBSYS": "ALL"}, backend="nccl", iface="eth0",
                          force_ring=True)
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "ALL"
    assert env["NCCL_ALGO"] == "Ring"
    assert "NCCL_ALGO" not in worker_cmd.worker_env({}, backend="gloo", iface=None, force_ring=True)
    assert worker_cmd.worker_env({"NCCL_ALGO": "Tree"}, backend="nccl", iface=None,
                           force_ring=True)["NCCL_ALGO"] == "Tree"


def test_serve_argv_runs_the_worker_under_its_launch_guard() -> None:
    argv = worker_cmd.serve_argv("/opt/venv/bin/python", "w.py", master_addr="10.0.0.1", free_port=True)
    assert argv[:4] == ["/opt/venv/bin/python", "w.py", "launch", "--"]
    assert argv[4:] == ["/opt/venv/bin/python", "w.py", "serve", "--master", "10.0.0.1",
                        "--free-port"]
    assert "--free-port" not in worker_cmd.serve_argv("p", "w.py", master_addr="a", free_port=False)


def test_hostile_inventory_values_stay_quoted() -> None:
    evil_python = "/opt/my venv/bin/python; rm -rf /"
    evil_env = {"NCCL_IB_HCA": "mlx5_0'; touch /tmp/pwned; echo '", "X": "$(id) `id` \"q\""}
    argv = worker_cmd.serve_argv(evil_python, "w.py", master_addr="a b", free_port=False)
    line = shell_command(argv, env=evil_env, cwd="/tmp/dir with space")
    words = shlex.split(line)
    assert words[:3] == ["cd", "/tmp/dir with space", "&&"]
    assert words[4:7] == ["env", f"NCCL_IB_HCA={evil_env['NCCL_IB_HCA']}", f"X={evil_env['X']}"]
    assert words[7] == evil_python
    assert words.count("a b") == 1


def test_choose_backend() -> None:
    gpu = NodeProbe("a", "3.12", "2.11", 1, None)
    cpu = NodeProbe("b", "3.11", "2.13", 0, None)
    assert plan.choose_backend("auto", [gpu, gpu]) == "nccl"
    assert plan.choose_backend("auto", [gpu, cpu]) == "gloo"
    assert plan.choose_backend("nccl", [cpu, cpu]) == "nccl"


def probe(name: str, gpus: int = 0, *, iface: str | None = "eth0", port: int | None = None,
          gloo: bool = True) -> NodeProbe:
    return NodeProbe(name, "3.11", "2.5", gpus, port, Interfaces(route=iface), raw={"gloo": gloo})


def a_pair(**master_vars: Any) -> plan.Pair:
    return plan.Pair(host("a", ansible_host="10.0.0.1", **master_vars),
                     host("b", nodetune_socket_ifname="ib0",
                          nodetune_env={"NCCL_IB_HCA": "mlx5_0"}))


def test_plan_before_connecting_decides_inputs_once() -> None:
    p = plan.plan_pair(a_pair(nodetune_validate_profile="h100-2node-aws-p5"),
                       plan.Options(sizes="1M:4M"))
    assert p.master_addr == "10.0.0.1" and p.sizes == (1 << 20, 4 << 20)
    assert p.profile == "h100-2node-aws-p5" and p.threshold is not None
    assert [n.name for n in p.nodes] == ["a", "b"] and [n.rank for n in p.nodes] == [0, 1]
    assert p.nodes[1].data.exact == ("ib0",) and p.nodes[1].env == {"NCCL_IB_HCA": "mlx5_0"}
    assert p.expect_transport == "any"


@pytest.mark.parametrize(("options", "vars_", "match"), [
    (plan.Options(sizes="1G:1M"), {}, "MIN is larger"),
    (plan.Options(iters=0), {}, "--iters"),
    (plan.Options(), {"nodetune_validate_expect_transport": "carrier-pigeon"}, "a: .*expect"),
    (plan.Options(), {"nodetune_env": ["NCCL_DEBUG=INFO"]}, "a: nodetune_env must be a mapping"),
])
def test_bad_input_fails_in_the_plan(options: plan.Options, vars_: dict[str, Any],
                                     match: str) -> None:
    with pytest.raises(InputError, match=match):
        plan.plan_pair(a_pair(**vars_), options)


def test_complete_on_cpu_nodes() -> None:
    p = plan.plan_pair(a_pair(), plan.Options())
    launch = p.complete([probe("b", iface="eth9"), probe("a", port=29500)])  # any order
    assert (launch.backend, launch.nproc_per_node, launch.port) == ("gloo", 1, 29500)
    assert launch.sizes == parse_sizes(plan.DEFAULT_SIZES_CPU)
    assert launch.env["a"]["GLOO_SOCKET_IFNAME"] == "eth0"   # probed
    assert launch.env["b"]["GLOO_SOCKET_IFNAME"] == "ib0"    # inventory wins over the probe
    assert launch.env["b"]["NCCL_IB_HCA"] == "mlx5_0"
    spec = launch.spec(p.nodes[1])
    assert json.loads(json.dumps(spec)) == spec  # sent to the node as one JSON line
    assert (spec["nproc"], spec["node_rank"], spec["nnodes"], spec["port"]) == (1, 1, 2, 29500)
    assert spec["env"] == launch.env["b"]
    argv = spec["argv"]
    assert isinstance(argv, list) and argv[0] == "measure"
    assert argv[argv.index("--backend") + 1] == "gloo"
    assert argv[argv.index("--sizes") + 1] == ",".join(str(n) for n in launch.sizes)


def test_complete_on_gpu_nodes() -> None:
    p = plan.plan_pair(a_pair(nodetune_validate_profile="h100-ring-multinode"), plan.Options())
    launch = p.complete([probe("a", 8, port=1), probe("b", 4)])
    assert (launch.backend, launch.nproc_per_node) == ("nccl", 4)
    assert launch.sizes == parse_sizes(plan.DEFAULT_SIZES_GPU)
    assert launch.env["a"]["NCCL_ALGO"] == "Ring"  # a ring profile forces the ring
    default = plan.plan_pair(a_pair(nodetune_validate_profile="h100-2node-aws-p5"),
                             plan.Options()).complete([probe("a", 8, port=1), probe("b", 8)])
    assert "NCCL_ALGO" not in default.env["a"] and default.nproc_per_node == 8


@pytest.mark.parametrize(("options", "probes", "match"), [
    (plan.Options(), [probe("a"), probe("b")], "free port"),
    (plan.Options(backend="nccl"), [probe("a", 1, port=1), probe("b", 0)], "b: .*no CUDA"),
    (plan.Options(nproc_per_node=4), [probe("a", 8, port=1), probe("b", 2)],
     "b: --nproc-per-node 4 but only 2"),
    (plan.Options(), [probe("a", port=1, gloo=False), probe("b")], "a: .*without gloo"),
])
def test_complete_refuses_what_the_nodes_cannot_run(options: plan.Options,
                                                    probes: list[NodeProbe],
                                                    match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        plan.plan_pair(a_pair(), options).complete(probes)


def test_plan_is_frozen() -> None:
    p = plan.plan_pair(a_pair(), plan.Options())
    with pytest.raises(AttributeError):
        p.master_addr = "x"  # type: ignore[misc]


def test_nccl_ranks_outlast_the_stall_detection_so_ras_can_be_asked() -> None:
    p = plan.plan_pair(a_pair(), plan.Options(timeout=60))

    def rank_timeout(launch: plan.Launch) -> str:
        argv = launch.spec(p.nodes[0])["argv"]
        assert isinstance(argv, list)
        return str(argv[argv.index("--timeout") + 1])
    nccl = p.complete([probe("a", 8, port=1), probe("b", 8)])
    assert nccl.backend == "nccl" and rank_timeout(nccl) == f"{60 + plan.RANK_TIMEOUT_GRACE_S:g}"
    gloo = p.complete([probe("a", port=1), probe("b")])
    assert gloo.backend == "gloo" and rank_timeout(gloo) == "60"
