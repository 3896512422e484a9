"""Talking to the sandbox daemon: find it, start it when it is not running, ask it things.

Light on purpose (stdlib only): the provider imports it, and `gputui instances` must stay quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gputui.errors import GputuiError, NotFound
from gputui.i18n import N_, Deferred

__all__ = ["DaemonDown", "SandboxClient", "socket_path", "daemon_pid", "stop_daemon"]

_SOCKET_MAX = 100  # sun_path holds 108 bytes
IDLE_EXIT_S = 600.0  # a daemon started on demand goes when it has had no instance this long
START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 120.0


class DaemonDown(GputuiError):
    """The sandbox daemon could not be reached or started."""


class DaemonRefused(GputuiError):
    """The daemon answered with an error (its message is for the user)."""


class DaemonUnknown(DaemonRefused, NotFound):
    """The daemon has no such instance."""


def socket_path(root: Path) -> Path:
    """`<root>/daemon.sock`, or (when that path is too long for a Unix socket) one in a
    private folder under the temp dir, named after the root."""
    path = root / "daemon.sock"
    if len(str(path)) <= _SOCKET_MAX:
        return path
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:20]
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"gputui-{os.getuid()}"
    return base / f"sandbox-{digest}.sock"


def private_folder(path: Path) -> None:
    """Make `path` (mode 0700) or check that an existing one is ours and private: a socket in
    a folder someone else controls could be swapped for theirs."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise DaemonDown(Deferred(N_(
            "{path} is not a private folder of this user (owner {uid}, mode {mode}); remove it "
            "or set GPUTUI_HOME"), path=path, uid=st.st_uid, mode=f"{st.st_mode & 0o777:o}"))


def daemon_pid(root: Path) -> int | None:
    """The pid in `daemon.json` if that process is alive (not a zombie)."""
    try:
        pid = int(json.loads((root / "daemon.json").read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def stop_daemon(root: Path, timeout: float = 15.0) -> int | None:
    """Stop the daemon of `root` (SIGTERM, then SIGKILL); returns its pid, None if none ran."""
    pid = daemon_pid(root)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pid


class SandboxClient:
    """One sandbox folder's daemon, started on first use (and again if it died)."""

    def __init__(self, root: Path, *, autostart: bool = True) -> None:
        self.root = root
        self.autostart = autostart

    @property
    def socket(self) -> Path:
        return socket_path(self.root)

    async def call(self, op: str, **args: Any) -> Any:
        """Ask the daemon; start it first if it is not running. A request that found no daemon,
        or lost it midway, is asked once more of a fresh one (every op is idempotent)."""
        for attempt in range(2):
            try:
                return await self._ask({"op": op, **args})
            except (OSError, EOFError, asyncio.IncompleteReadError) as exc:
                if not self.autostart:
                    raise DaemonDown(Deferred(N_("the sandbox daemon is not running ({error})"),
                                              error=exc)) from None
                if attempt:
                    raise DaemonDown(Deferred(N_("the sandbox daemon stopped answering: {error}"),
                                              error=exc)) from None
                await self.start()
        raise AssertionError("unreachable")

    async def _ask(self, request: dict[str, Any]) -> Any:
        reader, writer = await asyncio.open_unix_connection(str(self.socket), limit=1 << 22)
        try:
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                line = await reader.readline()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if not line:
            raise EOFError("no answer")
        reply = json.loads(line)
        if reply.get("ok"):
            return reply.get("result")
        message = str(reply.get("error") or "the sandbox daemon refused")
        if reply.get("kind") == "unknown":
            raise DaemonUnknown(message)
        raise DaemonRefused(message)

    async def running(self) -> bool:
        try:
            await self._ask({"op": "ping"})
        except (OSError, EOFError, ValueError, DaemonRefused):
            return False
        return True

    async def start(self) -> None:
        """Start the daemon detached (one at a time: a lock in the folder), and wait until it
        answers."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = open(self.root / "spawn.lock", "a+")  # noqa: ASYNC230 - a lock file, opened once
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise DaemonDown(Deferred(N_(
                            "the sandbox daemon is being started by another process that "
                            "does not finish"))) from None
                    await asyncio.sleep(0.05)
            if await self.running():
                return
            proc = spawn(self.root)
            while time.monotonic() < deadline:
                if await self.running():
                    return
                if proc.poll() is not None and proc.returncode != 3:  # 3: another one won
                    break
                await asyncio.sleep(0.05)
            raise DaemonDown(Deferred(N_("the sandbox daemon did not start (see {log}{last})"),
                                      log=self.root / "daemon.log",
                                      last=_last_line(self.root / "daemon.log")))
        finally:
            lock.close()


def spawn(root: Path, *, idle_exit_s: float | None = IDLE_EXIT_S) -> subprocess.Popen[bytes]:
    """`python -m gputui.sandbox.daemon` in its own session, output to `daemon.log`."""
    import gputui

    env = dict(os.environ)
    package_parent = str(Path(gputui.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "gputui.sandbox.daemon", "--root", str(root)]
    if idle_exit_s is not None:
        argv += ["--idle-exit", str(idle_exit_s)]
    fd = os.open(root / "daemon.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                cwd=str(root), env=env, start_new_session=True, close_fds=True)
    finally:
        os.close(fd)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1][-200:]}" if lines else ""
