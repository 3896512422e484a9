"""The GPU catalog (cards, compare, fit, cost) and the New-instance form in Chinese: SVG
snapshots at 80×24 with fixed data and a frozen clock, and what a user reads there (column
headers, a fit verdict, a validation error, the progress line)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Input, Select, Static

from gputui.i18n import cell_len
from gputui.ui.catalog import CatalogScreen
from gputui.ui.create import CreateScreen
from tests.ui.test_catalog_ui import make_app, open_catalog, text_of
from tests.ui.test_screen_snapshots import plain_app
from tests.ui.waits import until

SIZE = (80, 24)




def _catalog_app(home: Path):
    return make_app(home, remember_theme=False)


async def _catalog(pilot, *keys: str) -> None:
    await pilot.press("g")
    await until(pilot, lambda: isinstance(pilot.app.screen, CatalogScreen)
                and pilot.app.screen.query_one("#cards", DataTable).row_count, "the catalog")
    for key in keys:
        await pilot.press(key)
    await pilot.pause()


async def _new_form(pilot, disk: str | None = None) -> None:
    app = pilot.app
    await pilot.press("n")
    await until(pilot, lambda: isinstance(app.screen, CreateScreen) and app.screen.offers,
                "the offers")
    screen = app.screen
    offer = next(o for o in screen.offers if o.gpu == "GeForce RTX 4090")
    screen.query_one("#offer", Select).value = offer.offer_id
    await until(pilot, lambda: "预计费用" in str(screen.query_one("#summary").render()),
                "the summary")
    if disk is not None:
        screen.query_one("#disk", Input).value = disk
        await until(pilot, lambda: "磁盘" in str(screen.query_one("#error").render()),
                    "the disk error")
    await pilot.pause()


# -- snapshots ----------------------------------------------------------------------------------


def test_zh_cards_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_catalog_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _catalog(pilot))


def test_zh_compare_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_catalog_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _catalog(pilot, "space", "space", "down",
                                                          "space", "v"))


def test_zh_fit_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_catalog_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _catalog(pilot, "3"))


def test_zh_cost_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _catalog(pilot, "4"))


def test_zh_new_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE, run_before=_new_form)


def test_zh_new_with_a_disk_error_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _new_form(pilot, disk="0"))


# -- what a user reads --------------------------------------------------------------------------


async def test_catalog_in_chinese_headers_verdicts_and_errors(gputui_home: Path, zh):
    app = make_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_catalog(pilot)
        cards = screen.query_one("#cards", DataTable)
        labels = [str(c.label) for c in cards.columns.values()]
        assert "价格来源" in labels and "VRAM" in labels  # VRAM: a name users search for
        assert "款显卡" in text_of(screen.query_one("#cards-status", Static))
        # every header shows whole at 80 columns: no column is narrower than its header
        for column in cards.columns.values():
            assert column.get_render_width(cards) >= cell_len(str(column.label))

        await pilot.press("3")
        await until(pilot, lambda: screen.fit_answer is not None, "the fit")
        fit = screen.query_one("#fit-table", DataTable)
        assert "每卡 GiB 需要/可用" in [str(c.label) for c in fit.columns.values()]
        body = text_of(screen.query_one("#fit-body", Static))
        assert "单卡需要" in body and "款显卡中" in body and "假设" in body
        assert "KV 缓存" in body and "权重" in body
        # a model too big for one card of any size: the verdict, and why, in Chinese
        screen.query_one("#fit-model", Select).value = "llama-3.1-70b"
        screen.query_one("#fit-job", Select).value = "full"
        await until(pilot, lambda: screen.fit_answer is not None
                    and screen.fit_answer.estimate.job.value == "full", "the 70B fit")
        misses = [fit.get_row(o.card) for o in screen.fit_answer.options if not o.fits]
        assert misses and all("装不下" in str(row[3]) for row in misses)
        assert any("卡装不下：每卡需要" in str(row[7]) for row in misses)
        # the Fit tab's own validation, in Chinese
        screen.query_one("#fit-context", Input).value = "abc"
        await until(pilot, lambda: "必须是整数" in text_of(screen.query_one("#fit-error", Static)),
                    "the context error")
        assert "上下文" in text_of(screen.query_one("#fit-error", Static))

        await pilot.press("4")
        cost = screen.query_one("#cost-table", DataTable)
        await until(pilot, lambda: cost.row_count > 0, "the costs")
        assert {"平台", "计费", "按秒"} <= {str(c.label) for c in cost.columns.values()}
        assert any(str(cost.get_cell(str(i), "billing")).startswith("按")
                   for i in range(cost.row_count))
        screen.query_one("#cost-hours", Input).value = "0"
        await until(pilot, lambda: "不算一次租用" in text_of(screen.query_one("#cost-error", Static)),
                    "the hours error")


async def test_new_form_in_chinese_labels_errors_and_progress(gputui_home: Path, zh):
    app = plain_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        await _new_form(pilot)
        screen = app.screen
        labels = [str(label.render()) for label in screen.query("#form Label")]
        assert {"平台", "镜像", "释放倒计时", "空闲关机"} <= set(labels)
        summary = str(screen.query_one("#summary").render())
        assert "按小时计费" in summary or "按秒计费" in summary or "按分钟计费" in summary
        # the disk range error a person sees as soon as the size is wrong
        screen.query_one("#disk", Input).value = "200000"
        await until(pilot, lambda: "200000 GB 不是有效大小" in str(screen.query_one("#error").render()),
                    "the disk error")
        await pilot.press("ctrl+s")  # refused: nothing rented
        assert not app.services.store.instances_sync()
        screen.query_one("#disk", Input).value = "50"
        await until(pilot, lambda: not str(screen.query_one("#error").render()).strip(),
                    "the error gone")
        # no timer: the warning before renting, in Chinese
        screen.query_one("#no-timer").value = True
        await pilot.pause()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, CreateScreen), "the confirmation")
        shown_text = " ".join(str(w.render()) for w in app.screen.query("Static, Button"))
        assert "没有定时释放" in shown_text and "不定时租用" in shown_text
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen, "back to the form")
        assert not app.services.store.instances_sync()
        screen.query_one("#no-timer").value = False
        # renting: the steps and the toast in Chinese
        progress = screen.query_one("#progress", Static)
        lines: list[str] = []
        update = progress.update

        def record(content="", *args, **kwargs):
            lines.append(str(content))
            return update(content, *args, **kwargs)

        progress.update = record  # type: ignore[method-assign]
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any("已运行" in str(n.message) for n in app._notifications),
                    "the toast")
        assert app.services.store.instances_sync()
        assert lines[:5] == ["已请求 …", "已请求 → 启动中 …", "已请求 → 启动中 → 运行中 ✓",
                             "已请求 → 启动中 → 运行中 → 设置定时释放 …",
                             "已请求 → 启动中 → 运行中 ✓"]


# -- the JSON stays English ---------------------------------------------------------------------


def _has_chinese(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_json_keeps_english_while_the_same_text_shows_in_chinese(zh):
    """The catalog library's verdicts, notes and assumptions are English strings (what `--json`
    and scripts read) that the console shows in Chinese."""
    import json
    from decimal import Decimal

    from gputui.catalog import PriceRow, load_prices
    from gputui.i18n import shown
    from gputui.services import catalog as svc

    answer = svc.fit("Llama-3.1-70B", job="lora", precision="bf16")
    data = json.dumps(answer.as_dict(), ensure_ascii=False)
    assert not _has_chinese(data)
    assert "LoRA keeps the whole base model in bf16" in data  # the note, in English
    note = answer.estimate.notes[-1]
    assert note.startswith("LoRA keeps") and _has_chinese(str(shown(note)))
    assert all(_has_chinese(str(shown(p.assumption))) for p in answer.estimate.all_parts)
    miss = next(o for o in answer.options if not o.fits)
    assert miss.warnings[0].startswith("does not fit")
    assert str(shown(miss.warnings[0])).endswith("GiB")
    assert "装不下" in str(shown(miss.warnings[0]))

    rows = [*load_prices(),
            PriceRow(provider="mylab", tier="day pass", gpu="rtx_4090", package="daily",
                     price_per_gpu_hour=Decimal("0.20"), as_of="2026-11-01", source="test"),
            PriceRow(provider="mylab", tier="on-demand", gpu="rtx_4090",
                     price_per_gpu_hour=Decimal("0.50"), as_of="2026-11-01", source="test")]
    cost = svc.cost("4090", count=1, hours=30, prices=rows)
    data = json.dumps(cost.as_dict(), ensure_ascii=False)
    assert not _has_chinese(data)
    assert "the daily package is cheaper than on-demand hourly" in data
    [even] = cost.break_evens
    assert "包天套餐" in str(shown(even.statement))
    daily = next(c for c in cost.costs if c.row.package == "daily")
    assert daily.as_dict()["notes"] == ["bought as 2 whole daily package(s)"]
    assert str(shown(daily.notes[0])) == "按 2 个完整的包天套餐购买"


async def test_yuan_view_says_in_chinese_which_prices_were_converted(gputui_home: Path, zh):
    """`y`: prices in ¥; a $ price converted at the configured rate says so, in Chinese."""
    from decimal import Decimal

    from gputui.config import Config, MoneySettings
    from gputui.store import SessionStore
    from tests.ui.test_catalog_ui import CatalogApp

    config = Config(money=MoneySettings(cny_per_usd=Decimal("7.2")))
    app = CatalogApp(config=config, store=SessionStore(gputui_home / "state.db"),
                     background=False)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("y")
        await until(pilot, lambda: any("价格以 ¥ 显示" in str(n.message)
                                       for n in app._notifications), "the toast")
        cards = screen.query_one("#cards", DataTable)
        where = [str(cards.get_cell(key, "provider")) for key in cards.rows]
        assert any("（USD，按 ¥7.2/$ 换算）" in w for w in where)
        assert "$/卡·时" not in [str(c.label) for c in cards.columns.values()]
        assert any(str(c.label).startswith("¥/卡·时") for c in cards.columns.values())


async def _yuan_catalog(pilot):
    screen = await open_catalog(pilot)
    await pilot.press("y")
    await until(pilot, lambda: screen.currency == "CNY", "the ¥ view")
    return screen


def _yuan_app(home: Path):
    from decimal import Decimal

    from gputui.config import Config, MoneySettings
    from gputui.store import SessionStore
    from tests.ui.test_catalog_ui import CatalogApp

    return CatalogApp(config=Config(money=MoneySettings(cny_per_usd=Decimal("7.2"))),
                      store=SessionStore(home / "state.db"), background=False)


async def test_yuan_view_heads_every_tab_in_yuan(gputui_home: Path, zh):
    """`y` at 80×24: the sort named in the status line, the compare rows, the Fit tab's prices
    and the Cost tab's figures are all in ¥ — no $/卡·时 left anywhere."""
    app = _yuan_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _yuan_catalog(pilot)
        status = text_of(screen.query_one("#cards-status", Static))
        assert "按 ¥/卡·时" in status and "$" not in status, status
        await pilot.press("space", "down", "space", "v")
        await until(pilot, lambda: "¥/卡·时" in text_of(screen.query_one("#compare-body", Static)),
                    "the compare rows in ¥")
        compare = text_of(screen.query_one("#compare-body", Static))
        assert "$/" not in compare and "TDP 和 ¥ 各行越低越好" in compare, compare
        await pilot.press("3")
        await until(pilot, lambda: screen.query_one("#fit-table", DataTable).row_count, "fit")
        fit = screen.query_one("#fit-table", DataTable)
        prices = [str(fit.get_row_at(i)[2]) for i in range(fit.row_count)]
        assert prices and all(p.startswith("¥") or p == "—" for p in prices), prices
        body = text_of(screen.query_one("#fit-body", Static))
        assert "¥" in body and "$" not in body.split("\n")[1], body
        await pilot.press("4")
        await until(pilot, lambda: screen.query_one("#cost-table", DataTable).row_count, "cost")
        cost = screen.query_one("#cost-table", DataTable)
        figures = [str(cost.get_cell(key, "cost")) for key in cost.rows]
        assert figures and all(f.startswith("¥") for f in figures), figures
        assert "模拟" in [str(cost.get_cell(key, "tier")).split("（")[0] for key in cost.rows]


async def test_yuan_view_headings_in_english_say_yuan(gputui_home: Path):
    app = _yuan_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _yuan_catalog(pilot)
        await pilot.press("3")
        await until(pilot, lambda: screen.query_one("#fit-table", DataTable).row_count, "fit")
        await pilot.press("4")
        await until(pilot, lambda: screen.query_one("#cost-table", DataTable).row_count, "cost")
        for table_id in ("#fit-table", "#cost-table"):
            labels = [str(c.label) for c in screen.query_one(table_id, DataTable).columns.values()]
            assert "¥/h" in labels and "$/h" not in labels, labels
        await pilot.press("y")  # back to $: the headings with it
        await until(pilot, lambda: "$/h" in [str(c.label) for c in screen.query_one(
            "#cost-table", DataTable).columns.values()], "the $ headings")
