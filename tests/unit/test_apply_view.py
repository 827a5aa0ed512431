"""apply's output: the change lines shown without --diff, and the roll-up at hundreds of hosts."""

from __future__ import annotations

import io

from rich.console import Console

from nodetune.ansible.events import render_diff
from nodetune.ansible.results import PlaybookEvent, TaskOutcome
from nodetune.apply import changes
from nodetune.cli.apply_view import LiveView


def _render(renderable: object, width: int = 100) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(renderable)
    return buf.getvalue()


def _changed(host: str, task: str, diff: object) -> TaskOutcome:
    return TaskOutcome(host=host, task=task, status="changed", diff=render_diff(diff))


def test_a_file_and_each_sysctl_setting_is_one_line_over_all_hosts() -> None:
    conf = {"before": "a\n", "after": "b\n", "before_header": "/etc/nccl.conf",
            "after_header": "/etc/nccl.conf"}
    live = {"before": "net.core.rmem_max = 1\nnet.ipv4.tcp_mtu_probing = 0\n",
            "after": "net.core.rmem_max = 2\nnet.ipv4.tcp_mtu_probing = 1\n",
            "before_header": "/proc/sys", "after_header": "/proc/sys"}
    tasks = [_changed(f"node-{i:03d}", "nccl_config : Write", conf) for i in range(500)]
    tasks += [_changed("node-001", "net_sysctl : Apply", live),
              TaskOutcome(host="node-002", task="pkgs : Install", status="changed")]
    lines = [c.line(total=500) for c in changes.summarize(tasks)]
    assert lines == [
        "/etc/nccl.conf  [nccl_config : Write]  on all 500 hosts",
        "net.core.rmem_max (/proc/sys)  [net_sysctl : Apply]  on 1 host: node-001",
        "net.ipv4.tcp_mtu_probing (/proc/sys)  [net_sysctl : Apply]  on 1 host: node-001",
        "pkgs : Install  on 1 host: node-002",
    ]
    assert changes.summarize(tasks[:5])[0].line(total=500) == (
        "/etc/nccl.conf  [nccl_config : Write]  on 5 hosts: node-000, node-001, node-002 +2 more")


def test_a_diff_without_a_file_header_names_its_path_or_its_settings() -> None:
    made = _changed("n1", "Install", [{"before": {"path": "/etc/ansible/facts.d", "state": "absent"},
                                       "after": {"path": "/etc/ansible/facts.d",
                                                 "state": "directory"}},
                                      {"before": "", "after": "x\n",
                                       "before_header": "/etc/ansible/facts.d/nodetune.fact",
                                       "after_header": "/etc/ansible/facts.d/nodetune.fact"}])
    assert changes.targets_of(made.diff) == ["/etc/ansible/facts.d",
                                             "/etc/ansible/facts.d/nodetune.fact"]
    mtu = _changed("n1", "Set MTUs", {"before": "eth1 mtu 1500\n", "after": "eth1 mtu 9000\n"})
    assert changes.targets_of(mtu.diff) == ["eth1 mtu 9000"]


def test_a_diff_without_header_is_named_by_its_first_line() -> None:
    assert changes.targets_of("would install foo 1.2\nand bar\n") == ["would install foo 1.2"]
    assert changes.targets_of("") == []


def _events(view: LiveView, host: str, *statuses: str) -> None:
    view.update(PlaybookEvent(kind="task", host=host, task="Write"))
    for s in statuses:
        view.update(PlaybookEvent(kind="result", host=host, task="Write", status=s))


def test_live_view_rolls_up_past_its_row_limit() -> None:
    hosts = [f"node-{i:03d}" for i in range(500)]
    view = LiveView(hosts)
    for h in hosts[:400]:
        _events(view, h, "ok")
    for h in hosts[400:410]:
        _events(view, h, "changed")
    _events(view, "node-499", "failed")
    _events(view, "node-498", "unreachable")
    _events(view, "node-497")  # running, no result yet
    out = _render(view.table())
    assert "500 hosts" in out
    counts = out.splitlines()[2].split()
    # waiting, running, ok, changed, failed, unreachable
    assert counts == ["87", "1", "400", "10", "1", "1"]
    assert "node-499" in out and "failed: Write" in out
    assert "node-498" in out and "unreachable: Write" in out
    assert "node-000" not in out and len(out.splitlines()) < 12


def test_live_view_has_a_row_per_host_when_few() -> None:
    view = LiveView(["a", "b"])
    _events(view, "a", "changed")
    out = _render(view.table())
    assert [ln.split()[0] for ln in out.splitlines()[2:]] == ["a", "b"]
