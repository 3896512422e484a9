"""Home: the instances, their countdown to release, and what each has cost so far."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

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
# total $/h, and Costs each instance's).
COLUMNS = [
    ("name", N_("Name")),
    ("gpu", N_("GPU")),
    ("status", N_("Status")),
    ("release", N_("Release in")),
    ("cost", N_("Cost")),
    ("link", N_("Link")),
    ("rate", N_("$/h")),
    ("provider", N_("Provider")),
]
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
    HomeScreen DataTable { height: 1fr; }
    """

    def compose_body(self) -> ComposeResult:
        hint = Static(_(EMPTY_HINT), id="hint")
        hint.display = False  # until the store is read: there may be instances
        yield hint
        yield Static("", id="keeper")
        yield DataTable(id="instances", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(_(label), key=key)
        self._instances: dict[str, Instance] = {}
        self._leases: dict[str, Lease] = {}
        self._shown: dict[str, dict[str, str]] = {}  # the text each cell shows now
        super().on_mount()  # last: where the session is open, it fills the table now

    def on_session_open(self) -> None:
        self.reload()
        self.set_interval(1.0, self.tick)

    def reload(self) -> None:
        store = self.gapp.store
        self._instances = {i.id: i for i in store.instances_sync(live_only=True)}
        self._leases = {lease.instance_id: lease for lease in store.leases_sync()}
        self._when_done: dict[str, str | None] = {}
        if self._instances:  # (no instance, no import of the jobs module before the first frame)
            from gputui.services.jobs import when_done_label  # "release when the queue ends"

            self._when_done = {i: when_done_label(self.gapp.services, i, short=True)
                               for i in self._instances}
        table = self.query_one(DataTable)
        removed = False
        for key in [k.value for k in list(table.rows)]:
            if key is not None and key not in self._instances:
                table.remove_row(key)
                self._shown.pop(key, None)
                removed = True
        if removed:
            _remeasure(table)
        for inst in self._instances.values():
            self._put_row(inst)
        hint = self.query_one("#hint", Static)
        hint.display = not self._instances
        self.call_after_refresh(self.check_keeper)  # not before the first frame
        if not self._instances and store.ledger_sync():
            hint.update(_("Nothing running. Ended instances and what they cost are in Costs "
                          "([b]c[/b], then 2). Press [b]n[/b] to rent another."))

    def _cells(self, inst: Instance, now: datetime) -> dict[str, str | Text]:
        lease = self._leases.get(inst.id)
        if lease is None and inst.status.live:
            release = _("⚠ no timer")  # made by an older gputui: nothing will release it
        elif lease is None or lease.state != "active":
            release = "-"
        elif lease.release_at is None:
            release = _("⚠ no timer")
        else:
            release = format_remaining(lease.remaining(now))
        if getattr(self, "_when_done", {}).get(inst.id):
            release = f"{release} · {shown(self._when_done[inst.id])}".removeprefix("- · ")
        link, _detail = self.gapp.store.link(inst.id)
        link_text = _(LINK_MARK.get(link.value, "-")) if inst.status.billing_compute else "-"
        provider = inst.provider  # "sandbox" says it; "(simulated)" was cut at 80 columns
        return {
            "name": Text(fit_name(inst.name, LABEL_CELLS)),  # a label is the user's text, never markup
            "provider": provider,
            "gpu": Text(f"{inst.gpu_count}× {short_gpu(inst.gpu)}"),
            "status": _status_text(inst, now),
            "link": link_text,  # a stopped box has no SSH to be "ok"
            "release": release,
            "rate": _rate_text(inst),
            "cost": format_money(inst.accrued(now), inst.billing.currency),
        }

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
        shown = self._shown.setdefault(iid, {})
        for key, value in cells.items():
            text = str(value)
            before = shown.get(key)
            if before == text:
                continue
            table.update_cell(iid, key, value,
                              update_width=before is None or cell_len(text) != cell_len(before))
            shown[key] = text

    def check_keeper(self) -> None:
        """Where only a local release keeps a deadline (Lambda: a power-off does not stop the
        billing) and neither a daemon nor a cron line is known, say so."""
        from gputui.services.daemon import deadline_keeper, needs_layer3

        note = self.query_one("#keeper", Static)
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
        self._ticks = getattr(self, "_ticks", 0) + 1
        if self._ticks % 10 == 0:  # a daemon started or stopped meanwhile
            self.check_keeper()
        table = self.query_one(DataTable)
        now = self.gapp.now()
        for inst in self._instances.values():
            cells = self._cells(inst, now)
            self._update(table, inst.id,
                         {k: cells[k] for k in ("release", "cost", "link", "status", "rate")})

    def on_store_event(self, message: StoreEvent) -> None:
        from gputui.store import InstanceChanged, LeaseChanged, LinkChanged

        if isinstance(message.event, InstanceChanged | LeaseChanged | LinkChanged):
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
                    run=at_release.run_label(job), cost=format_money(job.cost or 0, job.currency))
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
