"""Parse the ssh line a rental platform hands out into an `SSHEndpoint`.

Accepted forms (what AutoDL and most platforms print, plus the usual variations)::

    ssh -p 2222 root@host          ssh root@host -p 2222
    ssh -i ~/.ssh/key -p 22 root@1.2.3.4
    root@host:2222                 host            (user root, port 22)
    ssh -o StrictHostKeyChecking=no -p 1 u@h       (-o ignored, except Port/User/IdentityFile)
    [::1]:2222                     ssh://user@host:2222

Anything malformed raises `ValueError` with a one-line message saying what is wrong.
"""

from __future__ import annotations

import ipaddress
import re
import shlex

from gputui.models import SSHEndpoint

__all__ = ["parse_ssh_line"]

# OpenSSH client options (ssh(1)); the ones that take an argument and the ones that do not.
_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")
_NO_ARG = set("46AaCfGgKkMNnqsTtVvXxYy")
# Options that would change where we actually connect: refuse rather than silently ignore.
_UNSUPPORTED = {"J": "jump hosts (-J)", "W": "stdio forwarding (-W)"}
_UNSUPPORTED_O = {"proxyjump": "jump hosts (ProxyJump)", "proxycommand": "ProxyCommand"}

_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-%]+$")


def _port(text: str, where: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"bad port {text!r} in {where}: not a number") from None
    if not 1 <= value <= 65535:
        raise ValueError(f"bad port {text!r} in {where}: must be 1-65535")
    return value


def _split_destination(dest: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]`, `[user@][v6]:port`, bare IPv6, or `ssh://user@host:port`."""
    if dest.startswith("ssh://"):
        dest = dest[len("ssh://") :].rstrip("/")
    user: str | None = None
    if "@" in dest:
        user, _, dest = dest.rpartition("@")
        if not user:
            raise ValueError("empty user name before '@'")
    port: int | None = None
    if dest.startswith("["):
        close = dest.find("]")
        if close < 0:
            raise ValueError(f"unclosed '[' in host {dest!r}")
        host, rest = dest[1:close], dest[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"unexpected {rest!r} after ']' in {dest!r}")
            port = _port(rest[1:], dest)
    elif dest.count(":") == 1:
        host, _, port_text = dest.partition(":")
        port = _port(port_text, dest)
    else:
        host = dest  # a plain name, or a bare IPv6 address (several colons)
    if not host:
        raise ValueError(f"no host in {dest!r}")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"bad host {host!r}: not a host name or IPv6 address") from None
    elif not _HOST_RE.match(host):
        raise ValueError(f"bad host {host!r}")
    return user, host, port


def parse_ssh_line(line: str) -> SSHEndpoint:
    """Turn `ssh -p 2222 root@host` (and the other usual forms) into an `SSHEndpoint`."""
    text = (line or "").strip()
    if not text:
        raise ValueError("empty ssh line: expected something like 'ssh -p PORT root@HOST'")
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot parse ssh line: {exc}") from None
    if tokens and (tokens[0] == "ssh" or tokens[0].endswith("/ssh")):
        tokens = tokens[1:]
    if not tokens:
        raise ValueError("no host in ssh line: expected something like 'ssh -p PORT root@HOST'")

    flag_port: int | None = None
    flag_user: str | None = None
    key_path: str | None = None
    destination: str | None = None

    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            rest = tokens[i:]
            if destination is None and rest:
                destination, rest = rest[0], rest[1:]
            if rest:
                raise ValueError(f"unexpected extra argument {rest[0]!r}: only one host expected")
            break
        if tok.startswith("-") and len(tok) > 1:
            # A cluster of flags: -tt, -4v, -p2222, -i~/.ssh/key
            j = 1
            while j < len(tok):
                flag = tok[j]
                if flag in _NO_ARG:
                    j += 1
                    continue
                if flag not in _WITH_ARG:
                    raise ValueError(f"unknown ssh option -{flag}")
                if flag in _UNSUPPORTED:
                    raise ValueError(f"{_UNSUPPORTED[flag]} not supported: give the final host")
                value = tok[j + 1 :]
                if not value:
                    if i >= len(tokens):
                        raise ValueError(f"option -{flag} needs an argument")
                    value = tokens[i]
                    i += 1
                if flag == "p":
                    flag_port = _port(value, f"-p {value}")
                elif flag == "l":
                    flag_user = value
                elif flag == "i":
                    key_path = value
                elif flag == "o":
                    name, sep, val = value.partition("=")
                    if not sep:
                        name, _, val = value.partition(" ")
                    name, val = name.strip().lower(), val.strip()
                    if name in _UNSUPPORTED_O:
                        raise ValueError(
                            f"{_UNSUPPORTED_O[name]} not supported: give the final host"
                        )
                    if name == "port" and val:
                        flag_port = _port(val, f"-o {value}")
                    elif name == "user" and val:
                        flag_user = val
                    elif name == "identityfile" and val:
                        key_path = val
                break  # the rest of the token was the argument
            continue
        if destination is not None:
            raise ValueError(
                f"unexpected extra argument {tok!r} after host {destination!r}: only one host expected"
            )
        destination = tok

    if destination is None:
        raise ValueError("no host in ssh line: expected something like 'ssh -p PORT root@HOST'")
    user, host, dest_port = _split_destination(destination)
    if dest_port is not None and flag_port is not None and dest_port != flag_port:
        raise ValueError(f"conflicting ports: {dest_port} in {destination!r} and {flag_port} given")
    port = dest_port if dest_port is not None else flag_port
    return SSHEndpoint(
        host=host,
        port=port if port is not None else 22,
        user=user or flag_user or "root",
        key_path=key_path,
    )
