"""The `slurm` provider against a real one-node Slurm cluster on 127.0.0.1 (two fake H100s),
reached through OpenSSH's sshd as its login node. Skipped, saying why, where Slurm, munge,
sshd or root is missing (CI installs them)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.store import SessionStore
from tests.conftest import FAST_LINKS
from tests.drill.sshd_host import needs_sshd
from tests.slurm_cluster import (
    SlurmCluster,
    cluster_fixture,
    needs_slurm,
    services_fixture,
    unique_cluster,
    until,
)

pytestmark = [needs_slurm, needs_sshd]

PRICE = Decimal("2.10")
CLUSTER = unique_cluster("local")

cluster = cluster_fixture("slurm", runners_of=(CLUSTER,))
slurm = services_fixture({CLUSTER: str(PRICE)})


def _job_line(made: SlurmCluster, job: str) -> str:
    return made.run("squeue", "--states=all", "-h", "-j", job, "-o", "%T|%l|%b|%j").stdout.strip()


async def _rent(svc: Services, count: int, after: timedelta, name: str):
    offer = await svc.find_offer("slurm", "h100", region=CLUSTER)
    request = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=name)
    lease = Lease(instance_id="pending", release_at=utcnow() + after)
    return await svc.create("slurm", offer, request, lease=lease)


async def test_offers_rent_watch_queue_extend_release(slurm):
    svc, made = slurm
    offers = await svc.offers("slurm")
    assert [(o.region, o.offer_id, o.available, o.price_per_gpu_hour, o.billing.currency)
            for o in offers] == [(CLUSTER, f"slurm:{CLUSTER}:debug:h100", True, PRICE, "CNY")]
    assert "H100" in offers[0].gpu and "partition debug: 2 free now, up to 2 a node" in (offers[0].tier or "")

    inst = await _rent(svc, 2, timedelta(hours=3), "big")
    cluster_name, _sep, job = inst.provider_id.partition(":")
    assert cluster_name == CLUSTER and job.isdigit()
    assert inst.status == InstanceStatus.RUNNING and inst.billing.price_per_hour == 2 * PRICE
    # Slurm holds it: its own time limit is the deadline, with the GPUs asked for
    assert _job_line(made, job) == f"RUNNING|3:00:00|gres:gpu:h100:2|gputui-{inst.id}"
    taken = (await svc.offers("slurm"))[0]  # both GPUs are allocated now
    assert not taken.available and taken.tier == "partition debug: 0 free now, up to 2 a node"

    # commands on the instance run inside the allocation, with its GPUs
    out = await svc.run(inst, "echo $SLURM_JOB_ID $CUDA_VISIBLE_DEVICES; "
                              "nvidia-smi --query-gpu=index,name --format=csv,noheader")
    lines = out.stdout.split("\n")
    assert lines[0] == f"{job} 0,1"
    assert lines[1:3] == ["0, NVIDIA H100 80GB HBM3", "1, NVIDIA H100 80GB HBM3"]
    # the Monitor's long-lived stream runs there too, as a step of the allocation
    link = await svc.link(inst)
    got: list[str] = []
    async with link.stream_lines("nvidia-smi --query-gpu=index,memory.total "
                                 "--format=csv,noheader,nounits -lms 200") as stream:
        async for line in stream:
            got.append(line)
            if len(got) >= 4:
                break
    assert [g.replace(" ", "") for g in got[:2]] == ["0,81559", "1,81559"]

    # a second allocation waits in Slurm's queue, saying why
    queued = await _rent(svc, 1, timedelta(hours=1), "waits")
    assert queued.status == InstanceStatus.BOOTING
    assert queued.status_detail.startswith("queued in Slurm: Resources")
    assert queued.accrued() == 0  # a queued allocation bills nothing

    # extend: Slurm's time limit moves (whole minutes from the start)
    provider = svc.provider("slurm")
    start = inst.running_since
    assert await provider.schedule_release(inst, start + timedelta(hours=4, seconds=10))
    assert _job_line(made, job).split("|")[1] == "4:01:00"

    # cancelling the queued one: scancel, seen ended, nothing billed
    entry = await svc.release(queued, "manual")
    assert entry is not None and entry.compute_cost == 0
    qjob = queued.provider_id.partition(":")[2]
    assert _job_line(made, qjob).startswith("CANCELLED|")

    await asyncio.sleep(1.5)
    entry = await svc.release(inst, "manual")
    assert entry is not None and entry.end_reason == "manual"
    assert _job_line(made, job).startswith("CANCELLED|")
    ended = svc.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED
    seconds = (ended.ended_at - start).total_seconds()
    assert seconds >= 1 and entry.running_seconds == pytest.approx(seconds)
    # GPUs × hours allocated × the configured price, in the cluster's currency
    assert entry.currency == "CNY"
    assert float(entry.compute_cost) == pytest.approx(
        float(2 * PRICE * Decimal(seconds) / 3600), abs=0.01)


async def test_a_gpu_count_that_does_not_split_is_refused_before_slurm_sees_it(slurm):
    svc, made = slurm
    offer = await svc.find_offer("slurm", "h100", region=CLUSTER)
    with pytest.raises(Exception, match="3 GPUs do not split evenly over 2 nodes"):
        await svc.create("slurm", offer, CreateRequest(offer_id=offer.offer_id, gpu_count=3,
                                                       nodes=2, name="odd"))
    assert made.jobs().strip() == "" and svc.store.instances_sync() == []


async def test_time_limit_passes_with_no_gputui_running(slurm, gputui_home: Path):
    svc, made = slurm
    inst = await _rent(svc, 2, timedelta(seconds=50), "short")  # --time=1: Slurm's minute
    job = inst.provider_id.partition(":")[2]
    assert _job_line(made, job).startswith("RUNNING|1:00|")
    await svc.close()  # no gputui process from here on

    # the scheduler ends it by itself (it checks limits about every 30 s)
    await until(lambda: _job_line(made, job).startswith("TIMEOUT|"), 150, "Slurm's TIMEOUT")

    later = Services(SessionStore(gputui_home / "state.db"), svc.config, state_dir=gputui_home,
                     link_options=dict(FAST_LINKS))
    try:
        fresh = await later.refresh(later.store.get_instance_sync(inst.id))
    finally:
        await later.close()
    assert fresh.status == InstanceStatus.RELEASED and fresh.end_reason == "timer"
    assert fresh.status_detail.startswith("ended by Slurm: its time limit passed (TIMEOUT")
    # billed from Slurm's start to Slurm's end: about the minute it was allowed
    assert 55 <= fresh.running_seconds() <= 130
    entry = next(e for e in later.store.ledger_sync() if e.instance_id == inst.id)
    assert entry.end_reason == "timer" and entry.currency == "CNY"
    assert float(entry.compute_cost) == pytest.approx(
        float(2 * PRICE * Decimal(fresh.running_seconds()) / 3600), abs=0.01)
