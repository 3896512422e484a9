"""Chinese that reads like the platform (issue 26, item 7), seen at 80×24 against the AutoDL
emulator: the top bar (every currency whole, labelled figures, a stopped instance not
"billing"), Home after a stop (a short status, no GPU rate, no link), the stop dialog's start
key, New for AutoDL (1–4 GPUs, 国内特供版, 实例名称, sandbox（模拟）), a loose `3090` refused,
durations as the console writes them, tiers and push/pull in Chinese."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Input, Label, Select, Static

from gputui.app import GpuTuiApp
from gputui.config import Config, parse_duration
from gputui.i18n import cell_len
from gputui.models import InstanceStatus
from gputui.services.errors import InvalidRequest
from gputui.services.hub import Services
from gputui.store import SessionStore
from gputui.ui.widgets import TopBar
from tests.providers.autodl_emulator import AutoDLEmulator
from tests.providers.autodl_fixtures import rent
from tests.ui.waits import question, shown, until

SIZE = (80, 24)


pytestmark = pytest.mark.autodl


def _app(svc: Services) -> GpuTuiApp:
    return GpuTuiApp(config=Config(), store=svc.store, services=svc, remember_theme=False,
                     background=False)


def _bar(app: GpuTuiApp) -> str:
    app.refresh_meter()
    return app.screen.query_one(TopBar).render().plain


# -- the top bar ----------------------------------------------------------------------------


class _BarApp(App):
    def compose(self) -> ComposeResult:
        yield TopBar()


async def test_the_top_bar_keeps_every_currency_whole_at_80_columns(zh):
    app = _BarApp()
    async with app.run_test(size=SIZE) as pilot:
        bar = app.query_one(TopBar)
        bar.title = "Instances"
        bar.clock = "12:00:00"
        bar.billing_count = 2
        bar.by_currency = (("USD", Decimal("1.29"), Decimal("0.43")),
                           ("CNY", Decimal("1.88"), Decimal("0.04")))
        bar.wallet = (Decimal("99.98"), "CNY")
        await pilot.pause()
        text = bar.render().plain
        assert cell_len(text) <= 78
        # the yuan part is whole (never cut) and each figure says what it is
        assert "$1.29/小时" in text and "¥1.88/小时" in text, text
        assert "余额 ¥99.98" in text and text.rstrip().endswith("12:00:00"), text
        # one currency: room for the runway (what has been spent, when it fits, named)
        bar.billing_count = 1
        bar.by_currency = (("CNY", Decimal("1.88"), Decimal("0.04")),)
        await pilot.pause()
        text = bar.render().plain
        assert "余额 ¥99.98 · 约 53 小时 · 1 台计费 ¥1.88/小时" in text, text
        bar.wallet = None
        await pilot.pause()
        assert "1 台计费 ¥1.88/小时 已花 ¥0.04" in bar.render().plain


async def test_home_after_a_stop_in_chinese(services: Services, emu: AutoDLEmulator, zh):
    inst = await rent(services, name="train")
    app = _app(services)
    async with app.run_test(size=SIZE) as pilot:
        app.account_clock()
        await until(pilot, lambda: "余额 ¥" in _bar(app), "the wallet in the top bar")
        assert "1 台计费 ¥1.88/小时" in _bar(app)
        table = app.screen.query_one("#instances", DataTable)
        await pilot.press("s")
        text = await question(pilot)
        # `s` stops; the dialog names the key that starts it again
        assert "Shift+S（S）可再次开机" in text and "按 s 可再次开机" not in text, text
        await pilot.press("y")
        await until(pilot, lambda: services.store.get_instance_sync(inst.id).status
                    == InstanceStatus.STOPPED, "the stop")
        await until(pilot, lambda: str(table.get_cell(inst.id, "status")) == "14 天后清除",
                    "the short wipe clock on Home")
        assert str(table.get_cell(inst.id, "rate")) == "-"  # its GPU rate is not billing
        assert str(table.get_cell(inst.id, "link")) == "-"  # no SSH to be 正常
        # the stopped status does not push the essential columns (name to Queue) off 80 columns
        widths = {c.key.value: c.get_render_width(table) for c in table.columns.values()}
        assert sum(widths[k] for k in ("name", "gpu", "status", "release", "cost",
                                       "queue")) <= 80, widths
        bar = _bar(app)
        assert "没有计费" in bar and "¥0.00/小时" not in bar and "台计费" not in bar, bar
        assert "余额 ¥" in bar and "没有计费中的实例" not in bar, bar
        await pilot.press("S")
        await until(pilot, lambda: str(table.get_cell(inst.id, "status")) == "运行中",
                    "Home showing it running")
        await until(pilot, lambda: str(table.get_cell(inst.id, "rate")) == "¥1.88", "its rate")


# -- New for AutoDL -------------------------------------------------------------------------


async def test_new_for_autodl_offers_1_to_4_gpus_in_the_platform_words(
        services: Services, zh):
    from gputui.ui.create import CreateScreen

    app = _app(services)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        screen = await shown(pilot, CreateScreen)
        providers = screen.query_one("#provider", Select)
        labels = [str(label) for label, _v in providers._options if _v is not Select.BLANK]
        assert "sandbox（模拟）" in labels, labels
        providers.value = "autodl"
        offer = screen.query_one("#offer", Select)
        await until(pilot, lambda: "4090D" in [v for _l, v in offer._options], "AutoDL's offers")
        names = " ".join(str(label) for label, _v in offer._options)
        assert "RTX 4090 D（国内特供版）" in names and "（魔改）" in names, names
        assert "China SKU" not in names and "modified" not in names
        spec = next(v for _l, v in offer._options if v == "4090D")
        offer.value = spec
        count = screen.query_one("#count", Select)
        await until(pilot, lambda: [v for _l, v in count._options if v is not Select.BLANK]
                    == [1, 2, 3, 4], "1–4 GPUs")
        assert "实例名称" in [str(w.render()) for w in screen.query(Label)]


async def test_a_loose_3090_is_refused_naming_the_modified_board(services: Services, zh):
    with pytest.raises(InvalidRequest) as caught:
        await services.find_offer("autodl", "3090")
    said = str(caught.value)
    assert "没有 GeForce RTX 3090 可租" in said and "RTX 3090 48GB（魔改）" in said, said
    offer = await services.find_offer("autodl", "3090 48")  # its own name rents it
    assert offer.gpu == "RTX 3090 48GB (modified)"
    assert (await services.find_offer("autodl", "4090D")).gpu.startswith("GeForce RTX 4090 D")


async def test_the_cli_refuses_gpu_3090_in_chinese(gputui_home: Path, emu: AutoDLEmulator):
    from tests.providers.test_autodl_cli import env_for, gputui

    res = await gputui({**env_for(gputui_home, emu), "LANG": "zh_CN.UTF-8", "LC_ALL": ""},
                       "create", "--provider", "autodl", "--gpu", "3090", "--yes")
    assert res.returncode == 2, res.stderr
    assert "autodl 没有 GeForce RTX 3090 可租" in res.stderr, res.stderr
    assert "RTX 3090 48GB（魔改）" in res.stderr and "Traceback" not in res.stderr
    assert not emu.instances  # nothing rented


# -- words ----------------------------------------------------------------------------------


def test_durations_as_the_console_writes_them():
    from datetime import timedelta

    assert parse_duration("1小时") == timedelta(hours=1)
    assert parse_duration("1小时59分") == timedelta(hours=1, minutes=59)
    assert parse_duration("90分钟") == timedelta(minutes=90)
    assert parse_duration("2天") == timedelta(days=2)
    assert parse_duration("45秒") == timedelta(seconds=45)
    with pytest.raises(ValueError):
        parse_duration("小时")


def test_tiers_and_transfers_in_chinese(zh):
    from gputui.catalog.prices import load_prices
    from gputui.cli.jobs import _summary_line
    from gputui.i18n import shown
    from gputui.services.catalog import cost, cost_cells, rows_in_currency

    answer = cost("rtx_4090", count=1, hours=2, prices=rows_in_currency(load_prices(), "CNY"))
    tiers = {str(shown(cost_cells(c)[1])) for c in answer.costs if c.row.provider == "autodl"}
    assert "按量计费" in tiers and not any("pay-as-you-go" in t for t in tiers), tiers
    summary = SimpleNamespace(direction="pull", source="box:/out", target="./out", files=2,
                              bytes=2048, skipped=0, ignored=0, seconds=0.5, resumed=0,
                              not_copied=[])
    line = _summary_line(summary)
    assert line.startswith("取回 box:/out -> ./out：2 个文件") and "pull" not in line, line
    summary.direction = "push"
    assert _summary_line(summary).startswith("上传 ")


def test_textual_keys_and_card_names_in_chinese(zh):
    from gputui.format import gpu_name
    from gputui.i18n import _

    assert _("Dismiss menu") == "关闭菜单"
    assert gpu_name("GeForce RTX 4090 D (China SKU)") == "GeForce RTX 4090 D（国内特供版）"
    assert gpu_name("RTX 4090 48GB (modified)") == "RTX 4090 48GB（魔改）"


# -- snapshots: fixed data, frozen clock ----------------------------------------------------


def _autodl_home(home: Path) -> GpuTuiApp:
    """Home with a running sandbox instance ($), a running AutoDL one and a stopped one (¥)."""
    from datetime import UTC, datetime, timedelta

    from gputui.models import BillingRule, Granularity, Instance, Lease

    frozen = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    t0 = frozen - timedelta(hours=1)
    store = SessionStore(home / "state.db")
    rows = [("s1", "qwen-lora", "sandbox", "GeForce RTX 4090", "0.34", "USD",
             InstanceStatus.RUNNING),
            ("d1", "train", "autodl", "GeForce RTX 4090 D (China SKU)", "1.88", "CNY",
             InstanceStatus.RUNNING),
            ("d2", "eval", "autodl", "GeForce RTX 4090 D (China SKU)", "1.88", "CNY",
             InstanceStatus.STOPPED)]
    for iid, name, provider, gpu, price, cur, status in rows:
        store.put_instance_sync(Instance(
            id=iid, name=name, provider=provider, gpu=gpu, gpu_count=1,
            billing=BillingRule(price_per_hour=Decimal(price), currency=cur,
                                granularity=Granularity.SECOND),
            status=status, created_at=t0, running_since=t0,
            stopped_at=frozen - timedelta(days=1) if status == InstanceStatus.STOPPED else None))
        store.put_lease_sync(Lease(instance_id=iid, release_at=frozen + timedelta(hours=2)))
    app = GpuTuiApp(config=Config(), store=store, remember_theme=False, background=False)
    app.now = lambda: frozen
    return app


async def _home(pilot) -> None:
    from gputui.ui.home import HomeScreen

    await shown(pilot, HomeScreen)
    table = pilot.app.screen.query_one("#instances", DataTable)
    await until(pilot, lambda: table.row_count == 3, "the three rows")
    await pilot.pause()


def test_zh_home_with_a_stopped_autodl_instance_snapshot(snap_compare, gputui_home: Path,
                                                         utc_clock, zh):
    assert snap_compare(_autodl_home(gputui_home), terminal_size=SIZE, run_before=_home)


def test_zh_stop_dialog_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    async def stop(pilot) -> None:
        await _home(pilot)
        await pilot.press("down")  # the running AutoDL one: its wipe date and the timer
        await pilot.press("s")
        await question(pilot)
        await pilot.pause()

    assert snap_compare(_autodl_home(gputui_home), terminal_size=SIZE, run_before=stop)


async def test_a_wallet_error_names_the_provider_once_in_chinese(gputui_home, emu: AutoDLEmulator):
    """`gputui account` when the wallet cannot be read: "autodl：读取钱包：…", never
    "autodl：autodl：读取钱包" (the provider's errors name it already)."""
    from tests.providers.test_autodl_cli import env_for, gputui

    emu.fail("/wallet/balance", 500, times=50)
    env = env_for(gputui_home, emu) | {"LANG": "zh_CN.UTF-8"}
    out = await gputui(env, "account")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    [line] = [x for x in out.stderr.splitlines() if "读取钱包" in x]
    assert line.startswith("autodl：读取钱包") and line.count("autodl") == 1, line


# -- snapshots: New for AutoDL, and waiting for a sold-out card -------------------------------


def _autodl_new_app(services: Services) -> GpuTuiApp:
    from datetime import UTC, datetime

    app = _app(services)
    app.now = lambda: datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    return app


async def _new_for_autodl(pilot, wait: str = "") -> None:
    from gputui.ui.create import CreateScreen

    await pilot.press("n")
    screen = await shown(pilot, CreateScreen)
    screen.query_one("#provider", Select).value = "autodl"
    offer = screen.query_one("#offer", Select)
    await until(pilot, lambda: "4090D" in [v for _l, v in offer._options], "AutoDL's offers")
    offer.value = "4090D"
    image = screen.query_one("#image", Select)
    await until(pilot, lambda: any("CUDA" in str(label) for label, _v in image._options),
                "the images by readable name")
    screen.query_one("#name", Input).value = "train"
    screen.query_one("#wait", Input).value = wait
    await until(pilot, lambda: "释放" in str(screen.query_one("#summary", Static).render()),
                "the summary")
    await pilot.pause()


def test_zh_new_for_autodl_snapshot(snap_compare, services: Services, utc_clock, zh):
    assert snap_compare(_autodl_new_app(services), terminal_size=SIZE,
                        run_before=_new_for_autodl)


def test_zh_new_waiting_for_a_sold_out_card_snapshot(snap_compare, services: Services,
                                                     emu: AutoDLEmulator, utc_clock, zh,
                                                     monkeypatch: pytest.MonkeyPatch):
    from gputui.ui.create import CreateScreen

    emu.sell_out("4090D", 1000)
    monkeypatch.setattr(CreateScreen, "wait_backoff", staticmethod(lambda _n: 30.0))
    monkeypatch.setattr(CreateScreen, "wait_clock", staticmethod(lambda: 1000.0))  # stopped

    async def waiting(pilot) -> None:
        await _new_for_autodl(pilot, "2h")
        screen = pilot.app.screen
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "暂无库存" in str(screen.query_one("#progress").render()),
                    "the waiting line")
        await pilot.pause()

    assert snap_compare(_autodl_new_app(services), terminal_size=SIZE, run_before=waiting)
