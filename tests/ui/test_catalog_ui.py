"""The Catalog screen, by keyboard alone, at 80×24 and 200×60: sort, filter, mark and compare,
fit, job cost, and renting the card under the cursor."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import DataTable, Input, Select, Static, TabbedContent

from gputui.app import GpuTuiApp
from gputui.catalog import load_specs
from gputui.config import Config
from gputui.format import short_gpu
from gputui.services import catalog as svc
from gputui.store import SessionStore
from gputui.ui.catalog import CatalogScreen, bar, compare_table
from gputui.ui.create import CreateScreen
from tests.ui.waits import shown, until

SIZES = [(80, 24), (200, 60)]
FROZEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class CatalogApp(GpuTuiApp):
    # The real screen in the catalog mode, whatever app.py wires (it replaces a placeholder).
    MODES = {**GpuTuiApp.MODES, "catalog": CatalogScreen}


def make_app(home: Path, **kw) -> GpuTuiApp:
    store = SessionStore(home / "state.db")
    kw.setdefault("background", False)
    app = CatalogApp(config=Config(), store=store, **kw)
    app.now = lambda: FROZEN
    return app


async def open_catalog(pilot) -> CatalogScreen:
    await pilot.press("g")
    return await shown(pilot, CatalogScreen)


def keys_in_table(table: DataTable) -> list[str]:
    return [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]


def text_of(widget: Static) -> str:
    """What a Static shows, as plain text (markup and Rich renderables rendered)."""
    content = widget.content
    if isinstance(content, str):
        return Text.from_markup(content).plain
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    console.print(content)
    return console.export_text()


# -- the table, sorting --------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_table_lists_every_card_cheapest_first(gputui_home: Path, size):
    app = make_app(gputui_home)
    async with app.run_test(size=size) as pilot:
        screen = await open_catalog(pilot)
        table = screen.query_one("#cards", DataTable)
        assert table.row_count == len(load_specs())
        assert table.has_focus
        keys = keys_in_table(table)
        prices = [screen.cards[i].perf.usd_per_gpu_hour for i in range(len(keys))]
        priced = [p for p in prices if p is not None]
        assert priced == sorted(priced) and prices[: len(priced)] == priced  # unpriced last
        status = text_of(screen.query_one("#cards-status", Static))
        assert "by $/GPU·h ▲" in status and "not live quotes" in status
        # the most important columns come first, so they show on a narrow terminal
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[1:4] == ["GPU", "VRAM", "$/GPU·h ▲"]
        # the cursor card's price is shown with its date
        detail = text_of(screen.query_one("#cards-detail", Static))
        first = screen.cards[0]
        assert first.lowest is not None and f"as of {first.lowest.as_of}" in detail
        # the whole table and the footer are inside the screen
        assert table.region.bottom <= size[1] - 1


async def test_sort_cycles_columns_and_reverses(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        table = screen.query_one("#cards", DataTable)
        await pilot.press("s")  # price → whose price it is
        await pilot.pause()
        assert screen.sort_key == "provider"
        await pilot.press("s")  # → bandwidth, best (highest) first
        await pilot.pause()
        assert screen.sort_key == "bandwidth"
        bw = [c.spec.memory_bandwidth_gbs for c in screen.cards]
        assert bw == sorted(bw, reverse=True)
        assert keys_in_table(table)[0] == "b200"
        assert "GB/s ▼" in [str(c.label) for c in table.columns.values()]
        await pilot.press("S")
        await pilot.pause()
        bw = [c.spec.memory_bandwidth_gbs for c in screen.cards]
        assert bw == sorted(bw)
        assert "GB/s ▲" in text_of(screen.query_one("#cards-status", Static))
        # all the way round: every column sorts, and we come back to the price
        for _ in range(len(svc.COLUMNS)):
            await pilot.press("s")
            await pilot.pause()
            assert table.row_count == len(load_specs())
            if screen.sort_key == "price":
                break
        assert screen.sort_key == "price"


async def test_a_new_sort_is_read_from_the_top(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("down", "down", "down")
        for key in ("s", "S"):
            await pilot.press(key)
            await pilot.pause()
            assert screen.current_card_key() == screen.cards[0].key
            assert screen.query_one("#cards").scroll_y == 0


# -- filters ---------------------------------------------------------------------------------


async def test_filters_from_the_keyboard(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("f")
        assert screen.query_one("#f-vram", Input).has_focus
        await pilot.press("8", "0")
        await pilot.pause()
        assert screen.cards and all(c.spec.vram_gb >= 80 for c in screen.cards)
        assert len(screen.cards) < len(load_specs())
        # Tab to the architecture select, open it, choose an entry by keyboard
        await pilot.press("tab")
        assert screen.query_one("#f-arch", Select).has_focus
        await pilot.press("enter")
        await pilot.pause()
        hopper = svc.architectures().index("Hopper")
        await pilot.press(*["down"] * (hopper + 1), "enter")
        await pilot.pause()
        assert screen.query_one("#f-arch", Select).value == "Hopper"
        assert {c.key for c in screen.cards} == {"h100_sxm", "h100_pcie", "h200_sxm", "h20"}
        # interconnect: PCIe only
        await pilot.press("tab", "tab")
        assert screen.query_one("#f-link", Select).has_focus
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        assert screen.query_one("#f-link", Select).value == "pcie"
        assert {c.key for c in screen.cards} == set()  # the H100 PCIe has an NVLink bridge
        assert "No card matches" in text_of(screen.query_one("#cards-detail", Static))
        # escape goes back to the table; the filters stay
        await pilot.press("escape")
        assert screen.query_one("#cards", DataTable).has_focus


async def test_provider_filter_prices_from_that_provider_only(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        screen.query_one("#f-provider", Select).value = "lambda"
        await pilot.pause()
        assert screen.cards
        for card in screen.cards:
            assert card.lowest is not None and card.lowest.provider == "lambda"
        screen.query_one("#f-provider", Select).clear()
        await pilot.pause()
        assert len(screen.cards) == len(load_specs())


async def test_odd_filter_input_never_crashes(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("f", "-", ".", "9", "9", "9", "9", "9", "9")
        await pilot.pause()
        assert screen.is_mounted
        vram = screen.query_one("#f-vram", Input)
        vram.value = "1e999"  # inf: nothing has that much
        await pilot.pause()
        assert screen.query_one("#cards", DataTable).row_count == 0
        vram.value = "-5"
        await pilot.pause()
        assert "⚠" in text_of(screen.query_one("#cards-status", Static))


# -- mark and compare -----------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_mark_and_compare(gputui_home: Path, size):
    app = make_app(gputui_home)
    async with app.run_test(size=size) as pilot:
        screen = await open_catalog(pilot)
        table = screen.query_one("#cards", DataTable)
        first, second, third = keys_in_table(table)[:3]
        await pilot.press("space", "space")  # marks and moves down
        await pilot.pause()
        assert screen.marked == [first, second]
        assert table.get_cell(first, "mark") == "●"
        assert "2 marked" in text_of(screen.query_one("#cards-status", Static))
        await pilot.press("v")
        await pilot.pause()
        assert screen.query_one(TabbedContent).active == "compare-tab"
        body = text_of(screen.query_one("#compare-body", Static))
        specs = load_specs()
        for key in (first, second):
            assert short_gpu(specs[key].name) in body
        assert "◆" in body and "█" in body and "VRAM GiB" in body and "GB/s per $/h" in body
        assert "as of" in body and "not live quotes" in body
        # back, unmark the second (space toggles), mark two more, a fifth is refused
        await pilot.press("1")
        await pilot.pause()
        assert table.has_focus
        await pilot.press("up", "space")
        assert screen.marked == [first]
        await pilot.press("space", "space", "space", "space")
        await pilot.pause()
        assert len(screen.marked) == 4
        assert any("at most 4" in n.message for n in app._notifications)
        await pilot.press("x")
        assert screen.marked == []
        await pilot.press("2")
        await pilot.pause()
        assert "Mark 2–4 cards" in text_of(screen.query_one("#compare-body", Static))


def test_bars_are_proportional_and_best_is_marked():
    assert bar(50, 100, 10) == "█████"
    assert bar(100, 100, 10) == "█" * 10
    assert bar(1, 100, 10) == "▏"
    assert bar(0, 100, 10) == "" and bar(5, 0, 10) == ""
    cards = [c for c in svc.card_rows() if c.key in ("rtx_4090", "h100_sxm")]
    console = Console(width=80, record=True, color_system=None)
    console.print(compare_table(cards, 80))
    text = console.export_text()
    lines = text.splitlines()
    vram = next(line for line in lines if line.startswith("VRAM GiB"))
    small, large = (seg for seg in vram.split() if "█" in seg)
    # the 24 GB bar is 24/80 the length of the 80 GB one, and the 80 GB one is the best
    assert abs(len(small) / len(large) - 24 / 80) < 0.06 and "80◆" in vram
    nvlink = next(line for line in lines if line.startswith("NVLink"))
    assert "PCIe 4" in nvlink and "900◆" in nvlink  # PCIe only: no bar
    price = next(line for line in lines if line.startswith("$/GPU·h"))
    # lower is better; the RTX 4090's price is one GPU on demand, not its $0.34 spot listing
    assert "$0.40◆" in price


# -- fit ----------------------------------------------------------------------------------------


async def test_fit_view(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("3")
        await pilot.pause()
        assert screen.query_one(TabbedContent).active == "fit-tab"
        assert screen.query_one("#fit-model", Select).has_focus
        answer = screen.fit_answer
        assert answer is not None and answer.estimate.model == "Qwen2.5-7B"
        body = text_of(screen.query_one("#fit-body", Static))
        for part in ("weights", "kv_cache", "activations", "overhead"):
            assert part in body
        assert "2 bytes per parameter" in body and "KiB per token" in body
        # memory in GiB, as on Home, Monitor and Ollama (never decimal GB beside it)
        need = answer.estimate.total_bytes / 2**30
        assert f"Needs {need:.1f} GiB on one GPU" in body and " GB" not in body
        table = screen.query_one("#fit-table", DataTable)
        assert "GiB/GPU need/usable" in [str(c.label) for c in table.columns.values()]
        first = answer.fitting[0]
        assert str(table.get_cell(first.card, "need")) == (
            f"{first.need_gb_per_gpu * 1e9 / 2**30:.1f}/{first.usable_gb * 1e9 / 2**30:.1f}")
        fitting = answer.fitting
        hourly = [o.hourly for o in fitting if o.hourly is not None]
        assert hourly == sorted(hourly)  # cheapest first
        assert keys_in_table(table)[0] == fitting[0].card

        # Llama 3.1 70B, full fine-tune: needs several GPUs; NVLink noted
        screen.query_one("#fit-model", Select).value = "llama-3.1-70b"
        screen.query_one("#fit-job", Select).value = "full"
        await pilot.pause()
        answer = screen.fit_answer
        assert answer is not None and answer.estimate.job.value == "full"
        assert all(o.count and o.count > 1 for o in answer.fitting)
        assert any("16 bytes per parameter" in n for n in answer.estimate.notes)
        links = {table.get_cell(k, "link") for k in keys_in_table(table)}
        assert any(link.startswith("NVLink") for link in links)
        assert any(link.startswith("PCIe") for link in links)
        # a context beyond the model's limit: one clear line, no crash
        screen.query_one("#fit-job", Select).value = "inference"
        screen.query_one("#fit-context", Input).value = "200000"
        await pilot.pause()
        error = screen.query_one("#fit-error", Static)
        assert error.display and "beyond" in text_of(error)
        assert screen.fit_answer is None and table.row_count == 0
        screen.query_one("#fit-context", Input).value = "0"
        await pilot.pause()
        assert "context" in text_of(error)
        screen.query_one("#fit-context", Input).value = "8192"
        await pilot.pause()
        assert not error.display and screen.fit_answer is not None


async def test_fit_a_custom_model_by_its_parameter_count(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("3")
        await pilot.pause()
        screen.query_one("#fit-job", Select).value = "lora"
        await pilot.pause()
        params = screen.query_one("#fit-params", Input)
        params.focus()
        await pilot.press(*"13e9")
        await pilot.pause()
        assert screen.query_one("#fit-model", Select).value == "custom"
        answer = screen.fit_answer
        assert answer is not None and answer.estimate.params == 13_000_000_000
        body = text_of(screen.query_one("#fit-body", Static))
        assert "does not fit a 24 GiB card, QLoRA does" in body  # the rule of thumb corrected
        assert "not given, estimated" in body  # guessed shape said plainly
        for sel, value in (("#fit-layers", "40"), ("#fit-kv", "40"), ("#fit-hd", "128")):
            screen.query_one(sel, Input).value = value
        await pilot.pause()
        assert screen.fit_answer is not None and screen.fit_answer.estimate.kv_heads == 40
        params.value = "lots"
        await pilot.pause()
        assert "params must be a number" in text_of(screen.query_one("#fit-error", Static))
        params.value = ""
        await pilot.pause()
        assert "parameter count" in text_of(screen.query_one("#fit-error", Static))


# -- cost and renting -------------------------------------------------------------------------


async def test_enter_on_a_card_shows_its_job_cost(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        screen.query_one("#f-vram", Input).value = "80"
        screen.sort_key = "bandwidth"
        screen.refresh_cards()
        await pilot.pause()
        table = screen.query_one("#cards", DataTable)
        table.focus()
        key = keys_in_table(table)[1]
        await pilot.press("down", "enter")
        await pilot.pause()
        assert screen.query_one(TabbedContent).active == "cost-tab"
        assert screen.query_one("#cost-card", Select).value == key
        answer = screen.cost_answer
        assert answer is not None and answer.spec.key == key
        cost_table = screen.query_one("#cost-table", DataTable)
        assert cost_table.row_count == len(answer.costs) > 0
        costs = [c.cost for c in answer.costs]
        assert costs == sorted(costs)
        notes = text_of(screen.query_one("#cost-notes", Static))
        assert "not live quotes" in notes
        # 8 GPUs for 30 hours
        screen.query_one("#cost-count", Input).value = "8"
        screen.query_one("#cost-hours", Input).value = "30"
        await pilot.pause()
        assert screen.cost_answer is not None and screen.cost_answer.count == 8
        # bad input: one line, no crash
        screen.query_one("#cost-hours", Input).value = "-3"
        await pilot.pause()
        error = screen.query_one("#cost-error", Static)
        assert error.display and "-3 h is not a rental; give more than 0" in text_of(error)
        screen.query_one("#cost-count", Input).value = "0"
        screen.query_one("#cost-hours", Input).value = "2"
        await pilot.pause()
        assert "GPU count" in text_of(error)


async def test_cost_shows_package_break_even(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_catalog(pilot)
        await screen.show_cost("h100_sxm", 8)
        await pilot.pause()
        notes = text_of(screen.query_one("#cost-notes", Static))
        assert "Break-even:" in notes and "daily package" in notes
        billing = {
            screen.query_one("#cost-table", DataTable).get_cell(str(i), "billing")
            for i in range(len(screen.cost_answer.costs))
        }
        assert any("second" in b for b in billing) and any("minute" in b for b in billing)


async def test_fit_row_enter_costs_that_count(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("3")
        screen.query_one("#fit-model", Select).value = "llama-3.1-70b"
        await pilot.pause()
        await pilot.press("escape")  # to the results table
        assert screen.query_one("#fit-table", DataTable).has_focus
        option = screen.fit_answer.fitting[0]
        await pilot.press("enter")
        await pilot.pause()
        assert screen.query_one("#cost-card", Select).value == option.card
        assert screen.query_one("#cost-count", Input).value == str(option.count)


async def test_fit_headline_names_a_card_rented_as_its_row_reads(gputui_home: Path):
    """Issue 29.1: the headline read "cheapest 1× RTX 3090 at $0.33/h" while that row was
    "vast marketplace (2× only)": 2 GPUs billed. It names what a renter pays for the GPUs the
    job needs, and that card's row says the same."""
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("3")
        await until(pilot, lambda: screen.fit_answer is not None, "the fit")
        answer = screen.fit_answer
        body = " ".join(text_of(screen.query_one("#fit-body", Static)).split())
        assert "cheapest 1× RTX 6000 Ada at $0.37/h" in body
        assert "RTX 3090 at $0.33" not in body
        table = screen.query_one("#fit-table", DataTable)
        best = answer.cheapest
        assert best is not None and best.card == "rtx_6000_ada"
        where = str(table.get_cell(best.card, "where"))
        assert where == "vast marketplace" and "only" not in where
        assert str(table.get_cell(best.card, "hourly")) == "$0.37"
        assert "pays for" not in str(table.get_cell(best.card, "notes"))
        # the 3090 row: what one GPU rents at, not half a 2-GPU instance
        assert "only" not in str(table.get_cell("rtx_3090", "where"))
        assert "pays for" not in str(table.get_cell("rtx_3090", "notes"))


def _visible_columns(table: DataTable) -> list[str]:
    """The keys of the columns whole within the table's width, left to right."""
    keys, x = [], 0
    for column in table.ordered_columns:
        x += column.get_render_width(table)
        if x > table.scrollable_content_region.width:
            break
        keys.append(column.key.value)
    return keys


async def test_cost_rows_of_one_provider_are_told_apart_at_80_columns(gputui_home: Path):
    """Issue 29.2: for 2× RTX 4090, four "vast marketplace" rows at $0.79, $0.80, $1.39 and
    $2.77/h, nothing on an 80-column screen saying what differs. The instance size each is
    sold in, and the date of its source, are on screen; no two rows read the same."""
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await screen.show_cost("rtx_4090", 2)
        table = screen.query_one("#cost-table", DataTable)
        await until(pilot, lambda: table.row_count > 0 and _visible_columns(table),
                    "the costs laid out")
        seen = _visible_columns(table)
        assert {"provider", "tier", "sizes", "cost", "as_of"} <= set(seen)
        rows = [tuple(str(table.get_cell(str(i), k)) for k in seen)
                for i in range(table.row_count)]
        vast = {row[seen.index("sizes")]: row[seen.index("cost")]
                for row in rows if row[0] == "vast"}
        assert vast == {"2×": "$7.90", "1×": "$8.00", "4×": "$13.90", "8×": "$27.70"}
        assert len(set(rows)) == len(rows)
        # the same on every card and size a renter may ask: one offer's dated sources included
        for card in ("h100_sxm", "h100_pcie", "a10", "rtx_3090"):
            for count in ("1", "8"):
                screen.query_one("#cost-card", Select).value = card
                screen.query_one("#cost-count", Input).value = count
                await until(pilot, lambda c=card, n=count: screen.cost_answer is not None
                            and screen.cost_answer.spec.key == c
                            and str(screen.cost_answer.count) == n, "the new costs")
                seen = _visible_columns(table)
                rows = [tuple(str(table.get_cell(str(i), k)) for k in seen)
                        for i in range(table.row_count)]
                assert len(set(rows)) == len(rows), (card, count, rows)


@pytest.mark.parametrize("size", SIZES)
async def test_n_rents_the_card_under_the_cursor(gputui_home: Path, size):
    app = make_app(gputui_home)
    async with app.run_test(size=size) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("s", "s")  # by provider, then bandwidth: the B200 first, then the H200
        await until(pilot, lambda: screen.sort_key == "bandwidth", "the bandwidth order")
        screen.query_one("#cards", DataTable).move_cursor(row=0)
        await pilot.press("down")
        await pilot.pause()
        key = screen.current_card_key()
        assert key == "h200_sxm"
        await pilot.press("n")
        await pilot.pause()
        create = await shown(pilot, CreateScreen)
        await until(pilot, lambda: create.selected_offer() is not None, "the card chosen")
        offer = create.selected_offer()
        assert offer is not None and offer.gpu == load_specs()[key].name


async def test_n_from_the_fit_results_rents_that_card(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("3")
        await pilot.pause()
        await pilot.press("escape", "n")
        await pilot.pause()
        create = await shown(pilot, CreateScreen)
        await until(pilot, lambda: create.selected_offer() is not None, "the card chosen")
        assert create.selected_offer().gpu == load_specs()[screen.fit_answer.fitting[0].card].name


async def test_n_from_a_multi_gpu_fit_brings_the_gpu_count(gputui_home: Path):
    from textual.widgets import Select

    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        await pilot.press("3")
        await pilot.pause()
        model = screen.query_one("#fit-model", Select)
        model.value = "llama-3.1-70b"
        await until(pilot, lambda: screen.fit_answer is not None
                    and screen.fit_answer.fitting[0].count > 1, "the 70B fit")
        first = screen.fit_answer.fitting[0]
        assert first.count > 1
        await pilot.press("escape", "n")
        create = await shown(pilot, CreateScreen)
        await until(pilot, lambda: create.query_one("#count", Select).value == first.count,
                    "the GPU count")


async def test_keys_are_hidden_where_they_do_nothing(gputui_home: Path):
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        assert screen.check_action("sort", ())
        await pilot.press("4")
        await pilot.pause()
        assert not screen.check_action("sort", ())
        assert not screen.check_action("mark", ())
        assert screen.check_action("new_instance", ())
        before = screen.sort_key
        await pilot.press("s")  # hidden, so nothing happens
        assert screen.sort_key == before


async def test_bad_config_prices_are_reported_not_fatal(gputui_home: Path):
    from gputui.config import PriceOverride

    config = Config(prices=[PriceOverride(provider="me", gpu="RTX 9999", price_per_gpu_hour=1)])
    app = CatalogApp(config=config, store=SessionStore(gputui_home / "state.db"), background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        assert screen.query_one("#cards", DataTable).row_count == len(load_specs())
        assert any("config.toml prices ignored" in n.message for n in app._notifications)


async def test_user_prices_from_config_show_in_the_table(gputui_home: Path):
    from decimal import Decimal

    from gputui.config import PriceOverride

    config = Config(
        prices=[PriceOverride(provider="mylab", gpu="4090", price_per_gpu_hour=Decimal("0.05"))]
    )
    app = CatalogApp(config=config, store=SessionStore(gputui_home / "state.db"), background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        first = screen.cards[0]
        assert first.key == "rtx_4090" and first.lowest.provider == "mylab"


# -- snapshots ----------------------------------------------------------------------------------



def _snap_app(home: Path) -> GpuTuiApp:
    return make_app(home, remember_theme=False)


def test_catalog_snapshot(snap_compare, gputui_home: Path, utc_clock):
    assert snap_compare(_snap_app(gputui_home), terminal_size=(80, 24), press=["g"])


def test_compare_snapshot(snap_compare, gputui_home: Path, utc_clock):
    assert snap_compare(
        _snap_app(gputui_home),
        terminal_size=(80, 24),
        press=["g", "space", "space", "down", "space", "v"],
    )


def test_fit_snapshot(snap_compare, gputui_home: Path, utc_clock):
    assert snap_compare(_snap_app(gputui_home), terminal_size=(80, 24), press=["g", "3"])


async def test_providers_publish_their_offers_into_the_table(gputui_home):
    """The sandbox's list prices join the table as its own rows, never as 'the lowest'."""
    from gputui.app import GpuTuiApp
    from gputui.catalog.prices import lowest_price
    from gputui.config import Config
    from gputui.store import SessionStore

    app = GpuTuiApp(config=Config(), store=SessionStore(gputui_home / "state.db"),
                    background=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        sandbox_rows = [r for r in screen.rows if r.provider == "sandbox"]
        assert len(sandbox_rows) == 21 and all(r.simulated for r in sandbox_rows)
        lowest = lowest_price("rtx_4090", screen.rows)
        assert lowest is not None and lowest.provider != "sandbox"


def _price_of(cell: object) -> str:
    """The money in a price cell or an offer label ('$2.79 8×' → '$2.79')."""
    return str(cell).split()[0]


async def test_one_card_reads_one_price_on_new_and_the_catalog_for_each_provider(gputui_home):
    """Issue 16: the price a renter compares is one they can rent. For every provider with
    offers, a card reads the same $/GPU·h in New's list and in the catalog filtered to that
    provider; the catalog's any-provider view never passes a spot or 8×-only listing off as
    the plain price, and says whose price it is."""
    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        providers = [n for n in app.services.providers if n != "ssh"]
        assert providers
        offers = {n: await app.services.offers(n) for n in providers}
        screen = await open_catalog(pilot)
        await app.workers.wait_for_complete()
        table = screen.query_one("#cards", DataTable)
        keys = [str(c.key.value) for c in table.columns.values()]
        assert keys.index("provider") == keys.index("price") + 1  # whose price, beside it
        assert "Price at" in [str(c.label) for c in table.columns.values()]
        # the A100 80GB SXM4 has only a spot price ($1.39) and an 8-GPU on-demand one ($2.79)
        assert str(table.get_cell("a100_80gb_sxm", "price")) == "$2.79 8×"
        assert str(table.get_cell("a100_80gb_sxm", "provider")) == "lambda on-demand"
        for key in keys_in_table(table):
            card = next(c for c in screen.cards if c.key == key)
            low = card.lowest
            if low is not None and low.caveat:  # marked wherever it is not 1 GPU on demand
                assert str(table.get_cell(key, "price")) != _price_of(
                    table.get_cell(key, "price"))
        from gputui.catalog.match import card_for_reported_name, match_card

        for name in providers:
            screen.query_one("#f-provider", Select).value = name
            await until(pilot, lambda name=name, s=screen: s.filters.provider == name,
                        f"the catalog filtered to {name}")
            catalog = {c.key: _price_of(table.get_cell(c.key, "price")) for c in screen.cards}
            await pilot.press("n")
            new = await shown(pilot, CreateScreen)
            await until(pilot, lambda new=new: new.offers, "New's offers")
            select = new.query_one("#offer", Select)
            listed = {value: str(label) for label, value in select._options if value != Select.BLANK}
            compared = 0
            for o in offers[name]:
                if not o.available:
                    continue
                card = card_for_reported_name(o.gpu) or match_card(o.gpu)
                key = card.key
                if key not in catalog:
                    continue
                on_new = listed[o.offer_id].split(" · ")[2].removesuffix("/GPU·h")
                assert on_new == catalog[key], (name, o.gpu, on_new, catalog[key])
                compared += 1
            assert compared >= 5, f"{name}: only {compared} cards compared"
            await pilot.press("g")
            screen = await shown(pilot, CatalogScreen)
            table = screen.query_one("#cards", DataTable)


async def test_a_tab_is_built_on_its_first_visit_by_key_or_by_its_header(gputui_home: Path):
    """Issue 16: the catalog opens with its Cards tab only (the others cost a switch nothing
    until visited); a tab reached from the tab bar by keyboard is built and usable too."""
    from textual.widgets import Tabs

    app = make_app(gputui_home)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_catalog(pilot)
        assert not screen.query("#fit-table") and not screen.query("#cost-table")
        screen.query_one(Tabs).focus()
        await pilot.press("right")  # Compare, from its header
        await until(pilot, lambda: screen.query_one(TabbedContent).active == "compare-tab",
                    "the Compare tab")
        await until(pilot, lambda: "Mark 2–4 cards" in text_of(
            screen.query_one("#compare-body", Static)), "the Compare tab's text")
        await pilot.press("4")
        await until(pilot, lambda: screen.query_one("#cost-table", DataTable).row_count > 0,
                    "the Cost tab's prices")
        assert not screen.query("#fit-table")  # never visited, never built
