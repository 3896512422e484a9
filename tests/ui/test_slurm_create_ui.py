"""The New screen with a Slurm cluster: its Cluster and Nodes fields (shown for slurm only),
the GPU list of the chosen cluster, and the nodes going to Slurm — against a real one-node
Slurm cluster on 127.0.0.1 through its OpenSSH login node. Skipped, saying why, where Slurm,
munge, sshd or root is missing."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from textual.widgets import Select

from gputui.app import GpuTuiApp
from gputui.models import InstanceStatus
from gputui.ui.create import CreateScreen
from tests.drill.sshd_host import needs_sshd
from tests.slurm_cluster import (
    Login,
    cluster_config,
    cluster_fixture,
    needs_slurm,
    slurm_services,
    unique_cluster,
)

pytestmark = [needs_slurm, needs_sshd]

ALPHA, BETA = unique_cluster("alpha"), unique_cluster("beta")

cluster = cluster_fixture("slurmui", runners_of=(ALPHA, BETA))


def make_app(home: Path, login: Login) -> GpuTuiApp:
    config = cluster_config(login, {ALPHA: "2.10", BETA: "3.00"})
    services = slurm_services(home, config, login)
    return GpuTuiApp(config=config, store=services.store, services=services, background=False)


async def test_new_form_cluster_and_nodes_for_slurm(cluster, gputui_home: Path):
    made, login = cluster
    app = make_app(gputui_home, login)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("n")
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CreateScreen)
        assert screen.query_one("#provider", Select).value == "sandbox"
        assert not screen.query_one("#slurm-row").display  # slurm's fields: not for others
        screen.query_one("#provider", Select).value = "slurm"
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.query_one("#slurm-row").display
        clusters = screen.query_one("#cluster", Select)
        assert clusters.value == ALPHA
        offers = screen.query_one("#offer", Select)
        # the GPU list is the chosen cluster's: one offer, at its price
        assert [o.region for o in screen._cluster_offers()] == [ALPHA]
        clusters.value = BETA
        await pilot.pause()
        [beta] = screen._cluster_offers()
        assert beta.region == BETA and beta.price_per_gpu_hour == Decimal("3.00")
        offers.value = beta.offer_id
        await pilot.pause()
        screen.query_one("#count", Select).value = 2

        # two nodes (on a one-node cluster): the allocation asks Slurm for them, and waits in
        # its queue with Slurm's reason, billing nothing
        screen.query_one("#nodes", Select).value = 2
        await pilot.pause()
        await pilot.press("ctrl+s")
        await app.workers.wait_for_complete()
        await pilot.pause()
        [inst] = app.store.instances_sync()
        assert inst.region == BETA and inst.gpu_count == 2
        assert inst.status == InstanceStatus.BOOTING
        assert inst.status_detail.startswith("queued in Slurm: PartitionNodeLimit")
        job = inst.provider_id.partition(":")[2]
        assert made.run("squeue", "-h", "-j", job, "-o", "%D %b %T").stdout.strip() \
            == "2 gres:gpu:h100:1 PENDING"  # two nodes, one GPU each
        entry = await app.services.release(inst, "manual")
        assert entry is not None and entry.compute_cost == 0
