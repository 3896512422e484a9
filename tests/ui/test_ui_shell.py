"""The console shell: every screen reachable by key, by palette and from help, at 80×24 and 200×60."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from textual.widgets import DataTable

from gputui.app import SCREENS, GpuTuiApp, screen_class
from gputui.config import Config, load_config
from gputui.models import BillingRule, Instance, InstanceStatus, Lease
from gputui.store import SessionStore
from gputui.ui.help import HelpScreen
from gputui.ui.widgets import TopBar
from tests.ui.waits import shown, until

SIZES = [(80, 24), (200, 60)]
FROZEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def settle(app: GpuTuiApp, pilot, screen_cls: type) -> None:
    """Wait until a mode switch has finished (a switch is asynchronous in Textual)."""
    await shown(pilot, screen_cls)


def make_app(home: Path, **kw) -> GpuTuiApp:
    store = SessionStore(home / "state.db")
    kw.setdefault("background", False)
    app = GpuTuiApp(config=Config(), store=store, **kw)
    app.now = lambda: FROZEN
    return app


@pytest.mark.parametrize("size", SIZES)
async def test_every_screen_by_its_key(gputui_home: Path, size: tuple[int, int]):
    app = make_app(gputui_home)
    async with app.run_test(size=size) as pilot:
        for mode, key, _label, spec, _what in SCREENS[1:] + SCREENS[:1]:
            screen_cls = screen_class(spec)
            await pilot.press(key)
            await settle(app, pilot, screen_cls)
            assert app.current_mode == mode
            assert isinstance(app.screen, screen_cls)
            bar = app.screen.query_one(TopBar)
            assert bar.title == screen_cls.TITLE
            # nothing essential cut off: the top bar and footer fit the width
            assert bar.outer_size.width == size[0]


@pytest.mark.parametrize("size", SIZES)
async def test_every_screen_by_the_palette(gputui_home: Path, size: tuple[int, int]):
    app = make_app(gputui_home)
    async with app.run_test(size=size) as pilot:
        for mode, _key, label, spec, _what in SCREENS[1:]:
            screen_cls = screen_class(spec)
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*f"Go to {label}")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await settle(app, pilot, screen_cls)
            assert app.current_mode == mode, label
            assert isinstance(app.screen, screen_cls)


async def test_help_lists_every_binding(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await shown(pilot, HelpScreen)
        text = app.screen.text()
        for _mode, key, label, _cls, _what in SCREENS:
            assert f"{key}" in text and label in text
        assert "Quit" in text and "ctrl+p" in text
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen), "help closed")


async def test_q_quits(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (0, None)
    assert not app.is_running


async def test_empty_home_shows_what_to_do(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)):
        hint = app.screen.query_one("#hint")
        assert hint.display and "Press n to rent" in str(hint.render()).replace("[b]", "")


def _instance(iid: str, name: str) -> Instance:
    return Instance(
        id=iid, name=name, provider="sandbox", gpu="GeForce RTX 4090", gpu_count=2,
        billing=BillingRule(price_per_hour=Decimal("0.80")), status=InstanceStatus.RUNNING,
        created_at=datetime(2026, 11, 29, 11, 0, tzinfo=UTC),
        running_since=datetime(2026, 11, 29, 11, 0, tzinfo=UTC),
    )


async def test_home_lists_instances_and_meter(gputui_home: Path):
    app = make_app(gputui_home)
    app.store.put_instance_sync(_instance("a", "llama-ft"))
    app.store.put_lease_sync(Lease(instance_id="a", release_at=datetime(2026, 11, 29, 13, 30, tzinfo=UTC)))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        assert table.row_count == 1
        assert table.get_cell("a", "release") == "1h 30m"
        assert table.get_cell("a", "cost") == "$0.80"
        assert not app.screen.query_one("#hint").display
        bar = app.screen.query_one(TopBar)
        assert "1 live $0.80/h" in str(bar.render())
        # a change made by a service appears without a reload
        app.store.put_instance_sync(_instance("b", "second"))
        await pilot.pause()
        assert table.row_count == 2


async def test_small_terminal_says_so(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        assert "needs 80×24" in str(app.screen.query_one(TopBar).render())
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert "needs" not in str(app.screen.query_one(TopBar).render())


async def test_theme_from_option_is_remembered(gputui_home: Path):
    app = make_app(gputui_home, theme_name="gputui-light")
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.theme == "gputui-light"
        await pilot.pause()
    assert load_config(gputui_home / "config.toml").ui.theme == "gputui-light"


async def test_broken_theme_file_warns_and_falls_back(gputui_home: Path):
    themes = gputui_home / "themes"
    themes.mkdir(parents=True)
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    app = make_app(gputui_home, theme_name="broken")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == "gputui-dark"
        messages = [n.message for n in app._notifications]
        assert any("broken.toml" in m and "not a colour" in m for m in messages)
        assert any("unknown theme 'broken'" in m for m in messages)


FIRST_FRAME_MODULES = """
import sys
from gputui.app import GpuTuiApp
from gputui.config import load_config

async def auto(pilot):
    await pilot.pause()
    pilot.app.exit()

GpuTuiApp(config=load_config(), background=False).run(headless=True, auto_pilot=auto)
print(" ".join(sorted(sys.modules)))
"""


def test_the_first_frame_loads_no_provider_client_or_ssh(gputui_home: Path):
    """Start-up time: the Lambda client, the sandbox and asyncssh load when first used."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = dict(os.environ, GPUTUI_HOME=str(gputui_home), LAMBDA_API_KEY="set-but-unused",
               PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", FIRST_FRAME_MODULES], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    loaded = set(out.stdout.split())
    assert "gputui.ui.home" in loaded  # it did draw Home
    for lazy in ("gputui.providers.lambda_cloud", "gputui.providers.sandbox", "asyncssh",
                 "httpx", "gputui.services.costs"):
        assert lazy not in loaded, lazy


async def test_a_provider_that_cannot_be_made_is_left_out_with_a_reason(gputui_home: Path):
    from gputui.services.hub import InvalidRequest, Services

    cfg = Config()
    cfg.providers.lambda_cloud.enabled = True
    cfg.providers.lambda_cloud.base_url = "not a url"
    store = SessionStore(gputui_home / "state.db")
    notices: list[str] = []
    store.subscribe(lambda ev: notices.append(getattr(ev, "text", "")))
    svc = Services(store, cfg, state_dir=gputui_home)
    assert "lambda" in svc.providers  # wanted; made on first use
    with pytest.raises(InvalidRequest, match="unknown or disabled provider 'lambda'"):
        svc.provider("lambda")
    assert any("lambda" in n.lower() for n in notices)  # said why
    assert [name for name, _ in svc.providers.items()] == ["sandbox", "ssh"]
    await svc.close()


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_a_long_label_does_not_push_status_and_cost_off_80_columns(
        gputui_home: Path, language: str):
    """A 60-cell label (Chinese and markup-looking text) is cut in the middle on Home and Costs:
    the status, the countdown and the cost stay on an 80-column screen."""
    from gputui.i18n import set_language
    from gputui.ui.costs import CostsScreen
    from gputui.ui.home import HomeScreen

    set_language(language)
    store = SessionStore(gputui_home / "state.db")
    t0 = FROZEN
    long = "[b]lora[/b]x训练任务-非常非常长的名字-qwen2.5-72b-instruct-00d7"
    store.put_instance_sync(Instance(
        id="i-1", name=long, provider="sandbox", gpu="GeForce RTX 4090", gpu_count=1,
        billing=BillingRule(price_per_hour=Decimal("0.35")), status=InstanceStatus.RUNNING,
        created_at=t0, running_since=t0))
    store.close()
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot, HomeScreen)

        def row_line() -> str:
            lines = [strip.text for strip in app.screen._compositor.render_strips()]
            return next((line for line in lines if "00d7" in line), "")

        await until(pilot, lambda: "$0.00" in row_line(), "the row with its cost on screen")
        line = row_line()
        assert "[b]lora" in line and "…" in line and line.index("00d7") < 30
        assert ("running" if language == "en" else "运行中") in line
        await pilot.press("c")
        await settle(app, pilot, CostsScreen)
        await until(pilot, lambda: "$0.35" in row_line(), "the Costs row with its rate")


async def test_a_screen_back_in_view_is_restyled_only_when_the_app_changed(gputui_home: Path):
    """Textual works out the CSS of every widget of a screen again each time it comes back in
    view (~50 ms for a screen of many widgets, on every switch). The console skips that where
    nothing the CSS reads of the app changed while the screen was away — and still does it
    where something did (the app losing the terminal's focus, a theme), so nothing is drawn
    in stale colours."""
    from gputui.ui.jobs import JobsScreen

    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await settle(app, pilot, JobsScreen)
        jobs = app.screen
        await pilot.press("h")
        await settle(app, pilot, screen_class(SCREENS[0][3]))
        restyled: list[int] = []
        update_nodes = app.stylesheet.update_nodes

        def counting(nodes, animate=False):  # noqa: ANN001, ANN202
            nodes = list(nodes)
            restyled.append(len(nodes))
            return update_nodes(nodes, animate=animate)

        app.stylesheet.update_nodes = counting  # type: ignore[method-assign]
        widgets = len(list(jobs.walk_children(with_self=True)))
        await pilot.press("j")
        await settle(app, pilot, JobsScreen)
        assert sum(restyled) < widgets // 2  # not the whole screen again

        await pilot.press("h")
        await settle(app, pilot, screen_class(SCREENS[0][3]))
        app.add_class("-changed")  # the app's classes change meanwhile (CSS may read them)
        await pilot.pause()
        restyled.clear()
        await pilot.press("j")
        await settle(app, pilot, JobsScreen)
        assert sum(restyled) >= widgets  # Jobs comes back styled for the app as it is now

        # a theme changed while Jobs was away: it comes back in the new theme's colours
        await pilot.press("h")
        await settle(app, pilot, screen_class(SCREENS[0][3]))
        before = jobs.query_one(TopBar).styles.background
        app.theme = "textual-light"
        await pilot.pause()
        on_home = app.screen.query_one(TopBar).styles.background  # Home, drawn in the new one
        await pilot.press("j")
        await settle(app, pilot, JobsScreen)
        await pilot.pause()
        after = jobs.query_one(TopBar).styles.background
        assert after != before and after == on_home
