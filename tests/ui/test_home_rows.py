"""Issue 27: Home's table renders again only the cell that changed, and repaints only its row
(a countdown ticking every second had redrawn the whole table). What a renter sees must be what
Textual's own DataTable would show: the new value, on the right row, with the cursor kept."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from gputui.ui.home import RowTable

ROWS = [("alpha", "2× 4090", "49m 10s"), ("bravo", "2× 4090", "48m 02s"),
        ("charlie", "1× H100", "12m 40s"), ("训练甲", "2× 4090", "47分 10秒")]


class TableApp(App):
    """ROWS as (name, gpu, release) columns; `with_cost`: (name, release, cost) instead."""

    def __init__(self, *, with_cost: bool = False) -> None:
        super().__init__()
        self.with_cost = with_cost

    def compose(self) -> ComposeResult:
        yield RowTable(cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(RowTable)
        columns = ("name", "release", "cost") if self.with_cost else ("name", "gpu", "release")
        for key in columns:
            table.add_column(key, key=key)
        for name, gpu, release in ROWS:
            cells = (name, release, "$0.10") if self.with_cost else (name, gpu, release)
            table.add_row(*cells, key=name)


def lines(table: RowTable) -> list[str]:
    """The table's lines as the terminal gets them."""
    return [table.render_line(y).text for y in range(len(ROWS) + 1)]


async def test_a_cell_update_shows_on_its_row_only_and_the_cursor_stays():
    app = TableApp()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.pause()
        before = lines(table)
        table.move_cursor(row=1)
        await pilot.pause()
        table.update_cell("bravo", "release", "48m 01s")
        table.update_cell("charlie", "release", Text("12m 39s"))
        await pilot.pause()
        after = lines(table)
        assert "48m 01s" in after[2] and "48m 02s" not in after[2]
        assert "12m 39s" in after[3]
        assert after[0] == before[0] and after[1] == before[1]  # header, alpha: unchanged
        assert table.get_cell("bravo", "release") == "48m 01s"
        assert table.cursor_row == 1
        # the cursor moves onto the changed row and off it: drawn from the new values
        table.move_cursor(row=2)
        await pilot.pause()
        table.update_cell("charlie", "release", "12m 38s")
        table.move_cursor(row=0)
        await pilot.pause()
        assert "12m 38s" in lines(table)[3] and "48m 01s" in lines(table)[2]
        # a wider value re-measures the column as DataTable does
        table.update_cell("alpha", "release", "1h 05m 00s", update_width=True)
        await pilot.pause()
        assert "1h 05m 00s" in lines(table)[1]
        assert table.columns[next(iter(table.columns))].label.plain == "name"


def styled(table: RowTable, y: int) -> list[tuple[str, str]]:
    """A line as (text, style) runs: what the terminal is told, colours included."""
    strip = table.render_line(y).simplify()
    return [(seg.text, str(seg.style)) for seg in strip if seg.text]


async def test_a_countdown_second_is_drawn_exactly_as_a_fresh_render_of_the_row():
    """The new text is put in place of the old in the row's drawn line (no Rich render per
    tick): on the cursor's row, a zebra row and a plain one, what is drawn must equal what a
    table drawn from scratch with the same values shows — colours, cursor and all."""
    app = TableApp()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.pause()
        table.move_cursor(row=1)
        await pilot.pause()
        lines(table)  # every row drawn once with the cursor where it is now
        calls: list[tuple[int, int]] = []
        render_cell = table._render_cell

        def counted(row: int, column: int, *args: object, **kwargs: object):
            calls.append((row, column))
            return render_cell(row, column, *args, **kwargs)

        table._render_cell = counted  # type: ignore[method-assign]
        for name, value in (("alpha", "49m 09s"), ("bravo", "48m 01s"),
                            ("charlie", Text("12m 39s")), ("训练甲", "47分 09秒")):
            table.update_cell(name, "release", value)
        await pilot.pause()
        drawn = [styled(table, y) for y in range(len(ROWS) + 1)]
        assert calls == []  # no cell rendered again: the four texts swapped in place
        table._render_cell = render_cell  # type: ignore[method-assign]
        # the same values drawn from scratch (every cache dropped)
        table.update_cell("alpha", "release", "49m 09s", update_width=True)
        await pilot.pause()
        assert [styled(table, y) for y in range(len(ROWS) + 1)] == drawn
        assert "48m 01s" in table.render_line(2).text and "12m 39s" in table.render_line(3).text
        assert "47分 09秒" in table.render_line(4).text


async def test_a_cell_that_is_not_plain_text_of_the_same_width_is_rendered_again():
    """Markup, styles, a wider or narrower text and wide characters are rendered by DataTable
    as ever: never a text swapped into a cell drawn for something else."""
    app = TableApp()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.pause()
        # (each as wide as the text before it where that could tempt a swap: "[u]1[/]")
        for value, shows in (("[u]1[/]", " 1 "), (Text("48m 00s", style="red"), "48m 00s"),
                             ("释放中…", "释放中…"), ("47m 59s", "47m 59s"),
                             ("9m 59s", "9m 59s")):
            lines(table)  # drawn as it is now: a swap would find the old text in place
            table.update_cell("bravo", "release", value)
            await pilot.pause()
            fresh = styled(table, 2)
            table.update_cell("alpha", "release", "49m 10s", update_width=True)  # drops caches
            await pilot.pause()
            assert styled(table, 2) == fresh, value
            assert shows in table.render_line(2).text


async def test_a_second_of_countdowns_changed_together_draws_each_row_as_a_fresh_render():
    """Home's second: every row's countdown (and here and there a cost) changed in one call,
    one pass over the caches and one repaint. Each row must read as a table drawn from
    scratch with the same values: two swaps on one row, a swap beside a cell rendered again,
    the cursor's row and a zebra row."""
    app = TableApp(with_cost=True)
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.pause()
        table.move_cursor(row=2)
        await pilot.pause()
        lines(table)  # every row drawn as it is now
        repainted: list[tuple] = []
        refresh = table.refresh

        def counted(*regions, **kwargs):
            repainted.append(regions)
            return refresh(*regions, **kwargs)

        table.refresh = counted  # type: ignore[method-assign]
        table.update_cells([("alpha", "release", "49m 09s"), ("alpha", "cost", "$0.11"),
                            ("bravo", "release", "48m 01s"), ("bravo", "cost", Text("$0.2", style="red")),
                            ("charlie", "release", "12m 39s"), ("训练甲", "release", "47分 09秒")])
        table.refresh = refresh  # type: ignore[method-assign]
        assert len(repainted) == 1 and len(repainted[0]) == 6  # one repaint: the six cells
        await pilot.pause()
        drawn = [styled(table, y) for y in range(len(ROWS) + 1)]
        texts = [table.render_line(y).text for y in range(len(ROWS) + 1)]
        assert "49m 09s" in texts[1] and "$0.11" in texts[1]
        assert "48m 01s" in texts[2] and "$0.2 " in texts[2]
        assert "12m 39s" in texts[3] and "47分 09秒" in texts[4]
        assert table.get_cell("bravo", "cost") == Text("$0.2", style="red")
        # the same values drawn from scratch (every cache dropped)
        table.update_cell("alpha", "release", "49m 09s", update_width=True)
        await pilot.pause()
        assert [styled(table, y) for y in range(len(ROWS) + 1)] == drawn
        assert table.cursor_row == 2


async def test_cells_are_found_where_datatable_puts_them():
    """The batch's cells are repainted where DataTable itself places them (widths of wide
    characters, a row two lines high, row labels, with or without the header): a place off by
    one would leave the old countdown on screen."""
    from textual.coordinate import Coordinate

    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(RowTable)
        table.add_row("delta", Text("2× 4090\nNVLink"), "1m 00s", key="delta", height=2,
                      label="d")
        await pilot.pause()
        cells = [(r, c) for r in range(table.row_count) for c in range(len(table.columns))]
        for header in (True, False):
            table.show_header = header
            await pilot.pause()
            assert table._cell_regions(cells) == [table._get_cell_region(Coordinate(r, c))
                                                  for r, c in cells]
