"""`sandbox`: the simulated GPU rental platform — on by default, no account needed.

A thin client of the simulated cloud, which runs as its own process (`gputui.sandbox.daemon`,
started on demand, one per GPUTUI_HOME): the daemon holds every running instance's SSH endpoint,
keeps the platform's books (`platform/<id>.json`, its invoice, independent of the console's
store) and fires scheduled power-offs and terminations with no gputui process running. This
module turns the provider contract into daemon requests, and the daemon's records into
`Instance` values; it reads the platform's files but never writes them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from gputui.errors import os_reason
from gputui.i18n import N_, Deferred
from gputui.models import (
    BillingRule,
    Granularity,
    Instance,
    InstanceStatus,
    Offer,
    SSHEndpoint,
    as_utc,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    Provider,
    ProviderContext,
    ProviderError,
    UnknownInstance,
)
from gputui.sandbox.client import DaemonDown, DaemonRefused, DaemonUnknown, SandboxClient
from gputui.sandbox.platform import PlatformRecord, kill_instance_processes

__all__ = ["SandboxProvider", "sandbox_offers", "kill_instance_processes", "PlatformRecord"]

LABEL = N_("sandbox (simulated)")
STORAGE_PER_GB_MONTH = Decimal("0.10")
GPU_COUNTS = (1, 2, 4, 8)
LOCAL_HOST = "127.0.0.1"


def _gpu_smi_name(spec: Any) -> str:
    """The name as nvidia-smi prints it: a known alias starting with NVIDIA, else NVIDIA + name."""
    for alias in spec.aliases:
        if alias.startswith("NVIDIA "):
            return alias
    return f"NVIDIA {spec.name}"


class SandboxProvider(Provider):
    name = "sandbox"
    label = LABEL
    capabilities = Capabilities(
        stop_start=True, scheduled_release=True, power_off_stops_billing=True, simulated=True,
        local=True,
    )

    def __init__(self, ctx: ProviderContext, *, boot_seconds: float = 1.5) -> None:
        self.ctx = ctx
        self.root = ctx.state_dir / "sandbox"
        self.boot_seconds = boot_seconds
        self.client = SandboxClient(self.root)

    # -- paths, keys and the daemon -----------------------------------------------------------

    def instance_root(self, instance_id: str) -> Path:
        return self.root / "instances" / instance_id

    def _record_path(self, instance_id: str) -> Path:
        return self.root / "platform" / f"{instance_id}.json"

    def client_key(self) -> tuple[Path, str]:
        from gputui.remote.keys import ensure_keypair

        try:
            return ensure_keypair(self.root / "client_key", comment="gputui-sandbox-client")
        except OSError as exc:
            raise ProviderError(Deferred(N_("sandbox: cannot use its key in {path}: {reason}"),
                                         path=self.root, reason=os_reason(exc))) from None

    def read_record(self, instance_id: str) -> PlatformRecord:
        """The platform's books for one instance, as it last wrote them."""
        import json

        path = self._record_path(instance_id)
        try:
            return PlatformRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise UnknownInstance(Deferred(N_("sandbox: no instance {id} on the platform"),
                                           id=instance_id)) from None
        except (OSError, ValueError, TypeError) as exc:
            raise ProviderError(Deferred(N_("sandbox: {path} is unreadable: {reason}"),
                                         path=path, reason=str(exc))) from None

    async def _call(self, op: str, **args: Any) -> Any:
        if op != "status":
            self.client_key()  # the daemon authorises this key: it exists before the daemon
        try:
            return await self.client.call(op, **args)
        except DaemonUnknown as exc:
            raise UnknownInstance(str(exc)) from None
        except (DaemonRefused, DaemonDown) as exc:
            raise ProviderError(str(exc)) from None

    async def _record(self, op: str, instance_id: str) -> PlatformRecord:
        answer = await self._call(op, id=instance_id)
        self._trust(answer)
        return PlatformRecord.from_json(answer)

    def _trust(self, answer: dict[str, Any]) -> None:
        """The platform vouches for its own instance's host key, as a cloud console shows it."""
        line, port = answer.get("host_key"), int(answer.get("port") or 0)
        if not line or not port:
            return
        import asyncssh

        key = asyncssh.import_public_key(line)
        known = self.ctx.host_keys
        if not any(k.public_data == key.public_data for k in known.host_keys(LOCAL_HOST, port)):
            known.forget(LOCAL_HOST, port)
            known.add(LOCAL_HOST, port, key)

    # -- offers ----------------------------------------------------------------------------------

    async def offers(self) -> list[Offer]:
        return sandbox_offers()

    def _offer(self, offer_id: str) -> Offer:
        for offer in sandbox_offers():
            if offer.offer_id == offer_id:
                return offer
        raise ProviderError(Deferred(N_("sandbox: no offer {offer}"), offer=repr(offer_id)))

    # -- lifecycle -----------------------------------------------------------------------------------

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        import json

        from gputui.catalog.specs import load_specs

        offer = self._offer(request.offer_id)
        spec = load_specs()[offer.offer_id.removeprefix("sandbox-")]
        rule = offer.billing.model_copy(
            update={"price_per_hour": offer.price_per_gpu_hour * request.gpu_count}
        )
        answer = await self._call("create", spec={
            "id": instance.id, "gpu": offer.gpu, "gpu_count": request.gpu_count,
            "gpu_smi_name": _gpu_smi_name(spec),
            "memory_total_mib": spec.nvidia_smi_total_mib or int(spec.vram_gb * 1024),
            "power_limit_w": spec.tdp_w, "tdp_w": spec.tdp_w,
            "rule": json.loads(rule.model_dump_json()), "disk_gb": request.disk_gb,
            "boot_seconds": self.boot_seconds,
        })
        self._trust(answer)
        rec = PlatformRecord.from_json(answer)
        return instance.model_copy(update={
            "provider_id": instance.id,
            "billing": rule,
            "status": InstanceStatus.BOOTING,
            "created_at": datetime.fromisoformat(rec.created_at),
            "ssh": self._endpoint(rec.port),
        })

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

    async def prepare(self, instance: Instance) -> Instance:
        """Make the instance reachable: the daemon serves it (it is started if it is not)."""
        if not instance.status.live:
            return instance
        rec = await self._record("serve", instance.id)
        if rec.terminated_at or not rec.port:
            return instance
        if instance.ssh is None or instance.ssh.port != rec.port:
            instance = instance.model_copy(update={"ssh": self._endpoint(rec.port)})
        return instance

    async def refresh(self, instance: Instance) -> Instance:
        """The platform's view (a past power-off or termination is in effect): the instance's
        record is brought in line with the platform's running periods, the truth for billing."""
        rec = await self._record("view", instance.id)
        if rec.terminated_at and rec.port:
            self.ctx.host_keys.forget(LOCAL_HOST, rec.port)
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
                    inst.status_detail = Deferred(
                        N_("terminated by the platform's scheduled release"))
        elif open_period is not None and inst.status in (
                InstanceStatus.REQUESTED, InstanceStatus.BOOTING, InstanceStatus.STOPPED):
            inst.status = InstanceStatus.RUNNING
            inst.status_detail = None
            inst.stopped_at = None
        elif open_period is None and rec.periods:
            off_at = datetime.fromisoformat(str(rec.periods[-1][1]))
            if inst.status != InstanceStatus.RELEASING:
                inst.status = InstanceStatus.STOPPED
            inst.stopped_at = off_at
            inst.status_detail = Deferred(
                N_("stopped at {time}") if rec.stopped_by == "user" else N_("powered off at {time}"),
                time=f"{off_at.astimezone():%H:%M:%S}")
        return inst

    async def release(self, instance: Instance) -> None:
        """Terminate: processes killed, the disk wiped, billing ends now. Idempotent."""
        rec = await self._record("release", instance.id)
        if rec.port:
            self.ctx.host_keys.forget(LOCAL_HOST, rec.port)

    async def stop(self, instance: Instance) -> Instance:
        """Power off keeping the disk: compute billing ends, storage goes on."""
        return self._apply_record(instance, await self._record("stop", instance.id))

    async def start(self, instance: Instance, release_at: datetime | None = None) -> Instance:
        """Power a stopped instance on again: billed from now, served on its port (its timers
        are the lease's to re-arm: `release_at` is not needed here)."""
        inst = self._apply_record(instance, await self._record("start", instance.id))
        return await self.prepare(inst)

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        """Layer 2: the platform terminates at `at` — its daemon fires it, watched or not."""
        answer = await self._call("schedule", id=instance.id,
                                  at=None if at is None else as_utc(at).isoformat())
        return bool(answer.get("scheduled"))

    def scheduled_release(self, instance_id: str) -> datetime | None:
        path = self.root / "platform" / f"{instance_id}.release_at"
        try:
            return datetime.fromisoformat(path.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    async def link_target(self, instance: Instance) -> tuple[SSHEndpoint | None, dict[str, Any]]:
        return instance.ssh, {"agent_path": None}  # the sandbox takes its own key only


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

