"""The console says what happened, wherever the renter is in it (Pilot at 80×24, real sandbox):
a run that fails and a queue that ends on any instance give a toast and the bell; Home's Queue
column follows the queue; an instance released by another process (`gputui reap`) stays on
Home a while, saying who released it and what it cost, instead of vanishing."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from gputui.app import GpuTuiApp
from gputui.models import utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.jobs import JobService, JobSpec
from gputui.ui.home import HomeScreen
from gputui.ui.jobs import JobsScreen
from tests.conftest import GPUTUI, run_gputui_env
from tests.ui.waits import shown, until

SIZE = (80, 24)


async def rent(svc: Services, name: str):
    offer = await svc.find_offer("sandbox", "RTX 4090")
    return await svc.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id,
                                                            gpu_count=1, name=name))


def toasts(app: GpuTuiApp) -> list[str]:
    """Every toast shown so far (also those that timed out)."""
    return app.__dict__.setdefault("_said_all", [])


def record_toasts(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> None:
    said = toasts(app)
    real = app.notify

    def notify(message: str, **kw: object) -> None:
        said.append(str(message))
        real(message, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(app, "notify", notify)


def cell(app: GpuTuiApp, row: str, col: str) -> str:
    return str(app.screen.query_one(DataTable).get_cell(row, col))


@pytest.fixture
def fast_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch reads a queue every second (the console's own pace is 10 s)."""
    monkeypatch.setattr("gputui.services.queuewatch.WATCH_EVERY_S", 1.0)


async def test_a_queue_ending_elsewhere_toasts_and_rings_and_home_counts_it(
        services: Services, fast_watch, monkeypatch: pytest.MonkeyPatch):
    shown_inst = await rent(services, "shown")
    other = await rent(services, "other")
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False)  # clocks on
    bells: list[int] = []
    monkeypatch.setattr(app, "bell", lambda: bells.append(1))
    record_toasts(app, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await shown(pilot, HomeScreen)
        table = app.screen.query_one(DataTable)
        assert [str(c.label) for c in table.columns.values()][:6] == \
            ["Name", "GPU", "Status", "Release in", "Cost", "Queue"]
        assert cell(app, other.id, "queue") == ""  # no queue: blank
        # the renter looks at another instance's Jobs screen...
        app.focus_instance = shown_inst.id
        await pilot.press("j")
        jobs = await shown(pilot, JobsScreen)
        assert jobs.instance is not None and jobs.instance.id == shown_inst.id
        # ...while a queue runs on `other` (queued from elsewhere: the CLI, MCP)
        await JobService(services).add(other, [
            JobSpec("echo broken; exit 3", name="bad"),
            JobSpec("sleep 4; echo ok", name="good")])
        await until(pilot, lambda: any("other: run 1 bad failed (exit code 3)" in t
                                       for t in toasts(app)), "the failed run's toast")
        assert bells, "a failed run rings the bell"
        rung = len(bells)
        await pilot.press("h")
        await shown(pilot, HomeScreen)
        # one run failed, one runs: the Queue column says so (by its row's key, never rebuilt)
        await until(pilot, lambda: cell(app, other.id, "queue") == "1/2 ✗1", "1/2 ✗1 on Home")
        assert cell(app, shown_inst.id, "queue") == ""
        await until(pilot, lambda: any(t.startswith("other: queue ended — 1 succeeded, 1 "
                                                    "failed, 0 cancelled") for t in toasts(app)),
                    "the queue-end toast")
        assert len(bells) > rung, "the queue's end rings the bell"
        assert "keeps running and billing" in next(t for t in toasts(app) if "queue ended" in t)
        await until(pilot, lambda: cell(app, other.id, "queue") == "done ✗1", "done on Home")
        # said once: the watch reads no more, and a later look says nothing again
        ended = [t for t in toasts(app) if "queue ended" in t]
        await JobService(services).view(other)
        await pilot.pause(0.2)
        assert [t for t in toasts(app) if "queue ended" in t] == ended
        # a run added later opens the queue again: read again, counted again
        await JobService(services).add(other, [JobSpec("exit 0", name="again")])
        await until(pilot, lambda: sum("other: queue ended" in t for t in toasts(app)) == 2,
                    "the second end said")
        await until(pilot, lambda: cell(app, other.id, "queue") == "done ✗1", "3 runs, done")


async def test_a_release_by_reap_in_another_process_says_who_and_what_it_cost(
        services: Services, gputui_home: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("gputui.ui.home.LINGER_S", 6.0)
    inst = await rent(services, "late")
    keep = await rent(services, "keep")
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)  # this console releases nothing itself
    record_toasts(app, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await shown(pilot, HomeScreen)
        await services.store.update_lease(inst.id, lambda le: le.model_copy(
            update={"release_at": utcnow() - timedelta(seconds=5)}))
        # past its deadline, someone is releasing it: never a transient "overdue"
        await until(pilot, lambda: cell(app, inst.id, "release") == "releasing…", "releasing…")
        reap = await asyncio.to_thread(
            subprocess.run, [*GPUTUI, "reap", "--json"], capture_output=True, text=True,
            env=run_gputui_env(gputui_home), timeout=120, stdin=subprocess.DEVNULL)
        assert reap.returncode == 0, reap.stderr
        note = app.screen.query_one("#ended", Static)
        await until(pilot, lambda: note.display and "late released by its release timer "
                    "(gputui reap) after" in str(note.render()), "who released it, on Home")
        entry = next(e for e in services.store.ledger_sync() if e.instance_id == inst.id)
        assert entry.ended_by == "reap"
        cost = f"${entry.total:.2f}"
        assert f"it cost {cost}" in str(note.render())
        assert any("late released by its release timer (gputui reap)" in t
                   for t in toasts(app)), "a toast too: this console did not release it"
        # the row stays a while, dimmed, with its final cost; the other row is untouched
        assert cell(app, inst.id, "status") == "released"
        assert cell(app, inst.id, "cost") == cost
        assert cell(app, inst.id, "link") == "-"
        assert app.screen.query_one(DataTable).get_cell(inst.id, "name").style == "dim"
        assert cell(app, keep.id, "status") == "running"
        # ...and goes after a while (a minute; here a few seconds)
        rows = app.screen.query_one(DataTable).rows
        await until(pilot, lambda: inst.id not in {k.value for k in rows}, "the row gone")
        assert not note.display and keep.id in {k.value for k in rows}


def test_queue_cell_words():
    from gputui.services.queuewatch import QueueSummary

    assert QueueSummary().cell() == ""
    assert QueueSummary(total=5, finished=3, succeeded=2, failed=1).cell() == "3/5 ✓2 ✗1"
    assert QueueSummary(total=5, finished=0).cell() == "0/5"
    assert QueueSummary(total=5, finished=5, succeeded=5, ended=True).cell() == "done"
    assert QueueSummary(total=2, finished=2, succeeded=1, failed=1, ended=True).cell() == \
        "done ✗1"


# ------------------------------------------------------------------------------------------
# Snapshots: Home with the Queue column at 80×24, fixed data and a frozen clock
# ------------------------------------------------------------------------------------------


def queue_app(home: Path) -> GpuTuiApp:
    """Home's two sandbox rows (tests/ui/test_snapshots.py) and a third whose release is held:
    one queue running (release at its end), one ended, one held."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from gputui.models import BillingRule, Granularity, Instance, InstanceStatus, Lease
    from gputui.services.jobs import WhenDone, save_when_done
    from gputui.services.queuewatch import QueueSummary, session_queue_watch
    from tests.ui.test_snapshots import app_with_data

    app = app_with_data(home)
    store = app.store
    t0 = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
    store.put_instance_sync(Instance(
        id="a3", name="sweep-7b", provider="sandbox", gpu="A100 80GB", gpu_count=1,
        billing=BillingRule(price_per_hour=Decimal("1.29"), granularity=Granularity.MINUTE),
        status=InstanceStatus.RUNNING, created_at=t0, running_since=t0))
    store.put_lease_sync(Lease(instance_id="a3",
                               release_at=datetime(2026, 11, 29, 11, 55, tzinfo=UTC)))
    services = app.services
    save_when_done(services, "a1", WhenDone(policy="release", set_at="2026-11-29T10:20:00"))
    save_when_done(services, "a3", WhenDone(
        policy="release", pulls=[{"remote": "results", "local": str(home / "results")}],
        set_at="2026-11-29T10:20:00", held="no such file: results",
        held_at="2026-11-29T11:55:00"))
    watch = session_queue_watch(services)
    watch._summary.update({
        "a1": QueueSummary(total=5, finished=3, succeeded=2, failed=1),
        "a2": QueueSummary(total=4, finished=4, succeeded=4, ended=True),
        "a3": QueueSummary(total=2, finished=2, succeeded=2, ended=True)})
    return app


async def _home_ready(pilot) -> None:
    await shown(pilot, HomeScreen)
    await until(pilot, lambda: pilot.app.screen.query_one(DataTable).row_count == 3, "3 rows")
    await pilot.pause()


def test_home_queue_column_snapshot(snap_compare, gputui_home: Path, utc_clock):
    assert snap_compare(queue_app(gputui_home), terminal_size=SIZE, run_before=_home_ready)


def test_zh_home_queue_column_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(queue_app(gputui_home), terminal_size=SIZE, run_before=_home_ready)


@pytest.mark.parametrize("lang", ["en", "zh"])
async def test_queue_column_fits_at_80_columns_beside_the_cost(gputui_home: Path, utc_clock,
                                                                lang: str):
    """The essential columns (name to cost) and Queue stay on an 80-column screen, even with
    a held release's long label."""
    from gputui.i18n import set_language

    set_language(lang)
    app = queue_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        table = app.screen.query_one(DataTable)
        widths = {c.key.value: c.get_render_width(table) for c in table.columns.values()}
        keys = ["name", "gpu", "status", "release", "cost", "queue"]
        assert sum(widths[k] for k in keys) <= SIZE[0], sorted(widths.items())
        assert cell(app, "a1", "queue") == "3/5 ✓2 ✗1"
        assert cell(app, "a3", "queue") == ("held" if lang == "en" else "暂缓")
        assert cell(app, "a2", "queue") == ("done" if lang == "en" else "已完成")


async def test_a_when_done_set_in_a_shell_shows_on_home(services: Services):
    """`gputui jobs NAME when-done release` run in a shell writes the record, not the database:
    Home still says "at queue end" beside the timer within seconds, and drops it once the
    record goes."""
    from gputui.services.jobs import WhenDone, _policy_path, save_when_done

    inst = await rent(services, "box")
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=SIZE) as pilot:
        await shown(pilot, HomeScreen)
        await until(pilot, lambda: cell(app, inst.id, "release") != "", "the row")
        assert "queue end" not in cell(app, inst.id, "release")
        save_when_done(services, inst.id, WhenDone(policy="release"))  # (no event: a shell's)
        await until(pilot, lambda: "at queue end" in cell(app, inst.id, "release"),
                    "at queue end on Home", timeout=15)
        _policy_path(services, inst.id).unlink()
        await until(pilot, lambda: "queue end" not in cell(app, inst.id, "release"),
                    "the note gone", timeout=15)


async def test_a_second_that_comes_while_home_is_taken_down_is_let_go(gputui_home: Path,
                                                                      utc_clock):
    """The app's second can reach Home while the app closes and Home's lines are already gone
    (CI saw `NoMatches: '#keeper'` at the end of a test): nothing to tick then, and no
    error."""
    app = queue_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        home = app.screen
        for line in ("#keeper", "#ended"):
            await home.query_one(line, Static).remove()
        for _ in range(20):  # past the 10th second, when the keeper line is looked at
            home.tick()
        home.check_keeper()
        home._show_said()
        await pilot.pause()
