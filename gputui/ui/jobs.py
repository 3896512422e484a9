"""Jobs: one instance's queue of runs — status, time, exit code, GPU use and cost per run — the
selected run's log following live, and keys to add, cancel, retry and pull, and to set what
happens when the queue ends.

The queue lives on the instance (see `gputui.services.jobs`); this screen reads it every two
seconds over the instance's link while it is shown, and the selected run's log every second.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.coordinate import Coordinate
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, RichLog, Static

from gputui.format import format_elapsed, format_small_money, run_name, status_text
from gputui.i18n import N_, _, cell_len, shown, truncate_cells
from gputui.models import Instance
from gputui.store import InstanceChanged
from gputui.ui.base import BaseScreen, StoreEvent
from gputui.ui.dialogs import on_answer

# Headers are translated where the table is made (`_()`).
COLUMNS = [
    ("id", "#"),
    ("name", N_("Run")),
    ("status", N_("Status")),
    ("exit", N_("Exit")),
    ("time", N_("Time")),
    ("util", N_("GPU%")),
    ("mem", N_("Mem MiB")),
    ("cost", N_("Cost")),
]
STATUS_STYLE = {"running": "bold", "failed": "bold red", "lost": "red", "cancelled": "dim",
                "succeeded": "green", "queued": ""}
NAME_CELLS = 22
POLL_S = 2.0
LOG_POLL_S = 1.0
LOG_LINES = 200
GONE_SHOWN = 10  # instances gone whose kept runs `i` goes through, the latest first


def local_path(text: str) -> str:
    """A local folder as typed (relative to the folder gputui was started in) made absolute."""
    import os

    return os.path.abspath(os.path.expanduser(text))


def _paths(form: dict[str, str]) -> tuple[str, str]:
    """(remote, absolute local) from a pull form; the local default is ./<name of remote>."""
    import os

    remote = form.get("remote") or "results"
    local = form.get("local") or f"./{os.path.basename(remote.rstrip('/')) or 'results'}"
    return remote, local_path(local)


def _destination(local: str) -> str:
    return _("→ {path}").format(path=escape(local_path(local))) if local.strip() else ""


def _retries(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 100:
        raise ValueError(_("retries: {text} is not a whole number from 0 to 100").format(
            text=repr(text)))
    return value


class FormDialog(ModalScreen[dict[str, str] | None]):
    """A few text fields, one line each so the whole form fits 80×24; Enter in any of them
    submits (the fields after the first are optional or filled in), Tab moves between them,
    Escape cancels. A line at the bottom says so."""

    BINDINGS = [Binding("escape", "dismiss(None)", N_("Cancel"))]
    DEFAULT_CSS = """
    FormDialog { align: center middle; }
    FormDialog > VerticalScroll {
        width: 70; max-width: 100%; height: auto; max-height: 100%; border: round $primary;
        background: $surface; padding: 0 1;
    }
    FormDialog Input { margin-bottom: 1; }
    FormDialog .form-label { height: auto; }
    FormDialog .form-note { color: $text-muted; height: auto; margin-top: -1; margin-bottom: 1; }
    FormDialog #form-keys { color: $text-muted; height: auto; }
    """

    def __init__(self, title: str, fields: list[tuple[str, str, str]], *,
                 submit: str, values: dict[str, str] | None = None,
                 local_fields: tuple[str, ...] = ()) -> None:
        """`submit`: what Enter does, in a word or two (translated or marked with N_())."""
        super().__init__()
        self.title_text = title
        self.fields = fields  # (key, label, placeholder)
        self.values = values or {}  # key -> the text the field starts with (editable)
        self.local_fields = local_fields  # local paths: the absolute path is shown under them
        self.submit = submit

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.title_text)
            for key, label, hint in self.fields:
                yield Static(label, classes="form-label")
                yield Input(self.values.get(key, ""), placeholder=hint, id=f"f-{key}",
                            compact=True)
                if key in self.local_fields:
                    yield Static(_destination(self.values.get(key, "")), id=f"n-{key}",
                                 classes="form-note")
            yield Static(_("enter: {submit} · tab: next field · esc: cancel").format(
                submit=_(self.submit)), id="form-keys")

    @on(Input.Changed)
    def changed(self, event: Input.Changed) -> None:
        key = (event.input.id or "")[2:]
        if key in self.local_fields:
            self.query_one(f"#n-{key}", Static).update(_destination(event.value))

    def on_mount(self) -> None:
        self.query(Input).first().focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss({key: self.query_one(f"#f-{key}", Input).value.strip()
                      for key, _l, _h in self.fields})


class JobsScreen(BaseScreen):
    TITLE = N_("Jobs")
    BINDINGS = [
        Binding("a", "add", N_("Add run")),
        Binding("x", "cancel_run", N_("Cancel run")),
        Binding("r", "retry", N_("Retry")),
        Binding("p", "pull", N_("Pull results")),  # (files: 取回, not the 拉取 of a model)
        Binding("w", "when_done", N_("When done")),
        Binding("i", "next_instance", N_("Instance")),
    ]
    DEFAULT_CSS = """
    JobsScreen #jobs-head { height: auto; padding: 0 1; }
    JobsScreen #jobs-table { height: 1fr; min-height: 4; }
    JobsScreen #jobs-log { height: 1fr; min-height: 3; border-top: solid $primary; }
    """

    def compose_body(self) -> ComposeResult:
        yield Static("", id="jobs-head")
        yield DataTable(id="jobs-table", cursor_type="row", zebra_stripes=True)
        yield RichLog(id="jobs-log", wrap=False, markup=False, highlight=False, max_lines=2000)

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(_(label) if label != "#" else label, key=key)
        self._shown: dict[str, dict[str, str]] = {}
        self._jobs: dict[str, Any] = {}
        self._view: Any = None
        self._log_job: str | None = None
        self._log_lines: list[str] = []
        self._status = _("loading…")
        self.instance: Instance | None = None
        self._gone: tuple[Instance, Any] | None = None  # a released instance and its record
        self._log_final: str | None = None
        self._pick_instance()
        self.poll()
        self.follow_log()

    # -- which instance -------------------------------------------------------------------------
    def _live(self) -> list[Instance]:
        """The instances whose queue can be shown: the live ones, then those gone whose runs
        were kept here (the latest first)."""
        from gputui.services.run_records import record_path

        every = self.gapp.store.instances_sync()
        live = [i for i in every if i.status.value in ("running", "booting", "stopped")]
        gone = sorted((i for i in every if not i.status.live
                       and record_path(self.gapp.services, i.id).exists()),
                      key=lambda i: i.ended_at or i.created_at, reverse=True)
        return live + gone[:GONE_SHOWN]

    def _pick_instance(self) -> None:
        live = self._live()
        focus = self.gapp.focus_instance
        chosen = next((i for i in live if i.id == focus), None) or (live[0] if live else None)
        if chosen is not None and (self.instance is None or chosen.id != self.instance.id):
            self._switch(chosen)
        elif chosen is None:
            self.instance = None
            self._clear()
            self._head()

    def _switch(self, inst: Instance) -> None:
        self.instance = inst
        self.gapp.focus_instance = inst.id
        self._clear()
        self._status = _("loading…")
        self._head()

    def _clear(self) -> None:
        self.query_one(DataTable).clear()
        self._shown.clear()
        self._jobs.clear()
        self._view = None
        self._gone = None
        self._log_job = None
        self._log_final = None
        self._log_lines = []
        self.query_one(RichLog).clear()

    def action_next_instance(self) -> None:
        live = self._live()
        if not live:
            return
        ids = [i.id for i in live]
        cur = ids.index(self.instance.id) if self.instance and self.instance.id in ids else -1
        self._switch(live[(cur + 1) % len(live)])
        self.poll()

    def on_store_event(self, message: StoreEvent) -> None:
        if isinstance(message.event, InstanceChanged):
            if self.instance is not None:
                fresh = self.gapp.store.get_instance_sync(self.instance.id)
                if fresh is not None and fresh.status.live:
                    self.instance = fresh
                    return
                if fresh is not None and any(i.id == fresh.id for i in self._live()):
                    # released while shown: its runs stay (the row chosen too), read from
                    # the copy kept here from now on
                    self.instance = fresh
                    self._gone = None
                    self._log_final = None
                    self.poll()
                    return
            self.instance = None
            self._pick_instance()

    # -- reading the queue ------------------------------------------------------------------------
    def _service(self) -> Any:
        from gputui.services.jobs import JobService

        return JobService(self.gapp.services)

    @work(exclusive=True, group="jobs-poll", exit_on_error=False)
    async def poll(self) -> None:
        while True:
            inst = self.instance
            if inst is not None and not inst.status.live:
                if self._gone is None or self._gone[0] is not inst:
                    from gputui.services.run_records import released_view

                    view, rec = await asyncio.to_thread(released_view, self.gapp.services, inst)
                    if inst is self.instance:
                        self._gone = (inst, rec)
                        self._show(view)
            elif inst is not None and self.is_current:
                try:
                    view = await self._service().view(inst)
                except Exception as exc:  # a link down, the instance stopped: say so
                    if inst is self.instance:
                        self._status = _("cannot read the queue: {error}").format(error=exc)
                        self._head()
                else:
                    if inst is self.instance:
                        self._show(view)
            await asyncio.sleep(POLL_S)

    def _show(self, view: Any) -> None:
        self._view = view
        table = self.query_one(DataTable)
        keys = {k.value for k in table.rows}
        for job in view.jobs:
            self._jobs[job.id] = job
            cells = self._cells(job)
            if job.id not in keys:
                table.add_row(*(cells[k] for k, _label in COLUMNS), key=job.id)
                self._shown[job.id] = {k: str(v) for k, v in cells.items()}
                continue
            shown = self._shown.setdefault(job.id, {})
            for key, value in cells.items():
                text = str(value)
                if shown.get(key) != text:
                    table.update_cell(job.id, key, value,
                                      update_width=cell_len(text) > cell_len(shown.get(key) or ""))
                    shown[key] = text
        counts = view.counts()
        self._status = _(", ").join(_("{n} {status}").format(n=n, status=status_text(s))
                                    for s, n in counts.items()) or _("no runs yet")
        if view.finished:
            self._status = _("queue ended: {counts}").format(counts=self._status)
        self._head()
        if self._log_job is None and view.jobs:
            self._select_log(self._selected_id() or view.jobs[0].id)

    def _cells(self, job: Any) -> dict[str, str | Text]:
        return {
            "id": job.id,
            # the user's label, never markup; cut by cells in the middle (a sweep's labels
            # differ at the end) so that the cost column stays on an 80-column screen
            "name": Text(truncate_cells(run_name(job.id, job.name), NAME_CELLS, where="middle")),
            "status": Text(status_text(job.status), style=STATUS_STYLE.get(job.status, "")),
            "exit": "-" if job.exit_code is None else str(job.exit_code),
            "time": format_elapsed(job.seconds(self.gapp.now())),
            "util": "-" if job.gpu_util_avg is None else f"{job.gpu_util_avg:.0f}",
            "mem": "-" if job.gpu_mem_max_mib is None else f"{job.gpu_mem_max_mib:.0f}",
            "cost": "-" if job.cost is None else format_small_money(job.cost, job.currency),
        }

    def _head(self) -> None:
        head = self.query_one("#jobs-head", Static)
        if self.instance is None:
            head.update(_("No running instance. Rent one with [b]n[/b]; queue runs here or "
                          "with `gputui jobs NAME add -- CMD`."))
            return
        if not self.instance.status.live:  # gone: its runs as kept here, for reading
            from gputui.format import local_clock
            from gputui.services.run_records import record_note

            inst = self.instance
            when = (_(" at {time}").format(time=local_clock(inst.ended_at))
                    if inst.ended_at else "")
            rec = self._gone[1] if self._gone is not None else None
            head.update(_("[b]{name}[/b] · {status}{when} · {counts}").format(
                name=escape(inst.name), status=escape(status_text(inst.status)),
                when=escape(when), counts=escape(self._status))
                + "\n" + escape(record_note(rec, inst)))
            return
        from gputui.services.jobs import held_now, when_done_label

        services, iid = self.gapp.services, self.instance.id
        label = when_done_label(services, iid) or _("keep (w to change)")
        text = _("[b]{name}[/b] · {status} · when done: {label}").format(
            name=escape(self.instance.name), status=escape(self._status), label=escape(label))
        if held_now(services, iid):  # the ways out of a hold
            text += "\n" + _("Held, not released: [b]r[/b] on Home releases it anyway; [b]w[/b] "
                             "here pulls another path.")
        head.update(text)

    # -- the log ------------------------------------------------------------------------------
    def _selected_id(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count or table.cursor_row < 0:
            return None
        return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if key is not None and key != self._log_job:
            self._select_log(key)

    def _select_log(self, job_id: str) -> None:
        self._log_job = job_id
        self._log_final = None
        self._log_lines = []
        self.query_one(RichLog).clear()

    @work(exclusive=True, group="jobs-log", exit_on_error=False)
    async def follow_log(self) -> None:
        """The selected run's last lines, refreshed while it runs (appended, not redrawn); a
        released instance's from the copy kept here."""
        while True:
            inst, job_id = self.instance, self._log_job
            job = self._jobs.get(job_id) if job_id else None
            if inst is not None and job_id is not None and not inst.status.live:
                if self._log_final != job_id and self._gone is not None:
                    self._kept_log(job_id, job)
            elif inst is not None and job_id is not None and self.is_current:
                fetched = job is not None and job.final and self._log_final == job_id
                if not fetched:
                    try:
                        lines = await self._service().log_tail(inst, job_id, LOG_LINES)
                    except Exception:
                        lines = None
                    if lines is not None and job_id == self._log_job and inst is self.instance:
                        self._append(lines)
                        if job is not None and job.final:
                            self._log_final = job_id
                            if not self._log_lines:
                                self._say_in_log(job)
            await asyncio.sleep(LOG_POLL_S)

    def _say_in_log(self, job: Any) -> None:
        """An empty log says so, and how the run ended: "no output; exit code 3"."""
        from gputui.services.run_records import no_output

        self.query_one(RichLog).write(Text(no_output(job), style="italic"))

    def _kept_log(self, job_id: str, job: Any) -> None:
        from gputui.services.run_records import TOTAL_BYTES, kept_tail

        assert self._gone is not None
        self._log_final = job_id
        self.query_one(RichLog).clear()
        self._log_lines = []
        kept = kept_tail(self._gone[1], job_id)
        if kept is None:
            self.query_one(RichLog).write(Text(_("no log of this run was kept here"),
                                               style="italic"))
            return
        lines, cut, over_cap = kept
        if over_cap and not lines:
            self.query_one(RichLog).write(Text(_(
                "its log was not kept: the instance's logs were over the {size} kept").format(
                size=f"{TOTAL_BYTES // (1024 * 1024)} MiB"), style="italic"))
            return
        if cut:
            self.query_one(RichLog).write(Text(_("(the last lines only: the log was longer)"),
                                               style="italic"))
        self._append(lines)
        if not lines and job is not None:
            self._say_in_log(job)

    def _append(self, lines: list[str]) -> None:
        log = self.query_one(RichLog)
        old = self._log_lines
        # the new tail overlaps the old one: write only what follows it
        start = 0
        for k in range(min(len(old), len(lines)), 0, -1):
            if old[-k:] == lines[:k]:
                start = k
                break
        else:
            if old:
                log.clear()
        for line in lines[start:]:
            log.write(Text(line))
        self._log_lines = (old + lines[start:])[-LOG_LINES:] if start else list(lines)

    # -- actions ----------------------------------------------------------------------------
    def _need_instance(self) -> Instance | None:
        if self.instance is None:
            self.notify(_("No running instance."), severity="warning")
        elif not self.instance.status.live:
            self.notify(_("{name} is {status}: its runs are kept here to read; rent another "
                          "to run more").format(name=self.instance.name,
                                                status=status_text(self.instance.status)),
                        severity="warning")
            return None
        return self.instance

    def action_add(self) -> None:
        inst = self._need_instance()
        if inst is None:
            return
        from gputui.services.pushes import last_push

        project = last_push(self.gapp.services, inst.id)
        self.app.push_screen(FormDialog(
            _("[b]Queue a run on {name}[/b]").format(name=escape(inst.name)),
            [("command", _("Command"), "python train.py --lr 3e-4"),
             ("gpus", _("GPUs (e.g. 0,1; empty: all)"), _("all")),
             ("name", _("Label (for the ledger)"), _("optional")),
             ("cwd", _("Working folder on the instance (empty: its home; the pushed project "
                       "when there is one)"), _("home folder")),
             ("retries", _("Retries if it fails (0-100)"), "0")],
            values={"cwd": project or "", "retries": "0"}, submit=N_("queue it")),
            on_answer(lambda form: self.add(inst, form)))

    @work(group="jobs-act", exit_on_error=False)
    async def add(self, inst: Instance, form: dict[str, str]) -> None:
        from gputui.format import check_label
        from gputui.services.jobs import JobSpec, parse_gpus

        try:
            if not form.get("command"):
                raise ValueError(_("no command given"))
            retries = _retries(form.get("retries") or "0")
            label = check_label(form["name"], _("Label")) if form.get("name") else None
            spec = JobSpec(form["command"], name=label,
                           cwd=form.get("cwd") or None, retries=retries,
                           gpus=parse_gpus(form.get("gpus") or None, inst.gpu_count))
            [job_id] = await self._service().add(inst, [spec])
        except Exception as exc:
            self.notify(_("{name}: could not queue it: {error}").format(name=inst.name, error=exc),
                        severity="error")
            return
        self.notify(_("{name}: job {job_id} queued").format(name=inst.name, job_id=job_id))
        self.poll()

    def action_cancel_run(self) -> None:
        inst, job_id = self._need_instance(), self._selected_id()
        if inst is None or job_id is None:
            return
        from gputui.ui.create import ConfirmScreen

        job = self._jobs.get(job_id)
        question = (_("Cancel job {job_id} on {name} (stop it)?")
                    if job is not None and job.status == "running" else
                    _("Cancel job {job_id} on {name} (drop it)?"))
        self.app.push_screen(ConfirmScreen(question.format(job_id=job_id, name=escape(inst.name)),
                                           _("Cancel run"), _("Keep it")),
                             on_answer(lambda _yes: self.cancel_run(inst, job_id)))

    @work(group="jobs-act", exit_on_error=False)
    async def cancel_run(self, inst: Instance, job_id: str) -> None:
        try:
            await self._service().cancel(inst, job_id)
        except Exception as exc:
            self.notify(_("job {job_id}: {error}").format(job_id=job_id, error=exc),
                        severity="error")
            return
        self.notify(_("job {job_id}: cancelled").format(job_id=job_id))
        self.poll()

    def action_retry(self) -> None:
        inst, job_id = self._need_instance(), self._selected_id()
        if inst is not None and job_id is not None:
            self.retry(inst, job_id)

    @work(group="jobs-act", exit_on_error=False)
    async def retry(self, inst: Instance, job_id: str) -> None:
        try:
            new = await self._service().retry(inst, job_id)
        except Exception as exc:
            self.notify(_("job {job_id}: {error}").format(job_id=job_id, error=exc),
                        severity="error")
            return
        self.notify(_("job {job_id} queued again as {new}").format(job_id=job_id, new=new))
        self.poll()

    def action_pull(self) -> None:
        inst = self._need_instance()
        if inst is None:
            return
        self.app.push_screen(FormDialog(
            _("[b]Pull from {name}[/b] (only what changed)").format(name=escape(inst.name)),
            [("remote", _("On the instance (inside its home)"), "results"),
             ("local", _("To this folder here"), local_path("results"))],
            values={"remote": "results", "local": local_path("results")},
            local_fields=("local",), submit=N_("pull")),
            on_answer(lambda form: self.pull(inst, *_paths(form))))

    @work(group="jobs-act", exit_on_error=False)
    async def pull(self, inst: Instance, remote: str, local: str) -> None:
        from gputui.services.jobs import WhenDone

        rec = WhenDone(policy="keep", pulls=[{"remote": remote, "local": local}])
        try:
            [summary] = await self._service().pull_results(inst, rec)
        except Exception as exc:
            self.notify(_("{name}: pull failed: {error}").format(name=inst.name, error=exc),
                        severity="error")
            return
        self.notify(_("pulled {files} files ({skipped} unchanged) to {local}").format(
            files=summary.files, skipped=summary.skipped, local=local))

    def action_when_done(self) -> None:
        inst = self._need_instance()
        if inst is None:
            return
        self.app.push_screen(FormDialog(
            _("[b]When the queue on {name} ends[/b]").format(name=escape(inst.name)),
            [("policy", _("release, stop or keep"), "release"),
             ("remote", _("Pull this home first (empty: nothing)"), "results"),
             ("local", _("to this folder here"), local_path("results"))],
            values={"policy": "release", "local": local_path("results")},
            local_fields=("local",), submit=N_("set it")),
            on_answer(lambda form: self.when_done(
                inst, form, _paths(form) if form.get("remote") else None)))

    @work(group="jobs-act", exit_on_error=False)
    async def when_done(self, inst: Instance, form: dict[str, str],
                        pull: tuple[str, str] | None) -> None:
        policy = (form.get("policy") or "release").lower()
        if policy not in ("release", "stop", "keep"):
            self.notify(_("{policy}: choose release, stop or keep").format(policy=repr(policy)),
                        severity="error")
            return
        pulls = [pull] if pull else []
        jobs = self._service()
        try:
            await jobs.set_when_done(inst, policy, pulls=pulls)  # type: ignore[arg-type]
        except Exception as exc:
            self.notify(f"{inst.name}: {shown(exc)}", severity="error")
            return
        self.notify(_("{name}: when its queue ends: {policy}").format(name=inst.name,
                                                                     policy=policy))
        try:  # the queue may have ended already: done now (results home first)
            await jobs.finish(inst, force=True)
        except Exception as exc:
            self.notify(f"{inst.name}: {shown(exc)}", severity="error")
        self._head()
