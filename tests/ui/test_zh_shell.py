"""The console's frame in Chinese: Home, the help, the dialogs, toasts, the footer and the top
bar; and the language switched from the palette without a restart (every screen redrawn, the
choice kept in config.toml). SVG snapshots at 80×24 with fixed data and a frozen clock."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static
from textual.widgets._footer import FooterKey

from gputui.app import GpuTuiApp
from gputui.config import Config, config_path
from gputui.i18n import _, cell_len, current_language
from gputui.store import SessionStore
from gputui.ui.widgets import TopBar
from tests.ui.test_snapshots import app_with_data
from tests.ui.waits import shown, until

FROZEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SIZE = (80, 24)




def make_app(home: Path, *, instances: bool) -> GpuTuiApp:
    """Home with two sandbox instances (one with a timer, one without), or none."""
    if instances:
        return app_with_data(home)
    app = GpuTuiApp(config=Config(), store=SessionStore(home / "state.db"),
                    remember_theme=False, background=False)
    app.now = lambda: FROZEN
    return app


async def _home_ready(pilot) -> None:
    from gputui.ui.home import HomeScreen

    await shown(pilot, HomeScreen)
    await pilot.pause()


def footer_labels(app: GpuTuiApp) -> list[str]:
    return [f"{k.key_display} {k.description}" for k in app.screen.query(FooterKey)]


def top_bar(app: GpuTuiApp) -> str:
    return app.screen.query_one(TopBar).render().plain


# ------------------------------------------------------------------------------------------
# Snapshots
# ------------------------------------------------------------------------------------------


def test_zh_home_empty_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(make_app(gputui_home, instances=False), terminal_size=SIZE,
                        run_before=_home_ready)


def test_zh_home_with_instances_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(make_app(gputui_home, instances=True), terminal_size=SIZE,
                        run_before=_home_ready)


def test_zh_help_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    async def help_on_home(pilot) -> None:
        from gputui.ui.help import HelpScreen

        await _home_ready(pilot)
        await pilot.press("question_mark")
        await shown(pilot, HelpScreen)
        await pilot.pause()

    assert snap_compare(make_app(gputui_home, instances=True), terminal_size=SIZE,
                        run_before=help_on_home)


def _after_key(key: str, cls_name: str):
    async def run(pilot) -> None:
        from gputui.ui import dialogs

        await _home_ready(pilot)
        await pilot.press(key)
        await shown(pilot, getattr(dialogs, cls_name))
        await pilot.pause()

    return run


def test_zh_confirm_release_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(make_app(gputui_home, instances=True), terminal_size=SIZE,
                        run_before=_after_key("r", "ConfirmScreen"))


def test_zh_timer_dialog_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(make_app(gputui_home, instances=True), terminal_size=SIZE,
                        run_before=_after_key("t", "TimerDialog"))


def test_zh_add_host_dialog_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(make_app(gputui_home, instances=False), terminal_size=SIZE,
                        run_before=_after_key("a", "AddHostDialog"))


def test_zh_budget_dialog_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    async def budget(pilot) -> None:
        from gputui.config import BudgetSettings
        from gputui.ui.dialogs import BudgetDialog

        await _home_ready(pilot)
        pilot.app.push_screen(BudgetDialog(BudgetSettings(daily=Decimal("25")), "USD"))
        screen = await shown(pilot, BudgetDialog)
        screen.query_one("#budget-monthly").value = "0"  # refused: not a cap
        screen.query_one("#budget-monthly").focus()
        await pilot.press("enter")
        await until(pilot, lambda: "不是有效上限" in str(
            screen.query_one("#budget-error", Static).render()), "the budget error")
        await pilot.pause()

    assert snap_compare(make_app(gputui_home, instances=False), terminal_size=SIZE,
                        run_before=budget)


# ------------------------------------------------------------------------------------------
# What a user reads
# ------------------------------------------------------------------------------------------


async def test_zh_frame_toast_and_footer(gputui_home: Path, zh):
    app = make_app(gputui_home, instances=False)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        assert "实例" in top_bar(app) and "没有计费" in top_bar(app)
        labels = footer_labels(app)
        # whole keys, cut by cells: two more than in English (which ends at "n New"); the rest
        # are behind "? 更多按键"
        assert labels == ["? 更多按键", "q 退出", "e +1h", "t 定时", "r 释放", "a 添加主机", "g 选卡",
                          "n 新建", "m 监控", "j 任务"]
        assert sum(cell_len(label) + 1 for label in labels) <= 79
        assert "还没有实例" in str(app.screen.query_one("#hint", Static).render())
        await pilot.press("e")  # +1h with nothing selected
        await until(pilot, lambda: any(n.message == "没有选中实例。" for n in app._notifications),
                    "the Chinese toast")


async def test_zh_home_columns_and_cells(gputui_home: Path, zh, utc_clock):
    app = make_app(gputui_home, instances=True)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        table = app.screen.query_one(DataTable)
        headers = [str(c.label) for c in table.columns.values()]
        assert headers[:7] == ["名称", "GPU", "状态", "释放倒计时", "费用", "队列", "连接"]
        assert [str(c) for c in table.get_row("a1")][2:4] == ["运行中", "1小时45分"]
        assert str(table.get_row("a2")[3]) == "⚠ 无定时器"
        assert "2 台计费" in top_bar(app)


async def test_zh_dialog_validation_errors(gputui_home: Path, zh):
    from textual.widgets import Input

    from gputui.ui.dialogs import AddHostDialog, TimerDialog

    app = make_app(gputui_home, instances=True)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        await pilot.press("a")
        dialog = await shown(pilot, AddHostDialog)
        dialog.query_one("#line", Input).value = "ssh -p 2222 root@127.0.0.1"
        dialog.query_one("#price", Input).value = "abc"
        dialog.query_one("#gpu", Input).focus()
        await pilot.press("enter")
        error = dialog.query_one("#host-error", Static)
        await until(pilot, lambda: str(error.render()).startswith("价格：'abc' 不是数字"),
                    "the price error in Chinese")
        await pilot.press("escape")
        await _home_ready(pilot)
        await pilot.press("t")
        timer = await shown(pilot, TimerDialog)
        assert "qwen-lora 的释放定时器" in str(timer.query_one(Static).render())
        await pilot.press("9", "9", ":", "9", "9", "enter")
        error = timer.query_one("#timer-error", Static)
        await until(pilot, lambda: str(error.render()) == "'99:99' 不是时刻（试试 18:30）",
                    "the timer error in Chinese")


async def test_zh_help_lists_every_key_translated(gputui_home: Path, zh):
    from gputui.ui.help import HelpScreen

    app = make_app(gputui_home, instances=False)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        await pilot.press("question_mark")
        help_screen = await shown(pilot, HelpScreen)
        text = help_screen.text()
        for line in ("本界面（实例）", "所有界面", "e          +1h", "S          开机",
                     "a          添加主机", "?          帮助", "ctrl+p     命令面板",
                     "m          监控"):
            assert line in text, line
        assert "Help" not in text and "Quit" not in text


# ------------------------------------------------------------------------------------------
# Switching from the palette, without a restart
# ------------------------------------------------------------------------------------------


async def _palette(pilot, typed: str) -> str:
    """Open the command palette, type `typed`, and run the one command it finds; the
    palette's prompt as it read."""
    from textual.command import CommandInput, CommandList, CommandPalette

    app = pilot.app
    await pilot.press("ctrl+p")
    palette = await shown(pilot, CommandPalette)
    prompt = str(palette.query_one(CommandInput).placeholder)
    await pilot.press(*typed)
    commands = palette.query_one(CommandList)
    await until(pilot, lambda: commands.option_count == 1
                and "Language" in str(commands.get_option_at_index(0).prompt)
                and commands.highlighted == 0, "one command")
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, CommandPalette), "the palette closed")
    return prompt


async def _on(pilot, key: str, title: str) -> None:
    app = pilot.app
    await pilot.press(key)
    await until(pilot, lambda: getattr(app.screen, "TITLE", "") == title
                and app.screen.is_mounted and app.screen.query(FooterKey), title)
    await pilot.pause()


async def test_language_switch_from_the_palette_redraws_every_screen(gputui_home: Path):
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = '# my settings\n[ui]\ntheme = "gputui-16"  # readable here\n\n[lease]\ndefault_release = "3h"\n'
    path.write_text(kept, encoding="utf-8")
    app = make_app(gputui_home, instances=True)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        await _on(pilot, "m", "Monitor")  # a screen made before the switch
        await _on(pilot, "h", "Instances")
        assert "Instances" in top_bar(app) and "q Quit" in footer_labels(app)

        assert await _palette(pilot, "language中") == "Search for commands…"
        await until(pilot, lambda: current_language() == "zh", "Chinese")
        await until(pilot, lambda: "实例" in top_bar(app) and "q 退出" in footer_labels(app),
                    "Home in Chinese")
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2, "Home's rows back")
        assert str(next(iter(table.columns.values())).label) == "名称"
        assert str(table.get_row("a1")[0]) == "qwen-lora"
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        assert data["language"] == "zh"
        text = path.read_text(encoding="utf-8")
        assert text == kept.replace("[ui]", 'language = "zh"\n[ui]')  # the rest as it was

        await _on(pilot, "g", "GPU catalog")
        assert _("GPU catalog") in top_bar(app) and "q 退出" in footer_labels(app)
        assert "h 首页" in footer_labels(app)
        await _on(pilot, "m", "Monitor")  # made before the switch: made again, in Chinese
        assert "监控" in top_bar(app) and "q 退出" in footer_labels(app)

        assert await _palette(pilot, "languageenglish") == "搜索命令…"
        await until(pilot, lambda: current_language() == "en", "English")
        await until(pilot, lambda: "Monitor" in top_bar(app) and "q Quit" in footer_labels(app),
                    "Monitor in English")
        await _on(pilot, "h", "Instances")
        assert "Instances" in top_bar(app) and "a Add host" in footer_labels(app)
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2, "Home's rows")
        assert str(next(iter(table.columns.values())).label) == "Name"
        assert tomllib.loads(path.read_text(encoding="utf-8"))["language"] == "en"
        assert any(n.message == "Language: English" for n in app._notifications)


async def test_switches_in_quick_succession_end_in_the_last_language(gputui_home: Path):
    app = make_app(gputui_home, instances=True)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        for lang in ("zh", "en", "zh"):
            app.switch_language(lang)
        await until(pilot, lambda: not [w for w in app.workers if w.group == "language"],
                    "the switches done")
        await until(pilot, lambda: "实例" in top_bar(app), "Home in Chinese")
        assert app.current_mode == "home" and "_relabel" not in app._modes
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2, "Home's rows")
        assert tomllib.loads(config_path().read_text(encoding="utf-8"))["language"] == "zh"


async def test_switch_keeps_the_monitors_live_data(gputui_home: Path, utc_clock):
    """The Monitor made again after a switch draws the telemetry it had (the streams are the
    session's, not the screen's)."""
    from tests.ui.test_screen_snapshots import _monitor, _monitor_app

    app = _monitor_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        await _monitor(pilot, detail=False)
        before = app.screen
        await _palette(pilot, "language中")
        await until(pilot, lambda: app.screen is not before and app.screen.is_mounted
                    and "fixed/0" in app.screen.query_one("#gpus").rows, "the GPU row again")
        assert "监控" in top_bar(app)


async def test_switch_with_a_broken_config_still_switches(gputui_home: Path):
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("language = [\n", encoding="utf-8")
    app = make_app(gputui_home, instances=False)
    async with app.run_test(size=SIZE) as pilot:
        await _home_ready(pilot)
        await _palette(pilot, "language中")
        await until(pilot, lambda: "实例" in top_bar(app), "Home in Chinese")
        await until(pilot, lambda: any(n.message.startswith("无法记住语言设置")
                                       for n in app._notifications), "the warning")
    assert path.read_text(encoding="utf-8") == "language = [\n"  # left as it was


@pytest.mark.parametrize(("before", "after"), [
    (None, 'language = "zh"\n'),
    ('# mine\n[ui]\ntheme = "gputui-16"\n', '# mine\nlanguage = "zh"\n[ui]\ntheme = "gputui-16"\n'),
    ('language = "en"  # was\n\n[ui]\ntheme = "gputui-16"\n',
     'language = "zh"\n\n[ui]\ntheme = "gputui-16"\n'),
    ('[ui]\ntheme = "gputui-16"\n', 'language = "zh"\n[ui]\ntheme = "gputui-16"\n'),
])
def test_language_setting_keeps_the_rest_of_the_file(gputui_home: Path, before, after):
    from gputui.config import load_config, set_language_setting

    path = config_path()
    if before is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(before, encoding="utf-8")
    set_language_setting("zh")
    assert path.read_text(encoding="utf-8") == after
    assert load_config().language == "zh"
    assert path.stat().st_mode & 0o077 == 0  # as every write of the config: owner only
