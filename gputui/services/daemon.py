"""The headless daemon: what the console does in the background, and nothing else.

- keeps every lease: warnings before the deadline, the release at the deadline, the idle release
  from live telemetry (one `nvidia-smi -lms` stream per running instance), releases left half
  done by a crash finished, budgets watched — all through `LeaseService.tick`, exactly as the
  console's lease clock does;
- publishes nothing itself: notices go to the `on_notice` callback its command gives it (a
  desktop notification or a log line), and the figures are read by the metrics collector.

One daemon per state folder: it holds an exclusive `flock` on `daemon.lock` there for its whole
life, and writes who it is (pid, start time, metrics address) into the file. `daemon_status`
asks the same lock, so a crashed daemon (the lock goes with its process) is never reported as
running. The console and the daemon share the store; a release is claimed in the store first
(`SessionStore.claim_release`), so the two never release one instance twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.errors import BadInput, GputuiError
from gputui.i18n import N_, Deferred, _
from gputui.models import utcnow
from gputui.store import InstanceChanged, Notice

if TYPE_CHECKING:
    from gputui.services.hub import Services
    from gputui.services.leases import LeaseService
    from gputui.services.telemetry import TelemetryService

LOCK_NAME = "daemon.lock"
UNIT_NAME = "gputui-daemon.service"


class DaemonRunning(BadInput):
    """A daemon already keeps this state folder's deadlines."""


# -- the lock: one daemon per state folder -----------------------------------------------------------


@dataclass(frozen=True)
class DaemonInfo:
    pid: int
    started_at: str
    metrics: str | None = None
    interval_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "started_at": self.started_at, "metrics": self.metrics,
                "interval_s": self.interval_s}


class DaemonLock:
    """Held for the daemon's life; released when it closes or its process dies."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, state_dir: Path, info: DaemonInfo) -> DaemonLock:
        path = state_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            running = daemon_status(state_dir)
            if running:
                raise DaemonRunning(_("a gputui daemon is already running for {state} (pid "
                                      "{pid}); see `gputui daemon status`").format(
                                          state=state_dir, pid=running.pid)) from None
            raise DaemonRunning(_("a gputui daemon is already running for {state}; see "
                                  "`gputui daemon status`").format(state=state_dir)) from None
        lock = cls(path, fd)
        lock.update(info)
        return lock

    def update(self, info: DaemonInfo) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(info.as_dict()).encode(), 0)

    def release(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = -1


def daemon_status(state_dir: Path) -> DaemonInfo | None:
    """The running daemon for this state folder, or None. Cheap (an open and a flock): the
    console asks every few seconds."""
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 4096, 0)
            try:
                data = json.loads(raw or b"{}")
                return DaemonInfo(pid=int(data["pid"]), started_at=str(data["started_at"]),
                                  metrics=data.get("metrics"), interval_s=data.get("interval_s"))
            except (ValueError, KeyError, TypeError):
                return DaemonInfo(pid=0, started_at="?")  # locked but just starting
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# -- who keeps the deadlines when the console is closed ---------------------------------------------

_cron_cache: tuple[float, bool] | None = None


def cron_line_known(*, max_age_s: float = 300.0) -> bool:
    """A crontab line running `gputui reap` or `gputui daemon` (asked at most every 5 minutes)."""
    global _cron_cache
    now = time.monotonic()
    if _cron_cache is not None and now - _cron_cache[0] < max_age_s:
        return _cron_cache[1]
    found = False
    crontab = shutil.which("crontab")
    if crontab is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([crontab, "-l"], capture_output=True, text=True, timeout=3,
                                 check=False).stdout
            found = any("gputui" in line and (" reap" in line or " daemon" in line)
                        for line in out.splitlines() if not line.lstrip().startswith("#"))
    _cron_cache = (now, found)
    return found


def deadline_keeper(state_dir: Path) -> str | None:
    """"daemon" when a daemon runs, "cron" when a crontab line is known, else None."""
    if daemon_status(state_dir) is not None:
        return "daemon"
    if cron_line_known():
        return "cron"
    return None


# -- installing ----------------------------------------------------------------------------------------


def systemd_available() -> bool:
    """A systemd user manager can run a unit here (systemd booted this machine)."""
    return shutil.which("systemctl") is not None and Path("/run/systemd/system").is_dir()


def _command(metrics: str | None = None, allow_remote: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "gputui", "daemon"]
    if metrics:
        cmd += ["--metrics", metrics]
        if allow_remote:
            cmd.append("--allow-remote")
    return cmd


def systemd_unit(metrics: str | None = None, allow_remote: bool = False,
                 environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    lines = [
        "[Unit]",
        "Description=gputui daemon: keeps the release deadlines of rented GPUs",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(_command(metrics, allow_remote))}",
        "Restart=on-failure",
        "RestartSec=10",
    ]
    for name in ("GPUTUI_HOME",):  # never a secret (API keys stay in config.toml, mode 0600)
        if env.get(name):
            lines += [f"Environment={name}={shlex.quote(env[name])}"]  # a unit file: English
    lines += ["", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)


def unit_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "systemd" / "user" / UNIT_NAME


def cron_line(state_dir: Path, environ: Mapping[str, str] | None = None) -> str:
    """Layer 3 without a daemon: reap every minute."""
    env = os.environ if environ is None else environ
    prefix = f"GPUTUI_HOME={shlex.quote(env['GPUTUI_HOME'])} " if env.get("GPUTUI_HOME") else ""
    log = shlex.quote(str(state_dir / "reap.log"))
    return (f"* * * * * {prefix}{shlex.quote(sys.executable)} -m gputui reap "
            f">> {log} 2>&1")


@dataclass(frozen=True)
class Installed:
    kind: str  # "systemd" | "cron"
    path: Path | None  # the unit written (systemd)
    text: str  # the unit, or the cron line to add
    next_step: str  # what the user runs next


def install(state_dir: Path, *, systemd: bool | None = None, metrics: str | None = None,
            allow_remote: bool = False) -> Installed:
    """Write a systemd user unit (where systemd runs); otherwise give the cron line."""
    if systemd is None:
        systemd = systemd_available()
    if not systemd:
        line = cron_line(state_dir)
        return Installed("cron", None, line, N_("add it with `crontab -e` (systemd is not "
                                                "running here)"))  # JSON: English
    path = unit_path()
    text = systemd_unit(metrics, allow_remote)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise GputuiError(_("{path}: cannot write the unit: {error}").format(
            path=path, error=exc.strerror or exc)) from None
    return Installed("systemd", path, text,
                     f"systemctl --user daemon-reload && systemctl --user enable --now {UNIT_NAME}")


# -- the daemon --------------------------------------------------------------------------------------


class Daemon:
    """Run with `await Daemon(services).run(stop_event)`."""

    def __init__(
        self,
        services: Services,
        *,
        interval: float = 2.0,
        tick_s: float = 1.0,
        refresh_every: int = 30,
        poll_every: float = 2.0,
        on_notice: Callable[[Notice], None] | None = None,
        telemetry: TelemetryService | None = None,
        leases: LeaseService | None = None,
        keep_leases: bool = True,
    ) -> None:
        from gputui.services.leases import LeaseService
        from gputui.services.telemetry import TelemetryService

        self.services = services
        self.store = services.store
        self.tick_s = tick_s
        self.refresh_every = max(1, refresh_every)
        self.poll_every = poll_every
        warn = tuple(services.config.lease.warn_minutes or ())
        self.leases = leases or LeaseService(services, warn_minutes=warn)
        self.telemetry = telemetry or TelemetryService(services, self.store, interval=interval)
        self.keep_leases = keep_leases  # False: `gputui metrics` watches, releases nothing
        if keep_leases:  # a queue that ends or a run that fails is said (a line, the phone)
            from gputui.services.queuewatch import session_queue_watch

            session_queue_watch(services)
        self.ticks = 0
        self.errors = 0
        self._last_error: str | None = None  # the last failed tick's error (said once)
        self._on_notice = on_notice
        self._unsubscribe = self.store.subscribe(self._on_event)
        self._dirty = True  # the set of running instances may have changed

    def _on_event(self, event: object) -> None:
        if isinstance(event, InstanceChanged):
            self._dirty = True
        elif isinstance(event, Notice) and self._on_notice is not None:
            self._on_notice(event)

    def _sync_watches(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self.telemetry.sync(self.store.instances_sync(live_only=True))

    async def step(self) -> None:
        """One tick of the clock: look at other processes' changes, watch what runs, keep the
        leases (asking the providers every `refresh_every` ticks, and on the first)."""
        self._sync_watches()
        if not self.keep_leases:
            self.ticks += 1
            return
        try:
            await self.leases.tick(refresh=self.ticks % self.refresh_every == 0)
        except Exception as exc:  # the clock must keep going; say what went wrong
            self.errors += 1
            error = f"{type(exc).__name__}: {exc}"
            if error != self._last_error:  # once, not every second, until it changes
                self._last_error = error
                self.store.notify(Deferred(N_("auto-release check failed: {error}"),
                                           error=error), "error")
        else:
            self._last_error = None
        self.ticks += 1

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        next_poll = loop.time()
        try:
            while not stop.is_set():
                started = loop.time()
                if started >= next_poll:
                    next_poll = started + self.poll_every
                    with contextlib.suppress(GputuiError):
                        self.store.poll_external()
                await self.step()
                wait = max(0.0, self.tick_s - (loop.time() - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)
        finally:
            self._unsubscribe()
            await self.telemetry.close()

    def watched(self) -> list[str]:
        return self.telemetry.watching()


def capabilities_of(services: Services, provider: str) -> Any:
    """A provider's declared capabilities, without making one (None: no such provider)."""
    from gputui.services.hub import PROVIDER_CLASSES

    if provider not in PROVIDER_CLASSES:
        return None
    return services.capabilities(provider)


def needs_layer3(services: Services, instances: list[Any] | None = None) -> list[str]:
    """Names of live instances whose provider's power-off does not stop the billing (Lambda):
    only a local release (the console, the daemon, a cron line) keeps their deadline."""
    if instances is None:
        instances = services.store.instances_sync(live_only=True)
    names = []
    for inst in instances:
        if not inst.status.live:
            continue
        caps = capabilities_of(services, inst.provider)
        if caps is not None and not caps.power_off_stops_billing:
            names.append(inst.name)
    return names


def started_now() -> str:
    return utcnow().isoformat(timespec="seconds")
