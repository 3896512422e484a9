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

from gputui.i18n import N_, _
from gputui.models import SSHEndpoint

__all__ = ["parse_ssh_line"]

# OpenSSH client options (ssh(1)); the ones that take an argument and the ones that do not.
_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")
_NO_ARG = set("46AaCfGgKkMNnqsTtVvXxYy")
# Options that would change where we actually connect: refuse rather than silently ignore.
_UNSUPPORTED = {"J": N_("jump hosts (-J)"), "W": N_("stdio forwarding (-W)")}
_UNSUPPORTED_O = {"proxyjump": N_("jump hosts (ProxyJump)"), "proxycommand": "ProxyCommand"}

_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-%]+$")


def _port(text: str, where: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(_("bad port {text} in {where}: not a number").format(text=repr(text), where=where)) from None
    if not 1 <= value <= 65535:
        raise ValueError(_("bad port {text} in {where}: must be 1-65535").format(text=repr(text), where=where))
    return value


def _split_destination(dest: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]`, `[user@][v6]:port`, bare IPv6, or `ssh://user@host:port`."""
    if dest.startswith("ssh://"):
        dest = dest[len("ssh://") :].rstrip("/")
    user: str | None = None
    if "@" in dest:
        user, _sep, dest = dest.rpartition("@")
        if not user:
            raise ValueError(_("empty user name before '@'"))
    port: int | None = None
    if dest.startswith("["):
        close = dest.find("]")
        if close < 0:
            raise ValueError(_("unclosed '[' in host {dest}").format(dest=repr(dest)))
        host, rest = dest[1:close], dest[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(_("unexpected {rest} after ']' in {dest}").format(rest=repr(rest), dest=repr(dest)))
            port = _port(rest[1:], dest)
    elif dest.count(":") == 1:
        host, _sep, port_text = dest.partition(":")
        port = _port(port_text, dest)
    else:
        host = dest  # a plain name, or a bare IPv6 address (several colons)
    if not host:
        raise ValueError(_("no host in {dest}").format(dest=repr(dest)))
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(_("bad host {host}: not a host name or IPv6 address").format(host=repr(host))) from None
    elif not _HOST_RE.match(host):
        raise ValueError(_("bad host {host}").format(host=repr(host)))
    return user, host, port


def parse_ssh_line(line: str) -> SSHEndpoint:
    """Turn `ssh -p 2222 root@host` (and the other usual forms) into an `SSHEndpoint`."""
    text = (line or "").strip()
    if not text:
        raise ValueError(_("empty ssh line: expected something like 'ssh -p PORT root@HOST'"))
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(_("cannot parse ssh line: {exc}").format(exc=exc)) from None
    if tokens and (tokens[0] == "ssh" or tokens[0].endswith("/ssh")):
        tokens = tokens[1:]
    if not tokens:
        raise ValueError(_("no host in ssh line: expected something like 'ssh -p PORT root@HOST'"))

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
                raise ValueError(_("unexpected extra argument {arg}: only one host expected").format(arg=repr(rest[0])))
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
                    raise ValueError(_("unknown ssh option -{flag}").format(flag=flag))
                if flag in _UNSUPPORTED:
                    raise ValueError(_("{what} not supported: give the final host").format(what=_(_UNSUPPORTED[flag])))
                value = tok[j + 1 :]
                if not value:
                    if i >= len(tokens):
                        raise ValueError(_("option -{flag} needs an argument").format(flag=flag))
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
                        name, _sep, val = value.partition(" ")
                    name, val = name.strip().lower(), val.strip()
                    if name in _UNSUPPORTED_O:
                        raise ValueError(
                            _("{what} not supported: give the final host").format(what=_(_UNSUPPORTED_O[name]))
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
                _("unexpected extra argument {arg} after host {destination}: only one host expected").format(
                    arg=repr(tok), destination=repr(destination))
            )
        destination = tok

    if destination is None:
        raise ValueError(_("no host in ssh line: expected something like 'ssh -p PORT root@HOST'"))
    user, host, dest_port = _split_destination(destination)
    if dest_port is not None and flag_port is not None and dest_port != flag_port:
        raise ValueError(_("conflicting ports: {dest_port} in {destination} and {flag_port} given").format(dest_port=dest_port, destination=repr(destination), flag_port=flag_port))
    port = dest_port if dest_port is not None else flag_port
    return SSHEndpoint(
        host=host,
        port=port if port is not None else 22,
        user=user or flag_user or "root",
        key_path=key_path,
    )
