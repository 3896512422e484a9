"""An allocation Slurm has already forgotten: it ended (its time limit) while no gputui ran, and
was purged from Slurm's lists (MinJobAge) before gputui looked again, on a cluster with no
accounting (sacct knows nothing). Against a real one-node Slurm whose MinJobAge is 2 s; skipped,
saying why, where Slurm, munge, sshd or root is missing (CI installs them)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from tests.drill.sshd_host import needs_sshd
from tests.slurm_cluster import (
    cluster_fixture,
    job_purged,
    needs_slurm,
    refreshed_later,
    rent_seen_running,
    services_fixture,
    unique_cluster,
    until,
)

pytestmark = [needs_slurm, needs_sshd]

PRICE = Decimal("3.00")
CLUSTER = unique_cluster("purging")

cluster = cluster_fixture("slurm-purging", runners_of=(CLUSTER,), min_job_age=2)
slurm = services_fixture({CLUSTER: str(PRICE)})


async def test_a_purged_allocation_is_billed_to_its_time_limit_not_to_now(slurm,
                                                                         gputui_home: Path):
    """Billed to the time limit last seen — the latest Slurm lets it run — and said so; not to
    the moment gputui happened to look again (a laptop opened the next morning would have been
    billed the whole night)."""
    svc, made = slurm
    seen, job = await rent_seen_running(svc, CLUSTER, 1, 50, "gone")  # with its limit
    assert seen.ends_by is not None and seen.running_since is not None
    assert 55 <= (seen.ends_by - seen.running_since).total_seconds() <= 65  # --time=1
    await svc.close()  # no gputui process from here on
    await until(lambda: job_purged(made, job), 240, "Slurm to end the job and forget it")
    assert (utcnow() - seen.ends_by).total_seconds() > 20  # it is looked at well after

    fresh, entry = await refreshed_later(gputui_home, svc.config, seen.id)
    assert fresh.status == InstanceStatus.RELEASED and fresh.ended_at == seen.ends_by
    assert "billed to its time limit" in fresh.status_detail
    assert 55 <= fresh.running_seconds() <= 65  # the minute it was allowed, not until now
    assert entry.currency == "CNY"
    assert abs(entry.compute_cost - PRICE * Decimal(fresh.running_seconds()) / 3600) <= Decimal(
        "0.01")


async def test_a_purged_allocation_never_seen_running_bills_nothing_and_says_so(slurm):
    """Last seen queued (two nodes asked of a one-node cluster), then ended outside gputui and
    purged: whether it ever ran cannot be known here — nothing is billed, and the line says so
    and where to look (not "billed until now")."""
    svc, made = slurm
    offer = await svc.find_offer("slurm", "h100", region=CLUSTER)
    inst = await svc.create("slurm", offer, CreateRequest(
        offer_id=offer.offer_id, gpu_count=2, nodes=2, name="queued"),
        lease=Lease(instance_id="pending", release_at=utcnow() + timedelta(hours=1)))
    assert inst.status == InstanceStatus.BOOTING and inst.running_since is None
    job = inst.provider_id.partition(":")[2]
    made.run("scancel", job)  # the cluster's admin, or the renter on the login node
    await until(lambda: job_purged(made, job), 180, "Slurm to forget the job")
    fresh = await svc.refresh(svc.store.get_instance_sync(inst.id))
    assert fresh.status == InstanceStatus.RELEASED and fresh.compute_cost() == 0
    assert "never seen running, so nothing is billed here" in fresh.status_detail
    entry = next(e for e in svc.store.ledger_sync() if e.instance_id == inst.id)
    assert entry.compute_cost == 0 and entry.currency == "CNY"
