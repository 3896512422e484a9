"""Issue 27: Home's table renders again only the cell that changed, and repaints only its row
(a countdown ticking every second had redrawn the whole table). What a renter sees must be what
Textual's own DataTable would show: the new value, on the right row, with the cursor kept."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from gputui.ui.home import RowTable

ROWS = [("alpha", "2× 4090", "49m 10s"), ("bravo", "2× 4090", "48m 02s"),
        ("charlie", "1× H100", "12m 40s")]


class TableApp(App):
    def compose(self) -> ComposeResult:
        yield RowTable(cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(RowTable)
        for key in ("name", "gpu", "release"):
            table.add_column(key, key=key)
        for name, gpu, release in ROWS:
            table.add_row(name, gpu, release, key=name)


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
