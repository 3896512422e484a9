"""`sandbox`: the embedded, simulated GPU rental platform — on by default, no account needed.

Each instance is a folder with simulated GPUs (see `gputui.sandbox.shims`) served by a real asyncssh
server on 127.0.0.1 (key auth only, its own host key). The platform keeps its own record of
each instance in `platform/<id>.json` — when it ran and what it billed — independent of the
console's store, the way a real provider's invoice is.

A power-off scheduled on the instance (`shutdown -h +N`) takes effect at its time even if no
gputui process was running then: the record is worked out from timestamps when next looked at,
and compute billing ends at that moment (storage bills until the instance is released).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from gputui.models import (
    BillingRule,
    Granularity,
    Instance,
    InstanceStatus,
    Offer,
    SSHEndpoint,
    as_utc,
    money,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    ProviderContext,
    ProviderError,
    UnknownInstance,
)

LABEL = "sandbox (simulated)"
STORAGE_PER_GB_MONTH = Decimal("0.10")
GPU_COUNTS = (1, 2, 4, 8)
LOCAL_HOST = "127.0.0.1"


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

    def billing_rule(self) -> BillingRule:
        return BillingRule.model_validate(self.rule)

    def running_seconds(self, now: datetime) -> float:
        total = 0.0
        for start, end in self.periods:
            s = datetime.fromisoformat(str(start))
            e = datetime.fromisoformat(end) if end else now
            total += max(0.0, (e - s).total_seconds())
        return total

    def billed(self, now: datetime | None = None) -> Decimal:
        """What the platform charges up to `now` (or up to termination)."""
        now = as_utc(now or utcnow())
        if self.terminated_at:
            now = min(now, datetime.fromisoformat(self.terminated_at))
        rule = self.billing_rule()
        created = datetime.fromisoformat(self.created_at)
        compute = rule.compute_cost(self.running_seconds(now))
        storage = rule.storage_cost(self.disk_gb, (now - created).total_seconds())
        return money(compute + storage)


def kill_instance_processes(root: Path, grace_s: float = 1.0) -> list[int]:
    """Power off for real: every process running in the instance's folder goes (what a
    machine's power-off does to everything on it, nohup'd jobs and watchdogs included)."""
    import os
    import signal
    import time

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


def _gpu_smi_name(spec: Any) -> str:
    """The name as nvidia-smi prints it: a known alias starting with NVIDIA, else NVIDIA + name."""
    for alias in spec.aliases:
        if alias.startswith("NVIDIA "):
            return alias
    return f"NVIDIA {spec.name}"


class SandboxProvider:
    name = "sandbox"
    label = LABEL
    capabilities = Capabilities(
        stop_start=False, scheduled_release=True, power_off_stops_billing=True, simulated=True
    )

    def __init__(self, ctx: ProviderContext, *, boot_seconds: float = 1.5) -> None:
        self.ctx = ctx
        self.root = ctx.state_dir / "sandbox"
        self.boot_seconds = boot_seconds
        self._servers: dict[str, Any] = {}  # instance id -> InstanceServer
        self._lock = asyncio.Lock()

    # -- paths and keys ---------------------------------------------------------------------------

    def instance_root(self, instance_id: str) -> Path:
        return self.root / "instances" / instance_id

    def _record_path(self, instance_id: str) -> Path:
        return self.root / "platform" / f"{instance_id}.json"

    def client_key(self) -> tuple[Path, str]:
        from gputui.sandbox.server import ensure_keypair

        try:
            return ensure_keypair(self.root / "client_key", comment="gputui-sandbox-client")
        except OSError as exc:
            raise ProviderError(f"sandbox: cannot use its key in {self.root}: {exc.strerror}") from None

    def read_record(self, instance_id: str) -> PlatformRecord:
        path = self._record_path(instance_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return PlatformRecord(**data)
        except FileNotFoundError:
            raise UnknownInstance(f"sandbox: no instance {instance_id} on the platform") from None
        except (OSError, ValueError, TypeError) as exc:
            raise ProviderError(f"sandbox: {path} is unreadable: {exc}") from None

    def _write_record(self, rec: PlatformRecord) -> None:
        from gputui.config import write_private

        try:
            write_private(self._record_path(rec.id), json.dumps(rec.__dict__, indent=1).encode())
        except OSError as exc:
            raise ProviderError(f"sandbox: cannot write {self._record_path(rec.id)}: {exc.strerror}") from None

    # -- offers ----------------------------------------------------------------------------------

    async def offers(self) -> list[Offer]:
        return sandbox_offers()

    def _offer(self, offer_id: str) -> Offer:
        for offer in sandbox_offers():
            if offer.offer_id == offer_id:
                return offer
        raise ProviderError(f"sandbox: no offer {offer_id!r}")

    # -- lifecycle -----------------------------------------------------------------------------------

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        from gputui.catalog.specs import load_specs
        from gputui.sandbox.shims.state import create_instance_dir

        offer = self._offer(request.offer_id)
        spec = load_specs()[offer.offer_id.removeprefix("sandbox-")]
        root = self.instance_root(instance.id)
        mem = spec.nvidia_smi_total_mib or int(spec.vram_gb * 1024)
        try:
            await asyncio.to_thread(
                create_instance_dir, root, instance_id=instance.id, gpu_name=_gpu_smi_name(spec),
                gpu_count=request.gpu_count, memory_total_mib=mem, power_limit_w=spec.tdp_w,
                tdp_w=spec.tdp_w, python=sys.executable,
            )
        except OSError as exc:
            raise ProviderError(f"sandbox: cannot create the instance folder: {exc.strerror}") from None
        now = utcnow()
        rule = offer.billing.model_copy(
            update={"price_per_hour": offer.price_per_gpu_hour * request.gpu_count}
        )
        rec = PlatformRecord(
            id=instance.id, gpu=offer.gpu, gpu_count=request.gpu_count,
            rule=json.loads(rule.model_dump_json()), disk_gb=request.disk_gb,
            created_at=now.isoformat(),
            boot_at=(now + timedelta(seconds=self.boot_seconds)).isoformat(),
        )
        self._write_record(rec)
        server = await self._serve(instance.id, rec)
        instance = instance.model_copy(update={
            "provider_id": instance.id,
            "billing": rule,
            "status": InstanceStatus.BOOTING,
            "created_at": now,
            "ssh": self._endpoint(server.port),
        })
        return instance

    async def boot(self, instance: Instance) -> Instance:
        """Wait for the platform to finish booting it (it does so on its own, watched or not)."""
        rec = self.read_record(instance.id)
        if rec.boot_at:
            wait = (datetime.fromisoformat(rec.boot_at) - utcnow()).total_seconds()
            if wait > 0:
                await asyncio.sleep(wait)
        return await self.refresh(instance)

    def _endpoint(self, port: int) -> SSHEndpoint:
        key_path, _ = self.client_key()
        return SSHEndpoint(host=LOCAL_HOST, port=port, user="root", key_path=str(key_path))

    async def _serve(self, instance_id: str, rec: PlatformRecord) -> Any:
        """Start this instance's SSH server in this process (on its recorded port if it has one)."""
        from gputui.sandbox.server import ensure_host_key, start_instance_server
        from gputui.sandbox.shims.state import install_shims

        _, public = self.client_key()
        host_key_path = self.root / "platform" / f"{instance_id}.host_key"
        with contextlib.suppress(OSError):  # a newer gputui brings its newer tools
            await asyncio.to_thread(install_shims, self.instance_root(instance_id),
                                    python=sys.executable)
        try:
            server = await start_instance_server(
                self.instance_root(instance_id), host_key_path=host_key_path,
                authorized_keys=[public], port=rec.port,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            raise ProviderError(f"sandbox: cannot start the instance's SSH server: {exc}") from None
        self._servers[instance_id] = server
        if rec.port != server.port:
            rec.port = server.port
            self._write_record(rec)
        # The platform vouches for its own instance's host key, as a cloud console shows it.
        key = ensure_host_key(host_key_path)
        known = self.ctx.host_keys
        if not any(k.public_data == key.public_data for k in known.host_keys(LOCAL_HOST, server.port)):
            known.forget(LOCAL_HOST, server.port)
            known.add(LOCAL_HOST, server.port, key)
        return server

    async def prepare(self, instance: Instance) -> Instance:
        """Make the instance reachable from this process: serve it unless another process does."""
        async with self._lock:
            if instance.id in self._servers or not instance.status.live:
                return instance
            rec = self.read_record(instance.id)
            if rec.terminated_at:
                return instance
            try:
                await self._serve(instance.id, rec)
            except OSError:
                # Another gputui process serves this port already; it is the same instance.
                pass
            if instance.ssh is None or instance.ssh.port != rec.port:
                instance = instance.model_copy(update={"ssh": self._endpoint(rec.port)})
            return instance

    async def refresh(self, instance: Instance) -> Instance:
        """The platform's view, worked out from timestamps (a past power-off is in effect).

        The platform's running periods are the truth for billing: the instance's record is
        brought in line with them.
        """
        from gputui.sandbox.shims.state import power_state

        rec = self.read_record(instance.id)
        scheduled = self.scheduled_release(instance.id)
        if not rec.terminated_at and scheduled is not None and scheduled <= utcnow():
            # Layer 2: the platform itself terminates at the scheduled time.
            await self._terminate(rec, scheduled, by="schedule")
        if not rec.terminated_at and not rec.periods:
            boot_at = datetime.fromisoformat(rec.boot_at) if rec.boot_at else None
            if boot_at is None or boot_at <= utcnow():
                rec.periods.append([(boot_at or utcnow()).isoformat(), None])
                self._write_record(rec)
        if not rec.terminated_at:
            try:
                power = power_state(self.instance_root(instance.id))
            except Exception as exc:  # a damaged instance folder: say so, keep the record
                raise ProviderError(f"sandbox: {exc}") from None
            if power.is_off and rec.periods and rec.periods[-1][1] is None:
                assert power.at is not None
                rec.periods[-1][1] = power.at.isoformat()
                self._write_record(rec)
                await self._stop_server(instance.id)
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(kill_instance_processes, self.instance_root(instance.id))
        return self._apply_record(instance, rec)

    def _apply_record(self, instance: Instance, rec: PlatformRecord) -> Instance:
        inst = instance.model_copy()
        closed = [p for p in rec.periods if p[1] is not None]
        inst.billed_running_seconds = sum(
            (datetime.fromisoformat(str(e)) - datetime.fromisoformat(str(s))).total_seconds()
            for s, e in closed)
        open_period = rec.periods[-1] if rec.periods and rec.periods[-1][1] is None else None
        inst.running_since = datetime.fromisoformat(str(open_period[0])) if open_period else None
        if rec.terminated_at:
            if inst.status.live:
                reason = "timer" if rec.terminated_by == "schedule" else (inst.end_reason or "external")
                inst.status = InstanceStatus.RELEASED
                inst.ended_at = datetime.fromisoformat(rec.terminated_at)
                inst.end_reason = reason  # type: ignore[assignment]
                if rec.terminated_by == "schedule":
                    inst.status_detail = "terminated by the platform's scheduled release"
        elif open_period is not None and inst.status in (InstanceStatus.REQUESTED, InstanceStatus.BOOTING):
            inst.status = InstanceStatus.RUNNING
            inst.status_detail = None
        elif open_period is None and rec.periods:
            off_at = datetime.fromisoformat(str(rec.periods[-1][1]))
            if inst.status != InstanceStatus.RELEASING:
                inst.status = InstanceStatus.STOPPED
            inst.stopped_at = off_at
            inst.status_detail = f"powered off at {off_at.astimezone():%H:%M:%S}"
        return inst

    async def _stop_server(self, instance_id: str) -> None:
        server = self._servers.pop(instance_id, None)
        if server is not None:
            await server.aclose()

    async def release(self, instance: Instance) -> None:
        """Terminate: processes killed, the disk wiped, billing ends now. Idempotent."""
        rec = self.read_record(instance.id)
        if not rec.terminated_at:
            await self._terminate(rec, utcnow())

    async def _terminate(self, rec: PlatformRecord, at: datetime, by: str = "user") -> None:
        from gputui.sandbox.shims.state import kill_processes, power_state

        root = self.instance_root(rec.id)
        with contextlib.suppress(Exception):
            power = power_state(root, at)
            if power.is_off and power.at is not None and rec.periods and rec.periods[-1][1] is None:
                rec.periods[-1][1] = power.at.isoformat()
        if rec.periods and rec.periods[-1][1] is None:
            rec.periods[-1][1] = at.isoformat()
        rec.terminated_at = at.isoformat()
        rec.terminated_by = by
        self._write_record(rec)
        await self._stop_server(rec.id)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(kill_processes, root)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(kill_instance_processes, root)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(shutil.rmtree, root)
        (self.root / "platform" / f"{rec.id}.release_at").unlink(missing_ok=True)
        if rec.port:
            self.ctx.host_keys.forget(LOCAL_HOST, rec.port)

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        """Layer 2: the platform terminates at `at` — recorded; enforced when next looked at."""
        rec = self.read_record(instance.id)
        path = self.root / "platform" / f"{instance.id}.release_at"
        if at is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(as_utc(at).isoformat(), encoding="utf-8")
        return rec.terminated_at is None

    def scheduled_release(self, instance_id: str) -> datetime | None:
        path = self.root / "platform" / f"{instance_id}.release_at"
        try:
            return datetime.fromisoformat(path.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    async def close(self) -> None:
        for iid in list(self._servers):
            await self._stop_server(iid)


def sandbox_offers() -> list[Offer]:
    """Every card of the catalog at a simulated list price, billed per minute (60 s minimum).

    The list price is the lowest dated reference price for the card where the catalog has one
    (its source is kept); otherwise it is derived from the card's dense BF16 TFLOPS at the median
    $/TFLOP-hour of the priced cards, and says so.
    """
    from gputui.catalog.prices import load_prices, lowest_price
    from gputui.catalog.specs import load_specs

    specs = load_specs()
    rows = load_prices()
    priced: dict[str, tuple[Decimal, str, str | None]] = {}
    ratios: list[Decimal] = []
    for key, spec in specs.items():
        row = lowest_price(key, rows, include_spot=False)
        if row is not None:
            priced[key] = (row.price_per_gpu_hour, f"{row.provider} {row.tier}: {row.source}", row.as_of)
            if spec.bf16_tflops > 0:
                ratios.append(row.price_per_gpu_hour / Decimal(str(spec.bf16_tflops)))
    ratios.sort()
    median = ratios[len(ratios) // 2] if ratios else Decimal("0.01")
    offers: list[Offer] = []
    for key, spec in specs.items():
        if key in priced:
            price, source, as_of = priced[key]
        else:
            tflops = Decimal(str(spec.bf16_tflops or spec.fp16_tflops or spec.fp32_tflops))
            price = (tflops * median).quantize(Decimal("0.01"))
            source, as_of = "derived: BF16 TFLOPS × median $/TFLOP-hour of priced cards", None
        rule = BillingRule(
            price_per_hour=price, granularity=Granularity.MINUTE, minimum_seconds=60,
            storage_per_gb_month=STORAGE_PER_GB_MONTH,
        )
        offers.append(Offer(
            provider="sandbox", offer_id=f"sandbox-{key}", gpu=spec.name, vram_gb=spec.vram_gb,
            price_per_gpu_hour=price, billing=rule, region="local", tier="simulated",
            source=source, as_of=as_of, images=["ubuntu-22.04-cuda-12.4", "pytorch-2.5"],
        ))
    return offers

