"""Monitor: every instance's GPUs live in one view (`Overview`), and a detail view for one
instance (`Detail`, with its `Processes`).

The screen only reads the store (samples, history, processes, link state) and the App's
`TelemetryService` (`app.telemetry`: status, hints, inventory); it never talks SSH.

Keys — everywhere: `+`/`-` refresh interval (0.5-10 s), `l` watch this machine (NVML).
All instances: ↑/↓ move, enter opens the instance under the cursor.
Detail: esc back, `[`/`]` previous/next instance, `s` sort processes, `k` TERM the selected
process (asks first), `K` KILL it (asks first), `r` re-read processes now.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from gputui.i18n import N_, _, ngettext, shown
from gputui.models import BillingRule, GpuInventory, GpuSample, Instance, InstanceStatus
from gputui.services.telemetry import LOCAL_ID, Hint, WatchStatus, step_interval
from gputui.store import InstanceChanged, LinkChanged, TelemetryChanged
from gputui.ui.base import BaseScreen, StoreEvent
from gputui.ui.dialogs import on_answer
from gputui.ui.livetable import LiveTable
from gputui.ui.monitor.detail import Detail
from gputui.ui.monitor.overview import Overview
from gputui.ui.monitor.render import overview_columns
from gputui.ui.widgets import show

if TYPE_CHECKING:
    from gputui.services.telemetry import TelemetryService


class MonitorScreen(BaseScreen):
    SHOWS_TELEMETRY = True
    TITLE = N_("Monitor")
    # descriptions are marked here and translated where the footer and help show them
    BINDINGS = [
        Binding(key="plus,equals_sign", action="interval(1)", description=N_("Slower"),
                key_display="+"),
        Binding(key="minus,underscore", action="interval(-1)", description=N_("Faster"),
                key_display="-"),
        Binding("escape", "back", N_("All"), show=True),
        Binding("k", "kill(False)", N_("Kill"), show=True),
        Binding("K", "kill(True)", N_("KILL"), show=False),
        Binding("s", "sort", N_("Sort"), show=True),
        Binding("r", "refresh_processes", N_("Re-read"), show=False),
        Binding(key="left_square_bracket", action="cycle(-1)", description=N_("Prev"),
                show=False, key_display="["),
        Binding(key="right_square_bracket", action="cycle(1)", description=N_("Next"),
                show=False, key_display="]"),
        Binding("l", "toggle_local", N_("This machine"), show=False),
    ]
    DEFAULT_CSS = """
    MonitorScreen #mon-status { height: 1; padding: 0 1; color: $text-muted; }
    """

    view: str = "overview"
    detail_id: str | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="mon-status")
        yield Overview(self, id="overview")
        yield Detail(self, id="detail")

    # -- life cycle ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        super().on_mount()
        self.instances: list[Instance] = []
        self._dirty: set[str] = set()
        self.refreshed: dict[str, float] = {}  # monotonic time each instance was last drawn
        self._structure_dirty = True
        self.overview = self.query_one(Overview)
        self.detail = self.query_one(Detail)
        self.overview.table.focus()
        self.overview.build_columns(self.size.width)
        self._reload_instances()
        self._refresh_all()
        self.set_interval(0.25, self._apply_dirty)
        self.set_interval(1.0, self._tick)
        self._consume_focus()

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        if not hasattr(self, "overview"):
            return
        self._reload_instances()
        self._refresh_all()
        self._consume_focus()

    def on_resize(self) -> None:
        super().on_resize()
        if not hasattr(self, "overview"):
            return
        if overview_columns(self.size.width) != self.overview.cols:
            self.overview.build_columns(self.size.width)
        self._refresh_all()

    @property
    def service(self) -> TelemetryService | None:
        return getattr(self.gapp, "telemetry", None)

    def _consume_focus(self) -> None:
        iid = getattr(self.gapp, "focus_instance", None)
        if iid:
            self.gapp.focus_instance = None  # type: ignore[attr-defined]
            self.show_detail(iid)

    # -- what the views read -----------------------------------------------------------------------

    def instance(self, iid: str | None) -> Instance | None:
        return next((i for i in self.instances if i.id == iid), None)

    def status_of(self, iid: str) -> WatchStatus | None:
        svc = self.service
        return svc.status(iid) if svc is not None else None

    def hints_of(self, iid: str) -> list[Hint]:
        svc = self.service
        return svc.hints(iid) if svc is not None else []

    def inventory_gpu(self, iid: str, index: int) -> GpuInventory | None:
        svc = self.service
        inv = svc.inventory(iid) if svc is not None else None
        if inv is None:
            return None
        return next((g for g in inv.gpus if g.index == index), None)

    def latest(self, iid: str) -> list[GpuSample]:
        return self.gapp.store.telemetry(iid).latest()

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
        quiet = {i.id for i in self.instances if now - self.refreshed.get(i.id, 0) > 0.9}
        if quiet:
            self._refresh(quiet)
        elif self.view == "detail":
            self.detail.refresh_for(self.detail_id)

    def _reload_instances(self) -> None:
        items = list(self.gapp.store.instances_sync(live_only=True))
        svc = self.service
        if svc is not None and svc.is_watching(LOCAL_ID):
            items.insert(0, Instance(id=LOCAL_ID, name=_("this machine"), provider="local",
                                     gpu="local GPUs", billing=BillingRule(price_per_hour=Decimal(0)),
                                     status=InstanceStatus.RUNNING))
        self.instances = items

    def _refresh_all(self) -> None:
        self._dirty.clear()
        self._refresh({i.id for i in self.instances}, full=True)

    def _refresh(self, iids: Iterable[str], full: bool = False) -> None:
        iids = set(iids)
        self._refresh_status_line()
        if self.view == "detail":  # the hidden overview is brought up to date when shown
            if self.detail_id is not None and (full or self.detail_id in iids):
                self.refreshed[self.detail_id] = time.monotonic()
                self.detail.refresh_for(self.detail_id)
            return
        self.overview.refresh_rows(iids, full)

    def _refresh_status_line(self) -> None:
        svc = self.service
        if svc is None:
            text = _("Telemetry is not running in this console.")
        elif self.view == "detail":
            # the keys first: an 80-column pane cuts from the right
            ids = [i.id for i in self.instances]
            where = (_("{n} of {total}").format(n=ids.index(self.detail_id) + 1, total=len(ids))
                     if self.detail_id in ids else "")
            text = _("esc: all · [ ]: prev/next {where} · every {seconds} s (+/-)").format(
                where=where, seconds=f"{svc.interval:g}")
        else:
            gpus = sum(len(self.gapp.store.telemetry(i.id).gpus) for i in self.instances)
            hints = sum(len(self.hints_of(i.id)) for i in self.instances)
            count = len(self.instances)
            text = " · ".join([
                _("every {seconds} s (+/-)").format(seconds=f"{svc.interval:g}"),
                ngettext("{n} instance", "{n} instances", count).format(n=count),
                ngettext("{n} GPU", "{n} GPUs", gpus).format(n=gpus),
            ])
            if hints:
                text += " · ⚑ " + ngettext("{n} hint", "{n} hints", hints).format(n=hints)
            if self.instances:
                text += " · " + _("enter details")
        show(self.query_one("#mon-status", Static), Text(text))

    # -- the two views -----------------------------------------------------------------------------

    def show_detail(self, iid: str) -> None:
        self._reload_instances()
        if self.instance(iid) is None:
            self.notify(_("That instance is not running."), severity="warning")
            return
        if self.detail_id != iid:
            self.detail.reset()
        self.view, self.detail_id = "detail", iid
        self.overview.display = False
        self.detail.display = True
        self.detail.processes.table.focus()
        self._refresh_status_line()
        self.detail.refresh_for(iid)
        self.refresh_bindings()

    def show_overview(self) -> None:
        self.view = "overview"
        self.detail.display = False
        self.overview.display = True
        table: LiveTable = self.overview.table
        table.focus()
        if self.detail_id is not None and self.detail_id in table.rows:
            table.move_cursor(row=table.get_row_index(self.detail_id))
        self._refresh_all()
        self.refresh_bindings()

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
        self.notify(_("Refresh every {seconds} s").format(seconds=f"{value:g}"), timeout=2)
        self._refresh_status_line()

    def action_sort(self) -> None:
        self.detail.processes.next_sort()
        if self.detail_id:
            self.detail.refresh_for(self.detail_id)

    def action_cycle(self, step: int) -> None:
        if not self.instances or self.detail_id is None:
            return
        ids = [i.id for i in self.instances]
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
            self.notify(_("Stopped watching this machine."), timeout=3)
        else:
            svc.start_local()
            self.notify(_("Watching this machine's GPUs through NVML."), timeout=3)
        self._structure_dirty = True

    def action_kill(self, force: bool) -> None:
        iid = self.detail_id
        proc = self.detail.processes.selected()
        inst = self.instance(iid)
        if iid is None or inst is None or proc is None:
            self.notify(_("No process selected."), severity="warning")
            return
        from gputui.format import format_gib
        from gputui.ui.dialogs import ConfirmScreen

        sig = "KILL" if force else "TERM"
        what = escape(proc.name or "?")
        mem = "" if proc.used_memory_mib is None else \
            f", {format_gib(proc.used_memory_mib, unit='mib')}"
        gpu = "" if proc.gpu_index is None else _(" on GPU {index}").format(index=proc.gpu_index)
        question = _("Send [b]{signal}[/b] to PID {pid} ({what}) on [b]{name}[/b]?").format(
            signal=sig, pid=proc.pid, what=f"{what}{mem}{gpu}", name=escape(inst.name))
        if force:
            question += "\n\n" + _("KILL cannot be caught: the process ends at once, unsaved "
                                   "work is lost.")
        self.app.push_screen(ConfirmScreen(question, _("Send {signal}").format(signal=sig),
                                           _("Keep it")),
                             on_answer(lambda _yes: self._kill(iid, proc.pid, force)))

    @work(group="monitor-kill", exit_on_error=False)
    async def _kill(self, iid: str, pid: int, force: bool) -> None:
        svc = self.service
        if svc is None:
            return
        result = await svc.kill(iid, pid, force=force)
        message = str(shown(result.message))
        if result.gone:
            self.notify(message)
        elif result.sent:
            self.notify(message + ("" if force else _(" (K sends KILL)")),
                        severity="warning", timeout=8)
        else:
            self.notify(_("PID {pid}: {message}").format(pid=pid, message=message),
                        severity="error")
