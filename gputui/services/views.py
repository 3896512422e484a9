"""Plain views of the store for commands and screens (no Textual, no I/O)."""

from __future__ import annotations

from datetime import datetime

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
    }


