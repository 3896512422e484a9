"""The monitor's process list for one instance: sorted by memory, PID, GPU, user or command
(`s`), rows updated in place by PID."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from gputui.format import format_gib
from gputui.i18n import N_, _, cell_len
from gputui.models import ProcessSample
from gputui.ui.monitor.render import SORT_WORDS, SORTS, SortText
from gputui.ui.widgets import show

COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("pid", N_("PID"), 8), ("user", N_("User"), 10), ("gpu", N_("GPU"), 3),
    ("mem", N_("Memory"), 9), ("cmd", N_("Command"), None),
)


class Processes(Vertical):
    """`#procs-title` and the `#procs` table."""

    DEFAULT_CSS = """
    Processes { height: 1fr; min-height: 5; }
    Processes #procs-title { height: 1; padding: 0 1; color: $text-muted; }
    Processes #procs { height: 1fr; min-height: 4; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.cells: dict[str, dict[str, Text]] = {}
        self.procs: dict[str, ProcessSample] = {}
        self.sort_index = 0

    def compose(self) -> ComposeResult:
        yield Static("", id="procs-title")
        yield DataTable(id="procs", cursor_type="row", zebra_stripes=True)

    @property
    def table(self) -> DataTable:
        return self.query_one("#procs", DataTable)

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            text = _(label)  # never cut: as wide as its header at least
            self.table.add_column(text, key=key,
                                  width=None if width is None else max(width, cell_len(text)))

    def clear(self) -> None:
        self.procs.clear()
        self.cells.clear()
        self.table.clear()

    def update_from(self, procs: list[ProcessSample]) -> None:
        table = self.table
        name, keyfn = SORTS[self.sort_index]
        show(self.query_one("#procs-title", Static),
             Text(_("Processes: {n} · sorted by {order} (s) · k TERM · K KILL").format(
                 n=len(procs), order=_(SORT_WORDS.get(name, name))), style="dim"))
        wanted = {str(p.pid): p for p in procs}
        changed = False
        for key in [k for k in self.cells if k not in wanted]:
            table.remove_row(key)
            del self.cells[key]
            self.procs.pop(key, None)
            changed = True
        for key, p in wanted.items():
            cells = {
                "pid": SortText(Text(str(p.pid)), keyfn(p)),
                "user": Text(p.user or "?"),
                "gpu": Text("?" if p.gpu_index is None else str(p.gpu_index)),
                "mem": Text("N/A" if p.used_memory_mib is None
                            else format_gib(p.used_memory_mib, unit="mib")),
                "cmd": Text(p.name or "?", no_wrap=True, overflow="ellipsis"),
            }
            before = self.cells.get(key)
            if before is None:
                table.add_row(*cells.values(), key=key)
                changed = True
            else:
                for c, value in cells.items():
                    if before.get(c) != value:
                        table.update_cell(key, c, value, update_width=(c == "cmd"))
                        changed = changed or c == "pid"
            self.cells[key] = cells
            self.procs[key] = p
        if changed:
            table.sort("pid", key=lambda cell: getattr(cell, "order", ()))

    def next_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(SORTS)
        table = self.table
        for key, p in self.procs.items():
            cells = self.cells.get(key)
            if cells is not None:
                cells["pid"] = SortText(Text(str(p.pid)), SORTS[self.sort_index][1](p))
                table.update_cell(key, "pid", cells["pid"])
        table.sort("pid", key=lambda cell: getattr(cell, "order", ()))

    def selected(self) -> ProcessSample | None:
        table = self.table
        if not table.row_count or table.cursor_row < 0:
            return None
        try:
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except Exception:  # noqa: BLE001
            return None
        return self.procs.get(key or "")
