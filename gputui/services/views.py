"""Plain views of the store for commands and screens (no Textual, no I/O)."""

from __future__ import annotations

from datetime import datetime

from gputui.i18n import N_, Deferred
from gputui.models import Instance, Lease, utcnow


def instance_view(inst: Instance, lease: Lease | None, now: datetime | None = None) -> dict:
    """What `gputui instances --json` prints for one instance."""
    now = now or utcnow()
    release_at = lease.release_at if lease and lease.state == "active" else None
    ssh = inst.ssh
    return {
        "id": inst.id,
        "name": inst.name,
        "provider": inst.provider,
        "gpu": inst.gpu,
        "gpu_count": inst.gpu_count,
        "status": inst.status.value,
        "release_at": release_at.isoformat() if release_at else None,
        "no_timer": bool(lease and lease.release_at is None and inst.status.live),
        "cost": float(inst.accrued(now)),
        "currency": inst.billing.currency,
        "price_per_hour": float(inst.billing.price_per_hour),
        "created_at": inst.created_at.isoformat(),
        "ended_at": inst.ended_at.isoformat() if inst.ended_at else None,
        "end_reason": inst.end_reason,
        "ssh": f"{ssh.user}@{ssh.host}:{ssh.port}" if ssh else None,
        "state_detail": state_detail(inst, now),
        "stopped_at": inst.stopped_at.isoformat() if inst.stopped_at else None,
        "wipe_at": _wipe_at(inst),
        "disks": disks_view(inst),
    }


DISK_WARN_PCT = 90.0  # a disk this full is the guides' named cause of failed runs


def _wipe_at(inst: Instance) -> str | None:
    """When the provider releases and wipes the stopped instance (AutoDL: 15 days shut down)."""
    from datetime import timedelta

    from gputui.models import InstanceStatus

    days = WIPE_AFTER_STOPPED_DAYS.get(inst.provider)
    if days is None or inst.status != InstanceStatus.STOPPED or inst.stopped_at is None:
        return None
    return (inst.stopped_at + timedelta(days=days)).isoformat()


def disks_view(inst: Instance) -> dict | None:
    """The disks' use as the provider last reported it (AutoDL: system and data disk), each
    with its share used and a warning at 90 %; None where the provider reports none."""
    from gputui.models import DiskUsage

    d = inst.disks
    if d is None:
        return None
    out: dict = {"at": d.at.isoformat(), "warnings": []}
    for key, used, total in (("system", d.system_used, d.system_total),
                             ("data", d.data_used, d.data_total)):
        pct = DiskUsage.share(used, total)
        out[key] = {"used_bytes": used, "total_bytes": total,
                    "percent": None if pct is None else round(pct, 1)}
        if pct is not None and pct >= DISK_WARN_PCT:
            out["warnings"].append(disk_warning(key, pct))
    return out


def disk_warning(which: str, pct: float) -> Deferred:
    """"the data disk is 93 % full": English as JSON keeps it; `shown()` translates it."""
    disk = Deferred(N_("the system disk")) if which == "system" else Deferred(N_("the data disk"))
    return Deferred(N_("{disk} is at {pct} % — runs fail when it fills"), disk=disk,
                    pct=f"{pct:.0f}")




# Providers that wipe an instance left shut down: days until released and wiped.
WIPE_AFTER_STOPPED_DAYS = {"autodl": 15}


def deletion_note(stopped_at: datetime | None, days: int, now: datetime | None = None
                  ) -> tuple[Deferred, bool]:
    """("stopped 3 d · wiped in 12 d", warn), English as JSON keeps it and shown in the
    interface's language with `shown()`: warn from a day before the wipe."""
    if stopped_at is None:
        return Deferred(N_("stopped")), False
    now = now or utcnow()
    gone = max(0.0, (now - stopped_at).total_seconds())
    left = days * 86400 - gone

    def span(s: float) -> Deferred:
        if s >= 86400:
            return Deferred(N_("{n} d"), n=int(s // 86400))
        if s >= 3600:
            return Deferred(N_("{n} h"), n=int(s // 3600))
        return Deferred(N_("{n} min"), n=max(0, int(s // 60)))

    if left <= 0:
        return Deferred(N_("stopped {gone} · wiped by now"), gone=span(gone)), True
    return (Deferred(N_("stopped {gone} · wiped in {left}"), gone=span(gone), left=span(left)),
            left <= 86400)


def deletion_clock(stopped_at: datetime | None, days: int, now: datetime | None = None
                   ) -> tuple[str, bool]:
    """("stopped 3 d · wiped in 12 d", warn) in the interface's language: warn from a day
    before the wipe."""
    note, warn = deletion_note(stopped_at, days, now)
    return note.translated(), warn


def wipe_clock(stopped_at: datetime | None, days: int, now: datetime | None = None
               ) -> tuple[str, bool]:
    """Home's short status of a stopped instance the provider wipes: ("off · wiped in 14 d",
    warn) in the interface's language; warn from a day before the wipe."""
    if stopped_at is None:
        return Deferred(N_("stopped")).translated(), False
    left = days * 86400 - max(0.0, ((now or utcnow()) - stopped_at).total_seconds())
    if left <= 0:
        return Deferred(N_("off · wiped by now")).translated(), True
    if left >= 86400:
        span = Deferred(N_("{n} d"), n=int(left // 86400))
    elif left >= 3600:
        span = Deferred(N_("{n} h"), n=int(left // 3600))
    else:
        span = Deferred(N_("{n} min"), n=max(0, int(left // 60)))
    return Deferred(N_("off · wiped in {left}"), left=span).translated(), left <= 86400


def state_detail(inst: Instance, now: datetime | None = None) -> str | None:
    """What a user should know beside the status: the deletion clock of a stopped instance, what
    it still costs, or the provider's words. English (JSON prints it); show it with
    `gputui.format.stored_text`."""
    from gputui.format import format_money
    from gputui.models import InstanceStatus

    if inst.status == InstanceStatus.STOPPED:
        parts: list[Deferred] = []
        days = WIPE_AFTER_STOPPED_DAYS.get(inst.provider)
        if days is not None:
            text, warn = deletion_note(inst.stopped_at, days, now)
            parts.append(Deferred("⚠ {note}", note=text) if warn else text)
        else:
            parts.append(Deferred(N_("stopped")))
        disk = inst.billing.storage_cost(inst.disk_gb, 3600)
        parts.append(Deferred(N_("still costs {price}/h (disk)"),
                              price=format_money(disk, inst.billing.currency)))
        return Deferred("{state} · {cost}", state=parts[0], cost=parts[1])
    return inst.status_detail


def runway_line(balance: object, currency: str, instances: list[Instance]) -> str:
    """The top bar's account figure: "¥312.40 · 38 h at ¥8.20/h" (what is billing now in that
    currency; "no instance billing" when nothing is). English (JSON prints it); show it with
    `shown()`."""
    from decimal import Decimal

    from gputui.format import format_money

    amount = Decimal(str(balance))
    rate = sum((i.billing.price_per_hour for i in instances
                if i.status.live and i.status.billing_compute
                and i.billing.currency == currency), Decimal(0))
    head = format_money(amount, currency)
    if rate <= 0:
        return Deferred(N_("{balance} · no instance billing"), balance=head)
    hours = max(Decimal(0), amount / rate)
    span = (Deferred(N_("{n} h"), n=int(hours)) if hours >= 1
            else Deferred(N_("{n} min"), n=int(hours * 60)))
    return Deferred(N_("{balance} · {span} at {rate}/h"), balance=head, span=span,
                    rate=format_money(rate, currency))
