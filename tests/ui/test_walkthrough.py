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
            text = app.screen.text()
            assert "\n  [          Prev" in text and "\n  ]          Next" in text, text
            assert "," not in "".join(line[:12] for line in text.splitlines())
            if key == "o":
                assert "x / esc    Cancel pull" in text
            # every key in view at 80×24, without scrolling
            for widget in app.screen.query("#help-text, #help-all"):
                assert on_screen(widget) and widget.region.bottom <= 24, widget.region
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


async def test_costs_exports_from_the_screen_and_the_palette_finds_export(gputui_home: Path):
    import csv

    from tests.ui.test_costs_ui import FROZEN, seeded_app

    app = seeded_app(gputui_home, [FROZEN])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: app.screen.TITLE == "Costs", "Costs")
        totals = str(app.screen.query_one("#totals", Static).render())
        assert "gputui costs --csv" in totals and "B sets them" in totals
        await pilot.press("x")
        exports = gputui_home / "exports"
        await until(pilot, lambda: list(exports.glob("costs-*.csv")), "the CSV file")
        [path] = list(exports.glob("costs-*.csv"))
        rows = list(csv.DictReader(path.open()))
        assert sorted(r["name"] for r in rows) == ["qwen-serve", "run-0", "run-1"]
        assert any(str(path) in n.message for n in app._notifications)
        # the palette finds it by the word a user types
        commands = [c.title for c in app.get_system_commands(app.screen)]
        assert any("export" in t.lower() for t in commands)


async def test_budgets_are_set_from_the_costs_screen_into_the_config(gputui_home: Path):
    from decimal import Decimal

    from gputui.config import load_config
    from gputui.ui.dialogs import BudgetDialog
    from tests.ui.test_costs_ui import FROZEN, seeded_app
    from tests.ui.waits import shown

    app = seeded_app(gputui_home, [FROZEN])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: app.screen.TITLE == "Costs", "Costs")
        await pilot.press("B")
        dialog = await shown(pilot, BudgetDialog)
        await pilot.press(*"-5", "enter")
        error = dialog.query_one("#budget-error", Static)
        await until(pilot, lambda: "above 0" in str(error.render()), "the refusal")
        assert "Per day: '-5' is not a cap" in str(error.render())
        dialog.query_one("#budget-daily", Input).value = "25"
        dialog.query_one("#budget-per_instance", Input).value = "$4.50"
        dialog.query_one("#budget-daily", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.TITLE == "Costs", "back on Costs")
        saved = load_config()
        assert saved.budget.daily == Decimal("25") and saved.budget.per_instance == Decimal("4.5")
        assert saved.budget.monthly is None
        await until(pilot, lambda: "day cap $25.00" in str(app.screen.query_one("#totals").render()),
                    "the cap on screen")


async def test_the_cost_tab_refuses_zero_and_absurd_hours(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: app.screen.TITLE == "GPU catalog", "the catalog")
        await pilot.press("4")
        screen = app.screen
        error = screen.query_one("#cost-error", Static)
        for typed, said in (("0", "0 h is not a rental"), ("99999999", "over a year"),
                            ("soon", "not a number of hours")):
            screen.query_one("#cost-hours", Input).value = typed
            await until(pilot, lambda said=said: said in str(error.render()), said)
            assert on_screen(error)
            assert screen.query_one("#cost-table").row_count == 0
        screen.query_one("#cost-hours", Input).value = "10"
        await until(pilot, lambda: not error.display, "the error cleared")


async def test_the_selected_monitor_row_reads_in_16_colours(gputui_home: Path):
    """Yellow/green cell colours on the cursor's white made the selected row unreadable in the
    16-colour theme: the cursor's own colours win on its row."""
    from rich.text import Text
    from textual.app import App, ComposeResult

    from gputui.ui.livetable import LiveColumn, LiveTable
    from gputui.ui.theming import load_themes

    themes = load_themes([]).themes

    class Sixteen(App):
        def compose(self) -> ComposeResult:
            yield LiveTable(id="t")

        def on_mount(self) -> None:
            self.register_theme(themes["gputui-16"])
            self.theme = "gputui-16"
            table = self.query_one(LiveTable)
            table.set_columns([LiveColumn("name", "Name", 8), LiveColumn("note", "Note", 10)])
            table.set_row("a", [Text("train"), Text("⚑ split?", style="bold yellow")])
            table.set_row("b", [Text("serve"), Text("live", style="green")])
            table.focus()

    app = Sixteen()
    async with app.run_test(size=(40, 6)) as pilot:
        table = app.query_one(LiveTable)
        await pilot.pause()
        cursor = table._cursor_style()
        strip = table.render_line(1)  # the first row: under the cursor
        assert "split?" in strip.text
        styles = {(seg.style.color, seg.style.bgcolor) for seg in strip if seg.text.strip()}
        assert styles == {(cursor.color, cursor.bgcolor)}, styles
        assert cursor.color != cursor.bgcolor
        other = table.render_line(2)  # rows off the cursor keep their colours
        assert any(seg.style.color and seg.style.color.name == "green" for seg in other)


async def test_add_host_says_a_price_must_be_positive_and_an_error_once(gputui_home: Path):
    from gputui.ui.dialogs import AddHostDialog
    from tests.ui.waits import shown

    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        dialog = await shown(pilot, AddHostDialog)
        dialog.query_one("#line", Input).value = "ssh -p 1 root@127.0.0.1"
        dialog.query_one("#price", Input).value = "-3"
        dialog.query_one("#gpu", Input).focus()
        await pilot.press("enter")
        error = dialog.query_one("#host-error", Static)
        await until(pilot, lambda: "price" in str(error.render()), "the price refusal")
        assert "must be more than 0" in str(error.render())
        dialog.query_one("#price", Input).value = "2.50"
        dialog.query_one("#gpu", Input).focus()
        await pilot.press("enter")
        # nothing listens on port 1: the dialog comes back saying why, naming the host once
        await until(pilot, lambda: isinstance(app.screen, AddHostDialog) and app.screen is not dialog
                    and str(app.screen.query_one("#host-error", Static).render()).strip(),
                    "the dialog back with the reason")
        said = str(app.screen.query_one("#host-error", Static).render())
        assert said.count("127.0.0.1:1") == 1, said


def test_the_catalog_filtered_to_the_sandbox_shows_the_prices_new_charges():
    """One price source per provider: the sandbox's offers, as the New list shows them, are the
    prices the catalog shows for the sandbox, rounded by the same rule."""
    from gputui.format import format_money
    from gputui.providers.sandbox import sandbox_offers
    from gputui.services import catalog as svc

    offers = sandbox_offers()
    rows = [*svc.load_prices(), *svc.offer_price_rows(offers, "2026-11-30")]
    cards = {c.spec.name: c for c in svc.card_rows(rows, svc.Filters(provider="sandbox"))}
    price_col = svc.get_column("price")
    checked = 0
    for offer in offers:
        card = cards.get(offer.gpu)
        if card is None:
            continue
        assert price_col.show(card) == format_money(offer.price_per_gpu_hour), offer.gpu
        checked += 1
    assert checked >= 15
    # the rounding rule: a rate of $0.165 reads $0.17 per GPU, and 4 of them $0.66
    from decimal import Decimal

    assert format_money(Decimal("0.165")) == "$0.17" and format_money(Decimal("0.66")) == "$0.66"


async def test_the_top_bar_adds_up_as_the_home_rows_read(gputui_home: Path):
    from decimal import Decimal

    from textual.widgets import DataTable

    from gputui.models import BillingRule, Instance, InstanceStatus
    from gputui.ui.widgets import TopBar

    app = make_app(gputui_home, datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    for n, price in enumerate(["0.35", "0.165", "0.165"]):
        inst = Instance(id=f"i{n}", name=f"job{n}", provider="ssh", gpu="RTX 3090",
                        billing=BillingRule(price_per_hour=Decimal(price)),
                        status=InstanceStatus.RUNNING,
                        created_at=datetime(2026, 11, 30, 11, 0, tzinfo=UTC))
        inst.mark_running(inst.created_at)
        app.store.put_instance_sync(inst)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 3, "three rows")
        rates = [str(table.get_cell(f"i{n}", "rate")) for n in range(3)]
        assert rates == ["$0.35", "$0.17", "$0.17"]
        shown = sum(Decimal(r.lstrip("$")) for r in rates)
        bar = app.screen.query_one(TopBar)
        await until(pilot, lambda: f"${shown:.2f}/h" in str(bar.render()), "the bar's total")


async def test_catalog_sort_cycles_through_the_columns_in_view(gputui_home: Path):
    from textual.widgets import DataTable

    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: app.screen.TITLE == "GPU catalog", "the catalog")
        screen = app.screen
        table = screen.query_one("#cards", DataTable)
        visible = screen.visible_sort_keys()
        assert 3 <= len(visible) < 12  # at 80 columns, some are a scroll away
        seen = []
        for _ in range(len(visible) + 1):
            await pilot.press("s")
            await pilot.pause()
            seen.append(screen.sort_key)
        assert set(seen) == set(visible)  # every visible one, and none hidden
        x = 0
        for column in table.columns.values():  # the sorted column is the one with the arrow
            width = column.get_render_width(table)
            if column.key.value == screen.sort_key:
                assert x + width <= table.size.width and ("▲" in str(column.label)
                                                          or "▼" in str(column.label))
            x += width


async def test_the_ledger_reason_and_home_provider_are_whole_at_80_columns(gputui_home: Path):
    from textual.widgets import DataTable

    from tests.ui.test_costs_ui import FROZEN, seeded_app

    def right_edge(table: DataTable, key: str) -> int:
        x = 0
        for column in table.columns.values():
            x += column.get_render_width(table)
            if column.key.value == key:
                return x
        raise KeyError(key)

    app = seeded_app(gputui_home, [FROZEN])
    async with app.run_test(size=(80, 24)) as pilot:
        home = app.screen.query_one(DataTable)
        await until(pilot, lambda: home.row_count == 1, "the live row")
        # at 80 columns Home shows through Link (Queue came before it); a little wider, the
        # provider is whole
        assert right_edge(home, "link") <= home.size.width
        await pilot.resize_terminal(84, 24)
        await until(pilot, lambda: right_edge(home, "provider") <= home.size.width,
                    "the provider whole at 84 columns")
        assert str(home.get_cell("live", "provider")) == "sandbox"
        await pilot.resize_terminal(80, 24)
        await pilot.press("c")
        await until(pilot, lambda: app.screen.TITLE == "Costs", "Costs")
        await pilot.press("2")
        ledger = app.screen.query_one("#ledger-table", DataTable)
        await until(pilot, lambda: ledger.row_count == 2 and ledger.size.width > 0, "the ledger")
        assert right_edge(ledger, "reason") <= ledger.size.width, ledger.size
        assert ledger.get_cell("old0", "reason") == "timer"


async def test_home_columns_shrink_back_when_a_long_cell_goes(gputui_home: Path, monkeypatch):
    """A long status ("… · release at queue end") widens its column; when that row is
    released, or the text shortens, the columns are sized by what is on screen now, so the ones
    after it come back whole (the header read "Provide" after a release)."""
    from textual.widgets import DataTable

    from gputui.models import Instance, InstanceStatus
    from gputui.services.jobs import WhenDone, save_when_done
    from gputui.store import InstanceChanged, LeaseChanged
    from tests.ui.test_costs_ui import FROZEN, seeded_app

    def widths(table: DataTable) -> list[int]:
        return [c.get_render_width(table) for c in table.columns.values()]

    monkeypatch.setattr("gputui.ui.home.LINGER_S", 0.2)  # an ended row lingers (a minute)
    app = seeded_app(gputui_home, [FROZEN])
    async with app.run_test(size=(80, 24)) as pilot:
        home = app.screen
        table = home.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 1, "the live row")
        store = app.store
        second = Instance.model_validate({**store.get_instance_sync("live").model_dump(),
                                          "id": "two", "name": "sweep"})
        store.put_instance_sync(second)
        store.emit(InstanceChanged("two"))
        await until(pilot, lambda: table.row_count == 2, "the second row")
        await pilot.pause()
        before = widths(table)

        save_when_done(app.services, "two", WhenDone(policy="release"))
        store.emit(LeaseChanged("two"))
        await until(pilot, lambda: "queue" in str(table.get_cell("two", "release")),
                    "the long status")
        await pilot.pause()
        assert widths(table) != before  # it grew

        (gputui_home / "jobs" / "two.json").unlink()  # the policy is dropped: back to the timer
        store.emit(LeaseChanged("two"))
        await until(pilot, lambda: "queue" not in str(table.get_cell("two", "release")),
                    "the short status again")
        await pilot.pause()
        assert widths(table) == before

        save_when_done(app.services, "two", WhenDone(policy="release"))
        store.emit(LeaseChanged("two"))
        await until(pilot, lambda: "queue" in str(table.get_cell("two", "release")), "long")
        ended = store.get_instance_sync("two")
        ended.mark_ended(FROZEN, "manual")
        ended.status = InstanceStatus.RELEASED
        store.put_instance_sync(ended)
        store.emit(InstanceChanged("two"))
        await until(pilot, lambda: table.row_count == 1, "the released row gone")
        await pilot.pause()
        assert widths(table) == before
        header = [str(c.label) for c in table.columns.values()]
        assert header[-1] == "Provider"
