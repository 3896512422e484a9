"""The simulated cloud's books and machines: what the sandbox daemon does for each instance.

The platform keeps its own record of each instance in `platform/<id>.json` — when it ran and
what it billed — independent of the console's store, the way a real provider's invoice is. Only
the daemon (`gputui.sandbox.daemon`) writes these records; clients read them.

Layout of the sandbox folder (`<GPUTUI_HOME>/sandbox`)::

    client_key, client_key.pub    the key the console (and `ssh -i`) logs in with
    instances/<id>/               the instance's disk (see gputui.sandbox.shims.state)
    platform/<id>.json            the platform's record (PlatformRecord)
    platform/<id>.host_key        the instance's SSH host key
    platform/<id>.release_at      a provider-side termination time (layer 2)
    daemon.json, daemon.log       the running daemon (pid, socket) and its log
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from gputui.errors import GputuiError, NotFound

log = logging.getLogger("gputui.sandbox")


class PlatformError(GputuiError):
    """The simulated platform refused or failed; one line for the user."""


class NoSuchInstance(PlatformError, NotFound):
    """The platform has no such instance (never created, or long gone)."""


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class PlatformRecord:
    """The sandbox platform's own books for one instance."""

    id: str
    gpu: str
    gpu_count: int
    rule: dict[str, Any]
    disk_gb: float
    created_at: str
    port: int = 0
    boot_at: str | None = None  # when the platform finishes booting it (running from then)
    periods: list[list[str | None]] = field(default_factory=list)  # running periods [start, end]
    terminated_at: str | None = None
    terminated_by: str | None = None  # "user" (the API's release) or "schedule" (layer 2)
    stopped_by: str | None = None  # "user" (the API's stop) while powered off that way

    def running_seconds(self, now: datetime) -> float:
        total = 0.0
        for start, end in self.periods:
            s = datetime.fromisoformat(str(start))
            e = datetime.fromisoformat(end) if end else now
            total += max(0.0, (e - s).total_seconds())
        return total

    @property
    def running(self) -> bool:
        return bool(self.periods) and self.periods[-1][1] is None and not self.terminated_at

    def billed(self, now: datetime | None = None) -> Decimal:
        """What the platform charges up to `now` (or up to termination)."""
        from gputui.models import BillingRule, as_utc, money, utcnow

        now = as_utc(now or utcnow())
        if self.terminated_at:
            now = min(now, datetime.fromisoformat(self.terminated_at))
        rule = BillingRule.model_validate(self.rule)
        created = datetime.fromisoformat(self.created_at)
        compute = rule.compute_cost(self.running_seconds(now))
        storage = rule.storage_cost(self.disk_gb, (now - created).total_seconds())
        return money(compute + storage)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlatformRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def kill_instance_processes(root: Path, grace_s: float = 1.0) -> list[int]:
    """Power off for real: every process running in the instance's folder goes (what a
    machine's power-off does to everything on it, nohup'd jobs and watchdogs included)."""
    root_s = str(Path(root).resolve())

    def inside() -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
            except OSError:
                continue
            if cwd == root_s or cwd.startswith(root_s + "/"):
                pids.append(int(entry.name))
        return pids

    found = inside()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and inside():
            time.sleep(0.05)
        if not inside():
            break
    return found


def power_off_machine(root: Path) -> None:
    """Everything on the machine stops: registered GPU processes, then anything else in it."""
    from gputui.sandbox.shims.state import kill_processes

    with contextlib.suppress(Exception):
        kill_processes(root, grace_s=1.0)
    with contextlib.suppress(OSError):
        kill_instance_processes(root)


class Platform:
    """Every instance of one sandbox folder: their records, machines and SSH servers.

    Runs in the daemon's event loop; requests are serialised by one lock so the records have
    one writer.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: dict[str, Any] = {}  # instance id -> InstanceServer
        self.outages: set[str] = set()  # endpoints staged down (`outage`)
        self.lock = asyncio.Lock()

    # -- files ------------------------------------------------------------------------------
    def instance_root(self, instance_id: str) -> Path:
        return self.root / "instances" / instance_id

    def record_path(self, instance_id: str) -> Path:
        return self.root / "platform" / f"{instance_id}.json"

    def release_at_path(self, instance_id: str) -> Path:
        return self.root / "platform" / f"{instance_id}.release_at"

    def host_key_path(self, instance_id: str) -> Path:
        return self.root / "platform" / f"{instance_id}.host_key"

    def read(self, instance_id: str) -> PlatformRecord:
        path = self.record_path(instance_id)
        try:
            return PlatformRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise NoSuchInstance(f"sandbox: no instance {instance_id} on the platform") from None
        except (OSError, ValueError, TypeError) as exc:
            raise PlatformError(f"sandbox: {path} is unreadable: {exc}") from None

    def write(self, rec: PlatformRecord) -> None:
        from gputui.remote.keys import write_private

        try:
            write_private(self.record_path(rec.id), json.dumps(rec.to_json(), indent=1).encode())
        except OSError as exc:
            raise PlatformError(
                f"sandbox: cannot write {self.record_path(rec.id)}: {exc.strerror}") from None

    def records(self) -> list[PlatformRecord]:
        out = []
        for path in sorted((self.root / "platform").glob("*.json")):
            try:
                out.append(self.read(path.stem))
            except PlatformError as exc:
                log.warning("%s", exc)
        return out

    def scheduled_release(self, instance_id: str) -> datetime | None:
        try:
            text = self.release_at_path(instance_id).read_text(encoding="utf-8").strip()
            return datetime.fromisoformat(text)
        except (OSError, ValueError):
            return None

    def client_public_key(self) -> str:
        from gputui.remote.keys import ensure_keypair

        return ensure_keypair(self.root / "client_key", comment="gputui-sandbox-client")[1]

    # -- requests ---------------------------------------------------------------------------
    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Make the instance's disk and record, boot it (it runs from `boot_at`), serve it.
        Asking again for an id that exists answers with what is there (a retried request)."""
        from gputui.sandbox.shims.state import create_instance_dir

        iid = str(spec["id"])
        if not iid.isalnum():
            raise PlatformError(f"sandbox: bad instance id {iid!r}")
        async with self.lock:
            if self.record_path(iid).exists():
                rec = self.read(iid)
            else:
                root = self.instance_root(iid)
                try:
                    await asyncio.to_thread(
                        create_instance_dir, root, instance_id=iid,
                        gpu_name=str(spec["gpu_smi_name"]), gpu_count=int(spec["gpu_count"]),
                        memory_total_mib=int(spec["memory_total_mib"]),
                        power_limit_w=float(spec["power_limit_w"]), tdp_w=float(spec["tdp_w"]),
                        python=sys.executable,
                    )
                except OSError as exc:
                    raise PlatformError(
                        f"sandbox: cannot create the instance folder: {exc.strerror}") from None
                now = _now()
                rec = PlatformRecord(
                    id=iid, gpu=str(spec["gpu"]), gpu_count=int(spec["gpu_count"]),
                    rule=dict(spec["rule"]), disk_gb=float(spec["disk_gb"]),
                    created_at=now.isoformat(),
                    boot_at=(now + timedelta(seconds=float(spec.get("boot_seconds", 0)))).isoformat(),
                )
                self.write(rec)
                log.info("created %s (%s × %s)", iid, rec.gpu_count, rec.gpu)
            await self._serve(rec)
            return self._answer(rec)

    async def view(self, instance_id: str) -> dict[str, Any]:
        """The record with every event that is due applied (boot, power-off, termination)."""
        async with self.lock:
            rec = await self._settle(self.read(instance_id), _now())
            return self._answer(rec)

    async def serve(self, instance_id: str) -> dict[str, Any]:
        async with self.lock:
            rec = await self._settle(self.read(instance_id), _now())
            if not rec.terminated_at and rec.stopped_by is None and not self._off(rec):
                await self._serve(rec)
            return self._answer(rec)

    async def outage(self, instance_id: str, down: bool) -> dict[str, Any]:
        """Stage a network outage: the instance's endpoint drops every connection and stops
        answering until the outage ends (`down` false), whoever asks for it meanwhile."""
        async with self.lock:
            rec = self.read(instance_id)
            if down:
                self.outages.add(instance_id)
                await self._stop_server(instance_id)
            else:
                self.outages.discard(instance_id)
                if not rec.terminated_at and rec.stopped_by is None and not self._off(rec):
                    await self._serve(rec)
            return self._answer(rec)

    async def release(self, instance_id: str) -> dict[str, Any]:
        """Terminate: processes killed, the disk wiped, billing ends now. Idempotent."""
        async with self.lock:
            rec = self.read(instance_id)
            if not rec.terminated_at:
                await self._terminate(rec, _now(), by="user")
            return self._answer(rec)

    async def schedule(self, instance_id: str, at: str | None) -> dict[str, Any]:
        """Layer 2: the platform terminates at `at` (None cancels), watched or not."""
        async with self.lock:
            rec = self.read(instance_id)
            path = self.release_at_path(instance_id)
            if at is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(datetime.fromisoformat(at).isoformat(), encoding="utf-8")
            answer = self._answer(rec)
            answer["scheduled"] = rec.terminated_at is None
            return answer

    async def stop(self, instance_id: str) -> dict[str, Any]:
        """Power off keeping the disk: compute billing ends, storage goes on."""
        from gputui.sandbox.shims.state import schedule_poweroff

        async with self.lock:
            rec = await self._settle(self.read(instance_id), _now())
            if rec.terminated_at:
                raise PlatformError(f"sandbox: instance {instance_id} is terminated")
            if rec.running:
                now = _now()
                with contextlib.suppress(Exception):
                    schedule_poweroff(self.instance_root(instance_id), now, command="platform stop")
                rec = await self._settle(rec, now + timedelta(microseconds=1))
            rec.stopped_by = "user"
            self.write(rec)
            return self._answer(rec)

    async def start(self, instance_id: str) -> dict[str, Any]:
        """Power on a stopped instance: a new running period, served again."""
        from gputui.sandbox.shims.state import power_on

        async with self.lock:
            rec = await self._settle(self.read(instance_id), _now())
            if rec.terminated_at:
                raise PlatformError(f"sandbox: instance {instance_id} is terminated")
            if not rec.running:
                power_on(self.instance_root(instance_id))
                rec.periods.append([_now().isoformat(), None])
                rec.stopped_by = None
                self.write(rec)
                log.info("started %s again", instance_id)
            await self._serve(rec)
            return self._answer(rec)

    async def status(self) -> list[dict[str, Any]]:
        async with self.lock:
            out = []
            for rec in self.records():
                if rec.terminated_at:
                    continue
                out.append(self._answer(rec))
            return out

    async def tick(self) -> None:
        """Apply what is due on every instance: boot, power-offs, scheduled terminations."""
        async with self.lock:
            now = _now()
            for rec in self.records():
                if rec.terminated_at:
                    continue
                try:
                    await self._settle(rec, now)
                except PlatformError as exc:
                    log.warning("%s", exc)

    async def restore(self) -> None:
        """At start: serve every instance still running (the daemon may have died)."""
        async with self.lock:
            now = _now()
            for rec in self.records():
                if rec.terminated_at:
                    continue
                try:
                    rec = await self._settle(rec, now)
                    if not rec.terminated_at and not self._off(rec) and rec.stopped_by is None:
                        await self._serve(rec)
                except (PlatformError, OSError) as exc:
                    log.warning("could not bring %s back: %s", rec.id, exc)

    def live_count(self) -> int:
        return sum(1 for rec in self.records() if not rec.terminated_at)

    async def close(self) -> None:
        for iid in list(self.servers):
            await self._stop_server(iid)

    # -- inside -----------------------------------------------------------------------------
    def _answer(self, rec: PlatformRecord) -> dict[str, Any]:
        server = self.servers.get(rec.id)
        out = rec.to_json()
        out["serving"] = server is not None
        if server is not None:
            out["host_key"] = server.host_key_line
        return out

    def _off(self, rec: PlatformRecord) -> bool:
        return bool(rec.periods) and rec.periods[-1][1] is not None

    async def _settle(self, rec: PlatformRecord, now: datetime) -> PlatformRecord:
        from gputui.sandbox.shims.state import power_state

        scheduled = self.scheduled_release(rec.id)
        if not rec.terminated_at and scheduled is not None and scheduled <= now:
            await self._terminate(rec, scheduled, by="schedule")
            return rec
        if not rec.terminated_at and not rec.periods:
            boot_at = datetime.fromisoformat(rec.boot_at) if rec.boot_at else None
            if boot_at is None or boot_at <= now:
                rec.periods.append([(boot_at or now).isoformat(), None])
                self.write(rec)
        if not rec.terminated_at:
            try:
                power = power_state(self.instance_root(rec.id), now)
            except Exception as exc:  # a damaged instance folder: say so, keep the record
                raise PlatformError(f"sandbox: {exc}") from None
            if power.is_off and rec.periods and rec.periods[-1][1] is None:
                assert power.at is not None
                rec.periods[-1][1] = power.at.isoformat()
                self.write(rec)
                log.info("%s powered off (%s)", rec.id, power.command or "shutdown")
                await self._stop_server(rec.id)
                await asyncio.to_thread(power_off_machine, self.instance_root(rec.id))
        return rec

    async def _terminate(self, rec: PlatformRecord, at: datetime, by: str) -> None:
        from gputui.sandbox.shims.state import power_state

        root = self.instance_root(rec.id)
        with contextlib.suppress(Exception):
            power = power_state(root, at)
            if power.is_off and power.at is not None and rec.periods and rec.periods[-1][1] is None:
                rec.periods[-1][1] = power.at.isoformat()
        if rec.periods and rec.periods[-1][1] is None:
            rec.periods[-1][1] = at.isoformat()
        rec.terminated_at = at.isoformat()
        rec.terminated_by = by
        self.write(rec)
        log.info("terminated %s (%s)", rec.id, by)
        await self._stop_server(rec.id)
        await asyncio.to_thread(power_off_machine, root)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(shutil.rmtree, root)
        self.release_at_path(rec.id).unlink(missing_ok=True)

    async def _serve(self, rec: PlatformRecord) -> None:
        """Serve the instance over SSH (on its recorded port when it has one and it is free)."""
        import errno

        from gputui.sandbox.server import start_instance_server
        from gputui.sandbox.shims.state import install_shims

        if rec.id in self.servers or rec.terminated_at or rec.id in self.outages:
            return
        root = self.instance_root(rec.id)
        with contextlib.suppress(OSError):  # a newer gputui brings its newer tools
            await asyncio.to_thread(install_shims, root, python=sys.executable)
        from gputui.sandbox.shims.df import write_disk_size

        with contextlib.suppress(OSError):  # `df` on the instance shows the rented disk
            await asyncio.to_thread(write_disk_size, root, rec.disk_gb)
        kwargs: dict[str, Any] = dict(host_key_path=self.host_key_path(rec.id),
                                      authorized_keys=[self.client_public_key()])
        try:
            server = await start_instance_server(root, port=rec.port, **kwargs)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or not rec.port:
                raise PlatformError(f"sandbox: cannot start the instance's SSH server: {exc}") from None
            log.warning("%s: port %s is taken; serving on another", rec.id, rec.port)
            server = await start_instance_server(root, port=0, **kwargs)
        self.servers[rec.id] = server
        if rec.port != server.port:
            rec.port = server.port
            self.write(rec)
        log.info("serving %s on 127.0.0.1:%s", rec.id, server.port)

    async def _stop_server(self, instance_id: str) -> None:
        server = self.servers.pop(instance_id, None)
        if server is not None:
            await server.aclose()
