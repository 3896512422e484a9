"""A 2-node Slurm allocation: the Monitor and `smi` read each node's GPUs through their own
stream (a step on that node), and a run on every GPU is one task a node. Against a real
two-node Slurm cluster on this machine (the second node's slurmd in its own network namespace,
as a second machine). Skipped, saying why, where that cannot be made (no root, no Slurm, no
network namespaces)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.jobs import JobService, JobSpec
from gputui.services.smi import snapshot_instance
from gputui.services.telemetry import TelemetryService
from tests.drill.sshd_host import needs_sshd
from tests.slurm_cluster import (
    SlurmCluster,
    cluster_fixture,
    services_fixture,
    two_nodes_reason,
    unique_cluster,
    until,
)

pytestmark = [pytest.mark.skipif(two_nodes_reason() is not None,
                                 reason=two_nodes_reason() or ""), needs_sshd]

# unique to this run: its runners' folders, ~/.gputui/slurm/CLUSTER, are removed afterwards
CLUSTER = unique_cluster("twonode")

cluster = cluster_fixture("slurm2", nodes=2, runners_of=(CLUSTER,))
slurm = services_fixture({CLUSTER: "1.50"}, currency="USD")


def _steps(made: SlurmCluster) -> list[str]:
    """`squeue --steps`: `STEPID NODELIST` of the steps besides the allocation's batch step."""
    out = made.run("squeue", "--steps", "-h", "-o", "%i %N").stdout.split("\n")
    return sorted(line.strip() for line in out if line.strip() and ".batch" not in line)


async def test_two_nodes_one_stream_a_node_and_runs_on_both(slurm):
    svc, made = slurm
    offer = await svc.find_offer("slurm", "h100", region=CLUSTER)
    assert "partition debug: 4 free now, up to 2 a node" == offer.tier
    inst = await svc.create("slurm", offer, CreateRequest(
        offer_id=offer.offer_id, gpu_count=4, nodes=2, name="pair"),
        lease=Lease(instance_id="pending", release_at=utcnow() + timedelta(hours=1)))
    assert inst.status == InstanceStatus.RUNNING and inst.billing.price_per_hour == Decimal("6.00")
    job = inst.provider_id.partition(":")[2]
    assert made.run("squeue", "-h", "-j", job, "-o", "%D %N").stdout.strip() == "2 n[1-2]"

    # the Monitor: one nvidia-smi stream a node, each a step on its node; GPUs 0-3
    telemetry = TelemetryService(svc, svc.store, interval=0.5)
    telemetry.start(inst)
    try:
        await until(lambda: sorted(s.index for s in svc.store.telemetry(inst.id).latest())
                    == [0, 1, 2, 3], 60, "samples of the four GPUs")
        steps = _steps(made)  # the two streams (and the host vitals', on the first node)
        assert {s.split()[1] for s in steps} == {"n1", "n2"}, steps
        assert [s.split()[1] for s in steps].count("n2") == 1, steps
        assert all(s.split()[0].startswith(f"{job}.") for s in steps)
    finally:
        await telemetry.close()

    # smi: one reading a node, the GPUs numbered on from the first node's
    snap = await snapshot_instance(svc, inst)
    assert [s.index for s in snap.samples] == [0, 1, 2, 3]
    assert any("2 nodes (n1, n2)" in str(note) for note in snap.notes)

    # a run on every GPU: one task a node, each with its node's two GPUs
    jobs = JobService(svc)
    await jobs.add(inst, [JobSpec("echo $SLURMD_NODENAME $SLURM_STEP_GPUS", name="both")])
    view = await jobs.wait(inst, every=0.5)
    assert (view.jobs[0].status, view.jobs[0].exit_code) == ("succeeded", 0)
    assert sorted(await jobs.log_tail(inst, "1")) == ["n1 0,1", "n2 0,1"]
