"""LiveTable: the monitor overview's table (keys, cursor, messages, what is drawn)."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from gputui.ui.livetable import LiveColumn, LiveTable


class TableApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str | None]] = []

    def compose(self) -> ComposeResult:
        yield LiveTable(id="t")

    def on_mount(self) -> None:
        table = self.query_one(LiveTable)
        table.set_columns([LiveColumn("name", "Name", 8), LiveColumn("util", "Util", 5)])
        for n in range(30):
            table.set_row(f"r{n}", [Text(f"row {n}"), Text(f"{n}%")])
        table.focus()

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        self.events.append(("highlighted", event.row_key))

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.events.append(("selected", event.row_key))


def lines(app: App) -> list[str]:
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


async def test_keys_move_the_cursor_and_enter_chooses_the_row():
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LiveTable)
        await pilot.press("down", "down")
        assert table.cursor_key == "r2"
        await pilot.press("enter")
        await pilot.pause()
        assert ("highlighted", "r2") in app.events and app.events[-1] == ("selected", "r2")
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_key == "r29"
        screen = lines(app)
        assert screen[0].startswith(" Name") and "Util" in screen[0]  # the header stays on top
        assert screen[-1] == " row 29    29%"  # the last row scrolled into view
        await pilot.press("home", "pagedown")
        assert table.cursor_row == 8  # a page is the 9 rows under the header, less one


async def test_updates_sorting_and_removal_keep_the_cursor_on_its_row():
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LiveTable)
        await pilot.press("down", "down", "down")
        assert table.cursor_key == "r3"
        assert table.set_row("r3", [Text("row 3"), Text("3%")]) is False  # nothing changed
        assert table.set_row("r1", [Text("busy"), Text("99%")]) is True
        table.sort("util", key=lambda cell: -int(cell.plain.rstrip("%")))
        assert table.row_keys()[:2] == ["r1", "r29"]
        assert table.cursor_key == "r3"  # the same row, wherever it went
        table.remove_row("r3")
        assert "r3" not in table.rows and table.cursor_key is not None
        await pilot.pause()
        assert lines(app)[1] == " busy      99%"


async def test_a_cell_wider_than_its_column_ends_in_an_ellipsis():
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LiveTable)
        table.set_row("r0", [Text("NVIDIA H100 80GB HBM3"), Text("100%")])
        await pilot.pause()
        assert lines(app)[1] == " NVIDIA …  100%"
        assert table.visible_keys()[:2] == ["r0", "r1"] and len(table.visible_keys()) == 9


async def test_rows_drawn_before_a_focus_change_take_the_new_background():
    from textual.widgets import Input

    class WithInput(TableApp):
        def compose(self) -> ComposeResult:
            yield LiveTable(id="t")
            yield Input()

    app = WithInput()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LiveTable)
        await pilot.pause()

        def backgrounds(y: int) -> set:
            return {seg.style.bgcolor for seg in table.render_line(y) if seg.style}

        assert backgrounds(3) == {table.rich_style.bgcolor}  # cached while focused
        app.query_one(Input).focus()
        await pilot.pause()
        assert backgrounds(3) == {table.rich_style.bgcolor}  # not the focused tint any more


async def test_any_sequence_of_changes_keeps_rows_order_and_cursor_consistent():
    """Rows come and go under the cursor all the time in the monitor (instances start, stop,
    gain GPUs); whatever happens, the table's order, index and cursor agree (seeded fuzz)."""
    import random

    rng = random.Random(6)
    app = TableApp()
    async with app.run_test(size=(40, 10)):
        table = app.query_one(LiveTable)
        for _ in range(300):
            table.clear()
            for _ in range(rng.randint(0, 40)):
                kind, key = rng.choice(["set", "set", "remove", "move", "sort"]), f"r{rng.randint(0, 9)}"
                if kind == "set":
                    table.set_row(key, [Text(key), Text(str(rng.randint(0, 3)))])
                elif kind == "remove":
                    table.remove_row(key)
                elif kind == "move":
                    table.move_cursor(row=rng.randint(-2, 12))
                else:
                    table.sort("util", key=lambda cell: cell.plain)
                keys = table.row_keys()
                assert set(keys) == set(table.rows) and len(keys) == table.row_count
                assert all(table.get_row_index(k) == i for i, k in enumerate(keys))
                if keys:
                    assert 0 <= table.cursor_row < len(keys) and table.cursor_key in table.rows
                else:
                    assert table.cursor_key is None and table.cursor_row == -1
                assert len(table.visible_keys()) <= 9


async def test_new_widths_keep_rows_and_cursor_new_columns_do_not():
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LiveTable)
        await pilot.press("down", "down")
        table.set_columns([LiveColumn("name", "Name", 12), LiveColumn("util", "Util", 5)])
        await pilot.pause()
        assert table.row_count == 30 and table.cursor_key == "r2"  # a resized pane
        assert lines(app)[1] == " row 0         0%"
        table.set_columns([LiveColumn("gpu", "GPU", 5)])
        assert table.row_count == 0 and table.cursor_key is None


async def test_a_click_moves_the_cursor_and_a_second_click_chooses():
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(LiveTable)
        await pilot.click(LiveTable, offset=(3, 3))  # line 3: the header, then rows 0, 1, 2
        assert table.cursor_key == "r2"
        await pilot.click(LiveTable, offset=(3, 3))
        await pilot.pause()
        assert app.events[-1] == ("selected", "r2")
        await pilot.click(LiveTable, offset=(3, 0))  # the header: nothing happens
        assert table.cursor_key == "r2"
