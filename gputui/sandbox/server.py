"""The sandbox's real SSH endpoint: an asyncssh server on 127.0.0.1 for one instance folder.

- listens on 127.0.0.1 only, key auth only (passwords and keyboard-interactive refused),
  accepting only the sandbox's own client key(s);
- its host key is generated once and kept (0600) in the sandbox state folder;
- each session runs a real `/bin/sh -c CMD` (or `/bin/sh -i` on a pseudo-terminal when the
  client asks for a terminal and gives no command) with cwd=HOME=<instance root> and
  `<root>/bin` first on PATH; exit status and signals go back to the client, and when the
  client goes away the command's whole process group is hung up / terminated;
- SFTP and scp (asyncssh's server, also for OpenSSH's `sftp`/`scp`), chrooted to the
  instance folder, so relative paths land in its home;
- local port forwarding (`ssh -L`) only to 127.0.0.1 / localhost on the instance;
- a powered-off instance (the shims' `enforce_power` / `power_state`) refuses connections with
  "instance is powered off", and connections open when it powers off are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib
import logging
import os
import signal
import termios
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import asyncssh

from gputui.remote.keys import ensure_host_key, ensure_keypair

__all__ = [
    "InstanceServer",
    "POWERED_OFF_MESSAGE",
    "ensure_host_key",
    "ensure_keypair",
    "instance_powered_off",
    "start_instance_server",
]

log = logging.getLogger(__name__)

POWERED_OFF_MESSAGE = "instance is powered off"
LISTEN_HOST = "127.0.0.1"
_LOCAL_TARGETS = {"127.0.0.1", "localhost", "::1", "ip6-localhost"}
_SHIM_STATE_MODULE = "gputui.sandbox.shims.state"
_DRAIN_TIMEOUT = 2.0  # after the shell exits, how long background children may hold its output
_PROTECTED_ENV = {"PATH", "HOME", "PWD", "SHELL", "USER", "LOGNAME", "GPUTUI_SANDBOX_ROOT"}


# -- keys (made by gputui.remote.keys; re-exported for the server's callers) ----------------
_KEY_PREFIXES = ("ssh-", "ecdsa-", "sk-")


def _authorized(keys: Path | str | Sequence[str]) -> asyncssh.SSHAuthorizedKeys:
    """An authorized_keys file (Path, or a str that is not a key line) or key lines."""
    if isinstance(keys, Path) or (isinstance(keys, str) and not keys.startswith(_KEY_PREFIXES)):
        return asyncssh.read_authorized_keys(str(keys))
    if isinstance(keys, str):
        keys = [keys]
    lines = [line.strip() for line in keys if line and line.strip()]
    return asyncssh.import_authorized_keys("\n".join(lines) + "\n")


# -- power ----------------------------------------------------------------------------------
def _looks_off(state: Any) -> bool:
    for attr in ("off", "is_off", "powered_off"):
        value = getattr(state, attr, None)
        if callable(value):
            value = value()
        if isinstance(value, bool):
            return value
    for attr in ("state", "status", "kind", "value"):
        value = getattr(state, attr, None)
        if value is not None and not callable(value):
            state = value
            break
    text = str(getattr(state, "value", state)).strip().lower()
    return text in {"off", "powered_off", "powered-off", "poweroff", "stopped"}


def instance_powered_off(root: Path) -> bool:
    """Apply any power-off that is due (`enforce_power`) and say whether `root` is off.

    Uses the sandbox shims' state module when it is there; without it an instance is on.
    """
    try:
        mod = importlib.import_module(_SHIM_STATE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name and _SHIM_STATE_MODULE.startswith(exc.name):
            return False
        log.warning("sandbox power state unavailable: %s", exc)
        return False
    except Exception as exc:
        log.warning("sandbox power state unavailable: %s", exc)
        return False
    try:
        enforce = getattr(mod, "enforce_power", None)
        if enforce is not None:
            enforce(root)
        power_state = getattr(mod, "power_state", None)
        if power_state is None:
            return False
        return _looks_off(power_state(root))
    except Exception:
        log.exception("sandbox power state check failed for %s", root)
        return False


# -- the server -----------------------------------------------------------------------------
class _ServerConn(asyncssh.SSHServer):
    def __init__(self, owner: InstanceServer):
        self._owner = owner
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._owner._conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._owner._conns.discard(self._conn)

    async def begin_auth(self, username: str) -> bool:
        if await self._owner.powered_off_async():
            raise asyncssh.DisconnectError(asyncssh.DISC_CONNECTION_LOST, POWERED_OFF_MESSAGE)
        return True  # always authenticate: keys only

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def host_based_auth_supported(self) -> bool:
        return False

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool:
        if dest_host.strip("[]").lower() in _LOCAL_TARGETS:
            return True
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
            f"forwarding to {dest_host} refused: only 127.0.0.1 on the instance",
        )

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False  # no remote (-R) forwarding


class _InstanceSFTP(asyncssh.SFTPServer):
    """asyncssh's SFTP server, ending with exit status 0 as OpenSSH's sftp-server does (without
    one, OpenSSH's `scp` reports a failure after a good copy)."""

    def exit(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.exit(0)

    def readlink(self, path: bytes) -> bytes:
        """A link's target as written, as OpenSSH's sftp-server answers (asyncssh's chroot
        resolves it against the server's own working folder instead)."""
        return os.readlink(self.map_path(path))


class InstanceServer:
    """A running sandbox SSH server. `.port`, `.close()`, `await .wait_closed()`."""

    def __init__(
        self,
        root: Path,
        host_key: asyncssh.SSHKey,
        authorized: asyncssh.SSHAuthorizedKeys,
        power_check: Callable[[Path], bool],
    ):
        self.root = root
        self.host = LISTEN_HOST
        self.port = 0
        self.host_key_fingerprint: str = host_key.get_fingerprint("sha256")
        self.host_key_line: str = host_key.export_public_key("openssh").decode("ascii").strip()
        self._host_key = host_key
        self._authorized = authorized
        self._power_check = power_check
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._conns: set[asyncssh.SSHServerConnection] = set()
        self._sessions: set[asyncio.Task[Any]] = set()
        self._poll_task: asyncio.Task[None] | None = None
        self._closing = False
        self._base_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")

    # -- lifecycle --------------------------------------------------------------------------
    def listen_options(self) -> dict[str, Any]:
        """Every option the instance's SSH server is started with, in one place (a subsystem
        such as SFTP is switched on here: `sftp_factory`)."""
        return dict(
            server_factory=lambda: _ServerConn(self),
            server_host_keys=[self._host_key],
            authorized_client_keys=self._authorized,
            process_factory=self._session,
            encoding=None,
            line_editor=False,
            allow_scp=True,  # scp and sftp (OpenSSH's too), chrooted to the instance folder
            sftp_factory=self._sftp,
            agent_forwarding=False,
            x11_forwarding=False,
            password_auth=False,
            kbdint_auth=False,
            host_based_auth=False,
            gss_host=None,
            config=None,
            login_timeout=30,
            keepalive_interval=15,
            keepalive_count_max=3,
        )

    async def _start(self, port: int, power_poll_interval: float | None) -> None:
        self._acceptor = await asyncssh.listen(host=LISTEN_HOST, port=port, **self.listen_options())
        self.port = self._acceptor.get_port()
        if power_poll_interval:
            self._poll_task = asyncio.create_task(self._poll_power(power_poll_interval))

    def _sftp(self, chan: asyncssh.SSHServerChannel) -> asyncssh.SFTPServer:
        """SFTP (and scp) sessions see the instance folder as `/`, and start there."""
        return _InstanceSFTP(chan, chroot=os.fsencode(self.root))

    def powered_off(self) -> bool:
        try:
            return bool(self._power_check(self.root))
        except Exception:
            log.exception("power check failed for %s", self.root)
            return False

    async def powered_off_async(self) -> bool:
        """`powered_off` off the event loop (enforcing a power-off may wait for processes)."""
        return await asyncio.to_thread(self.powered_off)

    async def _poll_power(self, interval: float) -> None:
        while not self._closing:
            await asyncio.sleep(interval)
            if self._conns and await self.powered_off_async():
                self.disconnect_all(POWERED_OFF_MESSAGE, asyncssh.DISC_CONNECTION_LOST)

    def disconnect_all(
        self, reason: str = "server closing", code: int = asyncssh.DISC_BY_APPLICATION
    ) -> None:
        """Drop every open connection (their commands are then terminated)."""
        for conn in list(self._conns):
            with contextlib.suppress(Exception):
                conn.disconnect(code, reason)

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closing = True
        if self._poll_task is not None:
            self._poll_task.cancel()
        if self._acceptor is not None:
            self._acceptor.close()
        self.disconnect_all("server closing")

    async def wait_closed(self) -> None:
        if self._acceptor is not None:
            # bounded: a connection the kernel still holds must not hang whoever closes us
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._acceptor.wait_closed(), 5)
        if self._poll_task is not None:
            await asyncio.gather(self._poll_task, return_exceptions=True)
        for conn in list(self._conns):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)
        if self._sessions:
            await asyncio.wait(list(self._sessions), timeout=10)

    async def aclose(self) -> None:
        self.close()
        await self.wait_closed()

    async def __aenter__(self) -> InstanceServer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- sessions ---------------------------------------------------------------------------
    def _env(self, process: asyncssh.SSHServerProcess[bytes], term: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SSH_")}
        for key, value in (process.env or {}).items():
            k = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            v = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if k and k not in _PROTECTED_ENV and not k.startswith(("LD_", "SSH_")):
                env[k] = v
        user = process.get_extra_info("username") or "root"
        peer = process.get_extra_info("peername") or ("127.0.0.1", 0)
        root = str(self.root)
        env.update(
            HOME=root,
            PWD=root,
            PATH=f"{self.root / 'bin'}{os.pathsep}{self._base_path}",
            SHELL="/bin/sh",
            USER=str(user),
            LOGNAME=str(user),
            GPUTUI_SANDBOX_ROOT=root,
            SSH_CONNECTION=f"{peer[0]} {peer[1]} {LISTEN_HOST} {self.port}",
        )
        if term:
            env["TERM"] = term
        else:
            env.pop("TERM", None)
        return env

    async def _session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._sessions.add(task)
        try:
            await self._run_session(process)
        except Exception:
            log.exception("sandbox session failed")
            with contextlib.suppress(Exception):
                process.stderr.write(b"sandbox: internal error\n")
                process.exit(255)
        finally:
            if task is not None:
                self._sessions.discard(task)

    async def _run_session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if await self.powered_off_async():
            process.stderr.write(POWERED_OFF_MESSAGE.encode() + b"\r\n")
            process.exit(255)
            conn = process.get_extra_info("connection")
            if conn is not None:
                conn.disconnect(asyncssh.DISC_CONNECTION_LOST, POWERED_OFF_MESSAGE)
            return
        if process.subsystem:
            process.stderr.write(f"subsystem {process.subsystem} not supported\n".encode())
            process.exit(1)
            return
        if not self.root.is_dir():
            process.stderr.write(f"instance folder {self.root} is missing\n".encode())
            process.exit(255)
            return
        command = process.command
        term = process.term_type
        if command is not None:
            argv = ["/bin/sh", "-c", command]
        elif term:
            argv = ["/bin/sh", "-i"]
        else:
            argv = ["/bin/sh"]
        env = self._env(process, term)

        master_fds: list[Any] = []
        if term:
            master, slave = os.openpty()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    cwd=str(self.root),
                    env=env,
                    start_new_session=True,
                    preexec_fn=_take_controlling_tty,
                )
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)
            writer = os.fdopen(master, "wb", buffering=0)
            reader = os.fdopen(os.dup(master), "rb", buffering=0)
            master_fds = [writer, reader]
            process.set_redirect_pid(proc.pid)
            await process.redirect(stdin=writer, stdout=reader, send_eof=False)
        else:
            pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=pipes[0][0],
                    stdout=pipes[1][1],
                    stderr=pipes[2][1],
                    cwd=str(self.root),
                    env=env,
                    start_new_session=True,
                )
            except BaseException:
                for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
                    os.close(fd)
                raise
            finally:
                for fd in (pipes[0][0], pipes[1][1], pipes[2][1]):
                    with contextlib.suppress(OSError):
                        os.close(fd)
            stdin_w = os.fdopen(pipes[0][1], "wb", buffering=0)
            stdout_r = os.fdopen(pipes[1][0], "rb", buffering=0)
            stderr_r = os.fdopen(pipes[2][0], "rb", buffering=0)
            master_fds = [stdin_w, stdout_r, stderr_r]
            process.set_redirect_pid(proc.pid)
            await process.redirect(stdin=stdin_w, stdout=stdout_r, stderr=stderr_r, send_eof=False)

        exited = asyncio.ensure_future(proc.wait())
        channel_closed = asyncio.ensure_future(process.channel.wait_closed())
        try:
            await asyncio.wait({exited, channel_closed}, return_when=asyncio.FIRST_COMPLETED)
            if exited.done():
                rc = exited.result()
                # Let the output reach the client (background children may hold the pipe).
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        asyncio.gather(process.stdout.drain(), process.stderr.drain()),
                        _DRAIN_TIMEOUT,
                    )
                if not channel_closed.done():
                    with contextlib.suppress(Exception):
                        process.channel.write_eof()
                    if rc >= 0:
                        process.exit(rc)
                    else:
                        try:
                            name = signal.Signals(-rc).name.removeprefix("SIG")
                        except ValueError:
                            name = "KILL"
                        process.exit_with_signal(name)
            else:
                await _terminate(proc)
        finally:
            if proc.returncode is None:
                await _terminate(proc)
            channel_closed.cancel()
            exited.cancel()
            await asyncio.gather(exited, channel_closed, return_exceptions=True)
            process.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait_closed(), 5)
            for fh in master_fds:
                with contextlib.suppress(OSError):
                    fh.close()


def _take_controlling_tty() -> None:  # runs in the child, after setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    """Hang up the session's process group as a dropped terminal would; if its shell is
    still alive after a moment, TERM then KILL the group. (A `nohup`ed child of a shell
    that went away on the hang-up survives, as it would with a real sshd.)"""
    for sig, grace in ((signal.SIGHUP, 1.0), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        if proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), grace)
        if proc.returncode is not None:
            return


async def start_instance_server(
    root: Path,
    *,
    host_key_path: Path,
    authorized_keys: Path | Sequence[str],
    port: int = 0,
    power_check: Callable[[Path], bool] | None = None,
    power_poll_interval: float | None = 2.0,
) -> InstanceServer:
    """Serve `root` over SSH on 127.0.0.1:`port` (0: any free port; see `.port`).

    `authorized_keys` is an authorized_keys file or a list of public key lines.
    `power_check(root) -> bool` says whether the instance is off (default: the sandbox shims'
    `enforce_power` + `power_state`); checked at login, at each session, and every
    `power_poll_interval` seconds while connections are open (None: only at login/session).
    """
    root = Path(root)
    host_key = ensure_host_key(host_key_path)
    server = InstanceServer(
        root,
        host_key,
        _authorized(authorized_keys),
        power_check or instance_powered_off,
    )
    await server._start(port, power_poll_interval)
    log.info("sandbox ssh for %s on %s:%s", root, LISTEN_HOST, server.port)
    return server
