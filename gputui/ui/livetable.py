"""LiveTable: a keyed table with a row cursor, drawn line by line, for data that changes often.

Textual's DataTable keys every render cache on one table-wide update counter, so changing a
single cell re-renders every visible cell. With hundreds of GPU rows changing every second at
their own moments, that is most of the console's CPU. Here each row is rendered once into a
`Strip` and kept until that row changes; a change repaints that one line (the Line API), and
rows scrolled out of view cost nothing until they are drawn.

What it offers is what the monitor's overview needs: fixed-width columns with a header, rows
by key (add, update, remove, sort), a row cursor moved by the keys (↑ ↓ PgUp PgDn Home End),
a click, and `RowHighlighted` / `RowSelected` messages carrying the row key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputui.i18n import N_, _

PAD = 1  # blank cells each side of a column, as DataTable draws them


@dataclass(frozen=True)
class LiveColumn:
    key: str
    label: str
    width: int


class LiveTable(ScrollView, can_focus=True):
    """Rows of `Text` cells under a header; see the module docstring."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"live-table--header", "live-table--cursor"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", N_("Up"), show=False),
        Binding("down", "cursor(1)", N_("Down"), show=False),
        Binding("pageup", "page(-1)", N_("Page up"), show=False),
        Binding("pagedown", "page(1)", N_("Page down"), show=False),
        Binding("home", "edge(-1)", N_("First"), show=False),
        Binding("end", "edge(1)", N_("Last"), show=False),
        Binding("enter", "select", N_("Select"), show=False),
    ]
    DEFAULT_CSS = """
    LiveTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        & > .live-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .live-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .live-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .live-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
    }
    """

    class RowHighlighted(Message):
        """The cursor moved onto a row (or the row under it changed)."""

        def __init__(self, table: LiveTable, row_key: str | None, cursor_row: int) -> None:
            super().__init__()
            self.table = table
            self.row_key = row_key
            self.cursor_row = cursor_row

        @property
        def control(self) -> LiveTable:
            return self.table

    class RowSelected(Message):
        """Enter (or a click on the cursor row) chose a row."""

        def __init__(self, table: LiveTable, row_key: str, cursor_row: int) -> None:
            super().__init__()
            self.table = table
            self.row_key = row_key
            self.cursor_row = cursor_row

        @property
        def control(self) -> LiveTable:
            return self.table

    def __init__(self, *, name: str | None = None, id: str | None = None,  # noqa: A002
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._columns: list[LiveColumn] = []
        self._order: list[str] = []  # row keys, top to bottom
        self._index: dict[str, int] = {}  # row key -> position in _order
        self._cells: dict[str, list[Text]] = {}
        self._strips: dict[str, Strip] = {}  # rendered rows (without cursor), until they change
        self._header: Strip | None = None
        self._cursor = 0
        self._announced: str | None = None  # the row key last sent in RowHighlighted

    # -- reading -----------------------------------------------------------------------------------

    @property
    def rows(self) -> dict[str, list[Text]]:
        """Cells by row key (test with `key in table.rows`)."""
        return self._cells

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def columns(self) -> list[LiveColumn]:
        return list(self._columns)

    def row_keys(self) -> list[str]:
        """Row keys in the order they are shown."""
        return list(self._order)

    def get_row(self, key: str) -> list[Text]:
        return list(self._cells[key])

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def visible_keys(self) -> list[str]:
        """The keys of the rows on screen now."""
        top = int(self.scroll_y)
        return self._order[top:top + self._body_height()]

    @property
    def cursor_row(self) -> int:
        return self._cursor if self._order else -1

    @property
    def cursor_key(self) -> str | None:
        return self._order[self._cursor] if self._order else None

    # -- changing ------------------------------------------------------------------------------------

    def set_columns(self, columns: Iterable[LiveColumn]) -> None:
        """New columns drop every row (their cells no longer line up); the same columns at
        other widths keep the rows and the cursor."""
        columns = list(columns)
        if [c.key for c in columns] != [c.key for c in self._columns]:
            self._order, self._index, self._cells = [], {}, {}
            self._cursor = 0
        self._columns = columns
        self._strips = {}
        self._header = None
        self._sized()
        self.refresh()

    def set_row(self, key: str, cells: Sequence[Text]) -> bool:
        """Add the row (at the bottom) or replace its cells; True when anything changed."""
        new = list(cells)
        old = self._cells.get(key)
        if old is not None:
            if old == new:
                return False
            self._cells[key] = new
            self._strips.pop(key, None)
            self._refresh_row(self._index[key])
            return True
        self._cells[key] = new
        self._index[key] = len(self._order)
        self._order.append(key)
        self._sized()
        self._refresh_row(len(self._order) - 1)
        if len(self._order) == 1:
            self._announce()
        return True

    def remove_row(self, key: str) -> None:
        if key not in self._cells:
            return
        at_cursor = self.cursor_key
        del self._cells[key]
        self._strips.pop(key, None)
        self._order.remove(key)
        self._reindex(keep=at_cursor if at_cursor != key else None)
        self._sized()
        self.refresh()

    def clear(self) -> None:
        self._order, self._index, self._cells, self._strips = [], {}, {}, {}
        self._cursor = 0
        self._sized()
        self.refresh()
        self._announce()

    def sort(self, column: str, key: Callable[[Text], Any]) -> None:
        """Order the rows by `key(cell)` of `column`; the cursor stays on its row."""
        col = next(i for i, c in enumerate(self._columns) if c.key == column)
        at_cursor = self.cursor_key
        order = sorted(self._order, key=lambda k: key(self._cells[k][col]))
        if order != self._order:
            self._order = order
            self._reindex(keep=at_cursor)
            self.refresh()

    def move_cursor(self, *, row: int) -> None:
        if not self._order:
            return
        row = max(0, min(len(self._order) - 1, row))
        if row == self._cursor:
            return
        old, self._cursor = self._cursor, row
        self._refresh_row(old)
        self._refresh_row(row)
        self._scroll_to_cursor()
        self._announce()

    # -- actions -------------------------------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        self.move_cursor(row=self._cursor + step)

    def action_page(self, direction: int) -> None:
        self.move_cursor(row=self._cursor + direction * max(1, self._body_height() - 1))

    def action_edge(self, direction: int) -> None:
        self.move_cursor(row=0 if direction < 0 else len(self._order) - 1)

    def action_select(self) -> None:
        key = self.cursor_key
        if key is not None:
            self.post_message(self.RowSelected(self, key, self._cursor))

    async def _on_click(self, event: events.Click) -> None:
        if event.y < 1:
            return
        row = int(self.scroll_y) + event.y - 1
        if 0 <= row < len(self._order):
            if row == self._cursor:
                self.action_select()
            else:
                self.move_cursor(row=row)

    # -- drawing -------------------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._header = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x = int(self.scroll_x)
        base = self.rich_style
        if y == 0:
            if self._header is None:
                self._header = self._render_cells(
                    [Text(_(c.label)) for c in self._columns],  # labels marked with N_()
                    self.get_component_rich_style("live-table--header"))
            return self._header.crop_extend(scroll_x, scroll_x + width, base)
        row = int(self.scroll_y) + y - 1
        if not 0 <= row < len(self._order):
            return Strip.blank(width, base)
        key = self._order[row]
        if row == self._cursor:
            strip = self._render_cells(self._cells[key], self._cursor_style(), cursor=True)
        else:
            cached = self._strips.get(key)
            if cached is None:
                cached = self._strips[key] = self._render_cells(self._cells[key], base)
            strip = cached
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _cursor_style(self) -> Style:
        return self.rich_style + self.get_component_rich_style("live-table--cursor")

    def _render_cells(self, cells: Sequence[Text], style: Style, cursor: bool = False) -> Strip:
        """One row. On the cursor row the cursor's colours win over the cells' own (a yellow
        hint on the cursor's white reads as nothing in 16 colours)."""
        line = Text(no_wrap=True, end="")
        for col, cell in zip(self._columns, cells, strict=False):
            piece = cell
            if cell.cell_len > col.width:
                piece = cell.copy()
                piece.truncate(col.width, overflow="ellipsis")
            line.append(" " * PAD)
            line.append_text(piece)
            line.append(" " * (col.width - piece.cell_len + PAD))
        total = self._total_width()
        post = Style(color=style.color, bgcolor=style.bgcolor) if cursor else None
        segments = Segment.apply_style(line.render(self.app.console), style, post)
        return Strip(list(segments)).adjust_cell_length(total, style)

    # -- helpers -------------------------------------------------------------------------------------

    def _total_width(self) -> int:
        return sum(c.width + 2 * PAD for c in self._columns)

    def _body_height(self) -> int:
        return max(1, self.size.height - 1)

    def _sized(self) -> None:
        self.virtual_size = Size(self._total_width(), len(self._order) + 1)

    def _reindex(self, keep: str | None) -> None:
        self._index = {k: i for i, k in enumerate(self._order)}
        if keep is not None and keep in self._index:
            self._cursor = self._index[keep]
        else:
            self._cursor = max(0, min(self._cursor, len(self._order) - 1))
        self._announce()

    def _refresh_row(self, row: int) -> None:
        """Repaint one row if it is on screen."""
        y = row - int(self.scroll_y) + 1
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def _scroll_to_cursor(self) -> None:
        top = int(self.scroll_y)
        body = self._body_height()
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False)
        elif self._cursor >= top + body:
            self.scroll_to(y=self._cursor - body + 1, animate=False)

    def _announce(self) -> None:
        key = self.cursor_key
        if key != self._announced:
            self._announced = key
            self.post_message(self.RowHighlighted(self, key, self.cursor_row))
