"""The monitor's overview: every instance's GPUs in one live table, and the lines under it for
the instance under the cursor. Rows are updated in place by key; rows scrolled out of view are
brought up to date when they come into view."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from gputui.format import fit_name, short_gpu
from gputui.i18n import _, shown, truncate_cells
from gputui.models import Instance
from gputui.services.telemetry import LOCAL_ID
from gputui.ui.livetable import LiveColumn, LiveTable
from gputui.ui.monitor.render import (
    HISTORY_AT,
    HOST_HINTS,
    Column,
    SortText,
    _recent,
    bar,
    fmt_mem,
    fmt_power,
    hint_short,
    host_cells,
    mem_pct,
    overview_columns,
    problem_line,
    sparkline,
    state_label,
    status_text,
)
from gputui.ui.widgets import show

if TYPE_CHECKING:
    from gputui.ui.monitor.screen import MonitorScreen

MIG = "MIG"  # NVIDIA's name for a GPU partition


class Overview(Vertical):
    """The table of every instance's GPUs (`#gpus`) and the notes under it (`#notes`)."""

    DEFAULT_CSS = """
    Overview { height: 1fr; }
    Overview #gpus { height: 1fr; }
    Overview #notes { height: auto; max-height: 8; padding: 0 1; }
    """

    def __init__(self, monitor: MonitorScreen, **kw) -> None:
        super().__init__(**kw)
        self.monitor = monitor
        self.cols: list[Column] = []
        self.keys: dict[str, list[str]] = {}
        self.deferred: set[str] = set()  # instances whose rows are out of view and behind

    def compose(self) -> ComposeResult:
        yield LiveTable(id="gpus")
        yield Static("", id="notes")

    @property
    def table(self) -> LiveTable:
        return self.query_one("#gpus", LiveTable)

    def on_mount(self) -> None:
        self.watch(self.table, "scroll_y", self._scrolled, init=False)

    def build_columns(self, width: int) -> None:
        table = self.table
        self.cols = overview_columns(width or 80)
        keys = [c.key for c in table.columns]
        table.set_columns(LiveColumn(c.key, c.label, c.width or 10) for c in self.cols)
        if [c.key for c in self.cols] != keys:
            self.keys = {}  # the table dropped its rows

    def rows_for(self, pos: int, inst: Instance) -> list[tuple[str, dict[str, Text]]]:
        m = self.monitor
        iid = inst.id
        st = m.status_of(iid)
        state, style = state_label(st, inst)
        latest = m.latest(iid) if (st is None or st.watching) else []
        room = (self.cols[0].width or 14) - 2 if self.cols else 12
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
        hints = m.hints_of(iid)
        tel = m.gapp.store.telemetry(iid)
        hist_w = next((c.width for c in self.cols if c.key == "hist"), 0) or 0
        if tel.host is not None and (st is None or st.watching):
            cells = host_cells(tel.host, hints)
            cells["gpu"] = SortText(cells["gpu"], (pos, -1, 0))
            cells["hist"] = sparkline(list(tel.host_cpu)[-hist_w:], hist_w) if hist_w \
                else Text("")
            rows.append((f"{iid}/host", cells))
        hints = [h for h in hints if h.code not in HOST_HINTS]  # on the host row
        if not latest:
            if st is not None and st.watching:
                why = (problem_line(st.diagnosis) if st.diagnosis
                       else str(shown(st.note)) if st.note else _("no data yet"))
                rows.append((f"{iid}/msg", {
                    "gpu": SortText(Text("  " + truncate_cells(why, 60), style="dim italic"),
                                    (pos, 0, -1)),
                    "util": Text(""), "mem": Text(""), "temp": Text(""), "power": Text(""),
                    "fan": Text(""), "sm": Text(""), "hist": Text(""),
                    "note": Text(""),
                }))
            return rows
        for s in latest:
            marks = " ".join(hint_short(h) for h in hints if h.gpu_index == s.index)
            if not marks and any(h.gpu_index is None for h in hints):
                marks = " ".join(hint_short(h) for h in hints if h.gpu_index is None)
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
            inv = m.inventory_gpu(iid, s.index)
            for j, mig in enumerate(inv.mig_devices if inv else []):
                mp = (mig.memory_used_mib / mig.memory_total_mib * 100
                      if mig.memory_used_mib is not None and mig.memory_total_mib else None)
                # MIG, GI and CI are NVIDIA's names: the same in every language
                ids = (f"GI{mig.gi_id if mig.gi_id is not None else '?'}"
                       f" CI{mig.ci_id if mig.ci_id is not None else '?'}")
                rows.append((f"{iid}/{s.index}/mig{j}", {
                    "gpu": SortText(Text(f"   └ {mig.profile or MIG}", style="dim"),
                                    (pos, s.index, j)),
                    "util": Text(ids, style="dim"),
                    "mem": bar(mp, 5) + Text(" " + fmt_mem(mig.memory_used_mib,
                                                          mig.memory_total_mib)),
                    "temp": Text(""), "power": Text(""), "fan": Text(""), "sm": Text(""),
                    "hist": Text(""), "note": Text(MIG, style="dim"),
                }))
        return rows

    def refresh_rows(self, iids: set[str], full: bool) -> None:
        m = self.monitor
        table = self.table
        present = {i.id for i in m.instances}
        changed = False
        if full:
            for gone in [k for k in self.keys if k not in present]:
                for key in self.keys.pop(gone):
                    table.remove_row(key)
                changed = True
        cols = [c.key for c in self.cols]
        now = time.monotonic()
        # Rows scrolled out of view are rebuilt when they come into view (`_scrolled`), unless
        # the instance gains or loses rows: that moves the rows below it, so it is done now.
        shown = self._instances_in_view(table)
        for pos, inst in enumerate(m.instances):
            if inst.id not in iids:
                continue
            m.refreshed[inst.id] = now
            if not full and inst.id not in shown and inst.id in self.keys \
                    and self._shape(inst) == self.keys[inst.id]:
                self.deferred.add(inst.id)
                continue
            self.deferred.discard(inst.id)
            rows = self.rows_for(pos, inst)
            keys = [k for k, _cells in rows]
            for old in self.keys.get(inst.id, []):
                if old not in keys:
                    table.remove_row(old)
                    changed = True
            for key, cells in rows:
                changed = changed or key not in table.rows
                table.set_row(key, [cells[c] for c in cols])
            self.keys[inst.id] = keys
        if changed:
            table.sort("gpu", key=lambda cell: getattr(cell, "order", ()))
        self.refresh_notes()

    def _shape(self, inst: Instance) -> list[str]:
        """The row keys `rows_for` gives this instance, without building the rows."""
        m = self.monitor
        iid = inst.id
        st = m.status_of(iid)
        keys = [iid]
        tel = m.gapp.store.telemetry(iid)
        if tel.host is not None and (st is None or st.watching):
            keys += [f"{iid}/host"]  # a row key, not text
        indices = sorted(tel.gpus) if (st is None or st.watching) else []
        if not indices:
            return keys + [f"{iid}/msg"] if st is not None and st.watching else keys
        for index in indices:
            keys.append(f"{iid}/{index}")
            inv = m.inventory_gpu(iid, index)
            keys += [f"{iid}/{index}/mig{j}" for j in range(len(inv.mig_devices if inv else []))]
        return keys

    @staticmethod
    def _instances_in_view(table: LiveTable) -> set[str]:
        return {k.split("/", 1)[0] for k in table.visible_keys()}

    def _scrolled(self) -> None:
        """Rows that came into view get what changed while they were out of it."""
        if not self.deferred or self.monitor.view != "overview":
            return
        shown = self._instances_in_view(self.table)
        if self.deferred & shown:
            self.refresh_rows(self.deferred & shown, full=False)

    def cursor_instance(self) -> str | None:
        key = self.table.cursor_key
        instances = self.monitor.instances
        if key is None:
            return instances[0].id if instances else None
        return key.split("/", 1)[0]

    def refresh_notes(self) -> None:
        m = self.monitor
        notes = self.query_one("#notes", Static)
        if not m.instances:
            show(notes, Text(_("No running instances. Rent one with n (the sandbox needs no "
                               "account), or press l to watch this machine's GPUs."), style="dim"))
            return
        inst = m.instance(self.cursor_instance())
        if inst is None:
            show(notes, "")
            return
        wide = self.size.width >= HISTORY_AT
        host = m.gapp.store.telemetry(inst.id).host if wide else None
        show(notes, status_text(inst, m.status_of(inst.id), m.hints_of(inst.id),
                                limit=7 if host is not None else 5, host=host))

    @on(LiveTable.RowHighlighted, "#gpus")
    def _highlighted(self, _event: LiveTable.RowHighlighted) -> None:
        self.refresh_notes()

    @on(LiveTable.RowSelected, "#gpus")
    def _selected(self, event: LiveTable.RowSelected) -> None:
        key = event.row_key
        if key:
            self.monitor.show_detail(key.split("/", 1)[0])
