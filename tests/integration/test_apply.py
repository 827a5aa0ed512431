"""`nodetune apply` against a real two-node lab over real SSH."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import run_nodetune
from tests.integration.conftest import Lab

FACT = "/etc/ansible/facts.d/nodetune.fact"
# Whether this module's first test converged the session's lab: every later test here
# leaves it converged, so one that needs a converged lab applies only when run alone.
_converged: list[bool] = []


def converge(lab: Lab, runs_dir: Path) -> None:
    """The lab converged: by this module's first test where it ran, else by an apply now."""
    if not _converged:
        res = run_nodetune("apply", str(lab.inventory), runs_dir=runs_dir)
        assert res.code == 0, res.stdout + res.stderr
        _converged.append(True)


def test_apply_converges_and_records_the_run(lab: Lab, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(lab.inventory), runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    _converged.append(True)
    for node in lab.nodes:
        assert node in res.stdout
    run = next(runs_dir.iterdir())
    assert run.name.endswith("-apply")
    assert (run / "report.json").is_file()
    assert (run / "ansible" / "job_events").is_dir(), "ansible-runner artifacts beside report"
    for node in lab.nodes:
        assert lab.sh(node, "test", "-x", FACT, check=False) == ""


def test_second_apply_changes_nothing(lab: Lab, runs_dir: Path) -> None:
    converge(lab, runs_dir)
    res = run_nodetune("apply", str(lab.inventory), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    report = res.json()
    assert {h["host"] for h in report["hosts"]} == set(lab.nodes)
    assert all(h["changed"] == 0 for h in report["hosts"]), report["changed_tasks"]
    assert report["schema_version"] == 1 and report["verb"] == "apply"


def _task_status(artifacts: str, task: str) -> dict[str, str]:
    """Each host's result of ``task`` in one run, from its job events."""
    import json

    out = {}
    for path in Path(artifacts).glob("job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if data.get("task") == task and event["event"].startswith("runner_on_") \
                and event["event"] != "runner_on_start":
            out[data["host"]] = event["event"].removeprefix("runner_on_")
    return out


def test_the_fact_script_is_installed_only_where_it_differs(lab: Lab, runs_dir: Path) -> None:
    # A converged node's fact gathering already ran the script node_facts installs:
    # no install call there. One whose script drifted (here its mode) gets one.
    converge(lab, runs_dir)
    drifted, other = lab.nodes[0], lab.nodes[1]
    lab.sh(drifted, "chmod", "0700", FACT)
    res = run_nodetune("apply", str(lab.inventory), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    report = res.json()
    task = "Install and gather the nodetune local fact"
    assert [(t["host"], t["task"]) for t in report["changed_tasks"]] == [(drifted, task)]
    assert _task_status(report["artifacts"], task) == {drifted: "ok", other: "skipped"}
    assert lab.sh(drifted, "stat", "-c", "%a %U %G", FACT) == "755 root root"
    again = run_nodetune("apply", str(lab.inventory), "--json", runs_dir=runs_dir).json()
    assert _task_status(again["artifacts"], task) == {drifted: "skipped", other: "skipped"}
    assert again["changed_tasks"] == []


def test_check_mode_predicts_but_changes_nothing(lab: Lab, runs_dir: Path) -> None:
    node = lab.nodes[0]
    lab.sh(node, "rm", "-f", FACT)
    res = run_nodetune("apply", str(lab.inventory), "--check", "--diff", "--limit", node,
                       "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    report = res.json()
    assert report["options"]["check"] is True
    assert [h["host"] for h in report["hosts"]] == [node]
    assert report["hosts"][0]["changed"] >= 1, "check mode predicts the missing fact script"
    assert lab.sh(node, "ls", "/etc/ansible/facts.d") == "", "check mode wrote nothing"
    # Converge again so later tests see a complete node: the fact script is node_facts'.
    again = run_nodetune("apply", str(lab.inventory), "--limit", node, "-t", "node_facts",
                         runs_dir=runs_dir)
    assert again.code == 0, again.stdout + again.stderr
    lab.sh(node, "test", "-x", FACT)


def test_unreachable_host_exits_3_while_others_converge(
        lab: Lab, runs_dir: Path, tmp_path: Path) -> None:
    inv = yaml.safe_load((lab.inventory / "hosts.yml").read_text())
    hosts = inv["all"]["children"]["gpu_nodes"]["hosts"]
    # Nothing listens on port 1 of loopback: SSH is refused at once.
    hosts["ghost-node"] = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    node = lab.nodes[1]
    lab.sh(node, "rm", "-f", FACT)
    res = run_nodetune("apply", str(path), runs_dir=runs_dir)
    assert res.code == 3, res.stdout + res.stderr
    assert "ghost-node" in res.stdout and "unreachable" in res.stdout
    assert "some hosts unreachable" in res.stdout
    lab.sh(node, "test", "-x", FACT)  # the reachable node was still applied


def test_facts_reports_every_node(lab: Lab, runs_dir: Path) -> None:
    res = run_nodetune("facts", str(lab.inventory), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    facts = res.json()["facts"]
    assert set(facts) == set(lab.nodes)
    for node in lab.nodes:
        f = facts[node]
        assert f["os"]["id"] == "debian"
        assert f["nvidia_gpu_present"] is False
        assert f["container"] is True
        eth0 = next(i for i in f["interfaces"] if i["name"] == "eth0")
        assert eth0["mtu"] == int(lab.sh(node, "cat", "/sys/class/net/eth0/mtu"))
        assert f["sysctl"]["net.ipv4.tcp_rmem"] == " ".join(
            lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_rmem").split())
    human = run_nodetune("facts", str(lab.inventory), runs_dir=runs_dir)
    assert "net.ipv4.tcp_congestion_control" in human.stdout
