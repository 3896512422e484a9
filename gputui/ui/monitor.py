"""Monitor: every instance's GPUs live in one view, and a detail view for one instance.

The screen only reads the store (samples, history, processes, link state) and the App's
`TelemetryService` (`app.telemetry`: status, hints, inventory); it never talks SSH. Rows are
updated in place by key; nothing is cleared on a tick.

Keys — everywhere: `+`/`-` refresh interval (0.5-10 s), `l` watch this machine (NVML).
All instances: ↑/↓ move, enter opens the instance under the cursor.
Detail: esc back, `[`/`]` previous/next instance, `s` sort processes, `k` TERM the selected
process (asks first), `K` KILL it (asks first), `r` re-read processes now.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from gputui.format import fit_name, short_gpu
from gputui.models import (
    BillingRule,
    GpuInventory,
    GpuSample,
    Instance,
    InstanceStatus,
    LinkState,
    ProcessSample,
)
from gputui.services.telemetry import LOCAL_ID, Hint, WatchStatus, step_interval
from gputui.store import GpuHistory, InstanceChanged, LinkChanged, TelemetryChanged
from gputui.ui.base import BaseScreen, StoreEvent
from gputui.ui.livetable import LiveColumn, LiveTable
from gputui.ui.widgets import show

if TYPE_CHECKING:
    from gputui.services.telemetry import TelemetryService

BLOCKS = " ▏▎▍▌▋▊▉"
SPARKS = "▁▂▃▄▅▆▇█"
EMPTY = "·"

# Diagnosis codes as a few words for a table cell.
DIAG_SHORT = {
    "nvidia-smi-missing": "no nvidia-smi",
    "driver-not-loaded": "no driver",
    "driver-library-mismatch": "drv mismatch",
    "nvml-unknown-error": "NVML error",
    "no-devices": "no GPUs seen",
    "permission-denied": "no permission",
    "gpu-lost": "GPU lost",
    "nvml-library-missing": "no NVML",
    "nvml-function-missing": "NVML too old",
    "nvidia-smi-failed": "smi failed",
    "ssh-auth": "login refused",
    "ssh-host-key": "host key!",
    "ssh-unreachable": "unreachable",
    "ssh-error": "ssh error",
    "unavailable": "unavailable",
    "internal": "error",
}

SORTS: list[tuple[str, Any]] = [
    ("memory", lambda p: (-(p.used_memory_mib or 0), p.pid)),
    ("pid", lambda p: (p.pid,)),
    ("gpu", lambda p: (p.gpu_index if p.gpu_index is not None else 999, -(p.used_memory_mib or 0))),
    ("user", lambda p: ((p.user or "~").lower(), p.pid)),
    ("command", lambda p: ((p.name or "~").lower(), p.pid)),
]


# --------------------------------------------------------------------------------------------
# Rendering helpers (pure; tested directly)
# --------------------------------------------------------------------------------------------


def level_style(pct: float | None) -> str:
    """Readable with 16 colours: green / yellow / red, and the bar length says it anyway."""
    if pct is None:
        return "dim"
    return "red" if pct >= 90 else "yellow" if pct >= 60 else "green"


def bar(pct: float | None, width: int, style: str | None = None) -> Text:
    """A horizontal bar of `width` cells (eighth-cell precision); N/A is a dim dotted line."""
    width = max(1, width)
    if pct is None:
        return Text(EMPTY * width, style="dim")
    pct = max(0.0, min(100.0, pct))
    cells = pct / 100 * width
    full = int(cells)
    frac = int((cells - full) * 8)
    filled = "█" * full + (BLOCKS[frac] if full < width and frac else "")
    text = Text(filled, style=style or level_style(pct))
    text.append(EMPTY * (width - len(filled)), style="dim")
    return text


def sparkline(values: Sequence[float | None], width: int, top: float | None = 100.0) -> Text:
    """The last `width` values as ▁..█ (scaled to `top`, else to their maximum)."""
    if width <= 0:
        return Text("")
    vals = list(values)[-width:]
    known = [v for v in vals if v is not None]
    scale = top if top else (max(known) if known else 0)
    out = []
    for v in vals:
        if v is None or not scale:
            out.append(" ")
        else:
            level = int(max(0.0, min(1.0, v / scale)) * (len(SPARKS) - 1) + 0.5)
            out.append(SPARKS[level])
    return Text("".join(out).rjust(width), style="cyan")


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def fmt_mem(used: float | None, total: float | None, unit: str = "G") -> str:
    def g(mib: float | None, decimals: int) -> str:
        return "?" if mib is None else f"{mib / 1024:.{decimals}f}"

    big = (total or used or 0) >= 100 * 1024
    d = 0 if big else 1
    return f"{g(used, d)}/{g(total, d)}{unit}"


def fmt_power(draw: float | None, limit: float | None) -> str:
    def w(v: float | None) -> str:
        return "?" if v is None else f"{v:.0f}"

    if draw is None and limit is None:
        return "N/A"
    return f"{w(draw)}/{w(limit)}W"


def mem_pct(s: GpuSample) -> float | None:
    if s.memory_used_mib is None or not s.memory_total_mib:
        return None
    return s.memory_used_mib / s.memory_total_mib * 100


def state_label(st: WatchStatus | None, inst: Instance) -> tuple[str, str]:
    """(short state for a table cell, style)."""
    if st is None:
        return "no service", "dim"
    if not st.watching:
        if inst.status != InstanceStatus.RUNNING:
            return inst.status.value, "dim"
        return "not watched", "dim"
    if st.diagnosis is not None:
        return "⚠ " + DIAG_SHORT.get(st.diagnosis.code, "error"), "bold red"
    if st.link == LinkState.RECONNECTING:
        return "⟳ reconnecting", "bold yellow"
    if st.link == LinkState.CONNECTING:
        return "connecting…", "yellow"
    if st.link == LinkState.FAILED:
        return "⚠ link failed", "bold red"
    if st.age_s is None:
        return "waiting…", "dim"
    if st.stale:
        return f"stale {fmt_age(st.age_s)}", "bold yellow"
    return "live", "green"


class SortText(Text):
    """A cell that carries its row's sort key (rows are sorted on it after inserts)."""

    def __init__(self, text: Text | str, order: tuple) -> None:
        if isinstance(text, Text):
            super().__init__(text.plain, style=text.style, no_wrap=True)
            for span in text.spans:
                self.spans.append(span)
        else:
            super().__init__(text, no_wrap=True)
        self.order = order

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SortText) and self.order == other.order
                and super().__eq__(other))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None


NARROW = [
    Column("gpu", "Instance / GPU", 14),
    Column("util", "Util", 10),
    Column("mem", "Memory GiB", 16),
    Column("temp", "Temp", 4),
    Column("power", "Power", 9),
]
WIDE_EXTRA = [
    Column("fan", "Fan", 4),
    Column("sm", "SM MHz", 6),
    Column("hist", "Util history", 30),
]
WIDE_AT = 136  # where fan, SM clock and a 30-cell history fit beside a readable note
HISTORY_AT = 96  # a tmux pane beside a training run is often ~100 columns: room for a sparkline


def overview_columns(width: int) -> list[Column]:
    cols = list(NARROW)
    if width >= WIDE_AT:
        cols += WIDE_EXTRA
        cols[0] = Column("gpu", "Instance / GPU", 24)
    elif width >= HISTORY_AT:
        cols.append(Column("hist", "Util history", min(30, width - 84)))
    used = sum((c.width or 0) + 2 for c in cols)
    note = max(10, width - used - 4)
    cols.append(Column("note", "State / hints", note))
    return cols


# --------------------------------------------------------------------------------------------
# The screen
# --------------------------------------------------------------------------------------------


class MonitorScreen(BaseScreen):
    TITLE = "Monitor"
    BINDINGS = [
        Binding("plus,equals_sign", "interval(1)", "Slower", key_display="+"),
        Binding("minus,underscore", "interval(-1)", "Faster", key_display="-"),
        Binding("escape", "back", "All", show=True),
        Binding("k", "kill(False)", "Kill", show=True),
        Binding("K", "kill(True)", "KILL", show=False),
        Binding("s", "sort", "Sort", show=True),
        Binding("r", "refresh_processes", "Re-read", show=False),
        Binding("left_square_bracket", "cycle(-1)", "Prev", show=False, key_display="["),
        Binding("right_square_bracket", "cycle(1)", "Next", show=False, key_display="]"),
        Binding("l", "toggle_local", "This machine", show=False),
    ]
    DEFAULT_CSS = """
    MonitorScreen #mon-status { height: 1; padding: 0 1; color: $text-muted; }
    MonitorScreen #overview { height: 1fr; }
    MonitorScreen #gpus { height: 1fr; }
    MonitorScreen #notes { height: auto; max-height: 6; padding: 0 1; }
    MonitorScreen #detail { height: 1fr; display: none; }
    MonitorScreen #detail-head { height: auto; max-height: 2; padding: 0 1; }
    MonitorScreen #gpu-panels { height: auto; max-height: 60%; padding: 0 1; }
    MonitorScreen .gpu-panel { height: auto; margin-bottom: 0; }
    MonitorScreen #diag { height: auto; padding: 0 1; display: none; }
    MonitorScreen #hints { height: auto; max-height: 4; padding: 0 1; }
    MonitorScreen #procs-title { height: 1; padding: 0 1; color: $text-muted; }
    MonitorScreen #procs { height: 1fr; min-height: 4; }
    """

    view: str = "overview"
    detail_id: str | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="mon-status")
        with Vertical(id="overview"):
            yield LiveTable(id="gpus")
            yield Static("", id="notes")
        with Vertical(id="detail"):
            yield Static("", id="detail-head")
            yield Static("", id="diag")
            with VerticalScroll(id="gpu-panels", can_focus=False):
                yield Static("", id="panel-wait")
            yield Static("", id="hints")
            yield Static("", id="procs-title")
            yield DataTable(id="procs", cursor_type="row", zebra_stripes=True)

    # -- life cycle ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        super().on_mount()
        self._instances: list[Instance] = []
        self._ov_cols: list[Column] = []
        self._ov_keys: dict[str, list[str]] = {}
        self._dirty: set[str] = set()
        self._refreshed: dict[str, float] = {}  # monotonic time each instance was last drawn
        self._structure_dirty = True
        self._panels: dict[int, Static] = {}
        self._proc_cells: dict[str, dict[str, Text]] = {}
        self._procs: dict[str, ProcessSample] = {}
        self._sort = 0
        self._deferred: set[str] = set()  # instances whose rows are out of view and behind
        table = self.query_one("#gpus", LiveTable)
        table.focus()
        self.watch(table, "scroll_y", self._scrolled, init=False)
        procs = self.query_one("#procs", DataTable)
        for key, label, width in (("pid", "PID", 8), ("user", "User", 10), ("gpu", "GPU", 3),
                                  ("mem", "Memory", 9), ("cmd", "Command", None)):
            procs.add_column(label, key=key, width=width)
        self._build_columns()
        self._reload_instances()
        self._refresh_all()
        self.set_interval(0.25, self._apply_dirty)
        self.set_interval(1.0, self._tick)
        self._consume_focus()

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        if not hasattr(self, "_ov_keys"):
            return
        self._reload_instances()
        self._refresh_all()
        self._consume_focus()

    def on_resize(self) -> None:
        super().on_resize()
        if not hasattr(self, "_ov_cols"):
            return
        if overview_columns(self.size.width) != self._ov_cols:
            self._build_columns()
        self._refresh_all()

    @property
    def service(self) -> TelemetryService | None:
        return getattr(self.gapp, "telemetry", None)

    def _consume_focus(self) -> None:
        iid = getattr(self.gapp, "focus_instance", None)
        if iid:
            self.gapp.focus_instance = None  # type: ignore[attr-defined]
            self.show_detail(iid)

    # -- store events ------------------------------------------------------------------------------

    def on_store_event(self, message: StoreEvent) -> None:
        ev = message.event
        if isinstance(ev, TelemetryChanged | LinkChanged):
            self._dirty.add(ev.instance_id)
        elif isinstance(ev, InstanceChanged):
            self._structure_dirty = True

    def _apply_dirty(self) -> None:
        if not self.is_current:
            return
        if self._structure_dirty:
            self._structure_dirty = False
            self._reload_instances()
            self._refresh_all()
            return
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        self._refresh(dirty)

    def _tick(self) -> None:
        """Ages and states move on without new data: redraw what no event redrew lately."""
        if not self.is_current:
            return
        self._consume_focus()
        now = time.monotonic()
        quiet = {i.id for i in self._instances if now - self._refreshed.get(i.id, 0) > 0.9}
        if quiet:
            self._refresh(quiet)
        elif self.view == "detail":
            self._refresh_detail()

    # -- the groups --------------------------------------------------------------------------------

    def _reload_instances(self) -> None:
        items = list(self.gapp.store.instances_sync(live_only=True))
        svc = self.service
        if svc is not None and svc.is_watching(LOCAL_ID):
            items.insert(0, Instance(id=LOCAL_ID, name="this machine", provider="local",
                                     gpu="local GPUs", billing=BillingRule(price_per_hour=0),
                                     status=InstanceStatus.RUNNING))
        self._instances = items

    def _instance(self, iid: str | None) -> Instance | None:
        return next((i for i in self._instances if i.id == iid), None)

    def _status(self, iid: str) -> WatchStatus | None:
        svc = self.service
        return svc.status(iid) if svc is not None else None

    def _hints(self, iid: str) -> list[Hint]:
        svc = self.service
        return svc.hints(iid) if svc is not None else []

    def _inventory_gpu(self, iid: str, index: int) -> GpuInventory | None:
        svc = self.service
        inv = svc.inventory(iid) if svc is not None else None
        if inv is None:
            return None
        return next((g for g in inv.gpus if g.index == index), None)

    def _latest(self, iid: str) -> list[GpuSample]:
        return self.gapp.store.telemetry(iid).latest()

    def _refresh_all(self) -> None:
        self._dirty.clear()
        self._refresh({i.id for i in self._instances}, full=True)

    def _refresh(self, iids: Iterable[str], full: bool = False) -> None:
        iids = set(iids)
        self._refresh_status_line()
        if self.view == "detail":  # the hidden overview is brought up to date when shown
            if self.detail_id is not None and (full or self.detail_id in iids):
                self._refreshed[self.detail_id] = time.monotonic()
                self._refresh_detail()
            return
        self._refresh_overview(iids, full)

    def _refresh_status_line(self) -> None:
        svc = self.service
        if svc is None:
            text = "Telemetry is not running in this console."
        else:
            gpus = sum(len(self.gapp.store.telemetry(i.id).gpus) for i in self._instances)
            hints = sum(len(self._hints(i.id)) for i in self._instances)
            text = (f"every {svc.interval:g} s (+/-) · {len(self._instances)} instance"
                    f"{'' if len(self._instances) == 1 else 's'} · {gpus} GPU"
                    f"{'' if gpus == 1 else 's'}")
            if hints:
                text += f" · ⚑ {hints} hint{'' if hints == 1 else 's'}"
            if self.view == "detail":
                text += " · esc: all instances · [ ] prev/next"
            elif self._instances:
                text += " · enter details"
        status = self.query_one("#mon-status", Static)
        show(status, Text(text))

    # -- overview ------------------------------------------------------------------------------------

    def _build_columns(self) -> None:
        table = self.query_one("#gpus", LiveTable)
        self._ov_cols = overview_columns(self.size.width or 80)
        keys = [c.key for c in table.columns]
        table.set_columns(LiveColumn(c.key, c.label, c.width or 10) for c in self._ov_cols)
        if [c.key for c in self._ov_cols] != keys:
            self._ov_keys = {}  # the table dropped its rows

    def _rows_for(self, pos: int, inst: Instance) -> list[tuple[str, dict[str, Text]]]:
        iid = inst.id
        st = self._status(iid)
        state, style = state_label(st, inst)
        latest = self._latest(iid) if (st is None or st.watching) else []
        room = (self._ov_cols[0].width or 14) - 2 if self._ov_cols else 12
        name = Text(("▾ " if latest else "▸ ") + fit_name(inst.name, room), style="bold")
        total_used = sum(s.memory_used_mib or 0 for s in latest)
        total_mem = sum(s.memory_total_mib or 0 for s in latest)
        draw = sum(s.power_draw_w or 0 for s in latest)
        limit = sum(s.power_limit_w or 0 for s in latest)
        utils = [s.utilization_gpu for s in latest if s.utilization_gpu is not None]
        if utils:  # the instance's mean, so a glance at the group rows is enough
            mean = sum(utils) / len(utils)
            util_cell = bar(mean, 5) + Text(f"{mean:>4.0f}%")
        else:
            util_cell = Text(f"{inst.gpu_count}× GPU" if iid != LOCAL_ID else "NVML", style="dim")
        header = {
            "gpu": SortText(name, (pos, -1, -1)),
            "util": util_cell,
            "mem": Text(fmt_mem(total_used, total_mem) if latest else "", style="dim"),
            "temp": Text(""),
            "power": Text(fmt_power(draw, limit) if latest and limit else "", style="dim"),
            "fan": Text(""),
            "sm": Text(""),
            "hist": Text(""),
            "note": Text(state, style=style),
        }
        rows = [(iid, header)]
        hints = self._hints(iid)
        if not latest:
            if st is not None and st.watching:
                why = st.diagnosis.problem if st.diagnosis else (st.note or "no data yet")
                rows.append((f"{iid}/msg", {
                    "gpu": SortText(Text("  " + why[:60], style="dim italic"), (pos, 0, -1)),
                    "util": Text(""), "mem": Text(""), "temp": Text(""), "power": Text(""),
                    "fan": Text(""), "sm": Text(""), "hist": Text(""),
                    "note": Text(""),
                }))
            return rows
        hist_w = next((c.width for c in self._ov_cols if c.key == "hist"), 0) or 0
        tel = self.gapp.store.telemetry(iid)
        for s in latest:
            marks = " ".join(h.short for h in hints if h.gpu_index == s.index)
            if not marks and any(h.gpu_index is None for h in hints):
                marks = " ".join(h.short for h in hints if h.gpu_index is None)
            util = s.utilization_gpu
            mp = mem_pct(s)
            hot = s.temperature_c is not None and s.temperature_c >= 85
            cells = {
                "gpu": SortText(Text(f" {s.index} {short_gpu(s.name)}"), (pos, s.index, -1)),
                "util": bar(util, 5) + Text(f"{util:>4.0f}%" if util is not None else "  N/A"),
                "mem": bar(mp, 5) + Text(" " + fmt_mem(s.memory_used_mib, s.memory_total_mib)),
                "temp": Text(f"{s.temperature_c:.0f}°" if s.temperature_c is not None else "N/A",
                             style="bold red" if hot else ""),
                "power": Text(fmt_power(s.power_draw_w, s.power_limit_w)),
                "fan": Text(f"{s.fan_pct:.0f}%" if s.fan_pct is not None else "N/A"),
                "sm": Text(f"{s.sm_clock_mhz:.0f}" if s.sm_clock_mhz is not None else "N/A"),
                "hist": sparkline(_recent(tel.history.get(s.index), "util", hist_w),
                                  hist_w) if hist_w else Text(""),
                "note": Text(("⚑ " + marks) if marks else "", style="bold yellow"),
            }
            rows.append((f"{iid}/{s.index}", cells))
            inv = self._inventory_gpu(iid, s.index)
            for j, mig in enumerate(inv.mig_devices if inv else []):
                mp = (mig.memory_used_mib / mig.memory_total_mib * 100
                      if mig.memory_used_mib is not None and mig.memory_total_mib else None)
                rows.append((f"{iid}/{s.index}/mig{j}", {
                    "gpu": SortText(Text(f"   └ {mig.profile or 'MIG'}", style="dim"),
                                    (pos, s.index, j)),
                    "util": Text(f"GI{mig.gi_id if mig.gi_id is not None else '?'}"
                                 f" CI{mig.ci_id if mig.ci_id is not None else '?'}",
                                 style="dim"),
                    "mem": bar(mp, 5) + Text(" " + fmt_mem(mig.memory_used_mib,
                                                          mig.memory_total_mib)),
                    "temp": Text(""), "power": Text(""), "fan": Text(""), "sm": Text(""),
                    "hist": Text(""), "note": Text("MIG", style="dim"),
                }))
        return rows

    def _refresh_overview(self, iids: set[str], full: bool) -> None:
        table = self.query_one("#gpus", LiveTable)
        present = {i.id for i in self._instances}
        changed = False
        if full:
            for gone in [k for k in self._ov_keys if k not in present]:
                for key in self._ov_keys.pop(gone):
                    table.remove_row(key)
                changed = True
        cols = [c.key for c in self._ov_cols]
        now = time.monotonic()
        # Rows scrolled out of view are rebuilt when they come into view (`_scrolled`), unless
        # the instance gains or loses rows: that moves the rows below it, so it is done now.
        shown = self._instances_in_view(table)
        for pos, inst in enumerate(self._instances):
            if inst.id not in iids:
                continue
            self._refreshed[inst.id] = now
            if not full and inst.id not in shown and inst.id in self._ov_keys \
                    and self._shape(inst) == self._ov_keys[inst.id]:
                self._deferred.add(inst.id)
                continue
            self._deferred.discard(inst.id)
            rows = self._rows_for(pos, inst)
            keys = [k for k, _ in rows]
            for old in self._ov_keys.get(inst.id, []):
                if old not in keys:
                    table.remove_row(old)
                    changed = True
            for key, cells in rows:
                changed = changed or key not in table.rows
                table.set_row(key, [cells[c] for c in cols])
            self._ov_keys[inst.id] = keys
        if changed:
            table.sort("gpu", key=lambda cell: getattr(cell, "order", ()))
        self._refresh_notes()

    def _shape(self, inst: Instance) -> list[str]:
        """The row keys `_rows_for` gives this instance, without building the rows."""
        iid = inst.id
        st = self._status(iid)
        keys = [iid]
        indices = sorted(self.gapp.store.telemetry(iid).gpus) \
            if (st is None or st.watching) else []
        if not indices:
            return keys + [f"{iid}/msg"] if st is not None and st.watching else keys
        for index in indices:
            keys.append(f"{iid}/{index}")
            inv = self._inventory_gpu(iid, index)
            keys += [f"{iid}/{index}/mig{j}" for j in range(len(inv.mig_devices if inv else []))]
        return keys

    @staticmethod
    def _instances_in_view(table: LiveTable) -> set[str]:
        return {k.split("/", 1)[0] for k in table.visible_keys()}

    def _scrolled(self) -> None:
        """Rows that came into view get what changed while they were out of it."""
        if not self._deferred or self.view != "overview":
            return
        table = self.query_one("#gpus", LiveTable)
        shown = self._instances_in_view(table)
        if self._deferred & shown:
            self._refresh_overview(self._deferred & shown, full=False)

    def _cursor_instance(self) -> str | None:
        key = self.query_one("#gpus", LiveTable).cursor_key
        if key is None:
            return self._instances[0].id if self._instances else None
        return key.split("/", 1)[0]

    def _refresh_notes(self) -> None:
        notes = self.query_one("#notes", Static)
        if not self._instances:
            show(notes, Text("No running instances. Rent one with n (the sandbox needs no "
                              "account), or press l to watch this machine's GPUs.", style="dim"))
            return
        iid = self._cursor_instance()
        inst = self._instance(iid)
        if inst is None:
            show(notes, "")
            return
        show(notes, status_text(inst, self._status(inst.id), self._hints(inst.id), limit=5))

    @on(LiveTable.RowHighlighted, "#gpus")
    def _highlighted(self, _event: LiveTable.RowHighlighted) -> None:
        self._refresh_notes()

    @on(LiveTable.RowSelected, "#gpus")
    def _selected(self, event: LiveTable.RowSelected) -> None:
        key = event.row_key
        if key:
            self.show_detail(key.split("/", 1)[0])

    # -- detail ------------------------------------------------------------------------------------

    def show_detail(self, iid: str) -> None:
        self._reload_instances()
        if self._instance(iid) is None:
            self.notify("That instance is not running.", severity="warning")
            return
        if self.detail_id != iid:
            self._procs.clear()
            self._proc_cells.clear()
            self.query_one("#procs", DataTable).clear()
            for panel in self._panels.values():
                panel.remove()
            self._panels.clear()
        self.view, self.detail_id = "detail", iid
        self.query_one("#overview").display = False
        self.query_one("#detail").display = True
        self.query_one("#procs", DataTable).focus()
        self._refresh_status_line()
        self._refresh_detail()
        self.refresh_bindings()

    def show_overview(self) -> None:
        self.view = "overview"
        self.query_one("#detail").display = False
        self.query_one("#overview").display = True
        table = self.query_one("#gpus", LiveTable)
        table.focus()
        if self.detail_id is not None and self.detail_id in table.rows:
            table.move_cursor(row=table.get_row_index(self.detail_id))
        self._refresh_all()
        self.refresh_bindings()

    def _panel_width(self) -> int:
        return max(40, (self.size.width or 80) - 4)

    def _refresh_detail(self) -> None:
        iid = self.detail_id
        inst = self._instance(iid)
        head = self.query_one("#detail-head", Static)
        if inst is None or iid is None:
            show(head, Text("This instance is no longer running (esc: all instances).",
                             style="dim"))
            return
        st = self._status(iid)
        svc = self.service
        inv = svc.inventory(iid) if svc is not None else None
        state, style = state_label(st, inst)
        line = Text.assemble((inst.name, "bold"))
        if iid != LOCAL_ID:
            line.append(f" · {inst.gpu_count}× {short_gpu(inst.gpu)}")
        if inv is not None:
            line.append(f" · driver {inv.driver_version or '?'} · CUDA {inv.cuda_version or '?'}")
        line.append(" · ")
        line.append(state, style=style)
        if st is not None and st.age_s is not None and not st.stale:
            line.append(f" ({fmt_age(st.age_s)} ago)", style="dim")
        if st is not None and st.link_detail and st.link != LinkState.CONNECTED:
            line.append(f"\n{st.link.value}: {st.link_detail}", style="yellow")
            if st.age_s is not None:
                line.append(f" — last data {fmt_age(st.age_s)} ago", style="yellow")
        show(head, line)

        diag = self.query_one("#diag", Static)
        if st is not None and st.diagnosis is not None:
            d = st.diagnosis
            t = Text.assemble(("⚠ " + d.problem, "bold red"), "\n", ("Fix: ", "bold"), d.fix)
            if d.detail:
                t.append(f"\n(said: {d.detail})", style="dim")
            show(diag, t)
            diag.display = True
        else:
            diag.display = False

        self._refresh_panels(iid, diagnosed=bool(st and st.diagnosis))
        hints = self._hints(iid)
        hint_box = self.query_one("#hints", Static)
        if hints:
            show(hint_box, Text("\n").join(Text("⚑ " + h.text, style="yellow") for h in hints))
            hint_box.display = True
        else:
            hint_box.display = False
        self._refresh_processes(iid)

    def _refresh_panels(self, iid: str, diagnosed: bool) -> None:
        box = self.query_one("#gpu-panels", VerticalScroll)
        latest = [] if diagnosed else self._latest(iid)
        wanted = {s.index for s in latest}
        for idx in [i for i in self._panels if i not in wanted]:
            self._panels.pop(idx).remove()
        tel = self.gapp.store.telemetry(iid)
        width = self._panel_width()
        new: list[Static] = []
        for s in latest:
            text = gpu_panel_text(s, tel.history.get(s.index),
                                  self._inventory_gpu(iid, s.index),
                                  [h for h in self._hints(iid) if h.gpu_index == s.index], width)
            panel = self._panels.get(s.index)
            if panel is None:
                panel = self._panels[s.index] = Static(text, classes="gpu-panel")
                new.append(panel)
            else:
                show(panel, text)
        if new:
            box.mount_all(new)
        wait = box.query_one("#panel-wait", Static)
        if not latest and not diagnosed:
            st = self._status(iid)
            show(wait, Text(st.note if st and st.note else "waiting for the first sample…",
                             style="dim italic"))
            wait.display = True
        else:
            wait.display = False

    def _refresh_processes(self, iid: str) -> None:
        table = self.query_one("#procs", DataTable)
        procs = list(self.gapp.store.telemetry(iid).processes)
        name, keyfn = SORTS[self._sort]
        title = self.query_one("#procs-title", Static)
        show(title, Text(f"Processes: {len(procs)} · sorted by {name} (s) · k TERM · K KILL",
                          style="dim"))
        wanted = {str(p.pid): p for p in procs}
        changed = False
        for key in [k for k in self._proc_cells if k not in wanted]:
            table.remove_row(key)
            del self._proc_cells[key]
            self._procs.pop(key, None)
            changed = True
        for key, p in wanted.items():
            cells = {
                "pid": SortText(Text(str(p.pid)), keyfn(p)),
                "user": Text(p.user or "?"),
                "gpu": Text("?" if p.gpu_index is None else str(p.gpu_index)),
                "mem": Text("N/A" if p.used_memory_mib is None
                            else f"{p.used_memory_mib:.0f} MiB"),
                "cmd": Text(p.name or "?", no_wrap=True, overflow="ellipsis"),
            }
            before = self._proc_cells.get(key)
            if before is None:
                table.add_row(*cells.values(), key=key)
                changed = True
            else:
                for c, value in cells.items():
                    if before.get(c) != value:
                        table.update_cell(key, c, value, update_width=(c == "cmd"))
                        changed = changed or c == "pid"
            self._proc_cells[key] = cells
            self._procs[key] = p
        if changed:
            table.sort("pid", key=lambda cell: getattr(cell, "order", ()))

    def _selected_process(self) -> ProcessSample | None:
        table = self.query_one("#procs", DataTable)
        if not table.row_count or table.cursor_row < 0:
            return None
        try:
            key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        except Exception:  # noqa: BLE001
            return None
        return self._procs.get(key or "")

    # -- actions -----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("kill", "sort", "back", "cycle", "refresh_processes"):
            return self.view == "detail"
        return True

    def action_back(self) -> None:
        if self.view == "detail":
            self.show_overview()

    def action_interval(self, direction: int) -> None:
        svc = self.service
        if svc is None:
            return
        value = svc.set_interval(step_interval(svc.interval, direction))
        self.notify(f"Refresh every {value:g} s", timeout=2)
        self._refresh_status_line()

    def action_sort(self) -> None:
        self._sort = (self._sort + 1) % len(SORTS)
        for key, p in self._procs.items():
            cells = self._proc_cells.get(key)
            if cells is not None:
                cells["pid"] = SortText(Text(str(p.pid)), SORTS[self._sort][1](p))
                self.query_one("#procs", DataTable).update_cell(key, "pid", cells["pid"])
        self.query_one("#procs", DataTable).sort(
            "pid", key=lambda cell: getattr(cell, "order", ()))
        if self.detail_id:
            self._refresh_processes(self.detail_id)

    def action_cycle(self, step: int) -> None:
        if not self._instances or self.detail_id is None:
            return
        ids = [i.id for i in self._instances]
        pos = ids.index(self.detail_id) if self.detail_id in ids else 0
        self.show_detail(ids[(pos + step) % len(ids)])

    def action_refresh_processes(self) -> None:
        svc = self.service
        if svc is not None and self.detail_id:
            svc.refresh_processes(self.detail_id)

    def action_toggle_local(self) -> None:
        svc = self.service
        if svc is None:
            return
        if svc.is_watching(LOCAL_ID):
            svc.stop(LOCAL_ID)
            self.notify("Stopped watching this machine.", timeout=3)
        else:
            svc.start_local()
            self.notify("Watching this machine's GPUs through NVML.", timeout=3)
        self._structure_dirty = True

    def action_kill(self, force: bool) -> None:
        iid = self.detail_id
        proc = self._selected_process()
        inst = self._instance(iid)
        if iid is None or inst is None or proc is None:
            self.notify("No process selected.", severity="warning")
            return
        from gputui.ui.dialogs import ConfirmScreen

        sig = "KILL" if force else "TERM"
        what = escape(proc.name or "?")
        mem = "" if proc.used_memory_mib is None else f", {proc.used_memory_mib:.0f} MiB"
        gpu = "" if proc.gpu_index is None else f" on GPU {proc.gpu_index}"
        question = (f"Send [b]{sig}[/b] to PID {proc.pid} ({what}{mem}{gpu}) on "
                    f"[b]{escape(inst.name)}[/b]?")
        if force:
            question += "\n\nKILL cannot be caught: the process ends at once, unsaved work is lost."
        self.app.push_screen(
            ConfirmScreen(question, f"Send {sig}", "Keep it"),
            lambda yes: self._kill(iid, proc.pid, force) if yes else None,
        )

    @work(group="monitor-kill", exit_on_error=False)
    async def _kill(self, iid: str, pid: int, force: bool) -> None:
        svc = self.service
        if svc is None:
            return
        result = await svc.kill(iid, pid, force=force)
        if result.gone:
            self.notify(result.message)
        elif result.sent:
            self.notify(result.message + ("" if force else " (K sends KILL)"),
                        severity="warning", timeout=8)
        else:
            self.notify(f"PID {pid}: {result.message}", severity="error")


def status_text(inst: Instance, st: WatchStatus | None, hints: Sequence[Hint],
                limit: int = 5) -> Text:
    """The lines under the overview table for the instance under the cursor."""
    lines: list[Text] = []
    state, style = state_label(st, inst)
    head = Text.assemble((inst.name, "bold"), ": ", (state, style))
    if st is not None and st.age_s is not None:
        head.append(f" · last data {fmt_age(st.age_s)} ago", style="dim")
    lines.append(head)
    if st is not None and st.link not in (LinkState.CONNECTED, LinkState.UNKNOWN) \
            and st.link_detail and (inst.id != LOCAL_ID):
        lines.append(Text(f"{st.link.value}: {st.link_detail}", style="yellow"))
    if st is not None and st.diagnosis is not None:
        lines.append(Text("⚠ " + st.diagnosis.problem, style="bold red"))
        lines.append(Text.assemble(("Fix: ", "bold"), st.diagnosis.fix))
    for h in hints:
        lines.append(Text("⚑ " + h.text, style="yellow"))
    if len(lines) == 1 and st is not None and st.watching:
        lines.append(Text("enter: GPUs in detail, history, processes (kill)", style="dim"))
    return Text("\n").join(lines[:limit])


def _recent(history: GpuHistory | None, name: str, n: int) -> list[float | None]:
    return history.last(name, n) if history is not None and n > 0 else []


def gpu_panel_text(s: GpuSample, history: GpuHistory | None, inv: GpuInventory | None,
                   hints: Sequence[Hint], width: int) -> Text:
    """One GPU in the detail view: title line, util / memory / power bars with sparklines,
    then its MIG devices."""
    bar_w = max(10, min(40, (width - 20) // 3))
    val_w = 14
    spark_w = max(0, min(120, width - 5 - bar_w - 1 - val_w - 1))
    title = Text.assemble((f"GPU {s.index} ", "bold"), short_gpu(s.name or (inv and inv.name)))
    if s.temperature_c is not None:
        title.append(" · ")
        title.append(f"{s.temperature_c:.0f}°C",
                     style="bold red" if s.temperature_c >= 85 else "")
    title.append(f" · fan {s.fan_pct:.0f}%" if s.fan_pct is not None else " · fan N/A")
    title.append(f" · SM {s.sm_clock_mhz:.0f} MHz" if s.sm_clock_mhz is not None else "")
    if s.pstate:
        title.append(f" · {s.pstate}")
    if inv is not None and inv.pcie_gen:
        title.append(f" · PCIe {inv.pcie_gen}×{inv.pcie_width or '?'}", style="dim")
    if hints:
        title.append("  ⚑ " + " ".join(h.short for h in hints), style="bold yellow")
    util = s.utilization_gpu
    mp = mem_pct(s)
    limit = s.power_limit_w or (inv.power_limit_w if inv else None)
    pp = (s.power_draw_w / limit * 100) if (s.power_draw_w is not None and limit) else None
    total = s.memory_total_mib

    def row(label: str, pct: float | None, value: str, values: list[float | None],
            top: float | None) -> Text:
        return Text.assemble(
            (f"{label:<5}", "bold"), bar(pct, bar_w), " ", value[:val_w].ljust(val_w), " ",
            sparkline(values, spark_w, top),
        )

    lines = [
        title,
        row("util", util, f"{util:.0f}%" if util is not None else "N/A",
            _recent(history, "util", spark_w), 100),
        row("mem", mp, fmt_mem(s.memory_used_mib, total, " GiB"),
            _recent(history, "mem_pct", spark_w), 100),
        row("pwr", pp, fmt_power(s.power_draw_w, limit).replace("W", " W"),
            _recent(history, "power_w", spark_w), limit),
    ]
    for mig in (inv.mig_devices if inv else []):
        mpct = (mig.memory_used_mib / mig.memory_total_mib * 100
                if mig.memory_used_mib is not None and mig.memory_total_mib else None)
        lines.append(Text.assemble(
            ("  └ MIG ", "dim"), (mig.profile or "?", "bold"),
            f"  GI {mig.gi_id if mig.gi_id is not None else '?'}"
            f" CI {mig.ci_id if mig.ci_id is not None else '?'}  ",
            bar(mpct, 10), " ", fmt_mem(mig.memory_used_mib, mig.memory_total_mib, " GiB"),
        ))
    return Text("\n").join(lines)
