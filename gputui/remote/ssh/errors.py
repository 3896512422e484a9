"""What can go wrong on an SSH link, as exceptions; which of them a retry may cure."""

from __future__ import annotations

from gputui.i18n import N_, Deferred
from gputui.models import SSHEndpoint
from gputui.remote.hostkeys import (
    HostKeyChanged,
    HostKeyRejected,
    SSHLayerError,
    UnknownHostKey,
)

from .results import RunResult


# -- errors ---------------------------------------------------------------------------------
class LinkUnreachable(SSHLayerError):
    """Nothing answered (refused, no route, DNS, or no SSH handshake within the timeout)."""


class AuthRefused(SSHLayerError):
    """The server refused the login. Not retried."""


class ConnectFailed(SSHLayerError):
    """Another failure while connecting (key file unreadable, protocol error...)."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class LinkDown(SSHLayerError):
    """The connection dropped while an operation was using it."""


class CommandInterrupted(LinkDown):
    """The connection dropped after the remote command had started (the channel was open and
    the command was running): for `shutdown -h now`, the host going away under us."""


class LinkClosed(SSHLayerError):
    """The link was closed with `close()`."""


class CommandTimeout(SSHLayerError):
    def __init__(self, cmd: str, timeout: float, partial: RunResult | None = None):
        self.cmd = cmd
        self.timeout = timeout
        self.partial = partial
        super().__init__(Deferred(N_("command did not finish within {seconds} s: {command}"),
                                  seconds=f"{timeout:g}", command=_short(cmd)))


class CommandFailed(SSHLayerError):
    """A streamed command ended with a non-zero status."""

    def __init__(self, cmd: str, exit_status: int, stderr: str):
        self.cmd = cmd
        self.exit_status = exit_status
        self.stderr = stderr
        last = (stderr.strip().splitlines()[-1] if stderr.strip()
                else Deferred(N_("no error output")))
        super().__init__(Deferred(N_("{command} exited with status {status}: {last}"),
                                  command=_short(cmd), status=exit_status, last=last))


def is_retryable(exc: BaseException) -> bool:
    """Whether the supervisor should keep trying after `exc` (network trouble: yes;
    refused login, host-key problems, bad key files: no)."""
    if isinstance(exc, (AuthRefused, UnknownHostKey, HostKeyChanged, HostKeyRejected, LinkClosed)):
        return False
    if isinstance(exc, ConnectFailed):
        return exc.retryable
    return True


def _short(cmd: str, limit: int = 60) -> str:
    cmd = " ".join(cmd.split())
    return cmd if len(cmd) <= limit else cmd[: limit - 1] + "…"


def _where(ep: SSHEndpoint) -> str:
    host = f"[{ep.host}]" if ":" in ep.host else ep.host
    return f"{ep.user}@{host}:{ep.port}"
