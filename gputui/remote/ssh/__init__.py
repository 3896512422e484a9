"""One persistent SSH connection per instance, supervised.

`Link` owns a single asyncssh connection (keepalives on, a connect timeout) and a supervisor
task that notices when it drops, backs off (capped exponential with jitter) and reconnects,
re-creating local port forwards on the same local port where it can. It reports its state
through `on_state(LinkState, detail)`: CONNECTING, CONNECTED, RECONNECTING (with the reason),
FAILED (with the reason; refused logins and host-key problems are never retried), and
UNKNOWN ("closed") after `close()`.

`LinkPool` keeps one `Link` per instance id, shared by every service.

Nothing here reads the user's ~/.ssh unless asked to: `config`, `agent_path` and `client_keys`
are explicit parameters. Tests pass `config=None, agent_path=None, client_keys=[key]`.

The modules: errors (the exceptions, is_retryable), results (RunResult), link (Link), stream
(LineStream), pool (LinkPool).
"""

from __future__ import annotations

from gputui.remote.hostkeys import HostKeyChanged, SSHLayerError, UnknownHostKey

from .errors import (
    AuthRefused,
    CommandFailed,
    CommandInterrupted,
    CommandTimeout,
    ConnectFailed,
    LinkClosed,
    LinkDown,
    LinkUnreachable,
    is_retryable,
)
from .link import Link, StateCallback
from .pool import LinkPool
from .results import RunResult
from .stream import LineStream

__all__ = [
    "AuthRefused",
    "CommandFailed",
    "CommandTimeout",
    "ConnectFailed",
    "HostKeyChanged",
    "Link",
    "LineStream",
    "LinkClosed",
    "LinkDown",
    "CommandInterrupted",
    "LinkPool",
    "LinkUnreachable",
    "RunResult",
    "SSHLayerError",
    "StateCallback",
    "UnknownHostKey",
    "is_retryable",
]
