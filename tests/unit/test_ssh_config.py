"""How a host is reached: inventory vars, ssh args, ssh_config, ProxyJump/ProxyCommand, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.errors import ExitCode, InputError
from nodetune.remote import ssh_config


@pytest.fixture(autouse=True)
def user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A ~/.ssh/config of the test's own; /etc/ssh/ssh_config kept out."""
    path = tmp_path / "ssh" / "config"
    path.parent.mkdir()
    monkeypatch.setattr(ssh_config, "USER_CONFIG", path)
    monkeypatch.setattr(ssh_config, "SYSTEM_CONFIG", tmp_path / "no-system-config")
    for var in ("ANSIBLE_SSH_ARGS", "ANSIBLE_SSH_COMMON_ARGS", "ANSIBLE_SSH_EXTRA_ARGS"):
        monkeypatch.delenv(var, raising=False)
    return path


def host(name: str = "node-b", **vars_: Any) -> Host:
    return Host(name=name, groups=("gpu_nodes",), vars=vars_)


def refused(h: Host) -> InputError:
    with pytest.raises(InputError) as info:
        ssh_config.spec_for(h)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert info.value.host == h.name
    return info.value


def test_user_ssh_config_is_honoured(user_config: Path, tmp_path: Path) -> None:
    key = tmp_path / "id_site"
    key.write_text("k")
    user_config.write_text(
        "Host node-b\n  HostName 10.1.0.12\n  User admin\n  Port 2222\n"
        f"  IdentityFile {key}\n  UserKnownHostsFile {tmp_path}/kh\n"
        "Host *\n  ServerAliveInterval 15\n  ConnectTimeout 7\n")
    spec = ssh_config.spec_for(host())
    assert (spec.address, spec.port, spec.user) == ("10.1.0.12", 2222, "admin")
    assert spec.key_files == (key,)
    assert spec.known_hosts[0] == tmp_path / "kh"
    assert (spec.keepalive, spec.connect_timeout) == (15, 7.0)


def test_inventory_beats_ssh_config_first_value_wins(user_config: Path) -> None:
    user_config.write_text("Host *\n  User fromconfig\n  Port 2222\n  Compression no\n")
    spec = ssh_config.spec_for(host(ansible_port=22, ansible_ssh_common_args="-o User=ops"))
    assert (spec.port, spec.user) == (22, "ops")
    spec = ssh_config.spec_for(host(ansible_user="root", ansible_ssh_common_args="-l ops"))
    assert spec.user == "root"  # ansible_user comes before ssh_common_args, like Ansible's ssh
    # Ansible's default ssh_args (-C -o ControlMaster=auto -o ControlPersist=60s) are taken.
    assert ssh_config.spec_for(host()).compress


def test_ansible_ssh_args_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_SSH_COMMON_ARGS", "-o ProxyJump=ops@bastion:2200")
    spec = ssh_config.spec_for(host(ansible_host="10.1.0.12"))
    assert [(j.address, j.port, j.user) for j in spec.jumps] == [("bastion", 2200, "ops")]


def test_proxyjump_chain_and_jump_hosts_get_their_own_config(user_config: Path,
                                                               tmp_path: Path) -> None:
    user_config.write_text(
        "Host outer\n  HostName 192.0.2.1\n  User gate\n"
        "Host inner\n  HostName 10.0.0.1\n  ProxyJump outer\n"
        f"Host *\n  UserKnownHostsFile {tmp_path}/kh\n")
    spec = ssh_config.spec_for(host(
        ansible_host="10.0.0.12", ansible_user="root",
        ansible_ssh_common_args="-o ProxyJump=inner,relay:2022 -o StrictHostKeyChecking=yes"))
    hops = [(j.address, j.port, j.user, j.role) for j in spec.jumps]
    # inner's own ProxyJump comes first; the target's -o User does not leak to jump hosts.
    assert hops == [("192.0.2.1", 22, "gate", "jump host outer"),
                    ("10.0.0.1", 22, None, "jump host inner"),
                    ("relay", 2022, None, "jump host relay")]
    assert all(j.known_hosts[0] == tmp_path / "kh" for j in spec.jumps)
    assert all(j.strict == "yes" for j in spec.jumps)
    assert "via gate@192.0.2.1:22 -> 10.0.0.1:22 -> relay:2022" in spec.describe()
    assert ssh_config.spec_for(host(ansible_ssh_extra_args="-J u@b")).jumps[0].user == "u"


def test_proxyjump_loop_is_refused(user_config: Path) -> None:
    user_config.write_text("Host *\n  ProxyJump bastion\n")
    assert "ProxyJump chain" in str(refused(host()))


def test_proxycommand_tokens_expanded(user_config: Path) -> None:
    # Like ssh under Ansible, ssh_config matches ansible_host (what ssh is given).
    user_config.write_text("Host 10.0.0.12\n  ProxyCommand ssh -W %h:%p gate\n  Port 2200\n")
    spec = ssh_config.spec_for(host(ansible_host="10.0.0.12"))
    assert spec.proxy_command == "ssh -W 10.0.0.12:2200 gate" and not spec.jumps
    spec = ssh_config.spec_for(host(ansible_ssh_common_args='-o ProxyCommand="nc %h %p"'))
    assert spec.proxy_command == "nc node-b 22"
    user_config.write_text("Host *\n  ProxyCommand none\n")
    assert ssh_config.spec_for(host()).proxy_command is None


def test_proxyjump_and_proxycommand_together_are_refused(user_config: Path) -> None:
    user_config.write_text("Host *\n  ProxyCommand nc %h %p\n")
    err = refused(host(ansible_ssh_common_args="-o ProxyJump=gate"))
    assert "ProxyJump gate and ProxyCommand" in str(err)


@pytest.mark.parametrize(("args", "words"), [
    ("-o HostKeyAlias=other", ["node-b:", "hostkeyalias other", "ansible_ssh_common_args"]),
    ("-o Ciphers=aes128-ctr", ["ciphers aes128-ctr", "not supported"]),
    ("-o LocalForward='8080 localhost:80'", ["localforward"]),
    ("-o AddressFamily=inet6", ["addressfamily inet6"]),
    ("-4", ["'-4'", "ansible_ssh_common_args"]),
    ("-o", ["-o needs a value"]),
    ("-o JustAWord", ["not a Key=Value"]),
    ("-o 'Include /etc/evil'", ["not an option ssh takes"]),
    ("-o 'Port=22\nProxyCommand=sh'", ["not a Key=Value"]),
])
def test_unhandled_options_are_refused_naming_host_and_option(args: str,
                                                              words: list[str]) -> None:
    err = str(refused(host(ansible_ssh_common_args=args)))
    for word in words:
        assert word in err


def test_unhandled_option_from_ssh_config_names_the_file(user_config: Path) -> None:
    user_config.write_text("Host node-*\n  RemoteForward 9000 localhost:9000\n")
    err = str(refused(host()))
    assert "remoteforward" in err and str(user_config) in err
    # Options that change nothing for nodetune's non-interactive use are accepted.
    user_config.write_text("Host *\n  SendEnv LANG LC_*\n  HashKnownHosts yes\n"
                           "  GSSAPIAuthentication yes\n  ControlMaster auto\n  LogLevel ERROR\n")
    assert ssh_config.spec_for(host()).address == "node-b"


def test_include_and_dash_f(user_config: Path, tmp_path: Path) -> None:
    (user_config.parent / "conf.d").mkdir()
    (user_config.parent / "conf.d" / "site.conf").write_text("Host node-b\n  User included\n")
    user_config.write_text("Include conf.d/*.conf\n")
    assert ssh_config.spec_for(host()).user == "included"
    own = tmp_path / "cluster_ssh_config"
    own.write_text("Host node-b\n  HostName 10.9.9.9\n")
    spec = ssh_config.spec_for(host(ansible_ssh_common_args=f"-F {own}"))
    assert spec.address == "10.9.9.9" and spec.user is None  # -F replaces ~/.ssh/config
    assert "does not exist" in str(refused(host(ansible_ssh_common_args="-F /no/such/config")))


def test_missing_private_key_is_bad_input() -> None:
    err = refused(host(ansible_ssh_private_key_file="/no/such/key"))
    assert "/no/such/key" in str(err) and "ansible_ssh_private_key_file" in str(err)


def test_strict_host_key_checking_values(user_config: Path) -> None:
    user_config.write_text("Host *\n  StrictHostKeyChecking ask\n")
    assert ssh_config.spec_for(host()).strict == "yes"  # nodetune never prompts
    assert ssh_config.spec_for(host(), accept_new_host_keys=True).strict == "accept-new"
    user_config.write_text("Host *\n  StrictHostKeyChecking no\n")
    # accept-new never weakens "no" further nor strengthens it into recording keys.
    assert ssh_config.spec_for(host(), accept_new_host_keys=True).strict == "no"


# A value that would end its ssh_config line and add a directive: here a ProxyCommand,
# which would run on the controller at connect time.
INJECT = "\nProxyCommand touch /tmp/nodetune-injected"


@pytest.mark.parametrize(("vars_", "variable"), [
    ({"ansible_user": "root" + INJECT}, "ansible_user"),
    ({"ansible_ssh_user": "root\rProxyCommand sh"}, "ansible_user"),
    ({"ansible_port": "22" + INJECT}, "ansible_port"),
    ({"ansible_ssh_private_key_file": "/k" + INJECT}, "ansible_ssh_private_key_file"),
    ({"ansible_host": "10.0.0.1" + INJECT}, "ansible_host"),
    ({"ansible_ssh_common_args": "-l 'root" + INJECT + "'"}, "ansible_ssh_common_args"),
    ({"ansible_ssh_common_args": "-i '/k" + INJECT + "'"}, "ansible_ssh_common_args"),
    ({"ansible_ssh_extra_args": "-J 'gate" + INJECT + "'"}, "ansible_ssh_extra_args"),
    ({"ansible_ssh_extra_args": "'-oHostName=h\x00x'"}, "ansible_ssh_extra_args"),
    ({"ansible_ssh_common_args": "-o 'User=a\u2028ProxyCommand sh'"}, "ansible_ssh_common_args"),
    ({"ansible_ssh_common_args": "-F '/etc/x\nProxyCommand sh'"}, "ansible_ssh_common_args"),
])
def test_a_control_character_in_any_value_is_refused_naming_host_and_variable(
        vars_: dict[str, Any], variable: str) -> None:
    err = refused(host(**vars_))
    assert variable in str(err)
    # The same refusal comes from the inputs pass, which reads no file and connects nothing.
    with pytest.raises(InputError) as info:
        ssh_config.check_hosts([host(**vars_)])
    assert info.value.host == "node-b" and variable in str(info.value)


def test_check_hosts_passes_good_hosts_and_skips_local_ones(tmp_path: Path) -> None:
    ssh_config.check_hosts([
        host(ansible_user="ops", ansible_port="2222", ansible_host="10.0.0.2",
             ansible_ssh_private_key_file=str(tmp_path / "not-read-here")),
        host("ctl", ansible_connection="local", ansible_user="x\ny"),
    ])


@pytest.mark.parametrize("port", ["22x", "0", "65536", "-1", " ", "2 2", "\uff12\uff12", True, 22.5])
def test_ansible_port_must_be_an_integer_1_to_65535(port: object) -> None:
    err = refused(host(ansible_port=port))
    assert "ansible_port" in str(err) and "1-65535" in str(err)


def test_a_port_given_as_text_is_the_number() -> None:
    assert ssh_config.spec_for(host(ansible_port="2222")).port == 2222
    assert ssh_config.spec_for(host(ansible_port=65535)).port == 65535


@pytest.mark.parametrize("user", ["a b", 'o"ps', "ops;id", "$(id)", "`id`", "-oProxyCommand=x",
                                  "u%h", "a|b"])
def test_a_user_that_is_not_a_user_name_is_refused(user: str) -> None:
    err = refused(host(ansible_user=user))
    assert "ansible_user" in str(err) and "user name" in str(err)


@pytest.mark.parametrize("address", ["a b", "x;id", "$(id)", "-oProxyCommand=x", "h'", "a|b"])
def test_an_ansible_host_with_shell_metacharacters_is_refused(address: str) -> None:
    assert "ansible_host" in str(refused(host(ansible_host=address)))


def test_user_and_key_file_are_written_quoted_and_read_back_whole(tmp_path: Path) -> None:
    key = tmp_path / "my key #1"
    key.write_text("k")
    spec = ssh_config.spec_for(host(ansible_user="=ops", ansible_ssh_private_key_file=str(key)))
    # Unquoted, "User =ops" reads as "ops" and "# 1" could be taken for a comment.
    assert spec.user == "=ops"
    assert spec.key_files == (key,)


def test_key_file_tokens_expand_as_ssh_does_or_are_refused(tmp_path: Path) -> None:
    key = tmp_path / "id_10.0.0.7"
    key.write_text("k")
    spec = ssh_config.spec_for(host(ansible_host="10.0.0.7",
                                    ansible_ssh_private_key_file=f"{tmp_path}/id_%h"))
    assert spec.key_files == (key,)
    for bad in (f"{tmp_path}/100%", f"{tmp_path}/a%%b", f"{tmp_path}/id_%n", f"{tmp_path}/x~y",
                f'{tmp_path}/"q"'):
        err = refused(host(ansible_ssh_private_key_file=bad))
        assert "ansible_ssh_private_key_file" in str(err) and "key file" in str(err)


def test_a_jump_hop_with_shell_metacharacters_or_a_bad_user_is_refused() -> None:
    assert "ProxyJump hop" in str(refused(host(ansible_ssh_common_args="-J 'ga;te'")))
    assert "user name" in str(refused(host(ansible_ssh_common_args="-J 'o$(id)@gate'")))


def test_templated_connection_variables_are_rendered_then_checked_and_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODETUNE_TEST_SSH_USER", "ops")
    h = host(ansible_host="{{ inventory_hostname }}.mgmt.example", ssh_port=2222,
             ansible_user="{{ lookup('env', 'NODETUNE_TEST_SSH_USER') }}",
             ansible_port="{{ ssh_port }}", jump="gate",
             ansible_ssh_common_args="{% if jump %}-J {{ jump }}{% endif %}")
    ssh_config.check_hosts([h])
    spec = ssh_config.spec_for(h)
    assert (spec.address, spec.user, spec.port) == ("node-b.mgmt.example", "ops", 2222)
    assert [j.address for j in spec.jumps] == ["gate"]


@pytest.mark.parametrize(("vars_", "variable"), [
    ({"ansible_user": "{{ u }}", "u": "root" + INJECT}, "ansible_user"),
    ({"ansible_host": "{{ a }}", "a": "10.0.0.1" + INJECT}, "ansible_host"),
    ({"ansible_port": "{{ p }}", "p": "22" + INJECT}, "ansible_port"),
    ({"ansible_ssh_common_args": "-l {{ u }}", "u": "'root" + INJECT + "'"},
     "ansible_ssh_common_args"),
])
def test_a_template_is_checked_for_what_it_renders_to(vars_: dict[str, Any],
                                                      variable: str) -> None:
    err = refused(host(**vars_))
    assert variable in str(err)
    assert "control character" in str(err) or "TCP port" in str(err)
    with pytest.raises(InputError) as info:
        ssh_config.check_hosts([host(**vars_)])
    assert info.value.host == "node-b" and variable in str(info.value)


def test_a_template_that_cannot_be_rendered_is_refused_naming_the_variable() -> None:
    err = refused(host(ansible_user="{{ no_such_variable }}"))
    assert "ansible_user" in str(err) and "could not be rendered" in str(err)
    with pytest.raises(InputError) as info:
        ssh_config.check_hosts([host(ansible_host="{{ no_such_variable }}")])
    assert info.value.host == "node-b" and "ansible_host" in str(info.value)
    assert "could not be rendered" in str(info.value)


@pytest.mark.parametrize(("vars_", "variable"), [
    ({"ansible_ssh_common_args": "-o ProxyJump=op$(id)@bastion"}, "ansible_ssh_common_args"),
    ({"ansible_ssh_common_args": "-o 'ProxyJump gate,o;id@b'"}, "ansible_ssh_common_args"),
    ({"ansible_ssh_common_args": "-J 'gate;id'"}, "ansible_ssh_common_args"),
    ({"ansible_ssh_extra_args": "-J 'o`id`@gate'"}, "ansible_ssh_extra_args"),
    ({"ansible_ssh_extra_args": "-oProxyJump=gate:70000"}, "ansible_ssh_extra_args"),
    ({"ansible_ssh_args": "-J -oProxyCommand=x@gate"}, "ssh_args"),
])
def test_check_hosts_checks_every_proxyjump_hop_before_any_contact(
        vars_: dict[str, Any], variable: str) -> None:
    with pytest.raises(InputError) as info:
        ssh_config.check_hosts([host(**vars_)])
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert info.value.host == "node-b" and variable in str(info.value)
    assert "ProxyJump" in str(info.value)
    refused(host(**vars_))  # and spec_for refuses the same hop


def test_good_proxyjump_hops_pass_check_hosts() -> None:
    ssh_config.check_hosts([host(ansible_ssh_common_args="-J ops@gate:2200,ssh://[fd00::1]:22"),
                            host("node-c", ansible_ssh_extra_args="-o ProxyJump=none")])


@pytest.mark.parametrize("user", ["CORP\\user", "svc$", "a$b"])
def test_user_names_openssh_allows_are_taken(user: str) -> None:
    ssh_config.check_hosts([host(ansible_user=user)])
    assert ssh_config.spec_for(host(ansible_user=user)).user == user


@pytest.mark.parametrize("user", ["CORP\\\\user", "user\\", "${USER}", "a${x}"])
def test_a_user_quoted_ssh_config_would_read_differently_is_refused(user: str) -> None:
    assert "user name" in str(refused(host(ansible_user=user)))
