"""A Slurm allocation on every screen, like any instance: Home (its row, countdown, yuan),
the Monitor (the node's GPUs through the stream started inside the allocation), Jobs (a run as
a step of the allocation, its exit code) and Costs (the meter, then the ledger once released) —
against a real one-node Slurm cluster on 127.0.0.1 through its OpenSSH login node. Skipped,
saying why, where Slurm, munge, sshd or root is missing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from textual.widgets import DataTable

from gputui.app import GpuTuiApp
from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.jobs import JobService, JobSpec
from gputui.ui.costs import CostsScreen
from gputui.ui.jobs import JobsScreen
from gputui.ui.livetable import LiveTable
from gputui.ui.monitor import MonitorScreen
from tests.drill.sshd_host import needs_sshd
from tests.services.test_telemetry_support import make_telemetry
from tests.slurm_cluster import (
    cluster_config,
    cluster_fixture,
    needs_slurm,
    slurm_services,
    unique_cluster,
)
from tests.ui.waits import until

pytestmark = [needs_slurm, needs_sshd]

CLUSTER = unique_cluster("screens")

cluster = cluster_fixture("slurmscreens", runners_of=(CLUSTER,))


class ConsoleApp(GpuTuiApp):
    """The console with the Monitor fed by a TelemetryService, as the real one is."""

    def __init__(self, services, telemetry) -> None:  # noqa: ANN001
        super().__init__(config=services.config, store=services.store, services=services,
                         background=False, remember_theme=False)
        self.telemetry = telemetry
        self.focus_instance: str | None = None

    async def on_unmount(self) -> None:
        await self.telemetry.close()
        await super().on_unmount()


def text(table: DataTable, row: str, col: str) -> str:
    return str(table.get_cell(row, col))


async def test_a_slurm_allocation_on_home_monitor_jobs_and_costs(cluster, gputui_home: Path):
    made, login = cluster
    services = slurm_services(gputui_home, cluster_config(login, {CLUSTER: "2.10"}), login)
    offer = await services.find_offer("slurm", "h100", region=CLUSTER)
    inst = await services.create("slurm", offer, CreateRequest(
        offer_id=offer.offer_id, gpu_count=2, name="sweep"),
        lease=Lease(instance_id="pending", release_at=utcnow() + timedelta(hours=2)))
    assert inst.status == InstanceStatus.RUNNING
    job = inst.provider_id.partition(":")[2]
    jobs = JobService(services)
    [run] = await jobs.add(inst, [JobSpec("echo on $SLURM_STEP_ID; exit 5", name="probe")])
    telemetry = make_telemetry(services)
    app = ConsoleApp(services, telemetry)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            # Home: its row like any other — the card, running, the countdown, yuan
            home = app.screen.query_one(DataTable)
            await until(pilot, lambda: inst.id in home.rows, "the allocation's row")
            assert text(home, inst.id, "name") == "sweep"
            assert "H100" in text(home, inst.id, "gpu") and "2×" in text(home, inst.id, "gpu")
            assert text(home, inst.id, "status") == "running"
            assert text(home, inst.id, "release").startswith(("1h 59m", "2h 00m"))
            assert text(home, inst.id, "rate") == "¥4.20"  # the column says per hour
            assert text(home, inst.id, "provider") == "slurm"

            # Monitor: the node's two GPUs, from the stream inside the allocation
            telemetry.sync(services.store.instances_sync(live_only=True))
            await pilot.press("m")
            await until(pilot, lambda: isinstance(app.screen, MonitorScreen), "the Monitor")
            gpus = app.screen.query_one("#gpus", LiveTable)
            await until(pilot, lambda: f"{inst.id}/1" in gpus.rows, "both GPUs' rows", 60)
            assert "H100" in str(gpus.get_row(f"{inst.id}/0")[0])

            # Jobs: the run, a step of the allocation, failed with its exit code
            await pilot.press("j")
            await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
            runs = app.screen.query_one(DataTable)
            await until(pilot, lambda: run in runs.rows and text(runs, run, "status")
                        == "failed", "the run failed", 60)
            assert text(runs, run, "exit") == "5" and text(runs, run, "name") == "probe"
            assert "¥" in text(runs, run, "cost")

            # Costs: accruing in yuan now; in the ledger once released (scancel, seen ended)
            await pilot.press("c")
            await until(pilot, lambda: isinstance(app.screen, CostsScreen), "Costs")
            now = app.screen.query_one("#now-table", DataTable)
            await until(pilot, lambda: inst.id in now.rows, "the allocation on the meter")
            assert text(now, inst.id, "rate") == "¥4.20"
            assert text(now, inst.id, "accrued").startswith("¥")
            entry = await services.release(services.store.get_instance_sync(inst.id), "manual")
            assert entry is not None and entry.currency == "CNY"
            assert made.run("squeue", "--states=all", "-h", "-j", job, "-o", "%T").stdout \
                .strip().startswith("CANCELLED")
            await pilot.press("2")
            ledger = app.screen.query_one("#ledger-table", DataTable)
            await until(pilot, lambda: inst.id in ledger.rows, "the ledger's entry")
            assert text(ledger, inst.id, "name") == "sweep"
            assert text(ledger, inst.id, "total").startswith("¥")
            assert text(ledger, inst.id, "provider") == "slurm"
    finally:
        await services.close()


async def test_push_then_a_run_on_the_node_then_pull_through_the_login_node(cluster,
                                                                           gputui_home: Path,
                                                                           tmp_path: Path):
    """push and pull go through the login node's SFTP into the cluster's shared home; the run,
    a step on the compute node, reads what was pushed and writes what is pulled."""
    from gputui.remote.transfer import pull, push

    made, login = cluster
    services = slurm_services(gputui_home, cluster_config(login, {CLUSTER: "2.10"}), login)
    remote = f"proj-{gputui_home.parent.name}"  # in the shared home (this machine's)
    try:
        offer = await services.find_offer("slurm", "h100", region=CLUSTER)
        inst = await services.create("slurm", offer, CreateRequest(
            offer_id=offer.offer_id, gpu_count=1, name="xfer"),
            lease=Lease(instance_id="pending", release_at=utcnow() + timedelta(hours=1)))
        project = tmp_path / "proj"
        project.mkdir()
        (project / "data.txt").write_text("12 30\n")
        link = await services.link(inst)
        sent = await push(link, project, remote)
        assert sent.files == 1
        jobs = JobService(services)
        [run] = await jobs.add(inst, [JobSpec(
            "awk '{print $1 + $2}' data.txt > sum.txt && hostname > where.txt",
            name="sum", cwd=remote)])
        view = await jobs.wait(inst, [run])
        assert view.get(run).status == "succeeded"
        back = tmp_path / "back"
        back.mkdir()
        await pull(link, f"{remote}/sum.txt", back)
        assert (back / "sum.txt").read_text() == "42\n"
        await services.release(services.store.get_instance_sync(inst.id), "manual")
    finally:
        await services.close()
        import shutil

        shutil.rmtree(Path.home() / remote, ignore_errors=True)
