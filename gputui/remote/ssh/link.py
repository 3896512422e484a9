"""`Link`: one supervised, reconnecting SSH connection to one instance (commands, forwards, shells)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import signal as _signal
import sys
import termios
import tty
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import asyncssh

from gputui.errors import os_reason
from gputui.i18n import N_, Deferred
from gputui.models import LinkState, SSHEndpoint
from gputui.remote.hostkeys import (
    HostKeyChanged,
    HostKeyRejected,
    HostKeyVerifier,
    KnownHosts,
    SSHLayerError,
    fingerprint,
)

from .errors import (
    AuthRefused,
    CommandFailed,
    CommandInterrupted,
    CommandTimeout,
    ConnectFailed,
    LinkClosed,
    LinkDown,
    LinkUnreachable,
    _short,
    _where,
    is_retryable,
)
from .results import RunResult, _exit_status
from .stream import LineStream

log = logging.getLogger("gputui.remote.ssh")  # the name it had before the package split

# Ciphers offered first (then asyncssh's defaults, OpenSSH's `^` form): both are authenticated
# encryption that OpenSSH servers accept by default; the fastest here with asyncssh.
PREFERRED_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"

StateCallback = Callable[[LinkState, "str | None"], "Awaitable[None] | None"]
_Default = tuple[()]  # asyncssh's "use the default" marker is the empty tuple ()



# -- the client side of one attempt ----------------------------------------------------------
class _Client(asyncssh.SSHClient):
    def __init__(self, verifier: HostKeyVerifier):
        self.verifier = verifier
        self.lost: Exception | None = None

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        return self.verifier.validate(host, addr, port, key)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc


@dataclass
class _Forward:
    remote_host: str
    remote_port: int
    local_port: int
    listener: asyncssh.SSHListener | None = None


@dataclass
class _Backoff:
    initial: float = 0.5
    maximum: float = 30.0
    jitter: float = 0.2  # +-20 %
    attempt: int = 0
    _rng: random.Random = field(default_factory=random.Random)

    def next_delay(self) -> float:
        base = min(self.maximum, self.initial * (2**self.attempt))
        self.attempt += 1
        return max(0.0, base * (1 + self._rng.uniform(-self.jitter, self.jitter)))

    def reset(self) -> None:
        self.attempt = 0


class Link:
    """One supervised SSH connection to one instance.

    Connecting is lazy: the first `run` / `stream_lines` / `forward_local` / `connect` starts
    it. The first attempt's failure is raised to the caller (and the state goes FAILED); once a
    connection has been up, a drop is retried until `close()` or a non-retryable error.
    """

    def __init__(
        self,
        endpoint: SSHEndpoint,
        *,
        known_hosts: KnownHosts,
        accept_new_host_key: bool = False,
        password: str | None = None,
        passphrase: str | None = None,
        client_keys: Sequence[str | Path] | None | _Default = (),
        agent_path: str | None | _Default = (),
        config: Sequence[str | Path] | None = None,
        connect_timeout: float = 10.0,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        backoff_jitter: float = 0.2,
        on_state: StateCallback | None = None,
        name: str | None = None,
        command_wrapper: Callable[[str], str] | None = None,
    ):
        if known_hosts is None:  # pragma: no cover - guarded by the type, but be explicit
            raise ValueError(N_("known_hosts is required (host keys are always checked)"))
        self.endpoint = endpoint
        self.name = name or _where(endpoint)
        self.known_hosts = known_hosts
        self.accept_new_host_key = accept_new_host_key
        self._password = password
        self._passphrase = passphrase
        self._client_keys = client_keys
        self._agent_path = agent_path
        self._config = config
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self._backoff = _Backoff(backoff_initial, backoff_max, backoff_jitter)
        self._on_state = on_state
        # Where the link's host is a gateway (a Slurm login node), how each command is run on
        # the machine behind it (`srun --jobid … --overlap`); SFTP and forwards stay on the host.
        self._wrap = command_wrapper or (lambda cmd: cmd)

        self.state: LinkState = LinkState.UNKNOWN
        self.detail: str | None = None
        self.last_error: SSHLayerError | None = None
        self.host_key_fingerprint: str | None = None

        self._conn: asyncssh.SSHClientConnection | None = None
        self._ready: asyncio.Future[asyncssh.SSHClientConnection] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._closed = False
        self._forwards: dict[tuple[str, int], _Forward] = {}
        self._forward_lock = asyncio.Lock()
        self._callbacks: set[asyncio.Task[Any]] = set()

    # -- state --------------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._conn is not None and self.state == LinkState.CONNECTED

    @property
    def closed(self) -> bool:
        return self._closed

    def set_keepalive(self, interval: float, count_max: int) -> None:
        """Probe a silent connection every `interval` seconds, down after `count_max`
        unanswered probes: from now on the open connection, and every later one."""
        if (interval, count_max) == (self.keepalive_interval, self.keepalive_count_max):
            return
        self.keepalive_interval, self.keepalive_count_max = interval, count_max
        conn = self._conn
        if conn is not None and not conn.is_closed():
            conn.set_keepalive(interval, count_max)

    def set_password(self, password: str | None) -> None:
        """Use this password from the next connection attempt on (kept in memory only)."""
        self._password = password

    def _set_state(self, state: LinkState, detail: str | None = None) -> None:
        if (state, detail) == (self.state, self.detail):
            return
        self.state, self.detail = state, detail
        log.debug("link %s: %s %s", self.name, state, detail or "")
        if self._on_state is None:
            return
        try:
            result = self._on_state(state, detail)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._callbacks.add(task)
                task.add_done_callback(self._callbacks.discard)
        except Exception:  # a broken listener must not break the link
            log.exception("link %s: on_state callback failed", self.name)

    def _new_ready(self) -> asyncio.Future[asyncssh.SSHClientConnection]:
        fut: asyncio.Future[asyncssh.SSHClientConnection] = (
            asyncio.get_running_loop().create_future()
        )
        # A failure nobody waited for is not an "exception was never retrieved" warning.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._ready = fut
        return fut

    # -- connecting ---------------------------------------------------------------------------
    def _connect_kwargs(self, verifier: HostKeyVerifier, client: _Client) -> dict[str, Any]:
        ep = self.endpoint
        client_keys: Any = self._client_keys
        if client_keys == () and ep.key_path:
            client_keys = [ep.key_path]
        if client_keys:
            client_keys = [os.path.expanduser(str(k)) for k in client_keys]
        password = self._password
        if password is None and ep.password_file:
            try:
                password = Path(ep.password_file).expanduser().read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConnectFailed(Deferred(
                    N_("cannot read password file {path}: {reason}"),
                    path=ep.password_file, reason=os_reason(exc))) from None
        kwargs: dict[str, Any] = {
            "host": ep.host,
            "port": ep.port,
            "username": ep.user,
            "known_hosts": verifier.known_hosts,
            "client_factory": lambda: client,
            "config": [str(c) for c in self._config] if self._config else None,
            "agent_path": self._agent_path,
            "client_keys": client_keys,
            "passphrase": self._passphrase,
            "password": password,
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
        }
        if self._config is None:
            # Without a config, don't pick up X.509 trust files from ~/.ssh either.
            kwargs["x509_trusted_certs"] = None
            kwargs["x509_trusted_cert_paths"] = None
            # AES-GCM first, then asyncssh's usual list (a server without it still connects):
            # asyncssh's chacha20-poly1305 costs several Python calls per 32 KiB packet where
            # AES-GCM is one (AES-NI), which made a large push ~1.5-2x scp's time. The host key
            # is checked exactly as before; a user's config (`Ciphers`) is left to rule.
            kwargs["encryption_algs"] = PREFERRED_CIPHERS
        return kwargs

    async def _open(self) -> asyncssh.SSHClientConnection:
        """One connection attempt, with every failure turned into a one-line SSHLayerError."""
        ep = self.endpoint
        verifier = self.known_hosts.verifier(self.accept_new_host_key)
        client = _Client(verifier)
        kwargs = self._connect_kwargs(verifier, client)
        try:
            conn = await asyncssh.connect(**kwargs)
        except asyncssh.HostKeyNotVerifiable as exc:
            if isinstance(verifier.error, HostKeyChanged):  # named as the user wrote it
                err = verifier.error
                raise HostKeyChanged(err.host, err.port, err.expected_fp, err.got_fp,
                                     user=ep.user) from None
            if verifier.error is not None:
                raise verifier.error from None
            raise HostKeyRejected(Deferred(N_("host key for {where} rejected: {reason}"),
                                           where=_where(ep), reason=exc.reason)) from None
        except asyncssh.PermissionDenied as exc:
            template = (N_("login refused for {where} (password not accepted: {reason})")
                        if kwargs["password"] else
                        N_("login refused for {where} (key not accepted: {reason})"))
            raise AuthRefused(Deferred(template, where=_where(ep), reason=exc.reason)) from None
        except asyncssh.KeyExchangeFailed as exc:
            changed = await self._probe_changed_key(verifier)
            if changed is not None:
                raise changed from None
            raise ConnectFailed(Deferred(N_("key exchange with {where} failed: {reason}"),
                                         where=_where(ep), reason=exc.reason)) from None
        except asyncssh.DisconnectError as exc:  # ConnectionLost, server disconnect
            raise LinkDown(Deferred(N_("{where} closed the connection: {reason}"),
                                    where=_where(ep), reason=exc.reason)) from None
        except asyncssh.KeyImportError as exc:
            raise ConnectFailed(Deferred(N_("cannot load SSH key: {reason}"),
                                         reason=str(exc))) from None
        except TimeoutError:
            raise LinkUnreachable(Deferred(N_("{where} did not answer within {seconds} s"),
                                           where=_where(ep),
                                           seconds=f"{self.connect_timeout:g}")) from None
        except OSError as exc:
            raise LinkUnreachable(Deferred(N_("cannot reach {where}: {reason}"),
                                           where=_where(ep), reason=os_reason(exc))) from None
        except ValueError as exc:  # bad options, unreadable key file, etc.
            raise ConnectFailed(Deferred(N_("cannot connect to {where}: {reason}"),
                                         where=_where(ep), reason=str(exc))) from None
        except asyncssh.Error as exc:
            raise ConnectFailed(Deferred(N_("cannot connect to {where}: {reason}"),
                                         where=_where(ep), reason=str(exc)),
                                retryable=True) from None
        key = conn.get_server_host_key()
        self.host_key_fingerprint = fingerprint(key) if key is not None else None
        conn.set_extra_info(gputui_client=client)
        return conn

    async def _probe_changed_key(self, verifier: HostKeyVerifier) -> SSHLayerError | None:
        """A known host whose key type changed fails key exchange (asyncssh only offers the
        known key types): fetch the key it now presents and report it as changed."""
        ep = self.endpoint
        trusted = self.known_hosts.host_keys(ep.host, ep.port)
        if not trusted:
            return None
        try:
            async with asyncio.timeout(self.connect_timeout):
                key = await asyncssh.get_server_host_key(ep.host, ep.port, config=None)
        except (OSError, asyncssh.Error, TimeoutError):
            return None
        if key is None or key in trusted:
            return None
        return HostKeyChanged(ep.host, ep.port, fingerprint(trusted[0]), fingerprint(key),
                              user=ep.user)

    async def _supervise(self, first: asyncio.Future[asyncssh.SSHClientConnection]) -> None:
        ready = first
        ever_connected = False
        reason: str | Deferred | None = None
        try:
            while not self._closed:
                if ever_connected:
                    delay = self._backoff.next_delay()
                    self._set_state(LinkState.RECONNECTING, Deferred(
                        N_("{reason}; retrying in {seconds} s"), reason=reason,
                        seconds=f"{delay:.3g}"))
                    await asyncio.sleep(delay)
                else:
                    self._set_state(LinkState.CONNECTING, None)
                try:
                    conn = await self._open()
                except SSHLayerError as exc:
                    self.last_error = exc
                    if ever_connected and is_retryable(exc):
                        reason = str(exc)
                        continue
                    self._set_state(LinkState.FAILED, str(exc))
                    if not ready.done():
                        ready.set_exception(exc)
                    return
                if self._closed:
                    conn.close()
                    break
                ever_connected = True
                self._backoff.reset()
                self._conn = conn
                await self._restore_forwards(conn)
                self._set_state(LinkState.CONNECTED, None)
                self.last_error = None
                if not ready.done():
                    ready.set_result(conn)
                await conn.wait_closed()
                client = conn.get_extra_info("gputui_client")
                lost = getattr(client, "lost", None)
                self._conn = None
                ready = self._new_ready()
                if self._closed:
                    break
                reason = (Deferred(N_("connection lost ({reason})"), reason=str(lost)) if lost
                          else Deferred(N_("connection closed by the server")))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # pragma: no cover - a bug; do not leave waiters hanging
            log.exception("link %s: supervisor crashed", self.name)
            said = Deferred(N_("internal error: {reason}"), reason=str(exc))
            self._set_state(LinkState.FAILED, said)
            if not ready.done():
                ready.set_exception(ConnectFailed(said))
        finally:
            if self._closed and self._ready is not None and not self._ready.done():
                self._ready.set_exception(LinkClosed(Deferred(N_("link to {name} closed"), name=self.name)))

    def _ensure_supervisor(self) -> asyncio.Future[asyncssh.SSHClientConnection]:
        if self._supervisor is None or self._supervisor.done():
            ready = self._new_ready()
            self._supervisor = asyncio.create_task(
                self._supervise(ready), name=f"ssh-link {self.name}"
            )
            return ready
        assert self._ready is not None
        return self._ready

    async def _connection(self, wait_s: float | None = None) -> asyncssh.SSHClientConnection:
        """The live connection; waits through a reconnect (at most `wait_s` seconds). Raises
        if the link FAILED or was closed."""
        loop = asyncio.get_running_loop()
        deadline = None if wait_s is None else loop.time() + wait_s
        while True:
            if self._closed:
                raise LinkClosed(Deferred(N_("link to {name} closed"), name=self.name))
            conn = self._conn
            if conn is not None and self.state == LinkState.CONNECTED and not conn.is_closed():
                return conn
            ready = self._ensure_supervisor()
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(remaining):
                    conn = await asyncio.shield(ready)
            except TimeoutError:
                raise LinkDown(Deferred(N_("{name} is not connected ({detail})"), name=self.name,
                                        detail=self.detail or self.state.value)) from None
            if conn is self._conn and not conn.is_closed():
                return conn
            await asyncio.sleep(0)  # a stale result from before a drop: wait for the next one

    async def connect(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Connect (or wait for the reconnect in progress). Raises the SSHLayerError if the
        attempt fails: LinkUnreachable, AuthRefused, UnknownHostKey, HostKeyChanged, ..."""
        await self._connection(timeout)

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The underlying asyncssh connection (connecting if needed), for what Link does not
        wrap (SFTP...). Do not close it: it is shared."""
        return await self._connection(self.connect_timeout)

    async def interactive(
        self,
        command: str | None = None,
        *,
        stdin: IO[Any] | None = None,
        stdout: IO[Any] | None = None,
        stderr: IO[Any] | None = None,
        terminal: bool | None = None,
    ) -> int:
        """Attach local stdin/stdout/stderr to a shell (command None) or a command on the
        instance, as `ssh host [cmd]` does; returns its exit status (128+N for signal N).

        `terminal` (default: when stdin and stdout are terminals) asks for a remote PTY,
        puts the local terminal in raw mode for the duration and follows its size.
        """
        stdin = stdin if stdin is not None else sys.stdin
        stdout = stdout if stdout is not None else sys.stdout
        stderr = stderr if stderr is not None else sys.stderr
        in_fd, out_fd, err_fd = stdin.fileno(), stdout.fileno(), stderr.fileno()
        if terminal is None:
            terminal = os.isatty(in_fd) and os.isatty(out_fd)
        conn = await self._connection(self.connect_timeout)
        for stream in (stdout, stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        opts: dict[str, Any] = {"encoding": None}
        if terminal:
            size = os.get_terminal_size(out_fd)
            opts["term_type"] = os.environ.get("TERM") or "xterm-256color"
            opts["term_size"] = (size.columns, size.lines)
        # asyncssh closes what it is given and makes it non-blocking: hand it duplicates and
        # put the blocking mode back afterwards.
        blocking = {fd: os.get_blocking(fd) for fd in {in_fd, out_fd, err_fd}}
        saved_tty = termios.tcgetattr(in_fd) if terminal else None
        loop = asyncio.get_running_loop()
        proc: asyncssh.SSHClientProcess[bytes] | None = None
        try:
            if saved_tty is not None:
                tty.setraw(in_fd, termios.TCSANOW)  # keep type-ahead
            proc = await conn.create_process(
                command,
                stdin=os.fdopen(os.dup(in_fd), "rb", buffering=0),
                stdout=os.fdopen(os.dup(out_fd), "wb", buffering=0),
                stderr=asyncssh.STDOUT
                if terminal
                else os.fdopen(os.dup(err_fd), "wb", buffering=0),
                **opts,
            )
            if terminal:

                def _resize(p: asyncssh.SSHClientProcess[bytes] = proc) -> None:
                    with contextlib.suppress(Exception):
                        sz = os.get_terminal_size(out_fd)
                        p.change_terminal_size(sz.columns, sz.lines)

                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(_signal.SIGWINCH, _resize)
            done = await proc.wait()
        except (asyncssh.ChannelOpenError, asyncssh.DisconnectError) as exc:
            raise LinkDown(Deferred(N_("{name}: session ended: {reason}"), name=self.name,
                                    reason=str(exc))) from None
        finally:
            if terminal:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(_signal.SIGWINCH)
            if saved_tty is not None:
                termios.tcsetattr(in_fd, termios.TCSADRAIN, saved_tty)
            for fd, was_blocking in blocking.items():
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, was_blocking)
            if proc is not None:
                proc.close()
        status, _sig = _exit_status(done.exit_status, done.exit_signal)
        if done.exit_status is None and done.exit_signal is None and conn.is_closed():
            raise LinkDown(Deferred(N_("{name}: connection lost during the session"),
                                    name=self.name))
        return status

    # -- commands -----------------------------------------------------------------------------
    async def run(
        self,
        cmd: str,
        *,
        timeout: float | None = 60.0,  # noqa: ASYNC109 - the remote command's limit
        input: str | None = None,
        connect_timeout: float | None = None,
    ) -> RunResult:
        """Run one command; returns its exit status and output (never raises on exit != 0).

        Waits for a reconnect in progress (up to `connect_timeout`, default `timeout`). A drop
        while the command runs raises LinkDown: commands are not re-run on their own.
        """
        conn = await self._connection(timeout if connect_timeout is None else connect_timeout)
        try:
            proc = await conn.create_process(
                self._wrap(cmd),
                input=input,
                stdin=asyncssh.DEVNULL if input is None else asyncssh.PIPE,
                encoding="utf-8",
                errors="replace",
            )
        except asyncssh.ChannelOpenError as exc:
            raise LinkDown(Deferred(N_("{name}: cannot start command: {reason}"),
                                    name=self.name, reason=exc.reason)) from None
        except (asyncssh.DisconnectError, OSError) as exc:
            raise LinkDown(Deferred(N_("{name}: connection lost: {reason}"), name=self.name,
                                    reason=str(exc))) from None
        try:
            done = await proc.wait(timeout=timeout)
        except asyncssh.TimeoutError as exc:
            status, sig = _exit_status(exc.exit_status, exc.exit_signal)
            partial = RunResult(status, str(exc.stdout or ""), str(exc.stderr or ""), sig)
            raise CommandTimeout(cmd, timeout or 0, partial) from None
        except (asyncssh.DisconnectError, OSError, asyncssh.ChannelOpenError) as exc:
            raise CommandInterrupted(Deferred(N_("{name}: connection lost during command: {what}"),
                                              name=self.name, what=str(exc))) from None
        finally:
            proc.close()
        if done.exit_status is None and done.exit_signal is None and conn.is_closed():
            raise CommandInterrupted(Deferred(N_("{name}: connection lost during command: {what}"),
                                              name=self.name, what=_short(cmd)))
        status, sig = _exit_status(done.exit_status, done.exit_signal)
        return RunResult(status, str(done.stdout or ""), str(done.stderr or ""), sig)

    def stream_lines(self, cmd: str, *, restart: bool = True) -> LineStream:
        """Lines of a long-lived command's stdout (trailing newline stripped).

        When the connection drops, the stream waits for the reconnect and starts the command
        again (unless `restart=False`, which raises LinkDown instead). It ends when the command
        exits 0, raises CommandFailed on another status, and ends quietly on `close()`.
        Use as `async with link.stream_lines(cmd) as lines: async for line in lines: ...`
        so that leaving early stops the remote command at once.
        """
        return LineStream(self._stream(cmd, restart))

    async def _stream(self, cmd: str, restart: bool) -> AsyncIterator[str]:
        while True:
            try:
                conn = await self._connection()
            except LinkClosed:
                return
            try:
                proc = await conn.create_process(
                    self._wrap(cmd), stdin=asyncssh.DEVNULL, encoding="utf-8", errors="replace"
                )
            except (asyncssh.ChannelOpenError, asyncssh.DisconnectError, OSError) as exc:
                if restart and await self._dropped(conn):
                    continue
                if self._closed:
                    return
                raise LinkDown(Deferred(N_("{name}: cannot start {command}: {reason}"),
                                        name=self.name, command=_short(cmd),
                                        reason=str(exc))) from None
            stderr_chunks: list[str] = []

            async def _drain_stderr(
                p: asyncssh.SSHClientProcess[str] = proc, out: list[str] = stderr_chunks
            ) -> None:
                with contextlib.suppress(Exception):
                    async for chunk in p.stderr:
                        out.append(chunk)
                        if len(out) > 200:
                            del out[:100]

            err_task = asyncio.create_task(_drain_stderr())
            failed: Exception | None = None
            try:
                try:
                    async for line in proc.stdout:
                        yield line.rstrip("\r\n")
                except (asyncssh.DisconnectError, asyncssh.ChannelOpenError, OSError) as exc:
                    failed = exc
                if failed is None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(5):
                            await proc.wait_closed()
                status, exit_signal = proc.exit_status, proc.exit_signal
            finally:
                proc.close()
                err_task.cancel()
                await asyncio.gather(err_task, return_exceptions=True)
            if failed is not None or (status is None and exit_signal is None):
                # No exit status: the connection went away under the command.
                if self._closed:
                    return
                if restart and await self._dropped(conn):
                    continue
                raise LinkDown(Deferred(
                    N_("{name}: connection lost while streaming {command}")
                    if conn.is_closed()
                    else N_("{name}: {command} ended without an exit status"),
                    name=self.name, command=_short(cmd)))
            code, _sig = _exit_status(status, exit_signal)
            if code == 0:
                return
            raise CommandFailed(cmd, code, "".join(stderr_chunks))

    async def _dropped(self, conn: asyncssh.SSHClientConnection) -> bool:
        """After an error on `conn`: True when the connection is gone (the supervisor will
        reconnect, so a stream may start again), False when it is still up."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await conn.wait_closed()
        return conn.is_closed() and not self._closed

    # -- port forwards ------------------------------------------------------------------------
    async def forward_local(
        self, remote_port: int, remote_host: str = "127.0.0.1", *, local_port: int = 0
    ) -> int:
        """Forward 127.0.0.1:<local port> to remote_host:remote_port on the instance.

        Returns the local port. The forward is re-created after a reconnect, on the same local
        port when that port is still free. Asking again for the same target returns the same
        port; `local_port_for` gives the current one.
        """
        key = (remote_host, remote_port)
        async with self._forward_lock:
            fwd = self._forwards.get(key)
            if fwd is not None and fwd.listener is not None:
                return fwd.local_port
            conn = await self._connection(self.connect_timeout)
            if fwd is None:
                fwd = _Forward(remote_host, remote_port, local_port)
            await self._open_forward(conn, fwd)
            self._forwards[key] = fwd
            return fwd.local_port

    def local_port_for(self, remote_port: int, remote_host: str = "127.0.0.1") -> int | None:
        fwd = self._forwards.get((remote_host, remote_port))
        return None if fwd is None else fwd.local_port

    async def close_forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> None:
        fwd = self._forwards.pop((remote_host, remote_port), None)
        if fwd is not None and fwd.listener is not None:
            fwd.listener.close()
            with contextlib.suppress(Exception):
                await fwd.listener.wait_closed()

    async def _open_forward(self, conn: asyncssh.SSHClientConnection, fwd: _Forward) -> None:
        try:
            listener = await conn.forward_local_port(
                "127.0.0.1", fwd.local_port, fwd.remote_host, fwd.remote_port
            )
        except OSError:
            if not fwd.local_port:
                raise
            # The old local port is taken now: take any free one.
            listener = await conn.forward_local_port(
                "127.0.0.1", 0, fwd.remote_host, fwd.remote_port
            )
        fwd.listener = listener
        fwd.local_port = listener.get_port()

    async def _restore_forwards(self, conn: asyncssh.SSHClientConnection) -> None:
        for fwd in list(self._forwards.values()):
            fwd.listener = None
            try:
                await self._open_forward(conn, fwd)
            except (OSError, asyncssh.Error) as exc:
                log.warning(
                    "link %s: cannot re-create forward to %s:%s: %s",
                    self.name,
                    fwd.remote_host,
                    fwd.remote_port,
                    exc,
                )

    # -- closing ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Close the connection and stop reconnecting. Idempotent."""
        if self._closed:
            return
        self._closed = True
        conn, self._conn = self._conn, None
        sup, self._supervisor = self._supervisor, None
        if sup is not None:
            sup.cancel()
        for fwd in self._forwards.values():
            if fwd.listener is not None:
                fwd.listener.close()
                fwd.listener = None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await conn.wait_closed()
        if sup is not None:
            await asyncio.gather(sup, return_exceptions=True)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(LinkClosed(Deferred(N_("link to {name} closed"), name=self.name)))
        self._set_state(LinkState.UNKNOWN, Deferred(N_("closed")))

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
