"""The Costs screen and the meter in the top bar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from textual.widgets import DataTable

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import BillingRule, Granularity, Instance, InstanceStatus, Lease, LedgerEntry
from gputui.store import SessionStore
from gputui.ui.widgets import TopBar
from tests.ui.waits import until

FROZEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def seeded_app(home: Path, clock: list[datetime]) -> GpuTuiApp:
    store = SessionStore(home / "state.db")
    t0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    live = Instance(id="live", name="qwen-serve", provider="sandbox", gpu="GeForce RTX 4090",
                    gpu_count=2, billing=BillingRule(price_per_hour=Decimal("0.68"),
                                                     granularity=Granularity.MINUTE,
                                                     storage_per_gb_month=Decimal("0.10")),
                    disk_gb=100, created_at=t0, status=InstanceStatus.RUNNING)
    live.mark_running(t0)
    store.put_instance_sync(live)
    store.put_lease_sync(Lease(instance_id="live", release_at=t0 + timedelta(hours=5)))
    for n, (gpu, hours, reason) in enumerate([("H100 80GB SXM5", 3, "timer"),
                                              ("A100 80GB SXM4", 1.5, "manual")]):
        ended = Instance(id=f"old{n}", name=f"run-{n}", provider="sandbox", gpu=gpu,
                         billing=BillingRule(price_per_hour=Decimal("2.00")),
                         created_at=t0 - timedelta(days=n + 1), status=InstanceStatus.RUNNING)
        ended.mark_running(ended.created_at)
        ended.mark_ended(ended.created_at + timedelta(hours=hours), reason)
        store.put_instance_sync(ended)
        store.end_instance_sync(ended.id, LedgerEntry.from_instance(ended, reason, ended.ended_at), ended)
    app = GpuTuiApp(config=Config(), store=store, remember_theme=False, background=False)
    app.now = lambda: clock[0]
    return app



def test_costs_snapshot(snap_compare, gputui_home: Path, utc_clock):
    clock = [FROZEN]
    assert snap_compare(seeded_app(gputui_home, clock), press=["c"], terminal_size=(80, 24))


async def test_meter_ticks_while_an_instance_runs(gputui_home: Path, utc_clock):
    clock = [FROZEN]
    app = seeded_app(gputui_home, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        bar = app.screen.query_one(TopBar)
        # 3 h at $0.68/h = $2.04, plus 100 GB × $0.10/GB-month × 3 h / 730 h = $0.04
        assert "$2.08 so far" in str(bar.render())
        table = app.screen.query_one("#now-table", DataTable)
        assert table.get_cell("live", "compute") == "$2.04"
        assert table.get_cell("live", "storage") == "$0.04"
        assert table.get_cell("live", "projected") == "$3.47"  # 5 h: $3.40 + $0.07
        clock[0] = FROZEN + timedelta(hours=1)
        # the meter ticks once a second on its own
        await until(pilot, lambda: "$2.77 so far" in str(bar.render())
                    and table.get_cell("live", "compute") == "$2.72", "the next tick")
        assert "$2.77 so far" in str(bar.render())
        assert table.get_cell("live", "compute") == "$2.72"
        await pilot.press("2")
        ledger = app.screen.query_one("#ledger-table", DataTable)
        assert ledger.row_count == 2 and ledger.get_cell("old0", "reason") == "timer"
        await pilot.press("b", "b", "b")  # day → week → month → GPU type
        groups = app.screen.query_one("#group-table", DataTable)
        assert {str(groups.get_row_at(i)[0]) for i in range(groups.row_count)} == {
            "H100 80GB SXM5", "A100 80GB SXM4"}
