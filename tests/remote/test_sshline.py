"""Parsing the ssh line rental platforms hand out."""

from __future__ import annotations

import pytest

from gputui.models import SSHEndpoint
from gputui.remote.sshline import parse_ssh_line


@pytest.mark.parametrize(
    ("line", "host", "port", "user", "key"),
    [
        ("ssh -p 2222 root@host", "host", 2222, "root", None),
        ("ssh root@host -p 2222", "host", 2222, "root", None),
        ("ssh -i ~/.ssh/key -p 22 root@1.2.3.4", "1.2.3.4", 22, "root", "~/.ssh/key"),
        ("root@host:2222", "host", 2222, "root", None),
        ("host", "host", 22, "root", None),
        ("ssh -o StrictHostKeyChecking=no -p 1 u@h", "h", 1, "u", None),
        ("[::1]:2222", "::1", 2222, "root", None),
        (
            "ssh -p 12345 root@connect.westb.seetacloud.com",
            "connect.westb.seetacloud.com",
            12345,
            "root",
            None,
        ),
        (
            "  ssh   -p2222   root@region-1.example.com  ",
            "region-1.example.com",
            2222,
            "root",
            None,
        ),
        (
            "ssh -tt -4 -i'/keys/my key' -l ubuntu 10.0.0.5",
            "10.0.0.5",
            22,
            "ubuntu",
            "/keys/my key",
        ),
        ("/usr/bin/ssh -oPort=2200 -o User=admin box", "box", 2200, "admin", None),
        ("ssh -o IdentityFile=~/.ssh/id_x h", "h", 22, "root", "~/.ssh/id_x"),
        ("ssh -p 2222 root@[2001:db8::1]", "2001:db8::1", 2222, "root", None),
        ("ssh -p 2201 -- root@h", "h", 2201, "root", None),
        ("ssh root@::1", "::1", 22, "root", None),
        ("ssh://alice@host:2022", "host", 2022, "alice", None),
        ("ssh -v -C root@host -p 2222", "host", 2222, "root", None),
    ],
)
def test_accepted_forms(line: str, host: str, port: int, user: str, key: str | None) -> None:
    ep = parse_ssh_line(line)
    assert isinstance(ep, SSHEndpoint)
    assert (ep.host, ep.port, ep.user, ep.key_path) == (host, port, user, key)
    assert ep.password_file is None


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("ssh", "no host"),
        ("ssh -p 2222", "no host"),
        ("ssh -p", "-p needs an argument"),
        ("ssh root@host -i", "-i needs an argument"),
        ("ssh -p abc root@host", "bad port 'abc'"),
        ("ssh -p 0 root@host", "must be 1-65535"),
        ("ssh -p 70000 root@host", "must be 1-65535"),
        ("root@host:99999", "must be 1-65535"),
        ("root@host:", "bad port"),
        ("ssh root@a root@b", "only one host"),
        ("ssh -Z root@host", "unknown ssh option -Z"),
        ("ssh -J jump root@host", "jump hosts"),
        ("ssh -o ProxyCommand=nc root@host", "ProxyCommand"),
        ("ssh 'root@host", "cannot parse"),
        ("ssh @host", "empty user"),
        ("ssh root@", "no host"),
        ("ssh root@ho/st", "bad host"),
        ("ssh [::1", "unclosed"),
        ("ssh [::1]x", "unexpected"),
        ("ssh -p 2222 root@host:2223", "conflicting ports"),
        ("ssh root@gg::zz::1", "bad host"),
    ],
)
def test_malformed_lines_give_one_clear_line(line: str, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_ssh_line(line)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message


def test_same_port_twice_is_fine() -> None:
    assert parse_ssh_line("ssh -p 2222 root@host:2222").port == 2222
