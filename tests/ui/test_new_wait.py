"""New's "Wait up to" for a sold-out card, against the AutoDL emulator: each try a create that
is refused for stock or exists (never two), the tries and the time left on the screen, Esc
stops waiting with nothing rented, and the finding is notified as `create --wait` does."""

from __future__ import annotations

import asyncio
import re

import pytest
from textual.widgets import Input, Select, Static

from gputui.app import GpuTuiApp
from gputui.config import Config, NotifySettings
from gputui.models import InstanceStatus
from gputui.services.hub import Services
from gputui.services.notify import NotifyService
from gputui.ui.create import CreateScreen
from tests.providers.autodl_emulator import AutoDLEmulator
from tests.ui.waits import shown, until

pytestmark = pytest.mark.autodl
SIZE = (80, 24)


def _app(svc: Services) -> GpuTuiApp:
    return GpuTuiApp(config=Config(), store=svc.store, services=svc, remember_theme=False,
                     background=False)


def _text(screen: CreateScreen, selector: str) -> str:
    widget = screen.query_one(selector, Static)
    return str(widget.render()) if widget.display else ""


async def _new_for_autodl(pilot, app: GpuTuiApp, wait: str) -> CreateScreen:  # noqa: ANN001
    await pilot.press("n")
    screen = await shown(pilot, CreateScreen)
    wait_row = screen.query_one("#wait-row")
    assert not wait_row.display  # the sandbox never says "sold out": no row to wait with
    screen.query_one("#provider", Select).value = "autodl"
    offer = screen.query_one("#offer", Select)
    await until(pilot, lambda: "4090D" in [v for _l, v in offer._options], "AutoDL's offers")
    offer.value = "4090D"
    assert wait_row.display
    screen.query_one("#name", Input).value = "waiter"
    screen.query_one("#wait", Input).value = wait
    return screen


async def test_new_waits_for_a_sold_out_card_and_rents_it_once(
        services: Services, emu: AutoDLEmulator, receiver, monkeypatch: pytest.MonkeyPatch):
    services.config.notify = NotifySettings(urls=[receiver.url("ok")])
    notifier = services.attached(NotifyService, lambda s: NotifyService(
        s.store, s.config, env={}, timeout_s=2.0, attempts=2, backoff_s=0.05, window_s=0.05))
    monkeypatch.setattr(CreateScreen, "wait_backoff", staticmethod(lambda _n: 1.5))
    emu.sell_out("4090D", 2)
    app = _app(services)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _new_for_autodl(pilot, app, "10m")
        await until(pilot, lambda: "tries again for up to 10m" in _text(screen, "#summary"),
                    "the summary saying it will wait")
        await pilot.press("ctrl+s")
        # refused for stock: the screen says so, with the tries and the time left
        await until(pilot, lambda: "No GeForce RTX 4090 D" in _text(screen, "#progress")
                    and "next try in" in _text(screen, "#progress"), "the waiting line")
        line = _text(screen, "#progress")  # (a loaded machine may be at the second try)
        assert re.search(r"\b(1 try|2 tries) · next try in", line), line
        assert "left" in line and "Esc stops" in line, line
        await until(pilot, lambda: services.store.instances_sync()
                    and services.store.instances_sync()[0].status == InstanceStatus.RUNNING,
                    "the card found and running", timeout=60)
        assert screen.waiting is None
        await until(pilot, lambda: app.screen is not screen, "back Home")
        toasts = [str(n.message) for n in app._notifications]
        assert any("a card was free after 3 tries" in t for t in toasts), toasts
    # three creates, two refused for stock, one instance — never two
    assert emu.count("/instance/pro/create") == 3 and len(emu.instances) == 1
    [rec] = services.store.instances_sync()
    assert rec.name == "waiter"
    lease = services.store.get_lease_sync(rec.id)
    assert lease is not None and lease.release_at is not None  # the timer is armed
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = await asyncio.to_thread(receiver.wait_for, 1)
    assert got.title == "waiter: a card was free — it is starting"
    assert "after 3 tries" in got.body


async def test_esc_stops_waiting_and_nothing_is_rented(services: Services,
                                                       emu: AutoDLEmulator,
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(CreateScreen, "wait_backoff", staticmethod(lambda _n: 30.0))
    emu.sell_out("4090D", 1000)
    app = _app(services)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _new_for_autodl(pilot, app, "2h")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "next try in" in _text(screen, "#progress"),
                    "waiting between tries")
        await pilot.press("escape")
        await until(pilot, lambda: "nothing was rented" in _text(screen, "#error"),
                    "Esc said what it did")
        assert "after 1 try" in _text(screen, "#error")
        assert app.screen is screen and screen.waiting is None and not screen.busy
        assert _text(screen, "#progress") == ""
        [rec] = services.store.instances_sync()
        assert rec.status == InstanceStatus.FAILED and rec.accrued() == 0
        await pilot.press("escape")  # not waiting: Esc goes back as ever
        await until(pilot, lambda: app.screen is not screen, "back Home")
    assert emu.count("/instance/pro/create") == 1 and emu.instances == {}


async def test_waiting_up_to_its_limit_says_so_and_a_bad_limit_is_one_line(
        services: Services, emu: AutoDLEmulator, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(CreateScreen, "wait_backoff", staticmethod(lambda _n: 0.4))
    emu.sell_out("4090D", 1000)
    app = _app(services)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _new_for_autodl(pilot, app, "soon")
        await until(pilot, lambda: "Wait up to:" in _text(screen, "#error"), "the bad limit")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert services.store.instances_sync() == [] and emu.count("/instance/pro/create") == 0
        screen.query_one("#wait", Input).value = "2s"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "nothing was rented" in _text(screen, "#error"),
                    "the limit reached", timeout=30)
        assert "was free within 0m 02s" in _text(screen, "#error")
        assert not screen.busy and screen.waiting is None
    assert emu.instances == {} and emu.count("/instance/pro/create") >= 2
