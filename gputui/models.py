"""The vocabulary every layer shares: offers, instances, leases, ledger entries, samples.

Money is `Decimal`, never float. Times are timezone-aware UTC datetimes inside the program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gputui.i18n import N_, _

CENT = Decimal("0.01")
SECONDS_PER_MONTH = 730 * 3600  # the usual cloud convention for "per GB-month"


def utcnow() -> datetime:
    return datetime.now(UTC)


def _shown(text: str | None) -> str | None:
    """A label or detail as it may be shown: labels refuse control characters on the way in,
    and a row stored before that (or edited by hand) is cleaned when read."""
    if text is None or text.isprintable():
        return text
    from gputui.sanitize import sanitize

    return sanitize(text, 1000)


def as_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def money(value: Decimal) -> Decimal:
    """Round to the cent, half up, as invoices do."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


class _Model(BaseModel):
    # defer_build: a model is compiled on first use, so commands pay only for what they touch
    model_config = ConfigDict(extra="ignore", validate_assignment=False, defer_build=True)


class Granularity(StrEnum):
    SECOND = "second"
    MINUTE = "minute"
    HOUR = "hour"  # per started hour

    @property
    def seconds(self) -> int:
        return {"second": 1, "minute": 60, "hour": 3600}[self.value]


PackageKind = Literal["hourly", "daily", "weekly", "monthly", "spot"]
# Packages are bought whole: a daily package bills started days (its price_per_hour is the
# package price spread over its hours).
PACKAGE_SECONDS = {"daily": 86400, "weekly": 7 * 86400, "monthly": 30 * 86400}


class BillingRule(_Model):
    """How an offer turns running time into money."""

    price_per_hour: Decimal = Field(ge=0, description=N_("per instance (all its GPUs), per hour"))
    currency: str = "USD"
    granularity: Granularity = Granularity.SECOND
    minimum_seconds: int = Field(default=0, ge=0, description=N_("minimum billed running time"))
    storage_per_gb_month: Decimal = Field(default=Decimal("0"), ge=0)
    package: PackageKind = "hourly"

    def billed_seconds(self, seconds: float) -> int:
        """Running seconds rounded up to the granularity, with the minimum applied."""
        if seconds <= 0:
            return 0
        step = max(self.granularity.seconds, PACKAGE_SECONDS.get(self.package, 0))
        # A tiny epsilon keeps float noise (3600.0000001) from costing a whole extra hour.
        units = math.ceil(round(seconds, 6) / step)
        return max(units * step, self.minimum_seconds)

    def compute_cost(self, seconds: float) -> Decimal:
        """Unrounded compute charge for `seconds` of running time."""
        billed = self.billed_seconds(seconds)
        return self.price_per_hour * Decimal(billed) / Decimal(3600)

    def storage_cost(self, disk_gb: float, seconds: float) -> Decimal:
        if seconds <= 0 or disk_gb <= 0:
            return Decimal("0")
        return (
            self.storage_per_gb_month
            * Decimal(str(disk_gb))
            * Decimal(str(round(seconds, 3)))
            / Decimal(SECONDS_PER_MONTH)
        )


class Offer(_Model):
    """Something rentable now at one provider."""

    provider: str
    offer_id: str
    gpu: str  # catalog display name, e.g. "GeForce RTX 4090"
    gpu_count: int = Field(default=1, ge=1)
    vram_gb: float | None = None
    price_per_gpu_hour: Decimal = Field(ge=0)
    billing: BillingRule
    region: str | None = None
    available: bool = True
    tier: str | None = None  # on-demand, spot, community, secure...
    images: list[str] = Field(default_factory=list)
    source: str | None = None  # where the figure comes from
    as_of: str | None = None  # date of the figure (reference prices are not live quotes)
    # False: no price is known before renting (AutoDL: the instance's snapshot has it); the
    # price above is then 0 and must never be shown as a price ("price on creation")
    price_known: bool = True


class InstanceStatus(StrEnum):
    REQUESTED = "requested"
    BOOTING = "booting"
    RUNNING = "running"
    STOPPED = "stopped"  # powered off but still exists (storage may bill)
    RELEASING = "releasing"
    RELEASED = "released"
    FAILED = "failed"

    @property
    def live(self) -> bool:
        """Still exists at the provider (and so may still bill)."""
        return self not in (InstanceStatus.RELEASED, InstanceStatus.FAILED)

    @property
    def billing_compute(self) -> bool:
        return self in (InstanceStatus.BOOTING, InstanceStatus.RUNNING, InstanceStatus.RELEASING)


class LinkState(StrEnum):
    UNKNOWN = "unknown"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    FAILED = "failed"


EndReason = Literal["timer", "idle", "budget", "manual", "external", "failed", "done"]
# "done": released by a jobs queue's when-done policy, after its results were pulled


class DiskUsage(_Model):
    """An instance's disks as its provider last reported them (AutoDL: the snapshot's
    `usage_info`), in bytes; a disk the provider does not report is None."""

    system_used: int | None = None
    system_total: int | None = None
    data_used: int | None = None
    data_total: int | None = None
    at: datetime = Field(default_factory=utcnow)

    @staticmethod
    def share(used: int | None, total: int | None) -> float | None:
        """Used, in percent of the total (None when either is unknown or the total is 0)."""
        if used is None or not total:
            return None
        return 100.0 * used / total


class SSHEndpoint(_Model):
    host: str
    port: int = Field(default=22, ge=1, le=65535)
    user: str = "root"
    key_path: str | None = None  # private key file; None means agent / default keys
    password_file: str | None = None  # a 0600 file, only if the user asked to keep one


class Instance(_Model):
    id: str  # our own id, stable across providers
    name: str  # the task label the user chose
    provider: str
    provider_id: str | None = None  # the provider's id for it
    offer_id: str | None = None
    gpu: str
    gpu_count: int = Field(default=1, ge=1)
    billing: BillingRule
    disk_gb: float = 0
    image: str | None = None
    region: str | None = None
    status: InstanceStatus = InstanceStatus.REQUESTED
    status_detail: str | None = None
    ssh: SSHEndpoint | None = None
    created_at: datetime = Field(default_factory=utcnow)
    running_since: datetime | None = None  # start of the current running period, if running
    billed_running_seconds: float = 0  # running seconds of earlier, finished periods
    stopped_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: EndReason | None = None
    disks: DiskUsage | None = None  # the disks' use, where the provider reports it (AutoDL)
    # The latest the provider ends it by itself, as last seen (Slurm: start + time limit): an
    # end never seen (a job Slurm purged, no accounting) is billed to here at the most.
    ends_by: datetime | None = None

    @field_validator("name", "status_detail")
    @classmethod
    def _clean_text(cls, v: str | None) -> str | None:
        return _shown(v)

    @field_validator("created_at", "running_since", "stopped_at", "ended_at", "ends_by")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else as_utc(v)

    def running_seconds(self, now: datetime | None = None) -> float:
        """Seconds of compute billing: earlier periods plus the current one, if running."""
        total = self.billed_running_seconds
        if self.running_since is not None:
            end = self.ended_at or as_utc(now or utcnow())
            total += max(0.0, (end - self.running_since).total_seconds())
        return total

    def mark_running(self, at: datetime) -> None:
        if self.running_since is None:
            self.running_since = as_utc(at)
        self.status = InstanceStatus.RUNNING
        self.stopped_at = None

    def mark_stopped(self, at: datetime) -> None:
        """Powered off: compute billing ends at `at`; storage goes on until release."""
        at = as_utc(at)
        if self.running_since is not None:
            self.billed_running_seconds += max(0.0, (at - self.running_since).total_seconds())
            self.running_since = None
        self.status = InstanceStatus.STOPPED
        self.stopped_at = at

    def mark_ended(self, at: datetime, reason: EndReason) -> None:
        at = as_utc(at)
        if self.running_since is not None:
            self.billed_running_seconds += max(0.0, (at - self.running_since).total_seconds())
            self.running_since = None
        self.status = InstanceStatus.RELEASED if reason != "failed" else InstanceStatus.FAILED
        self.ended_at = at
        self.end_reason = reason

    def existing_seconds(self, now: datetime | None = None) -> float:
        now = as_utc(now or utcnow())
        end = self.ended_at or now
        return max(0.0, (end - self.created_at).total_seconds())

    def compute_cost(self, now: datetime | None = None) -> Decimal:
        return self.billing.compute_cost(self.running_seconds(now))

    def storage_cost(self, now: datetime | None = None) -> Decimal:
        return self.billing.storage_cost(self.disk_gb, self.existing_seconds(now))

    def accrued(self, now: datetime | None = None) -> Decimal:
        return money(self.compute_cost(now) + self.storage_cost(now))


class LeaseState(StrEnum):
    ACTIVE = "active"
    FIRED = "fired"  # the release went through
    CANCELLED = "cancelled"  # the instance ended some other way


class Lease(_Model):
    """The promise to release an instance: a deadline, and optionally an idle rule."""

    instance_id: str
    release_at: datetime | None = None  # None: no timer (the user confirmed it)
    no_timer_confirmed: bool = False
    idle_util_pct: float | None = None  # idle release: all GPUs below this...
    idle_minutes: float | None = None  # ...for this long
    armed_for: datetime | None = None  # the release_at layers 1 and 2 were last armed for
    on_instance_armed: bool = False  # layer 1: shutdown scheduled on the instance
    provider_armed: bool = False  # layer 2: provider-side scheduled termination
    # layer 1 as last set on the instance: when that was (this machine's clock), and when the
    # power-off it scheduled fires (None: it only cancelled one). A later shutdown scheduled on
    # the instance itself (a queue's end) replaces it; `gputui jobs NAME` shows the later one.
    host_timer_set_at: datetime | None = None
    host_poweroff_at: datetime | None = None
    warned: list[int] = Field(default_factory=list)  # minutes-before warnings already given
    # while stopped, power it on and off shortly before the provider wipes it (AutoDL: 15 days
    # shut down); None: as `[providers.autodl] keep_stopped` says
    keep_stopped: bool | None = None
    state: LeaseState = LeaseState.ACTIVE
    updated_at: datetime = Field(default_factory=utcnow)

    @field_validator("release_at", "updated_at", "armed_for", "host_timer_set_at",
                     "host_poweroff_at")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else as_utc(v)

    def remaining(self, now: datetime | None = None) -> float | None:
        if self.release_at is None:
            return None
        return (self.release_at - as_utc(now or utcnow())).total_seconds()


class LedgerEntry(_Model):
    instance_id: str
    name: str
    provider: str
    gpu: str
    gpu_count: int
    started_at: datetime
    ended_at: datetime
    running_seconds: float
    compute_cost: Decimal
    storage_cost: Decimal
    currency: str = "USD"
    end_reason: EndReason
    # which gputui process released it ("daemon", "reap", "console", "run", "mcp"); None where
    # none did: the platform ended it, or the record predates this field
    ended_by: str | None = None

    @field_validator("name")
    @classmethod
    def _clean_text(cls, v: str) -> str:
        return _shown(v) or ""

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return as_utc(v)

    @property
    def total(self) -> Decimal:
        return self.compute_cost + self.storage_cost

    @classmethod
    def from_instance(cls, inst: Instance, reason: EndReason, ended_at: datetime) -> LedgerEntry:
        return cls(
            instance_id=inst.id,
            name=inst.name,
            provider=inst.provider,
            gpu=inst.gpu,
            gpu_count=inst.gpu_count,
            started_at=inst.created_at,
            ended_at=ended_at,
            running_seconds=inst.running_seconds(ended_at),
            compute_cost=money(inst.compute_cost(ended_at)),
            storage_cost=money(inst.storage_cost(ended_at)),
            currency=inst.billing.currency,
            end_reason=reason,
        )


# What a GPU can physically report; anything outside is a broken or hostile reading.
SAMPLE_RANGES: dict[str, tuple[float, float]] = {
    "utilization_gpu": (0, 100),
    "utilization_memory": (0, 100),
    "memory_used_mib": (0, 16 * 1024 * 1024),  # 16 TiB
    "memory_total_mib": (0, 16 * 1024 * 1024),
    "temperature_c": (-40, 150),
    "power_draw_w": (0, 10_000),
    "power_limit_w": (0, 10_000),
    "fan_pct": (0, 100),
    "sm_clock_mhz": (0, 20_000),
}
_RANGE_ITEMS = tuple(SAMPLE_RANGES.items())


class GpuSample(_Model):
    """One reading of one GPU. Every source (nvidia-smi CSV/XML, NVML) produces this.

    A field the GPU does not report ([N/A], [Not Supported], missing) is None.
    """

    index: int
    uuid: str | None = None
    name: str | None = None
    timestamp: datetime | None = None
    utilization_gpu: float | None = None  # %
    utilization_memory: float | None = None  # %
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: float | None = None
    sm_clock_mhz: float | None = None
    pstate: str | None = None
    mig_mode: str | None = None
    # Figures no GPU can report (1e308 °C, -50 %, -1e300 MiB, NaN): the field is None (N/A on
    # every screen, never a reading the idle check or a chart believes) and the raw value is
    # kept here for `--json`.
    out_of_range: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _in_range(self) -> GpuSample:
        fields = self.__dict__
        for name, (low, high) in _RANGE_ITEMS:
            value = fields[name]
            if value is not None and not (low <= value <= high):  # NaN fails too
                self.out_of_range[name] = value
                fields[name] = None
        return self

    def raw(self, name: str) -> float | str | None:
        """The value as the source reported it (out of range or not)."""
        return self.out_of_range.get(name, getattr(self, name))

    @property
    def memory_free_mib(self) -> float | None:
        if self.memory_used_mib is None or self.memory_total_mib is None:
            return None
        return max(0.0, self.memory_total_mib - self.memory_used_mib)


class ProcessSample(_Model):
    """A compute process on a GPU."""

    pid: int
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    name: str | None = None  # process name / command
    used_memory_mib: float | None = None
    user: str | None = None
    kind: str | None = None  # C, G, C+G where known


class MigDevice(_Model):
    gpu_index: int
    gi_id: int | None = None
    ci_id: int | None = None
    mig_index: int | None = None
    profile: str | None = None  # e.g. 3g.40gb
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    uuid: str | None = None


class GpuInventory(_Model):
    """What `nvidia-smi -q -x` (or NVML) says once per connection."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: float | None = None
    power_limit_w: float | None = None
    ecc_mode: str | None = None
    mig_mode: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    vbios: str | None = None
    mig_devices: list[MigDevice] = Field(default_factory=list)


class HostInventory(_Model):
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[GpuInventory] = Field(default_factory=list)
    processes: list[ProcessSample] = Field(default_factory=list)


# --- host vitals (CPU, memory, disks, network) beside the GPUs -------------------------------------


class DiskUse(_Model):
    """One mounted disk as `df -kP` reports it (KiB)."""

    mount: str
    filesystem: str | None = None
    size_kib: int = 0
    used_kib: int = 0
    avail_kib: int = 0

    @property
    def used_pct(self) -> float | None:
        """Used as `df` counts it: used / (used + available), so reserved blocks count as
        full (the point where writes fail)."""
        room = self.used_kib + self.avail_kib
        return self.used_kib / room * 100 if room > 0 else None


class HostSample(_Model):
    """One reading of an instance's host (or container): what the GPUs wait on.

    Rates are over the last interval; a figure the host does not offer is None."""

    cpu_pct: float | None = None  # busy share of the cores this instance may use, 0-100
    cpu_cores: float | None = None  # cores it may use (cgroup quota, cpuset, or online CPUs)
    cpu_limited: bool = False  # `cpu_cores` comes from a cgroup limit, not the whole machine
    iowait_pct: float | None = None  # share of the machine's CPU time waiting on I/O
    load1: float | None = None
    load5: float | None = None
    load15: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    mem_limited: bool = False  # `mem_total_mib` is the container's (cgroup) limit
    disk_read_bps: float | None = None
    disk_write_bps: float | None = None
    net_rx_bps: float | None = None
    net_tx_bps: float | None = None
    disks: list[DiskUse] = Field(default_factory=list)

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_mib is None or not self.mem_total_mib:
            return None
        return self.mem_used_mib / self.mem_total_mib * 100

    def fullest_disk(self) -> DiskUse | None:
        scored = [d for d in self.disks if d.used_pct is not None]
        return max(scored, key=lambda d: d.used_pct or 0.0) if scored else None


# --- what the monitor's hints say ----------------------------------------------------------------

_HINT_SHORT = {
    "imbalance": N_("split?"),
    "idle-memory": N_("idle mem"),
    "low-util": N_("{share} util"),  # the share outside: "%" in a message reads as a format
    "memory-full": N_("mem full"),
    "thermal": N_("hot"),
    "power-cap": N_("power cap"),
    "input-bound": N_("CPU/IO bound"),
    "disk-full": N_("disk full"),
}


@dataclass(frozen=True)
class Hint:
    """Where the seed guides say to look. `code` is stable (tests, UI marks)."""

    code: str  # imbalance | idle-memory | low-util | memory-full | thermal | power-cap |
    #            input-bound | disk-full (host vitals)
    text: str
    gpu_index: int | None = None
    severity: str = "warning"

    @property
    def short(self) -> str:
        """The hint in a few words, in the interface's language."""
        if self.code not in _HINT_SHORT:
            return self.code
        return _(_HINT_SHORT[self.code]).format(share="<50%")
