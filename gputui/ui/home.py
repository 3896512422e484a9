"""Home: the instances, their countdown to release, and what each has cost so far."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey, RowKey

from gputui.format import fit_name, format_money, format_remaining, short_gpu, status_text
from gputui.i18n import N_, _, cell_len, shown
from gputui.ui.base import BaseScreen, StoreEvent
from gputui.ui.dialogs import on_answer
from gputui.ui.widgets import LABEL_CELLS

if TYPE_CHECKING:  # (the first frame is drawn before the models are loaded)
    from gputui.models import Instance, Lease

EMPTY_HINT = N_(
    "No instances yet. Press [b]n[/b] to rent one (the sandbox needs no account), "
    "[b]g[/b] to compare GPUs, [b]?[/b] for every key."
)

# Most important first: a narrow pane cuts from the right.
# What matters most first: at 80 columns the table shows through "Link" (the top bar has the
# total $/h, and Costs each instance's). Queue: `3/5 ✓2 ✗1` while runs go, `done`, `held`.
COLUMNS = [
    ("name", N_("Name")),
    ("gpu", N_("GPU")),
    ("status", N_("Status")),
    ("release", N_("Release in")),
    ("cost", N_("Cost")),
    ("queue", N_("Queue")),
    ("link", N_("Link")),
    ("rate", N_("Rate/h")),
    ("provider", N_("Provider")),
]
LINGER_S = 60.0  # an instance ended by someone else stays (dimmed, with a line) this long
LINK_MARK = {"connected": N_("ok"), "connecting": "…", "reconnecting": N_("retrying"),
             "failed": N_("FAILED")}
# The status words as shown (the store and JSON keep the English value).
def _status_text(inst: Instance, now: datetime) -> str:
    """The status; a stopped instance says, short enough to keep the columns after it on an
    80-column screen, when the provider wipes it (the Monitor and `instances` say how long it
    has been stopped)."""
    from gputui.models import InstanceStatus
    from gputui.services.views import WIPE_AFTER_STOPPED_DAYS, wipe_clock

    days = WIPE_AFTER_STOPPED_DAYS.get(inst.provider)
    if inst.status != InstanceStatus.STOPPED or days is None:
        return status_text(inst.status)
    text, warn = wipe_clock(inst.stopped_at, days, now)
    return ("⚠ " if warn else "") + text


def _rate_text(inst: Instance) -> str:
    """What the row bills by the hour: a stopped instance's GPU rate is not billing — only its
    disk, where the provider charges for it."""
    from gputui.models import InstanceStatus

    if inst.status != InstanceStatus.STOPPED:
        return format_money(inst.billing.price_per_hour, inst.billing.currency)
    disk = inst.billing.storage_cost(inst.disk_gb, 3600)
    if disk <= 0:
        return "-"
    return _("{price} disk").format(price=format_money(disk, inst.billing.currency))


#: Home reads the when-done records again every this many seconds (another process may write
#: them: nothing else says so)
WHEN_DONE_EVERY = 5

#: cached cell renders kept at most: entries of older update counts are never read again
CELL_RENDERS_KEPT = 500


def _plain(value: object) -> str | None:
    """A cell's text where it is drawn as one run of plain text (no markup, no styles, one
    line, printable), else None."""
    if isinstance(value, str):
        text = value
        if "[" in text:  # DataTable reads a str as markup
            return None
    elif isinstance(value, Text) and not value.spans and not value.style:
        text = value.plain
    else:
        return None
    return text if text and text.isprintable() else None


def _swapped(cells: list[Segment], old: str, new: str) -> list[Segment] | None:
    """A cell's rendered line with its text `old` replaced by `new` of the same width, its
    styles kept (None where `old` is not one whole segment of it: cut, wrapped)."""
    hits = [i for i, seg in enumerate(cells) if seg.text == old and not seg.control]
    if len(hits) != 1:
        return None
    line = list(cells)
    line[hits[0]] = Segment(new, cells[hits[0]].style)
    return line


class RowTable(DataTable):
    """Home's table: a changed cell of the same width is drawn again alone and only its place
    on the terminal is written. Textual's DataTable renders every cell of every line again on
    any cell update and repaints the whole table: each countdown second redrew it all.

    A countdown's new text (plain, as wide as the old) is put in place of the old in the row's
    cached cells and finished lines, with the cell's styles as they were (no Rich render, no
    line built again); any other change renders that cell alone; lines drawn for another
    cursor place are dropped; `update_width=True` keeps DataTable's own way."""

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str,  # type: ignore[override]
                    value: object, *, update_width: bool = False) -> None:
        if update_width or not self.is_mounted:
            super().update_cell(row_key, column_key, value, update_width=update_width)
            return
        self.update_cells([(row_key, column_key, value)])

    def update_cells(self, changes: list[tuple[RowKey | str, ColumnKey | str, object]]) -> None:
        """Several cells at once (Home's second: each row's countdown), each as `update_cell`
        without `update_width`: the caches are gone through once and the table is asked to
        repaint once, for the changed cells' places only."""
        if not self.is_mounted:
            for row_key, column_key, value in changes:
                super().update_cell(row_key, column_key, value)
            return
        # (row, column, index, column index, swap) of each change
        done: list[tuple[RowKey, ColumnKey, int, int, tuple[str, str] | None]] = []
        for row_key, column_key, value in changes:
            row = RowKey(row_key) if isinstance(row_key, str) else row_key
            column = ColumnKey(column_key) if isinstance(column_key, str) else column_key
            if row not in self._row_locations or column not in self._column_locations:
                super().update_cell(row, column, value)  # (raises CellDoesNotExist)
                continue
            old = _plain(self._data[row].get(column))
            new = _plain(value)
            swap = ((old, new) if old is not None and new is not None
                    and cell_len(old) == cell_len(new) and not self.fixed_columns else None)
            # as DataTable.update_cell, but only this cell's cached renders are dropped (a new
            # update count would drop every cell's) and only the cell is repainted
            self._data[row][column] = value
            index = self.get_row_index(row)
            column_index = self.get_column_index(column)
            done.append((row, column, index, column_index, swap))
        if done:
            regions = self._cell_regions([(index, column) for _r, _c, index, column, _s in done])
            self._forget_cells(done, regions)
            window, offset = self.window_region, self.scroll_offset
            shown = [r.translate(-offset) for r in regions if window.overlaps(r)]
            if shown:
                self.refresh(*shown)

    def _cell_regions(self, cells: list[tuple[int, int]]) -> list[Region]:
        """Where each (row index, column index) cell is in the table, as DataTable's
        `_get_cell_region` says, with the columns' widths and the rows' heights added up once
        for all of them (not once a cell)."""
        xs = [self._row_label_column_width]
        for column in self.ordered_columns:
            xs.append(xs[-1] + column.get_render_width(self))
        rows = self.ordered_rows
        ys = [self.header_height if self.show_header else 0]
        for row in rows:
            ys.append(ys[-1] + row.height)
        return [Region(xs[c], ys[r], xs[c + 1] - xs[c], rows[r].height) for r, c in cells]

    def _forget_cells(self, done: list[tuple[RowKey, ColumnKey, int, int, tuple[str, str] | None]],
                      regions: list[Region]) -> None:
        """Drop the changed cells' cached renders; patch the rows' and lines' caches where they
        were drawn as the table is now (a countdown's same-width text swapped in place)."""
        # what a cached line was drawn for, as it is now (DataTable's cache keys hold these)
        now = (self.cursor_coordinate, self.hover_coordinate, self.cursor_type,
               self.show_cursor, self._show_hover_cursor, self._update_count,
               self._pseudo_class_state)
        cells = self._cell_render_cache
        if len(cells) > CELL_RENDERS_KEPT:
            cells.clear()
        # keys compared by their text: a StringKey's own == is a Python call per cached cell
        pairs = {(row.value, column.value) for row, column, _i, _c, _s in done}
        for cell in [k for k in cells.keys() if (k[0].value, k[1].value) in pairs]:
            cells.discard(cell)
        indexes = {index for _r, _c, index, _ci, _s in done}
        for count_index in [k for k in self._row_renderable_cache.keys() if k[1] in indexes]:
            self._row_renderable_cache.discard(count_index)
        by_row: dict[str | None, list[tuple[int, int, tuple[str, str] | None, Region]]] = {}
        for (row, _column, index, column_index, swap), region in zip(done, regions, strict=True):
            by_row.setdefault(row.value, []).append((index, column_index, swap, region))
        rows = self._row_render_cache
        for key in [k for k in rows.keys() if k[0].value in by_row]:
            patched = None
            # (row, line, base style, cursor, hover, cursor type, show cursor, show hover,
            # update count, pseudo-classes)
            if (key[3], key[4], key[5], key[6], key[7], key[8], key[9]) == now:
                patched = rows[key]
                for index, column_index, swap, _region in by_row[key[0].value]:
                    patched = self._patched(patched, key, index, column_index, swap)
                    if patched is None:
                        break
            rows.discard(key)  # (an LRUCache keeps a key's first value: out, then in)
            if patched is not None:
                rows[key] = patched
        lines = self._line_cache
        width = self.size.width
        for at in list(lines.keys()):
            try:
                mine = by_row.get(self._get_offsets(at[0])[0].value)
            except LookupError:
                mine = []  # a line of no row now: dropped
            if mine is None:
                continue
            line = None
            # (y, x1, x2, width, cursor, hover, base style, cursor type, show hover, update
            # count, pseudo-classes): show_cursor is not in it, a line drawn with it is
            if mine and at[3] == width and (
                    at[4], at[5], at[7], at[8], at[9], at[10]) == (
                    now[0], now[1], now[2], now[4], now[5], now[6]):
                line = lines[at]
                for _index, _column_index, swap, region in mine:
                    if swap is None:
                        line = None
                        break
                    line = _swapped_strip(line, region.x + self.cell_padding - at[1], *swap)
                    if line is None:
                        break
            lines.discard(at)
            if line is not None:
                lines[at] = line

    def render_lines(self, crop: Region) -> list[Strip]:
        # the widget's style, worked out from its ancestors once a frame, not once a line
        self._frame_style: Style | None = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None

    @property
    def rich_style(self) -> Style:
        style = self.__dict__.get("_frame_style")
        return style if style is not None else super().rich_style

    def _patched(self, pair: tuple[list, list], key: tuple, index: int, column_index: int,
                 swap: tuple[str, str] | None) -> tuple[list, list] | None:
        """A row's cached line (drawn as the table is now) with one cell drawn again, the
        others kept (None: drop it)."""
        fixed, scrollable = pair
        _row, line_no, base_style, cursor_at, hover_at, cursor_type = key[:6]
        if fixed or column_index >= len(scrollable) - 1:
            return None
        line = _swapped(scrollable[column_index], *swap) if swap is not None else None
        if line is None:
            at = Coordinate(index, column_index)
            column = self.ordered_columns[column_index]
            lines = self._render_cell(
                index, column_index, self._get_row_style(index, base_style),
                column.get_render_width(self),
                cursor=self._should_highlight(cursor_at, at, cursor_type),
                hover=self._should_highlight(hover_at, at, cursor_type))
            if line_no >= len(lines):
                return None
            line = lines[line_no]
        scrollable = list(scrollable)
        scrollable[column_index] = line
        return fixed, scrollable


def _swapped_strip(strip: Strip, x: int, old: str, new: str) -> Strip | None:
    """A finished line with the text `old` at cell `x` replaced by `new` of the same width
    (None where the line does not hold `old` there, within one segment of one style)."""
    at = 0
    segments = list(strip)
    for i, seg in enumerate(segments):
        text = seg.text
        cells = len(text) if text.isascii() else cell_len(text)
        if at + cells <= x:
            at += cells
            continue
        start = x - at  # in cells; in characters where a wide one comes before it
        if cells != len(text):
            start = next((n for n in range(len(text) + 1) if cell_len(text[:n]) >= start), -1)
        if seg.control or start < 0 or text[start:start + len(old)] != old:
            return None
        segments[i] = Segment(text[:start] + new + text[start + len(old):], seg.style)
        return Strip(segments, strip.cell_length)
    return None


def _apply(table: DataTable, batch: list[tuple[RowKey | str, ColumnKey | str, object]]) -> None:
    """Same-width cell changes, together where the table can take them so."""
    if isinstance(table, RowTable):
        table.update_cells(batch)
        return
    for row, column, value in batch:
        table.update_cell(row, column, value)


def _remeasure(table: DataTable) -> None:
    """Size every column by what the rows on screen now hold (DataTable keeps the widest a
    column ever was when a row goes)."""
    if not table.row_count:
        labels = [(column.key, column.label) for column in table.columns.values()]
        table.clear(columns=True)
        for key, label in labels:
            table.add_column(label, key=key.value)
        return
    first = next(iter(table.rows))
    for key in list(table.columns):
        # re-measures the whole column where this cell is narrower than the column
        table.update_cell(first, key, table.get_cell(first, key), update_width=True)


class HomeScreen(BaseScreen):
    TITLE = N_("Instances")
    BINDINGS = [
        Binding("e", "extend(60)", N_("+1h")),
        Binding("E", "extend(30)", N_("+30m"), show=False),
        Binding("t", "timer", N_("Timer")),
        Binding("r", "release", N_("Release")),
        Binding("s", "stop", N_("Stop"), show=False),  # in ? help; the footer is kept as it was
        Binding("S", "start", N_("Start"), show=False),
        Binding("a", "add_host", N_("Add host")),
        Binding("enter", "monitor", N_("Monitor"), show=False),
    ]
    DEFAULT_CSS = """
    HomeScreen #hint { padding: 1 2; color: $text-muted; }
    HomeScreen #keeper { padding: 0 1; color: $warning; display: none; }
    HomeScreen #ended { padding: 0 1; color: $text-muted; display: none; }
    HomeScreen DataTable { height: 1fr; }
    """

    def compose_body(self) -> ComposeResult:
        hint = Static(_(EMPTY_HINT), id="hint")
        hint.display = False  # until the store is read: there may be instances
        yield hint
        yield Static("", id="keeper")
        yield Static("", id="ended")
        yield RowTable(id="instances", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(_(label), key=key)
        self._instances: dict[str, Instance] = {}
        self._leases: dict[str, Lease] = {}
        self._shown: dict[str, dict[str, str]] = {}  # the text each cell shows now
        self._held: dict[str, bool] = {}
        self._gone: dict[str, str] = {}  # rows of ended instances, lingering: their line
        self._said: dict[str, str] = {}  # instance id -> line about it (newest last)
        super().on_mount()  # last: where the session is open, it fills the table now

    def on_session_open(self) -> None:
        self.reload()

    def on_second(self) -> None:
        """The app's one-second tick, while Home is in view (with the top bar's clock: one
        frame a second)."""
        self.tick()

    def on_screen_resume(self) -> None:
        if self.gapp.session_open:  # what changed while another screen was in view
            self.tick()

    def reload(self) -> None:
        store = self.gapp.store
        before = getattr(self, "_instances", {})
        self._instances = {i.id: i for i in store.instances_sync(live_only=True)}
        self._leases = {lease.instance_id: lease for lease in store.leases_sync()}
        self._when_done, self._held = self._when_done_now()
        table = self.query_one(DataTable)
        removed = False
        for key in [k.value for k in list(table.rows)]:
            if key is None or key in self._instances or key in self._gone:
                continue
            ended = store.get_instance_sync(key)
            if ended is not None and not ended.status.live and key in before:
                self._ended(table, ended)  # who ended it and what it cost: it lingers a while
                continue
            table.remove_row(key)
            self._shown.pop(key, None)
            removed = True
        if removed:
            _remeasure(table)
        for inst in self._instances.values():
            old = before.get(inst.id)
            if old is not None and old.status != inst.status:
                self._status_changed(old, inst)
            self._put_row(inst)
        hint = self.query_one("#hint", Static)
        hint.display = not self._instances and not self._gone
        self.call_after_refresh(self.check_keeper)  # not before the first frame
        if not self._instances and store.ledger_sync():
            hint.update(_("Nothing running. Ended instances and what they cost are in Costs "
                          "([b]c[/b], then 2). Press [b]n[/b] to rent another."))

    def _cells(self, inst: Instance, now: datetime, *,
               ticking: bool = False) -> dict[str, str | Text]:
        """The row's cells; `ticking`: only those the clock changes (release, cost, link,
        status, rate)."""
        lease = self._leases.get(inst.id)
        releasing = False
        if lease is None and inst.status.live:
            release = _("⚠ no timer")  # made by an older gputui: nothing will release it
        elif lease is None or lease.state != "active":
            release = "-"
        elif lease.release_at is None:
            release = _("⚠ no timer")
        else:
            left = lease.remaining(now)
            due = left is not None and left <= 0
            # past its deadline it is being released (by this console, the daemon or the
            # platform's own timer): "overdue" only where the release is held
            releasing = due and not self._held.get(inst.id)
            release = _("releasing…") if releasing else format_remaining(left)
        if getattr(self, "_when_done", {}).get(inst.id) and not self._held.get(inst.id):
            # (held: the Queue column says so; Jobs and the notices say which results)
            release = f"{release} · {shown(self._when_done[inst.id])}".removeprefix("- · ")
        link, _detail = self.gapp.store.link(inst.id)
        # a stopped box has no SSH to be "ok"; a link that drops as the instance goes is not
        # "retrying"
        from gputui.models import InstanceStatus

        going = releasing or inst.status not in (InstanceStatus.BOOTING, InstanceStatus.RUNNING)
        cells: dict[str, str | Text] = {
            "status": _status_text(inst, now),
            "link": "-" if going else _(LINK_MARK.get(link.value, "-")),
            "release": release,
            "rate": _rate_text(inst),
            "cost": format_money(inst.accrued(now), inst.billing.currency),
        }
        if ticking:  # what a second can change
            return cells
        provider = inst.provider  # "sandbox" says it; "(simulated)" was cut at 80 columns
        return {
            "name": Text(fit_name(inst.name, LABEL_CELLS)),  # a label is the user's text, never markup
            "provider": provider,
            "gpu": Text(f"{inst.gpu_count}× {short_gpu(inst.gpu)}"),
            "queue": self._queue_cell(inst.id),
            **cells,
        }

    def _when_done_now(self) -> tuple[dict[str, str | None], dict[str, bool]]:
        """Each instance's when-done as read now: "at queue end" beside the timer, and whether
        its release is held (the Queue column says so)."""
        if not self._instances:  # (no instance, no import of the jobs module before the first frame)
            return {}, {}
        from gputui.services.jobs import held_now, when_done_label

        services = self.gapp.services
        return ({i: when_done_label(services, i, short=True) for i in self._instances},
                {i: held_now(services, i) for i in self._instances})

    def _recheck_when_done(self, table: DataTable) -> None:
        """A when-done set, changed or carried out by another gputui process (`gputui jobs NAME
        when-done` in a shell, the daemon) writes its record, not the state database: nothing
        tells this console. The records are read again every few seconds and the rows follow
        ("at queue end" beside the timer, "held" in the Queue column)."""
        when, held = self._when_done_now()
        if when == self._when_done and held == self._held:
            return
        self._when_done, self._held = when, held
        for iid in self._instances:  # (the release cells follow in this tick's batch)
            self._update(table, iid, {"queue": self._queue_cell(iid)})

    def _queue_cell(self, instance_id: str) -> str:
        from gputui.services.queuewatch import queue_cell

        return queue_cell(self.gapp.services, instance_id, held=self._held.get(instance_id, False))

    # -- what someone else did ---------------------------------------------------------------

    def _ended(self, table: DataTable, ended: Instance) -> None:
        """An instance on screen ended: its row stays a minute, dimmed, with its final cost,
        and a line says who ended it and what it cost (a toast too where this console did not
        do it)."""
        from gputui.format import format_money

        entry = next((e for e in self.gapp.store.ledger_sync()
                      if e.instance_id == ended.id), None)
        line = ended_line(ended, entry)
        self._gone[ended.id] = line
        self._say(ended.id, line, toast=ended.id not in self.gapp.services.ended_here)
        cost = (format_money(entry.total, entry.currency) if entry is not None
                else format_money(ended.accrued(self.gapp.now()), ended.billing.currency))
        cells = self._shown.get(ended.id, {})
        dim = {key: Text(cells.get(key, ""), style="dim") for key, _label in COLUMNS}
        dim.update(status=Text(status_text(ended.status), style="dim"),
                   release=Text("-", style="dim"), link=Text("-", style="dim"),
                   cost=Text(cost, style="dim"))
        was = self._shown.setdefault(ended.id, {})
        for key, value in dim.items():  # every cell: the same text, dimmed
            table.update_cell(ended.id, key, value,
                              update_width=cell_len(str(value)) != cell_len(was.get(key, "")))
            was[key] = str(value)
        self.set_timer(LINGER_S, lambda: self._drop(ended.id))

    def _drop(self, instance_id: str) -> None:
        self._gone.pop(instance_id, None)
        self._said.pop(instance_id, None)
        self._show_said()
        table = self.query_one(DataTable)
        if instance_id in {k.value for k in table.rows} and instance_id not in self._instances:
            table.remove_row(instance_id)
            self._shown.pop(instance_id, None)
            _remeasure(table)
        if not self._instances and not self._gone:
            self.query_one("#hint", Static).display = True

    def _status_changed(self, old: Instance, inst: Instance) -> None:
        """Powered off by someone else (the daemon at the deadline, a queue's when-done, the
        instance's own timer or idle watchdog, another console): said, with its cost so far."""
        from gputui.models import InstanceStatus

        if inst.status != InstanceStatus.STOPPED or old.status == InstanceStatus.STOPPED:
            return
        services = self.gapp.services
        mine = inst.id in services.stopped_here
        services.stopped_here.discard(inst.id)
        lease = self._leases.get(inst.id)
        done = self._when_done_outcome(inst.id)
        why = (_("its queue ended") if done == "stopped" else
               _("its release time") if lease is not None and lease.state == "fired" else
               _("this console") if mine else _("outside this console"))
        line = _("{name} powered off ({why}); its disk stays — it has cost {cost}").format(
            name=inst.name, why=why,
            cost=format_money(inst.accrued(self.gapp.now()), inst.billing.currency))
        self._say(inst.id, line, toast=not mine)
        self.set_timer(LINGER_S, lambda: self._unsay(inst.id, line))

    def _when_done_outcome(self, instance_id: str) -> str | None:
        from gputui.services.jobs import JobError, load_when_done

        try:
            rec = load_when_done(self.gapp.services, instance_id)
        except JobError:
            return None
        return rec.outcome if rec is not None else None

    def _say(self, instance_id: str, line: str, *, toast: bool) -> None:
        self._said.pop(instance_id, None)
        self._said[instance_id] = line
        self._show_said()
        if toast:
            self.gapp.notify(line, timeout=12)
            self.gapp.bell()

    def _unsay(self, instance_id: str, line: str) -> None:
        if self._said.get(instance_id) == line:
            self._said.pop(instance_id)
            self._show_said()

    def _show_said(self) -> None:
        notes = self.query("#ended")
        if not notes:  # the screen being taken down
            return
        note = notes.first(Static)
        lines = list(self._said.values())[-2:]  # the newest two: the table keeps its rows
        note.update(Text("\n".join(lines)))
        note.display = bool(lines)

    def _put_row(self, inst: Instance) -> None:
        table = self.query_one(DataTable)
        cells = self._cells(inst, self.gapp.now())
        if inst.id in {k.value for k in table.rows}:
            self._update(table, inst.id, cells)
        else:
            table.add_row(*(cells[k] for k, _label in COLUMNS), key=inst.id)
            self._shown[inst.id] = {k: str(v) for k, v in cells.items()}

    def _update(self, table: DataTable, iid: str, cells: dict[str, str | Text]) -> None:
        """Redraw only the cells whose text changed; re-measure a column only when a cell
        changed width (a countdown ticking keeps its width; a long status that goes lets its
        column shrink back, so the columns after it come back into view)."""
        batch: list[tuple[RowKey | str, ColumnKey | str, object]] = []
        self._changes(table, iid, cells, batch)
        _apply(table, batch)

    def _changes(self, table: DataTable, iid: str, cells: dict[str, str | Text],
                 batch: list[tuple[RowKey | str, ColumnKey | str, object]]) -> None:
        """As `_update`, the cells that keep their width put in `batch` (drawn together)."""
        shown = self._shown.setdefault(iid, {})
        for key, value in cells.items():
            text = str(value)
            before = shown.get(key)
            if before == text:
                continue
            if before is None or cell_len(text) != cell_len(before):
                table.update_cell(iid, key, value, update_width=True)
            else:
                batch.append((iid, key, value))
            shown[key] = text

    def check_keeper(self) -> None:
        """Where only a local release keeps a deadline (Lambda: a power-off does not stop the
        billing) and neither a daemon nor a cron line is known, say so."""
        from gputui.services.daemon import deadline_keeper, needs_layer3

        notes = self.query("#keeper")
        if not notes:  # the screen being taken down (the app closing): its second came late
            return
        note = notes.first(Static)
        names = needs_layer3(self.gapp.services, list(self._instances.values()))
        if not names or deadline_keeper(self.gapp.services.state_dir) is not None:
            note.display = False
            return
        who = _(", ").join(names[:3])
        if len(names) > 3:
            who = _("{names} and {n} more").format(names=who, n=len(names) - 3)
        note.update(Text(_("⚠ Only gputui releases {names} at the deadline and no daemon runs: "
                           "keep this console open, or run `gputui daemon --install`.")
                         .format(names=who)))
        note.display = True

    def tick(self) -> None:
        # the app's second can come while Home is mounted but its widgets are not (yet, or
        # any more: the app closing): nothing on screen to tick then. (The table is looked up
        # once: a query walks the screen's widgets, every second.)
        table = self.__dict__.get("_table")
        if table is None or not table.is_attached:
            tables = self.query(DataTable)
            if not tables or not hasattr(self, "_instances"):
                return
            table = self._table = tables.first()
        self._ticks = getattr(self, "_ticks", 0) + 1
        if self._ticks % 10 == 0:  # a daemon started or stopped meanwhile
            self.check_keeper()
        if self._ticks % WHEN_DONE_EVERY == 0 and self._instances:
            self._recheck_when_done(table)
        now = self.gapp.now()
        batch: list[tuple[RowKey | str, ColumnKey | str, object]] = []
        for inst in self._instances.values():
            self._changes(table, inst.id, self._cells(inst, now, ticking=True), batch)
        _apply(table, batch)  # every row's countdown, in one pass and one repaint

    def on_store_event(self, message: StoreEvent) -> None:
        from gputui.store import InstanceChanged, LeaseChanged, LinkChanged, QueueChanged

        event = message.event
        if isinstance(event, QueueChanged):
            if event.instance_id in self._instances:  # that one cell, by its row's key
                self._update(self.query_one(DataTable), event.instance_id,
                             {"queue": self._queue_cell(event.instance_id)})
        elif isinstance(event, InstanceChanged | LeaseChanged | LinkChanged):
            self.reload()

    def selected_instance(self) -> Instance | None:
        table = self.query_one(DataTable)
        if not self._instances or table.cursor_row < 0:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return self._instances.get(key) if key is not None else None

    # -- actions ------------------------------------------------------------------------------

    def _selected_or_say(self) -> Instance | None:
        inst = self.selected_instance()
        if inst is None:
            self.notify(_("No instance selected."), severity="warning")
        return inst

    def action_extend(self, minutes: int = 60) -> None:
        inst = self._selected_or_say()
        if inst is not None:
            self.extend(inst, timedelta(minutes=minutes))

    @work(group="lease", exit_on_error=False)
    async def extend(self, inst: Instance, by: timedelta) -> None:
        try:
            lease = await self.gapp.leases.extend(inst, by=by)
        except Exception as exc:
            self.notify(_("{name}: could not extend: {problem}").format(name=inst.name, problem=exc),
                        severity="error")
            return
        left = format_remaining(lease.remaining(self.gapp.now()))
        self.notify(_("{name}: release in {left}").format(name=inst.name, left=left))

    def action_timer(self) -> None:
        inst = self._selected_or_say()
        if inst is None:
            return
        from gputui.ui.dialogs import TimerDialog

        lease = self._leases.get(inst.id)
        current = lease.release_at if lease else None
        self.app.push_screen(TimerDialog(inst.name, current, self.gapp.now),
                             lambda result: self._timer_chosen(inst, result))

    def _timer_chosen(self, inst: Instance, result: object) -> None:
        if result is None:
            return
        self.set_timer_to(inst, result)

    @work(group="lease", exit_on_error=False)
    async def set_timer_to(self, inst: Instance, result: object) -> None:
        try:
            if result == "none":
                await self.gapp.leases.remove_timer(inst)
                self.notify(_("{name}: no timer — it bills until you release it")
                            .format(name=inst.name), severity="warning")
            else:
                lease = await self.gapp.leases.extend(inst, to=result)  # type: ignore[arg-type]
                self.notify(_("{name}: release in {left}").format(
                    name=inst.name, left=format_remaining(lease.remaining(self.gapp.now()))))
        except Exception as exc:
            self.notify(f"{inst.name}: {shown(exc)}", severity="error")

    def action_release(self) -> None:
        inst = self._selected_or_say()
        if inst is not None:
            self.ask_release(inst)

    @work(group="lease", exit_on_error=False)
    async def ask_release(self, inst: Instance) -> None:
        """Say what the release would end (running runs, results not home), then ask."""
        from gputui.services.at_release import at_stake
        from gputui.ui.dialogs import ConfirmScreen

        stake = await at_stake(self.gapp.services, inst, timeout=5.0)
        cost = format_money(inst.accrued(self.gapp.now()), inst.billing.currency)
        question = _("Release [b]{name}[/b] ({count}× {gpu}) now?\n\nIt has cost {cost} so "
                     "far. Its disk and running processes are gone for good.").format(
            name=escape(inst.name), count=inst.gpu_count, gpu=escape(inst.gpu), cost=cost)
        if not stake.empty:
            question += "\n\n[b]⚠ " + _("{what}: the release ends them (a run it kills is "
                                          "recorded as cancelled).").format(
                what=escape(stake.describe())) + "[/b]"

        def answered(yes: bool | None) -> None:
            if yes:
                self.release(inst, stake)

        self.app.push_screen(ConfirmScreen(question, _("Release"), _("Keep it")), answered)

    @work(group="lease", exit_on_error=False)
    async def release(self, inst: Instance, stake: object = None) -> None:
        from gputui.format import format_small_money
        from gputui.services import at_release

        try:
            entry, cancelled = await at_release.release(
                self.gapp.services, inst,
                stake if isinstance(stake, at_release.AtStake) else None, recheck=True)
        except Exception as exc:
            self.notify(f"{inst.name}: {shown(exc)}", severity="error")
            return
        if entry is not None:
            self.notify(_("{name} released: {total} in all").format(
                name=inst.name, total=format_money(entry.total, entry.currency))
                + "".join("\n" + _("run {run}: cancelled by the release, {cost}").format(
                    run=at_release.run_label(job), cost=format_small_money(job.cost or 0, job.currency))
                    for job in cancelled))

    def action_stop(self) -> None:
        inst = self._selected_or_say()
        if inst is None:
            return
        from gputui.services.keeper import stop_preview
        from gputui.ui.create import ConfirmScreen

        # the wipe date (AutoDL: 15 days shut down) and the release timer that keeps running
        notes = "".join("\n• " + escape(str(shown(n))) for n in stop_preview(
            self.gapp.services, inst, self.gapp.store.get_lease_sync(inst.id), self.gapp.now()))
        self.app.push_screen(
            ConfirmScreen(_("Power off [b]{name}[/b]?\n\nThe GPU charge stops; the disk stays (and "
                            "may still cost). Shift+S (S) starts it again.").format(
                                name=escape(inst.name))
                          + notes,
                          _("Stop"), _("Keep running")),
            on_answer(lambda _yes: self.power(inst, "stop")))

    def action_start(self) -> None:
        inst = self._selected_or_say()
        if inst is not None:
            self.power(inst, "start")

    @work(group="power", exit_on_error=False)
    async def power(self, inst: Instance, what: str) -> None:
        self.notify((_("{name}: stopping…") if what == "stop" else _("{name}: starting…"))
                    .format(name=inst.name))
        try:
            if what == "stop":
                fresh = await self.gapp.services.stop(inst)
            else:
                fresh = await self.gapp.services.start(inst)
                await self.gapp.leases.arm(fresh)
        except Exception as exc:
            self.notify(f"{inst.name}: {shown(exc)}", severity="error")
            return
        self.notify(f"{fresh.name}: {_status_text(fresh, self.gapp.now())}")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_monitor()

    def action_monitor(self) -> None:
        inst = self.selected_instance()
        if inst is not None:
            self.gapp.focus_instance = inst.id
        self.gapp.action_goto("monitor")

    def action_add_host(self) -> None:
        from gputui.ui.dialogs import AddHostDialog

        self.app.push_screen(AddHostDialog(), self._host_given)

    def _host_given(self, form: dict | None) -> None:
        if form:
            self.add_host(form, accept_new=False)

    @work(group="hosts", exit_on_error=False)
    async def add_host(self, form: dict, accept_new: bool) -> None:
        from gputui.models import Granularity
        from gputui.services.hosts import UnknownHostKeyError, add_ssh_host

        try:
            inst = await add_ssh_host(
                self.gapp.services, form["endpoint"], name=form["name"], gpu=form["gpu"],
                price=form["price"], per=Granularity(form["per"]), accept_new_host_key=accept_new)
        except UnknownHostKeyError as exc:
            from gputui.ui.dialogs import ConfirmScreen

            def trust(yes: bool | None) -> None:
                if yes:
                    self.add_host(form, accept_new=True)

            self.app.push_screen(
                ConfirmScreen(_("[b]Unknown host[/b] {where}\n\nIts host key fingerprint is\n"
                                "[b]{fingerprint}[/b]\n\nTrust it only if it matches what the "
                                "provider shows.").format(where=escape(exc.where),
                                                          fingerprint=exc.fingerprint),
                              _("Trust and add"), _("Cancel")),
                trust)
            return
        except Exception as exc:
            # the form comes back with what was typed and the reason, nothing to retype
            from gputui.ui.dialogs import AddHostDialog

            initial = {k: form.get(k) for k in ("line", "price", "per", "name", "gpu")}
            self.app.push_screen(AddHostDialog(initial, str(shown(exc))), self._host_given)
            return
        self.notify(_("added {name}: {count}× {gpu}").format(name=inst.name, count=inst.gpu_count,
                                                             gpu=inst.gpu))


def ended_line(inst: Instance, entry: object) -> str:
    """`qwen-lora released by its release timer (gputui daemon) after 1h45m; it cost $0.60`:
    who ended an instance and what it cost, from its ledger entry."""
    from gputui.models import LedgerEntry
    from gputui.services.notify import _ACTORS, _RELEASED_BY, _duration

    if not isinstance(entry, LedgerEntry):
        return _("{name} ended ({status})").format(name=inst.name,
                                                   status=status_text(inst.status))
    reason = entry.end_reason
    if entry.ended_by in _ACTORS:
        who = _(_ACTORS[entry.ended_by])
    elif reason in ("external", "timer", "idle"):  # the platform, or the instance's own timer
        who = entry.provider
    else:
        who = _("gputui")
    cost = format_money(entry.total, entry.currency)
    duration = shown(_duration(entry.running_seconds))
    if reason == "external" and entry.ended_by is None:
        return _("{name} ended by {provider} after {duration}; it cost {cost}").format(
            name=entry.name, provider=entry.provider, duration=duration, cost=cost)
    return _("{name} released by {by} ({who}) after {duration}; it cost {cost}").format(
        name=entry.name, by=_(_RELEASED_BY.get(reason, reason)), who=who, duration=duration,
        cost=cost)
