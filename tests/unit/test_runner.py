"""The ansible-runner wrapper, run for real against the local machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nodetune.ansible.content import content_dir
from nodetune.ansible.results import HostResult, HostState, PlaybookEvent, PlaybookOptions
from nodetune.ansible.runner import run_playbook
from nodetune.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.fixture()
def local_inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.ini"
    py = sys.executable
    inv.write_text(
        "[local]\n"
        f"ok_host ansible_connection=local ansible_python_interpreter={py}\n"
        f"changer ansible_connection=local ansible_python_interpreter={py}\n"
        f"failer ansible_connection=local ansible_python_interpreter={py}\n"
        "[remote]\n"
        # Port 1 on loopback: nothing listens, so SSH is refused at once.
        "ghost ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n"
    )
    return inv


def test_events_become_progress_and_stats_become_host_results(
        local_inventory: Path, tmp_path: Path) -> None:
    events: list[PlaybookEvent] = []
    result = run_playbook(str(FIXTURES / "playbooks" / "mixed.yml"), local_inventory,
                          options=PlaybookOptions(forks=4), artifact_dir=tmp_path / "run",
                          on_progress=events.append)

    by_host = {h.host: h for h in result.hosts}
    assert set(by_host) == {"ok_host", "changer", "failer", "ghost"}
    assert by_host["ok_host"].state is HostState.OK
    assert by_host["changer"].state is HostState.CHANGED
    assert by_host["changer"].changed == 1
    assert by_host["failer"].state is HostState.FAILED
    assert by_host["ghost"].state is HostState.UNREACHABLE
    assert by_host["ok_host"].skipped == 2  # the fail task and the debug task

    failed = {t.host: t for t in result.failed_tasks}
    assert failed["failer"].task == "Fail on the failer"
    assert "disk /dev/nvme9 is missing" in failed["failer"].message
    assert failed["ghost"].status == "unreachable"
    assert [t.host for t in result.changed_tasks] == ["changer"]

    assert result.custom_stats["seen"] == {"ok_host": True, "changer": True}
    assert result.status == "failed"
    assert (result.artifacts / "job_events").is_dir()

    kinds = {(e.kind, e.status) for e in events}
    assert ("play", None) in kinds
    assert ("result", "changed") in kinds
    assert ("result", "failed") in kinds
    assert ("result", "unreachable") in kinds
    assert any(e.kind == "task" and e.host == "failer" and e.task == "Fail on the failer"
               for e in events)


def test_check_mode_reaches_ansible(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"me ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    play = tmp_path / "touch.yml"
    target = tmp_path / "must-not-exist"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.file:\n        path: {target}\n        state: touch\n"
    )
    result = run_playbook(str(play), inv, options=PlaybookOptions(check=True),
                          artifact_dir=tmp_path / "run")
    assert result.hosts[0].changed == 1
    assert not target.exists()


def test_missing_playbook_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        run_playbook("nope.yml", tmp_path, options=PlaybookOptions(), artifact_dir=tmp_path)


def test_content_dir_has_site_playbook() -> None:
    assert (content_dir() / "playbooks" / "site.yml").is_file()
    assert (content_dir() / "roles" / "node_facts" / "tasks" / "main.yml").is_file()


@pytest.mark.parametrize(
    ("counts", "state"),
    [({}, HostState.OK), ({"changed": 1}, HostState.CHANGED),
     ({"changed": 1, "failed": 1}, HostState.FAILED),
     ({"failed": 1, "unreachable": 1}, HostState.UNREACHABLE)],
)
def test_host_state_is_the_worst_outcome(counts: dict[str, int], state: HostState) -> None:
    assert HostResult(host="h", **counts).state is state


def test_unknown_tags_are_bad_input_before_anything_runs(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    for opts in (PlaybookOptions(tags=("nosuchrole",)), PlaybookOptions(skip_tags=("net_sysctl", "nope"))):
        with pytest.raises(InputError, match="unknown tag") as err:
            run_playbook("site.yml", inv, options=opts, artifact_dir=tmp_path / "run")
        assert "net_sysctl" in str(err.value), "the message lists the known tags"
    assert not (tmp_path / "run" / "ansible").exists(), "ansible-playbook never started"


def test_known_tags_come_from_every_play_and_role() -> None:
    from nodetune.ansible.env import playbook_env
    from nodetune.ansible.tags import playbook_tags
    from tests.plugins import collections_path

    env, _ = playbook_env(content=content_dir())
    env["ANSIBLE_COLLECTIONS_PATH"] = collections_path()
    tags = playbook_tags(content_dir() / "playbooks" / "site.yml",
                         content_dir() / "inventory" / "example", env=env)
    assert {"node_facts", "nvidia_driver", "nvidia_container_toolkit", "ofed", "net_sysctl",
            "net_mtu", "roce_qos", "nccl_config", "always"} <= tags


def test_skip_tags_find_ansible_playbook_where_the_run_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nodetune on a Python whose bin has no ansible-playbook (pip --target, a system
    Python): the tag check and the run both take it from PATH."""
    real = Path(sys.executable).parent / "ansible-playbook"
    assert real.exists()
    elsewhere = tmp_path / "python-without-ansible" / "bin"
    elsewhere.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(elsewhere / "python3"))
    monkeypatch.setenv("PATH", f"{real.parent}:/usr/bin:/bin")
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"me ansible_connection=local ansible_python_interpreter={real.parent / 'python'}\n")
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - {name: Kept, ansible.builtin.set_stats: {data: {kept: true}}, tags: [kept]}\n"
                    "    - {name: Skipped, ansible.builtin.set_stats: {data: {skipped: true}}, tags: [gone]}\n")
    result = run_playbook(str(play), inv, options=PlaybookOptions(skip_tags=("gone",)),
                          artifact_dir=tmp_path / "run")
    assert result.rc == 0, result.failed_tasks
    assert result.custom_stats == {"kept": True}


def test_unreachable_now_names_only_hosts_that_do_not_answer(local_inventory: Path) -> None:
    from nodetune.ansible.runner import unreachable_now

    assert unreachable_now(local_inventory, ["ok_host", "ghost", "failer"]) == {"ghost"}
    assert unreachable_now(local_inventory, []) == frozenset()


def test_diffs_are_rendered_as_unified_text() -> None:
    from nodetune.ansible.events import render_diff

    text = render_diff([{"before": "a=1\nb=2\n", "after": "a=1\nb=3\n",
                         "before_header": "/etc/x (content)", "after_header": "/etc/x (content)"},
                        {"prepared": "--- before\n+++ after\n@@ x @@\n"},
                        {"before": {"state": "absent"}, "after": {"state": "file"}}])
    assert "--- /etc/x (content)\n+++ /etc/x (content)\n" in text
    assert "-b=2\n+b=3\n" in text
    assert "@@ x @@\n" in text
    assert '-  "state": "absent"\n+  "state": "file"\n' in text
    assert render_diff(None) == "" and render_diff([{"before": "x", "after": "x"}]) == ""


def test_a_failed_host_that_no_longer_answers_went_away(tmp_path: Path) -> None:
    """The run sees two hosts fail; afterwards one answers and one does not (it died)."""
    from nodetune.ansible.runner import with_hosts_gone

    py = sys.executable
    during = tmp_path / "during.ini"
    during.write_text(f"[all]\nfailer ansible_connection=local ansible_python_interpreter={py}\n"
                      f"dying ansible_connection=local ansible_python_interpreter={py}\n")
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - {name: Run a module, ansible.builtin.fail: {msg: MODULE FAILURE}}\n")
    result = run_playbook(str(play), during, options=PlaybookOptions(), artifact_dir=tmp_path / "r")
    assert {h.state for h in result.hosts} == {HostState.FAILED}
    after = tmp_path / "after.ini"  # the dead node: nothing listens any more
    after.write_text(f"[all]\nfailer ansible_connection=local ansible_python_interpreter={py}\n"
                     "dying ansible_host=127.0.0.1 ansible_port=1\n")
    judged = with_hosts_gone(result, after)
    states = {h.host: h.state for h in judged.hosts}
    assert states == {"failer": HostState.FAILED, "dying": HostState.UNREACHABLE}
    dying = next(t for t in judged.failed_tasks if t.host == "dying")
    assert dying.status == "unreachable" and "went away" in dying.message
    assert next(t for t in judged.failed_tasks if t.host == "failer").status == "failed"


def test_a_host_ansible_lost_after_it_answered_went_away() -> None:
    """Ansible itself marks a host unreachable mid-run, after tasks had run on it."""
    from nodetune.ansible.results import PlaybookResult, TaskOutcome
    from nodetune.ansible.runner import with_hosts_gone

    lost = TaskOutcome(host="b", task="Read sysctls", status="unreachable", message="timed out")
    never = TaskOutcome(host="c", task="Gather facts", status="unreachable", message="refused")
    result = PlaybookResult(
        status="failed", rc=4,
        hosts=(HostResult("a", ok=9), HostResult("b", ok=5, unreachable=1),
               HostResult("c", unreachable=1)),
        failed_tasks=(lost, never), changed_tasks=(), custom_stats={},
        artifacts=Path("/nonexistent"), duration_s=1.0, ansible_config="")
    judged = with_hosts_gone(result, Path("/nonexistent"))
    by_host = {t.host: t for t in judged.failed_tasks}
    assert "went away" in by_host["b"].message and "[Read sysctls]" in by_host["b"].message
    assert "timed out" in by_host["b"].message
    assert by_host["c"] == never, "a host that never answered did not go away"
    assert [h.state for h in judged.hosts] == [HostState.OK, HostState.UNREACHABLE,
                                              HostState.UNREACHABLE]
