"""What the console shows about who keeps the deadlines: the daemon in the top bar, and on Home
a warning where only a local release protects an instance (Lambda) and nothing keeps it."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

from textual.widgets import Static

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import BillingRule, Instance, InstanceStatus, utcnow
from gputui.services.daemon import DaemonInfo, DaemonLock
from gputui.store import SessionStore
from gputui.ui.widgets import TopBar


def _store(home: Path, provider: str) -> SessionStore:
    store = SessionStore(home / "state.db")
    inst = Instance(id="l1", name="lam-job", provider=provider, gpu="H100 SXM", gpu_count=1,
                    provider_id="i-123", billing=BillingRule(price_per_hour=Decimal("2.99")),
                    status=InstanceStatus.RUNNING)
    inst.mark_running(utcnow())
    store.put_instance_sync(inst)
    return store


async def _wait(pilot, condition, rounds: int = 600) -> bool:
    for _ in range(rounds):
        if condition():
            return True
        await pilot.pause(0.05)
    return condition()


async def test_home_warns_until_a_daemon_keeps_a_lambda_deadline(gputui_home: Path):
    app = GpuTuiApp(config=Config(), store=_store(gputui_home, "lambda"), background=False,
                    remember_theme=False)
    async with app.run_test(size=(120, 24)) as pilot:
        note = app.screen.query_one("#keeper", Static)
        bar = app.screen.query_one(TopBar)
        assert await _wait(pilot, lambda: note.display)
        text = str(note.render())
        assert "lam-job" in text and "gputui daemon --install" in text
        assert "daemon" not in str(bar.render()).split("·")[1]

        lock = DaemonLock.acquire(gputui_home, DaemonInfo(os.getpid(), "now"))
        try:
            assert await _wait(pilot, lambda: "deadlines kept by the daemon" in str(bar.render()))
            assert await _wait(pilot, lambda: not note.display)  # Home re-checks on its clock
        finally:
            lock.release()
        assert await _wait(pilot, lambda: "deadlines kept" not in str(bar.render()))


async def test_no_warning_where_the_power_off_stops_the_billing(gputui_home: Path):
    app = GpuTuiApp(config=Config(), store=_store(gputui_home, "ssh"), background=False,
                    remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.screen.query_one("#keeper", Static).display


async def test_the_daemon_note_fits_an_80_column_top_bar(gputui_home: Path):
    app = GpuTuiApp(config=Config(), store=_store(gputui_home, "ssh"), background=False,
                    remember_theme=False)
    lock = DaemonLock.acquire(gputui_home, DaemonInfo(os.getpid(), "now"))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            bar = app.screen.query_one(TopBar)
            assert await _wait(pilot, lambda: "daemon ✓" in str(bar.render()))
            assert len(str(bar.render())) <= 78
    finally:
        lock.release()
