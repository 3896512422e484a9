"""The console with an AutoDL instance (emulator, real SSH): the top bar's yuan meter and
runway, Home's stop (s) and start (S) keys, and the deletion clock of a stopped instance."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from textual.widgets import DataTable

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import InstanceStatus
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.store import SessionStore
from gputui.ui.widgets import TopBar
from tests.providers.autodl_emulator import AutoDLEmulator
from tests.providers.autodl_fixtures import attach


@pytest.fixture
async def emu(tmp_path: Path):
    async with AutoDLEmulator(ssh_root=tmp_path / "boxes", creating_s=0.1, starting_s=0.1,
                              ssh_delay=0.2, shutting_s=0.1) as e:
        yield e


async def wait_for(pilot, cond, what: str, timeout: float = 30.0) -> None:  # noqa: ANN001
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def test_home_stop_start_and_the_yuan_top_bar(gputui_home: Path, emu: AutoDLEmulator):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(svc, emu)
    offer = await svc.find_offer("autodl", "4090D")
    inst = await svc.create("autodl", offer, CreateRequest(offer_id=offer.offer_id, name="train"))
    app = GpuTuiApp(config=Config(), store=svc.store, services=svc, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.account_clock()  # what the console runs when an account is configured
        bar = app.screen.query_one(TopBar)

        def bar_text() -> str:
            app.refresh_meter()
            return str(bar.render())

        await wait_for(pilot, lambda: re.search(r"balance ¥3\d\d\.\d\d · ≈\d+ h", bar_text()),
                       "the runway in the top bar")
        assert "1 live ¥1.88/h" in bar_text() and "$" not in bar_text()
        table = app.screen.query_one("#instances", DataTable)
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")

        def status() -> InstanceStatus:
            return svc.store.get_instance_sync(inst.id).status

        await wait_for(pilot, lambda: status() == InstanceStatus.STOPPED, "the stop")
        await wait_for(pilot, lambda: "wiped in 14 d" in str(table.get_cell(inst.id, "status")),
                       "the deletion clock on Home")
        assert emu.status_of(inst.provider_id) == "shutdown"
        await pilot.press("S")
        await wait_for(pilot, lambda: status() == InstanceStatus.RUNNING, "the start")
        await wait_for(pilot, lambda: str(table.get_cell(inst.id, "status")) == "running",
                       "Home showing it running")
        assert emu.status_of(inst.provider_id) == "running"


def test_rows_in_yuan_convert_only_through_the_configured_rate():
    from decimal import Decimal

    from gputui.catalog.prices import load_prices
    from gputui.services.catalog import card_rows, rows_in_currency

    rows = load_prices()
    plain = rows_in_currency(rows, "CNY")
    assert plain and {r.currency for r in plain} == {"CNY"} and all(r.provider == "autodl"
                                                                    for r in plain)
    at = rows_in_currency(rows, "CNY", Decimal("7.10"), "test rate")
    lambda_h100 = next(r for r in at if r.provider == "lambda" and r.gpu == "h100_sxm"
                       and r.price_per_gpu_hour == Decimal("4.29") * Decimal("7.10"))
    assert "USD at ¥7.10/$" in lambda_h100.tier and "test rate" in (lambda_h100.note or "")
    cards = {c.key: c for c in card_rows(plain, currency="CNY")}
    assert cards["rtx_4090"].perf.usd_per_gpu_hour == Decimal("1.88")  # the ¥ figure
    assert cards["h100_sxm"].lowest is None  # no ¥ price and no rate: none made up


async def test_catalog_switches_between_dollars_and_yuan(gputui_home: Path):
    from decimal import Decimal

    config = Config()
    config.money.cny_per_usd = Decimal("7.10")
    app = GpuTuiApp(config=config, store=SessionStore(gputui_home / "state.db"),
                    remember_theme=False, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await wait_for(pilot, lambda: app.screen.query("#cards"), "the catalog")
        table = app.screen.query_one("#cards", DataTable)
        await wait_for(pilot, lambda: table.row_count > 0, "the cards")

        def price(key: str) -> str:
            return str(table.get_cell(key, "price"))

        assert price("rtx_4090").startswith("$")
        assert price("a800_80gb_sxm") == "$0.70"  # ¥4.98 at the configured ¥7.10/$
        await pilot.press("y")
        await wait_for(pilot, lambda: price("rtx_4090") == "¥1.88", "the yuan view")
        assert price("a800_80gb_sxm") == "¥4.98"  # a China SKU, priced in yuan where sourced
        assert price("h100_sxm").startswith("¥")  # dollars converted at the configured rate
        assert "¥/GPU·h" in str(table.columns["price"].label)
        await pilot.press("y")
        await wait_for(pilot, lambda: price("rtx_4090").startswith("$"), "back to dollars")


async def test_costs_screen_totals_per_currency(gputui_home: Path):
    from datetime import timedelta
    from decimal import Decimal

    from textual.widgets import Static

    from gputui.models import BillingRule, Instance, utcnow

    store = SessionStore(gputui_home / "state.db")
    t0 = utcnow() - timedelta(hours=1)
    for iid, price, cur in (("cny", "8.20", "CNY"), ("usd", "1.29", "USD")):
        inst = Instance(id=iid, name=iid, provider="sandbox", gpu="GeForce RTX 4090",
                        billing=BillingRule(price_per_hour=Decimal(price), currency=cur),
                        created_at=t0, status=InstanceStatus.RUNNING)
        inst.mark_running(t0)
        store.put_instance_sync(inst)
    app = GpuTuiApp(config=Config(), store=store, remember_theme=False, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        await wait_for(pilot, lambda: app.screen.query("#totals"), "the costs screen")
        totals = app.screen.query_one("#totals", Static)
        await wait_for(pilot, lambda: "¥8.20/h" in str(totals.render()), "the yuan line")
        text = str(totals.render())
        assert "$1.29/h" in text and "9.49" not in text  # two lines, never one sum
        bar = str(app.screen.query_one(TopBar).render())
        assert "$1.29/h" in bar and "¥8.20/h" in bar


async def test_new_lists_autodl_offers_in_yuan(gputui_home: Path, emu: AutoDLEmulator):
    """The New form's GPU list shows each offer in its own currency: AutoDL's in yuan (a
    sourced reference price) or "price on creation" — never a dollar sign."""
    from textual.widgets import Select

    from gputui.ui.create import CreateScreen

    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(svc, emu)
    app = GpuTuiApp(config=Config(), store=svc.store, services=svc, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, CreateScreen), "the New form")
        screen = app.screen
        screen.query_one("#provider", Select).value = "autodl"
        await wait_for(pilot, lambda: screen.offers and screen.offers[0].provider == "autodl",
                       "AutoDL's offers")
        labels = [str(label) for label, _value in screen.query_one("#offer", Select)._options
                  if str(label)]  # (less the blank prompt)
        assert labels and not any("$" in label for label in labels), labels
        assert any(re.search(r"· ¥\d+\.\d\d/GPU·h", label) for label in labels), labels
        priced = {o.offer_id for o in screen.offers if o.price_per_gpu_hour}
        for o, label in zip(screen.offers, labels, strict=True):
            assert ("¥" in label) == (o.offer_id in priced)
            if o.offer_id not in priced:
                assert "price on creation" in label
