"""Renting from the console: the New screen, its summary, the no-timer confirmation, and the
home screen's extend / timer / release keys — against the sandbox, over real SSH."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from textual.widgets import DataTable, Input, Select, Static

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import InstanceStatus
from gputui.services.hub import Services
from gputui.store import SessionStore
from gputui.ui.create import CreateScreen
from gputui.ui.dialogs import ConfirmScreen, TimerDialog
from tests.ui.waits import shown


def make_app(home: Path) -> GpuTuiApp:
    store = SessionStore(home / "state.db")
    services = Services(store, Config(), state_dir=home, sandbox_boot_seconds=0)
    return GpuTuiApp(config=Config(), store=store, services=services, background=False)


async def choose_offer(app: GpuTuiApp, pilot, gpu: str) -> CreateScreen:
    await pilot.press("n")
    await app.workers.wait_for_complete()
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, CreateScreen)
    offer = next(o for o in screen.offers if o.gpu == gpu)
    screen.query_one("#offer", Select).value = offer.offer_id
    await pilot.pause()
    return screen


async def test_create_shows_cost_then_rents_with_a_timer(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await choose_offer(app, pilot, "GeForce RTX 4090")
        screen.query_one("#count", Select).value = 2
        screen.query_one("#name", Input).value = "lora"
        screen.query_one("#release", Input).value = "90m"
        await pilot.pause()
        summary = str(screen.query_one("#summary", Static).render())
        assert "for 2× GeForce RTX 4090" in summary and "billed per minute" in summary
        assert "in 1h 30m" in summary and "projected cost" in summary
        await pilot.press("ctrl+s")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.current_mode == "home"
        [inst] = app.store.instances_sync()
        assert inst.name == "lora" and inst.gpu_count == 2
        assert inst.status == InstanceStatus.RUNNING
        lease = app.store.get_lease_sync(inst.id)
        assert lease.on_instance_armed and lease.provider_armed
        left = lease.remaining()
        assert timedelta(minutes=89) < timedelta(seconds=left) <= timedelta(minutes=90)
        table = app.screen.query_one(DataTable)
        assert str(table.get_cell(inst.id, "name")) == "lora"

        # e extends by an hour
        await pilot.press("e")
        await app.workers.wait_for_complete()
        assert app.store.get_lease_sync(inst.id).remaining() > 2.4 * 3600

        # E extends by 30 minutes
        before = app.store.get_lease_sync(inst.id).release_at
        await pilot.press("E")
        await app.workers.wait_for_complete()
        assert app.store.get_lease_sync(inst.id).release_at - before == timedelta(minutes=30)

        # t sets a new time
        await pilot.press("t")
        await shown(pilot, TimerDialog)
        await pilot.press(*"3h", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert 2.9 * 3600 < app.store.get_lease_sync(inst.id).remaining() <= 3 * 3600

        # r asks first; n keeps it, y releases
        await pilot.press("r")
        await shown(pilot, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert app.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING
        await pilot.press("r")
        await shown(pilot, ConfirmScreen)  # (after its queue is read)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.store.get_instance_sync(inst.id).status == InstanceStatus.RELEASED
        # the row stays a minute, dimmed, saying so with its final cost, then goes
        assert table.row_count == 0 or str(table.get_cell(inst.id, "status")) == "released"


async def test_no_timer_needs_confirmation(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await choose_offer(app, pilot, "GeForce RTX 3090")
        screen.query_one("#no-timer").value = True
        await pilot.pause()
        assert "NO TIMER" in str(screen.query_one("#summary", Static).render())
        await pilot.press("ctrl+s")
        await shown(pilot, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert app.store.instances_sync() == []
        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        [inst] = app.store.instances_sync()
        lease = app.store.get_lease_sync(inst.id)
        assert lease.release_at is None and lease.no_timer_confirmed
        assert app.screen.query_one(DataTable).get_cell(inst.id, "release") == "⚠ no timer"


async def test_bad_release_text_is_explained_not_rented(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await choose_offer(app, pilot, "GeForce RTX 3090")
        screen.query_one("#release", Input).value = "soon"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "Release:" in str(screen.query_one("#error", Static).render())
        assert app.store.instances_sync() == []
