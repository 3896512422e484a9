"""Ollama: one instance's server, its models, and the GPUs it may use.

The screen calls `gputui.services.ollama.OllamaService` in workers and shows what comes back;
it never talks SSH or HTTP itself. Tables are updated in place by row key (a refresh never
clears them), so the cursor stays where it was.

Keys: `[`/`]` previous/next instance (or pick it in the list at the top), `r` refresh,
`s` start the server (or install Ollama, asking first), space ticks a GPU and `a` applies the
selection (asking first: a restart unloads the running models), `p` pull (type the model,
enter; `x` or escape cancels), `l` load the installed model under the cursor (fit check first),
`u` unload the running model under the cursor, `d` delete (asking first), `v` verify where
the loaded models sit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.coordinate import Coordinate
from textual.widgets import Checkbox, DataTable, Input, ProgressBar, Select, Static

from gputui.format import format_gib, short_gpu
from gputui.i18n import N_, _, shown, truncate_cells
from gputui.models import Instance, InstanceStatus
from gputui.sanitize import sanitize
from gputui.services.ollama import (
    INSTALL_COMMAND,
    SHOWN_ENV,
    FitRefused,
    GpuInfo,
    InstalledModel,
    OllamaService,
    OllamaStatus,
    PullProgress,
    RunningModel,
    gpu_words,
    restart_warning,
    service_for,
)
from gputui.store import InstanceChanged
from gputui.ui.base import BaseScreen, StoreEvent
from gputui.ui.widgets import TickBox

REFRESH_S = 5.0
# Headers are marked here and translated when the tables are made.
INSTALLED_COLUMNS = [("name", N_("Installed")), ("size", N_("Size")), ("quant", N_("Quant")),
                     ("family", N_("Family")), ("modified", N_("Modified"))]
RUNNING_COLUMNS = [("name", N_("Running")), ("size", N_("Size")), ("vram", N_("In VRAM")),
                   ("share", N_("On GPU")), ("until", N_("Until"))]
NO_INSTANCE = N_("No running instance. Press [b]n[/b] to rent one (the sandbox needs no "
                 "account).")


# --------------------------------------------------------------------------- formatting (pure)


def fmt_bytes(n: float | None) -> str:
    """Model and memory sizes in GiB, the unit of every GPU figure (format.format_gib)."""
    if n is None:
        return "-"
    if n >= 2**30:
        return format_gib(n)
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{int(n)} B"


def fmt_ago(ts: datetime | None, now: float) -> str:
    if ts is None:
        return "-"
    s = max(0.0, now - ts.timestamp())
    if s < 60:
        return _("{n}s ago").format(n=int(s))
    if s < 3600:
        return _("{n}m ago").format(n=int(s // 60))
    if s < 86400:
        return _("{n}h ago").format(n=int(s // 3600))
    return _("{n}d ago").format(n=int(s // 86400))


def fmt_until(ts: datetime | None, now: float) -> str:
    if ts is None:
        return "-"
    s = ts.timestamp() - now
    if s > 100 * 365 * 86400:
        return _("forever")
    if s <= 0:
        return _("unloading")
    if s < 3600:
        return _("{m}m {s}s").format(m=int(s // 60), s=f"{int(s % 60):02d}")
    return _("{h}h {m}m").format(h=int(s // 3600), m=f"{int(s % 3600 // 60):02d}")


def installed_rows(models: list[InstalledModel], now: float) -> dict[str, dict[str, str]]:
    return {
        m.name: {"name": sanitize(m.name, 96), "size": fmt_bytes(m.size),
                 "quant": sanitize(m.quantization or "-", 24),
                 "family": sanitize(m.family or "-", 24), "modified": fmt_ago(m.modified_at, now)}
        for m in models
    }


def running_rows(models: list[RunningModel], now: float) -> dict[str, dict[str, str]]:
    return {
        m.name: {"name": sanitize(m.name, 96), "size": fmt_bytes(m.size),
                 "vram": fmt_bytes(m.size_vram), "share": sanitize(m.processor, 24), "until": fmt_until(m.expires_at, now)}
        for m in models
    }


def server_line(st: OllamaStatus | None) -> str:
    if st is None:
        return _("Server: …")
    p = st.probe
    if not st.installed:
        return _("Server: [b]not installed[/b] — [b]s[/b] runs the official install "
                 "([i]{command}[/i])").format(command=escape(INSTALL_COMMAND))
    if not st.running:
        return _("Server: [b]stopped[/b] — [b]s[/b] starts it")
    how = f"systemd {p.unit}" if st.managed_by == "systemd" else f"pid {p.pid}"
    if not st.reachable:
        return _("Server: [b]not answering[/b] ({how}, port {port}): {error}").format(
            how=escape(how), port=st.port, error=escape(str(shown(st.error or ""))))
    return _("Server: [b]running[/b] · v{version} · {how} · {host}:{port} · ctx {context}").format(
        version=escape(st.version or "?"), how=escape(how), host=escape(st.host), port=st.port,
        context=f"{st.context:,}")


def env_line(st: OllamaStatus | None) -> str:
    if st is None or not st.installed:
        return ""
    parts = []
    for key in SHOWN_ENV:
        if key in st.env and key != "OLLAMA_HOST":
            value = st.env[key]
            if key == "CUDA_VISIBLE_DEVICES" and len(value) > 24:
                value = value[:24] + "…"
            parts.append(f"{key.removeprefix('OLLAMA_')}={value}")
    return _("Env: {settings}").format(
        settings=escape("  ".join(parts) if parts else _("defaults (all GPUs)")))


def gpu_label(g: GpuInfo) -> str:
    free = g.memory_free_mib
    if free is not None and g.memory_total_mib:  # never more free than the card holds
        free = min(free, g.memory_total_mib)
    text = "?" if free is None else format_gib(free, unit="mib")
    return _("{index} {name} · {free} free").format(
        index=g.index, name=truncate_cells(short_gpu(g.name), 14, ellipsis=""), free=text)


def placement_style(ok: bool, unverified: bool) -> str:
    return "b red" if not ok else "b yellow" if unverified else "b green"


# --------------------------------------------------------------------------- the screen


class GpuCheckbox(TickBox):
    """A GPU's tick box: X ticked, blank not, as every tick box of the console."""



class OllamaScreen(BaseScreen):
    TITLE = N_("Ollama")
    # descriptions are marked here and translated where the footer and help show them
    BINDINGS = [
        Binding("p", "pull", N_("Pull")),
        Binding("l", "load", N_("Load")),
        Binding("u", "unload", N_("Unload")),
        Binding("a", "apply_gpus", N_("Apply GPUs")),
        Binding("d", "delete", N_("Delete")),
        Binding("x,escape", "cancel_pull", N_("Cancel pull"), show=False),
        Binding("s", "start", N_("Start/install"), show=False),
        Binding("r", "refresh", N_("Refresh"), show=False),
        Binding("v", "verify", N_("Verify"), show=False),
        Binding(key="left_square_bracket", action="cycle(-1)", description=N_("Prev instance"),
                show=False, key_display="["),
        Binding(key="right_square_bracket", action="cycle(1)", description=N_("Next instance"),
                show=False, key_display="]"),
    ]
    DEFAULT_CSS = """
    OllamaScreen #body { height: 1fr; }
    OllamaScreen #pick { height: 1; padding: 0 1; }
    OllamaScreen #pick Static { width: auto; }
    OllamaScreen #instance { width: 44; }
    OllamaScreen #hint, OllamaScreen #server, OllamaScreen #env, OllamaScreen #message {
        height: auto; padding: 0 1;
    }
    OllamaScreen #hint { color: $text-muted; }
    OllamaScreen .label { height: 1; padding: 0 1; color: $text-muted; }
    OllamaScreen #gpus { layout: grid; grid-size: 2; grid-gutter: 0 1; height: auto;
                         padding: 0 1; }
    OllamaScreen #gpus Checkbox { width: 1fr; }
    OllamaScreen #installed { height: 1fr; min-height: 4; }
    OllamaScreen #running { height: auto; max-height: 6; min-height: 2; }
    OllamaScreen #pullrow { height: 1; padding: 0 1; }
    OllamaScreen #model { width: 26; }
    OllamaScreen #progress { width: 1fr; padding-left: 1; }
    """

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            with Horizontal(id="pick"):
                yield Static(_("Instance") + " ")
                yield Select([], prompt=_("(no running instance)"), id="instance", compact=True)
            yield Static(_(NO_INSTANCE), id="hint")
            yield Static(server_line(None), id="server")
            yield Static("", id="env")
            yield Static(_("GPUs Ollama may use (space ticks, [b]a[/b] applies):"),
                         classes="label", id="gpus-label")
            yield Horizontal(id="gpus")
            yield DataTable(id="installed", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="running", cursor_type="row")
            with Horizontal(id="pullrow"):
                yield Input(placeholder=_("pull: e.g. qwen2.5:7b"), id="model",
                            compact=True)
                yield ProgressBar(total=None, show_eta=False, id="progress")
            yield Static("", id="message")

    def on_mount(self) -> None:
        super().on_mount()
        self._svc, self._owned = self._make_service()
        self._instances: dict[str, Instance] = {}
        self._options: list[tuple[Text, str]] = []
        self._inst: Instance | None = None
        self._status: OllamaStatus | None = None
        self._server_selection: list[int] = []
        self._gpu_indices: list[int] = []
        self._running_models: list[RunningModel] = []
        self._refreshing = False
        self._busy: str | None = None
        self._pulling: str | None = None
        for table_id, columns in (("#installed", INSTALLED_COLUMNS),
                                  ("#running", RUNNING_COLUMNS)):
            table = self.query_one(table_id, DataTable)
            for key, label in columns:
                table.add_column(_(label), key=key)
        self.query_one("#progress", ProgressBar).display = False
        self._reload_instances(initial=True)
        self.set_interval(REFRESH_S, self._tick)

    def _make_service(self) -> tuple[OllamaService, bool]:
        services = getattr(self.gapp, "services", None) or self.app.services  # type: ignore[attr-defined]
        return service_for(services)

    def on_unmount(self) -> None:
        super().on_unmount()  # the Ollama service is the session's: it closes with it

    # -- instances -----------------------------------------------------------------------------
    def _reload_instances(self, *, initial: bool = False) -> None:
        live = [i for i in self.gapp.store.instances_sync(live_only=True)
                if i.status == InstanceStatus.RUNNING]
        self._instances = {i.id: i for i in live}
        select = self.query_one("#instance", Select)
        # a label is the user's text: never read as markup ("lora[b]x")
        options = [(Text(f"{i.name} · {i.gpu_count}× {short_gpu(i.gpu)}"), i.id) for i in live]
        current = self._inst.id if self._inst else None
        wanted = getattr(self.gapp, "focus_instance", None) if initial else None
        if wanted not in self._instances:
            wanted = current if current in self._instances else (live[0].id if live else None)
        with self.prevent(Select.Changed):
            if options != self._options:  # an open list is left alone when nothing changed
                select.set_options(options)
                self._options = options
            if wanted is not None and select.value != wanted:
                select.value = wanted
        self.query_one("#hint").display = not live
        changed = (self._inst.id if self._inst else None) != wanted
        if wanted is None:
            self._inst = None
            self._show_nothing()
        else:
            self._inst = self._instances[wanted]
            if changed:
                self._switched()

    def _switched(self) -> None:
        self._status = None
        self._server_selection = []
        for table_id in ("#installed", "#running"):
            self.query_one(table_id, DataTable).clear()
        self.query_one("#gpus").remove_children()
        self._gpu_indices = []
        self.query_one("#server", Static).update(server_line(None))
        self.query_one("#env", Static).update("")
        self._say("")
        self.refresh_all()

    def _show_nothing(self) -> None:
        self.query_one("#server", Static).update(_("Server: -"))
        self.query_one("#env", Static).update("")
        for table_id in ("#installed", "#running"):
            self.query_one(table_id, DataTable).clear()
        self.query_one("#gpus").remove_children()
        self._gpu_indices = []

    @on(Select.Changed, "#instance")
    def _picked(self, event: Select.Changed) -> None:
        value = event.value
        if isinstance(value, str) and value in self._instances and (
                self._inst is None or self._inst.id != value):
            self._inst = self._instances[value]
            self._switched()

    def action_cycle(self, step: int) -> None:
        keys = list(self._instances)
        if not keys:
            return
        index = keys.index(self._inst.id) if self._inst and self._inst.id in keys else -1
        self.query_one("#instance", Select).value = keys[(index + step) % len(keys)]

    def on_store_event(self, message: StoreEvent) -> None:
        if isinstance(message.event, InstanceChanged):
            self._reload_instances()

    # -- showing -------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        self.query_one("#message", Static).update(text)

    def _sync_table(self, table_id: str, rows: Mapping[str, Mapping[str, str]],
                    columns: list[tuple[str, str]]) -> None:
        """Rows by key: gone ones removed, present ones updated cell by cell, new ones added."""
        table = self.query_one(table_id, DataTable)
        have = {k.value for k in table.rows if k.value is not None}
        for key in have - set(rows):
            table.remove_row(key)
        for key, cells in rows.items():
            if key in have:
                for col, _label in columns:
                    if table.get_cell(key, col) != cells[col]:
                        table.update_cell(key, col, cells[col], update_width=True)
            else:
                table.add_row(*(cells[c] for c, _label in columns), key=key)

    async def _show_gpus(self, st: OllamaStatus) -> None:
        box = self.query_one("#gpus")
        indices = [g.index for g in st.gpus]
        old_selection = self._server_selection
        self._server_selection = st.selected
        if indices != self._gpu_indices:
            await box.remove_children()
            await box.mount(*[
                GpuCheckbox(gpu_label(g), g.index in st.selected, id=f"gpu-{g.index}",
                            compact=True)
                for g in st.gpus
            ])
            self._gpu_indices = indices
            return
        for g in st.gpus:
            box_ = self.query_one(f"#gpu-{g.index}", Checkbox)
            box_.label = gpu_label(g)
            untouched = box_.value == (g.index in old_selection)
            if untouched:
                box_.value = g.index in st.selected

    async def _show(self, st: OllamaStatus, models: list[InstalledModel],
                    running: list[RunningModel]) -> None:
        self._status = st
        self._running_models = running
        now = time.time()
        self.query_one("#server", Static).update(server_line(st))
        self.query_one("#env", Static).update(env_line(st))
        await self._show_gpus(st)
        self._sync_table("#installed", installed_rows(models, now), INSTALLED_COLUMNS)
        self._sync_table("#running", running_rows(running, now), RUNNING_COLUMNS)

    # -- refreshing ----------------------------------------------------------------------------
    def _tick(self) -> None:
        if self.is_current and self._inst is not None and not self._refreshing and not self._busy:
            self.refresh_all()

    def action_refresh(self) -> None:
        if self._inst is not None:
            self.refresh_all()

    @work(exclusive=True, group="ollama-refresh", exit_on_error=False)
    async def refresh_all(self) -> None:
        inst = self._inst
        if inst is None:
            return
        self._refreshing = True
        try:
            st = await self._svc.status(inst)
            models: list[InstalledModel] = []
            running: list[RunningModel] = []
            if st.reachable:
                models = await self._svc.models(inst, status=st)
                running = await self._svc.running(inst, status=st)
        except Exception as exc:
            if self._inst is inst:
                self._say(f"[b]{escape(inst.name)}[/b]: {escape(str(shown(exc)))}")
            return
        finally:
            self._refreshing = False
        if self._inst is inst:
            await self._show(st, models, running)

    # -- helpers for actions -------------------------------------------------------------------
    def _ready(self) -> Instance | None:
        inst = self._inst
        if inst is None:
            self.notify(_("No running instance."), severity="warning")
            return None
        if self._busy:
            self.notify(_("Busy: {task}…").format(task=self._busy), severity="warning")
            return None
        return inst

    def _row_key(self, table_id: str) -> str | None:
        table = self.query_one(table_id, DataTable)
        if table.row_count == 0 or table.cursor_row < 0:
            return None
        return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value

    async def _confirm(self, question: str, yes: str, no: str | None = None) -> bool:
        from textual.screen import Screen

        from gputui.ui.dialogs import ConfirmScreen

        screen: Screen[Any] = ConfirmScreen(question, yes, _("Cancel") if no is None else no)
        return bool(await self.app.push_screen_wait(screen))

    def _fail(self, inst: Instance, exc: BaseException) -> None:
        text = str(shown(exc)).removeprefix(f"{inst.name}: ")  # said once, not twice
        self._say(f"[b red]{escape(inst.name)}[/]: {escape(text)}")
        self.notify(str(shown(exc)), severity="error", timeout=8)

    # -- server --------------------------------------------------------------------------------
    def action_start(self) -> None:
        if self._ready() is not None:
            self.start_server()

    @work(exclusive=True, group="ollama-action", exit_on_error=False)
    async def start_server(self) -> None:
        inst, st = self._inst, self._status
        if inst is None:
            return
        if st is not None and not st.installed:
            if not await self._confirm(
                    _("Install Ollama on [b]{name}[/b]?\n\nThis runs the official install "
                      "script there:\n\n  {command}").format(name=escape(inst.name),
                                                            command=escape(INSTALL_COMMAND)),
                    _("Install")):
                return
            self._busy = _("installing Ollama")
            self._say(_("Installing Ollama… (this can take minutes)"))
            try:
                await self._svc.install(inst)
            except Exception as exc:
                self._fail(inst, exc)
                return
            finally:
                self._busy = None
        self._busy = _("starting Ollama")
        self._say(_("Starting the Ollama server…"))
        try:
            new = await self._svc.start(inst)
        except Exception as exc:
            self._fail(inst, exc)
            return
        finally:
            self._busy = None
        self._say(_("Ollama {version} is running on port {port}.").format(
            version=escape(new.version or ""), port=new.port))
        self.refresh_all()

    # -- GPUs ----------------------------------------------------------------------------------
    def _ticked(self) -> list[int]:
        return [i for i in self._gpu_indices
                if self.query_one(f"#gpu-{i}", Checkbox).value]

    def action_apply_gpus(self) -> None:
        if self._ready() is None:
            return
        if not self._gpu_indices:
            self.notify(_("No GPUs known yet (refresh with r)."), severity="warning")
            return
        ticked = self._ticked()
        if not ticked:
            self.notify(_("Tick at least one GPU."), severity="warning")
            return
        if ticked == sorted(self._server_selection) and self._status is not None and (
                self._status.running):
            self.notify(_("Ollama already uses these GPUs."))
            return
        self.apply_gpus(ticked)

    @work(exclusive=True, group="ollama-action", exit_on_error=False)
    async def apply_gpus(self, ticked: list[int]) -> None:
        inst = self._inst
        if inst is None:
            return
        every = ticked == list(self._gpu_indices)
        where = _("all GPUs") if every else _("GPU {ids}").format(ids=",".join(map(str, ticked)))
        warning = str(shown(restart_warning(self._running_models)))
        if not await self._confirm(
                _("Restart Ollama on [b]{name}[/b] with {where}?").format(
                    name=escape(inst.name), where=where) + f"\n\n{escape(warning)}",
                _("Restart")):
            return
        self._busy = _("restarting Ollama")
        self._say(_("Restarting Ollama with {where}…").format(where=where))
        try:
            new = await self._svc.apply_gpus(inst, None if every else ticked)
        except Exception as exc:
            self._fail(inst, exc)
            return
        finally:
            self._busy = None
        self._say(_("Ollama now uses {gpus} (CUDA_VISIBLE_DEVICES={value}).").format(
            gpus=shown(gpu_words(new.selected)), value=escape(new.visible_devices or _("unset"))))
        self._server_selection = []  # take the new selection on the next refresh
        for box in self.query("#gpus Checkbox").results(Checkbox):
            box.value = int(str(box.id).removeprefix("gpu-")) in new.selected
        self._server_selection = new.selected
        self.refresh_all()

    # -- pull ----------------------------------------------------------------------------------
    def action_pull(self) -> None:
        box = self.query_one("#model", Input)
        if box.value.strip() and self.focused is box:
            self._start_pull(box.value.strip())
        else:
            box.focus()

    @on(Input.Submitted, "#model")
    def _model_submitted(self, event: Input.Submitted) -> None:
        model = event.value.strip()
        if model:
            self._start_pull(model)
            self.query_one("#installed", DataTable).focus()  # letters are keys again

    def _start_pull(self, model: str) -> None:
        if self._inst is None:
            self.notify(_("No running instance."), severity="warning")
            return
        if self._pulling:
            self.notify(_("Already pulling {model} (x cancels it).").format(model=self._pulling),
                        severity="warning")
            return
        self.pull(model)

    def action_cancel_pull(self) -> None:
        if self._pulling:
            self.workers.cancel_group(self, "ollama-pull")

    @work(exclusive=True, group="ollama-pull", exit_on_error=False)
    async def pull(self, model: str) -> None:
        inst = self._inst
        if inst is None:
            return
        bar = self.query_one("#progress", ProgressBar)
        self._pulling = model
        try:
            try:
                fit = await self._svc.fit_check(inst, model)
            except Exception as exc:
                self._fail(inst, exc)
                return
            if not fit.ok and not await self._confirm(
                    f"{escape(str(shown(fit.message)))}\n\n"
                    + _("Pull [b]{model}[/b] anyway?").format(model=escape(model)), _("Pull")):
                return
            bar.update(total=None, progress=0)
            bar.display = True
            self._say(_("Pulling {model}…").format(model=escape(model)))

            def progress(p: PullProgress) -> None:
                if self._inst is not inst:  # another instance is on screen now
                    return
                if p.total:
                    bar.update(total=p.total, progress=p.completed)
                self._say(f"{escape(model)}: {escape(p.status)}"
                          + (_(" · {done} of {total}").format(done=fmt_bytes(p.completed),
                                                              total=fmt_bytes(p.total))
                             if p.total else ""))

            try:
                done = await self._svc.pull(inst, model, progress)
            except Exception as exc:
                self._fail(inst, exc)
                return
            self._say(_("Pulled {model} ({size}).").format(model=escape(model),
                                                          size=fmt_bytes(done.total)))
            self.query_one("#model", Input).value = ""
            self.refresh_all()
        except BaseException:
            self._say(_("Pull of {model} cancelled (a new pull resumes it).").format(
                model=escape(model)))
            raise
        finally:
            self._pulling = None
            bar.display = False

    # -- load / unload / delete ----------------------------------------------------------------
    def action_load(self) -> None:
        model = self._row_key("#installed")
        if model is None:
            self.notify(_("No installed model under the cursor."), severity="warning")
            return
        if self._ready() is not None:
            self.load(model)

    @work(exclusive=True, group="ollama-action", exit_on_error=False)
    async def load(self, model: str) -> None:
        inst = self._inst
        if inst is None:
            return
        self._busy = _("loading {model}").format(model=model)
        self._say(_("Checking that {model} fits, then loading it…").format(model=escape(model)))
        try:
            try:
                result = await self._svc.load(inst, model)
            except FitRefused as refused:
                fit_text = escape(str(shown(refused.fit.message)))
                self._say("[b yellow]" + _("Would not fit:") + f"[/] {fit_text}")
                self._busy = None
                if not await self._confirm(
                        f"{fit_text}\n\n"
                        + _("Load [b]{model}[/b] anyway?").format(model=escape(model)),
                        _("Load anyway")):
                    return
                self._busy = _("loading {model}").format(model=model)
                result = await self._svc.load(inst, model, force=True)
        except Exception as exc:
            self._fail(inst, exc)
            return
        finally:
            self._busy = None
        report = result.placement
        style = placement_style(report.ok, report.unverified)
        placed = str(shown(report.message))
        self._say(_("Loaded {model}. {placement}").format(
            model=escape(model), placement=f"[{style}]{escape(placed)}[/]"))
        if not report.ok:
            self.notify(placed, severity="warning", timeout=10)
        self.refresh_all()

    def action_unload(self) -> None:
        model = self._row_key("#running")
        if model is None:
            self.notify(_("No running model under the cursor."), severity="warning")
            return
        if self._ready() is not None:
            self.unload(model)

    @work(exclusive=True, group="ollama-action", exit_on_error=False)
    async def unload(self, model: str) -> None:
        inst = self._inst
        if inst is None:
            return
        self._busy = _("unloading {model}").format(model=model)
        try:
            await self._svc.unload(inst, model)
        except Exception as exc:
            self._fail(inst, exc)
            return
        finally:
            self._busy = None
        self._say(_("Unloaded {model}.").format(model=escape(model)))
        self.refresh_all()

    def action_delete(self) -> None:
        model = self._row_key("#installed")
        if model is None:
            self.notify(_("No installed model under the cursor."), severity="warning")
            return
        if self._ready() is not None:
            self.delete(model)

    @work(exclusive=True, group="ollama-action", exit_on_error=False)
    async def delete(self, model: str) -> None:
        inst = self._inst
        if inst is None:
            return
        size = ""
        with_size = self.query_one("#installed", DataTable)
        if model in {k.value for k in with_size.rows}:
            size = f" ({with_size.get_cell(model, 'size')})"
        if not await self._confirm(
                _("Delete [b]{model}[/b]{size} from [b]{name}[/b]?").format(
                    model=escape(model), size=size, name=escape(inst.name))
                + "\n\n" + _("Pulling it again downloads it again."), _("Delete"), _("Keep it")):
            return
        self._busy = _("deleting {model}").format(model=model)
        try:
            await self._svc.delete(inst, model)
        except Exception as exc:
            self._fail(inst, exc)
            return
        finally:
            self._busy = None
        self._say(_("Deleted {model}.").format(model=escape(model)))
        self.refresh_all()

    def action_verify(self) -> None:
        if self._ready() is not None:
            self.verify()

    @work(exclusive=True, group="ollama-action", exit_on_error=False)
    async def verify(self) -> None:
        inst = self._inst
        if inst is None:
            return
        try:
            report = await self._svc.verify_placement(inst)
        except Exception as exc:
            self._fail(inst, exc)
            return
        style = placement_style(report.ok, report.unverified)
        self._say(f"[{style}]{escape(str(shown(report.message)))}[/]")

    # -- for tests and the palette -------------------------------------------------------------
    @property
    def instance(self) -> Instance | None:
        return self._inst

    @property
    def ollama_status(self) -> OllamaStatus | None:
        return self._status

    def rows(self, table_id: str) -> dict[str, dict[str, Any]]:
        table = self.query_one(table_id, DataTable)
        cols = [str(c.key.value) for c in table.columns.values()]
        return {str(k.value): dict(zip(cols, table.get_row(k), strict=True)) for k in table.rows}
