"""The console as a renter walks it at 80×24 (issue 16): each test is a defect a user hit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from textual.widgets import Input, Label, Select, Static
from textual.widgets._footer import FooterKey

from gputui.app import SCREENS, GpuTuiApp, screen_class
from gputui.config import Config
from gputui.format import default_label
from gputui.services.hub import Services
from gputui.store import SessionStore
from gputui.ui.create import CreateScreen
from gputui.ui.dialogs import ConfirmScreen, TimerDialog
from gputui.ui.help import HelpScreen
from tests.ui.waits import on_screen, until


def make_app(home: Path, now: datetime | None = None) -> GpuTuiApp:
    store = SessionStore(home / "state.db")
    services = Services(store, Config(), state_dir=home, sandbox_boot_seconds=0)
    app = GpuTuiApp(config=Config(), store=store, services=services, background=False)
    if now is not None:
        app.now = lambda: now
    return app


async def new_form(app: GpuTuiApp, pilot, gpu: str = "GeForce RTX 3090") -> CreateScreen:
    await pilot.press("n")
    await until(pilot, lambda: isinstance(app.screen, CreateScreen) and app.screen.offers,
                "the New screen's offers")
    screen = app.screen
    offer = next(o for o in screen.offers if o.gpu == gpu)
    screen.query_one("#offer", Select).value = offer.offer_id
    await until(pilot, lambda: "for 1×" in str(screen.query_one("#summary", Static).render()),
                "the summary")
    return screen


async def test_new_form_errors_and_progress_are_in_view_at_80x24(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await new_form(app, pilot)
        summary = screen.query_one("#summary", Static)
        assert "projected cost" in str(summary.render())
        screen.query_one("#disk", Input).value = "-50"
        await pilot.pause()
        # no projection from a disk size that is not one
        assert "projected cost" not in str(summary.render())
        await pilot.press("ctrl+s")
        error = screen.query_one("#error", Static)
        await until(pilot, lambda: "Disk" in str(error.render()), "the disk error")
        assert "-50 GB is not a size" in str(error.render())
        assert on_screen(error), error.region
        assert app.store.instances_sync() == []
        # the creation progress has its place in view too
        assert on_screen(screen.query_one("#summary"))
        progress = screen.query_one("#progress", Static)
        progress.update("requested → booting …")
        await pilot.pause()
        assert on_screen(progress), progress.region


async def test_the_focused_field_is_marked(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await new_form(app, pilot)
        screen.query_one("#disk", Input).focus()
        await pilot.pause()
        rows = list(screen.query(".row"))
        focused = [r for r in rows if r.has_focus_within]
        [row] = focused
        assert row.query_one(Label).rich_style.reverse
        others = [r.query_one(Label) for r in rows if r is not row]
        assert not any(label.rich_style.reverse for label in others)


async def test_a_clock_time_just_passed_is_asked_about_naming_the_day(gputui_home: Path):
    now = datetime(2026, 11, 30, 13, 10, tzinfo=UTC)
    app = make_app(gputui_home, now)
    local = now.astimezone()
    passed = (local - timedelta(minutes=1)).strftime("%H:%M")
    tomorrow = (local + timedelta(days=1)).strftime("%a %d %b")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await new_form(app, pilot)
        screen.query_one("#release", Input).value = passed
        await pilot.pause()
        error = str(screen.query_one("#error", Static).render())
        assert f"{passed} has passed today" in error and tomorrow in error
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen)
                    and tomorrow in str(app.screen.query_one("#question").render()),
                    "the question naming tomorrow")
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, CreateScreen), "back on the form")
        assert app.store.instances_sync() == []


async def test_timer_dialog_asks_before_a_passed_clock_time(gputui_home: Path):
    now = datetime(2026, 11, 30, 13, 10, tzinfo=UTC)
    app = make_app(gputui_home, now)
    passed = (now.astimezone() - timedelta(minutes=1)).strftime("%H:%M")
    results: list[object] = []
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(TimerDialog("lora", None, lambda: now), results.append)
        await until(pilot, lambda: isinstance(app.screen, TimerDialog)
                    and app.screen.query_one(Input).has_focus, "the timer dialog")
        await pilot.press(*passed, "enter")
        error = app.screen.query_one("#timer-error", Static)
        await until(pilot, lambda: "has passed today" in str(error.render()), "the warning")
        assert results == []
        await pilot.press("enter")
        await until(pilot, lambda: results, "the answer")
        assert (results[0] - now) > timedelta(hours=23)


async def test_every_footer_key_is_whole_at_80_columns(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        for mode, key, label, spec, _what in SCREENS:
            cls = screen_class(spec)
            await pilot.press(key)
            await until(pilot, lambda cls=cls: isinstance(app.screen, cls)
                        and list(app.screen.query(FooterKey)), f"the {mode} footer")
            await pilot.pause()
            keys = list(app.screen.query(FooterKey))
            texts = [str(k.render()) for k in keys]
            assert texts[0].startswith("?"), texts
            right = max(k.region.right for k in keys)
            assert right <= 80, (mode, texts)
            for k in keys:  # none cut: each shows its whole label
                assert k.region.width >= len(k.key_display) + 1 + len(k.description), texts
            # the screen on view has no key of its own in the footer
            assert f"{key} {label}" not in texts
            if any(t.startswith("? More keys") for t in texts):
                continue
            # when nothing was dropped, every screen's key is there
            others = [f"{k} {lab}" for m, k, lab, _s, _w in SCREENS if m != mode]
            assert all(o in texts for o in others), texts


async def test_help_shows_bracket_keys_and_readable_names(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("m", "o"):
            await pilot.press(key)
            await until(pilot, lambda: app.screen.TITLE in ("Monitor", "Ollama"), "the screen")
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
            text = str(app.screen.query_one("#help-text").render())
            assert "\n  [          Prev" in text and "\n  ]          Next" in text, text
            assert "," not in "".join(line[:12] for line in text.splitlines())
            if key == "o":
                assert "x / esc    Cancel pull" in text
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, HelpScreen), "help closed")


async def test_ctrl_c_says_how_to_quit_without_markup(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._notifications, "a notification")
        [note] = list(app._notifications)
        assert "Press q to quit" in note.message and "[b]" not in note.message


def test_default_label_is_the_model_not_a_piece_of_a_parenthesis():
    assert default_label("GeForce RTX 4090 D (China SKU)") == "4090d"
    assert default_label("GeForce RTX 4090") == "4090"
    assert default_label("H20 96GB (China SKU)") == "h20"
    assert default_label("A100 80GB SXM4") == "a100"


async def test_a_label_with_brackets_reads_literally_on_the_ollama_screen(gputui_home: Path):
    from decimal import Decimal

    from gputui.models import BillingRule, Instance, InstanceStatus
    from gputui.ui.ollama import OllamaScreen
    from tests.ui.waits import shown

    app = make_app(gputui_home)
    app.store.put_instance_sync(Instance(
        id="i-1", name="lora[b]x", provider="ssh", gpu="NVIDIA GeForce RTX 4090", gpu_count=1,
        billing=BillingRule(price_per_hour=Decimal("0.5")), status=InstanceStatus.RUNNING))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("o")
        screen = await shown(pilot, OllamaScreen)
        select = screen.query_one("#instance", Select)
        await until(pilot, lambda: select.value == "i-1", "the instance chosen")
        await pilot.pause()
        assert "lora[b]x · 1× RTX 4090" in str(select.query_one("SelectCurrent Static").render())


def test_ollama_never_shows_more_free_memory_than_the_card_has():
    from gputui.services.ollama import GpuInfo
    from gputui.ui.ollama import gpu_label

    # nvidia-smi's MiB in GiB: a 24 GB card is 24.0 GiB (not "25.4 GB"), and a free figure
    # above the total (a racy reading) is capped at the total
    card = GpuInfo(0, None, "NVIDIA GeForce RTX 4090", 24564, 0, 24564)
    assert gpu_label(card) == "0 RTX 4090 · 24.0 GiB free"
    racy = GpuInfo(0, None, "NVIDIA GeForce RTX 4090", 24564, 0, 25000)
    assert gpu_label(racy) == "0 RTX 4090 · 24.0 GiB free"
