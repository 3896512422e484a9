"""The Ollama service: status, models, pulls, loads and GPU selection on instances."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_, _
from gputui.i18n import Deferred as D
from gputui.models import Instance
from gputui.remote.ollama_client import (
    InstalledModel,
    ModelInfo,
    OllamaClient,
    OllamaError,
    OllamaNotFound,
    PullProgress,
    RunningModel,
    normalize_name,
    parse_host,
)
from gputui.services.ollama.common import (
    DEFAULT_CONTEXT,
    INSTALL_COMMAND,
    LOG_FILE,
    UNIT,
    FitRefused,
    OllamaServiceError,
    install_run_command,
)
from gputui.services.ollama.fit import (
    FitCheck,
    _catalog_tag,
    _gb,
    check_fit,
    estimate_model,
)
from gputui.services.ollama.gpus import (
    GpuInfo,
    cuda_visible_value,
    parse_gpu_rows,
    selection_of,
)
from gputui.services.ollama.probe import (
    ServerProbe,
    _clean,
    compute_apps_query,
    gpu_query_command,
    parse_probe,
    probe_script,
)
from gputui.services.ollama.systemd import (
    nohup_start_command,
    stop_process_command,
    systemd_apply_commands,
    systemd_dropin,
    systemd_start_commands,
)

if TYPE_CHECKING:
    from gputui.services.hub import Services


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class OllamaStatus:
    instance: str
    probe: ServerProbe
    gpus: tuple[GpuInfo, ...]
    version: str | None = None  # from /api/version; None when it did not answer
    error: str | None = None  # why it did not answer, or why GPUs are unknown
    gpu_error: str | None = None

    @property
    def installed(self) -> bool:
        return self.probe.installed

    @property
    def running(self) -> bool:
        return self.probe.running

    @property
    def reachable(self) -> bool:
        return self.version is not None

    @property
    def managed_by(self) -> str | None:
        return self.probe.managed_by

    @property
    def pid(self) -> int | None:
        return self.probe.pid

    @property
    def env(self) -> dict[str, str]:
        return self.probe.server_env

    @property
    def host(self) -> str:
        return parse_host(self.env.get("OLLAMA_HOST"))[0]

    @property
    def port(self) -> int:
        return parse_host(self.env.get("OLLAMA_HOST"))[1]

    @property
    def forward_host(self) -> str:
        host = self.host
        return "127.0.0.1" if host in ("0.0.0.0", "::", "", "localhost") else host

    @property
    def visible_devices(self) -> str | None:
        return self.env.get("CUDA_VISIBLE_DEVICES")

    @property
    def selected(self) -> list[int]:
        return selection_of(self.visible_devices, self.gpus)

    @property
    def context(self) -> int:
        try:
            return max(256, int(self.env.get("OLLAMA_CONTEXT_LENGTH") or DEFAULT_CONTEXT))
        except ValueError:
            return DEFAULT_CONTEXT

    @property
    def parallel(self) -> int:
        try:
            return max(1, int(self.env.get("OLLAMA_NUM_PARALLEL") or 1))
        except ValueError:
            return 1

    @property
    def state(self) -> str:
        if not self.installed:
            return "not installed"
        if not self.running:
            return "stopped"
        return "running" if self.reachable else "not answering"

    def as_dict(self) -> dict[str, Any]:
        p = self.probe
        return {
            "instance": self.instance, "state": self.state, "installed": self.installed,
            "running": self.running, "reachable": self.reachable, "version": self.version,
            "client_version": p.client_version, "managed_by": self.managed_by,
            "unit": p.unit, "unit_active": p.unit_active, "dropin": p.dropin, "pid": p.pid,
            "binary": p.binary, "host": self.host, "port": self.port,
            "env": {k: v for k, v in self.env.items()},
            "cuda_visible_devices": self.visible_devices, "selected": self.selected,
            "gpus": [g.as_dict() for g in self.gpus], "error": self.error,
            "gpu_error": self.gpu_error,
            "log": LOG_FILE.replace("$HOME", p.home or "~") if self.managed_by == "process"
            else None,
            "install_command": None if self.installed else INSTALL_COMMAND,
        }


@dataclass(frozen=True)
class PlacementReport:
    selected: tuple[int, ...]
    per_gpu_mib: dict[int, float]  # memory Ollama's processes hold, by GPU index
    running: tuple[RunningModel, ...]
    outside: tuple[int, ...]  # GPUs holding Ollama memory that are not selected
    on_cpu: tuple[str, ...]  # models partly (or wholly) in host memory
    message: str
    unverified: bool = False  # models in VRAM, but nvidia-smi shows no Ollama process

    @property
    def ok(self) -> bool:
        return not self.outside and not self.on_cpu

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "unverified": self.unverified, "selected": list(self.selected),
            "per_gpu_mib": {str(k): v for k, v in sorted(self.per_gpu_mib.items())},
            "outside": list(self.outside), "on_cpu": list(self.on_cpu),
            "running": [m.as_dict() for m in self.running], "message": self.message,
        }


@dataclass(frozen=True)
class LoadResult:
    model: str
    fit: FitCheck
    placement: PlacementReport


def placement_report(
    apps_text: str,
    gpus: Sequence[GpuInfo],
    selected: Sequence[int],
    running: Sequence[RunningModel],
    *,
    server_pid: int | None,
) -> PlacementReport:
    from gputui.nvidia.nvsmi import parse_compute_apps_csv

    fields = ["pid", "gpu_uuid", "process_name", "used_gpu_memory"]
    uuid_to_index = {g.uuid: g.index for g in gpus if g.uuid}
    procs = parse_compute_apps_csv(apps_text, fields, uuid_to_index=uuid_to_index)
    per_gpu: dict[int, float] = {}
    for p in procs:
        ours = (server_pid is not None and p.pid == server_pid) or "ollama" in (p.name or "").lower()
        if ours and p.gpu_index is not None:
            per_gpu[p.gpu_index] = per_gpu.get(p.gpu_index, 0.0) + (p.used_memory_mib or 0.0)
    outside = tuple(sorted(i for i, mib in per_gpu.items() if mib > 0 and i not in selected))
    on_cpu = tuple(m.name for m in running if m.size_vram < m.size)
    names = {g.index: g.short_name for g in gpus}
    held: D | None = None
    for i, mib in sorted(per_gpu.items()):
        item = D(N_("{size} GiB on GPU {index} ({name})"), size=f"{mib / 1024:,.1f}", index=i,
                 name=names.get(i, "?"))
        held = item if held is None else D(N_("{first}, {second}"), first=held, second=item)
    if held is None:
        held = D(N_("no GPU memory"))
    sel = ",".join(str(i) for i in selected) or D(N_("none"))
    in_vram = sum(m.size_vram for m in running)
    unverified = in_vram > 0 and not per_gpu
    # English (JSON keeps it); shown in the interface language with `gputui.i18n.shown`
    msg: D
    if outside:
        msg = D(N_("MISMATCH: Ollama holds {held}; GPU {ids} is not selected (selected: "
                   "{selected})"), held=held, ids=",".join(map(str, outside)), selected=sel)
    elif on_cpu:
        msg = D(N_("Ollama holds {held}; partly on the CPU: {models} (selected: {selected})"),
                held=held, models=", ".join(on_cpu), selected=sel)
    elif unverified:
        msg = D(N_("Ollama reports {size} in GPU memory, but nvidia-smi lists no Ollama process "
                   "(in a container it often cannot see processes): placement not verified"),
                size=_gb(in_vram))
    else:
        msg = D(N_("Ollama holds {held}: as selected (GPUs {selected})"), held=held,
                selected=sel)
    return PlacementReport(tuple(selected), per_gpu, tuple(running), outside, on_cpu, msg,
                           unverified)


# --------------------------------------------------------------------------- the service


def _not_installed(inst: Instance) -> str:
    return _("{name}: Ollama is not installed (install it with: {command})").format(
        name=inst.name, command=INSTALL_COMMAND)


ProgressCallback = Callable[[PullProgress], None]


class OllamaService:
    """Ollama on instances, through the hub's shared SSH links. One per Services hub."""

    def __init__(
        self, services: Services, *, timeout: float = 10.0, long_timeout: float = 600.0
    ) -> None:
        self.services = services
        self.timeout = timeout
        self.long_timeout = long_timeout
        self._clients: dict[str, tuple[Any, tuple[str, int], int, OllamaClient]] = {}

    # -- plumbing ------------------------------------------------------------------------------
    async def _sh(self, inst: Instance, command: str, *, timeout: float = 60.0) -> Any:
        """Run one command on the instance (tests intercept this)."""
        return await self.services.run(inst, command, timeout=timeout)

    async def _client(self, inst: Instance, status: OllamaStatus) -> OllamaClient:
        from gputui.remote.ssh import SSHLayerError

        link = await self.services.link(inst)
        try:
            local = await link.forward_local(status.port, status.forward_host)
        except (SSHLayerError, OSError) as exc:
            raise OllamaServiceError(
                _("{name}: cannot forward to Ollama's port {port}: {error}").format(
                    name=inst.name, port=status.port, error=exc)) from None
        remote = (status.forward_host, status.port)
        cached = self._clients.get(inst.id)
        if cached is not None and cached[0] is link and cached[1] == remote and cached[2] == local:
            return cached[3]
        if cached is not None:
            await cached[3].aclose()
            if cached[0] is link and cached[1] != remote:  # the server moved: drop the old one
                with contextlib.suppress(Exception):
                    await link.close_forward(cached[1][1], cached[1][0])
        client = OllamaClient(f"http://127.0.0.1:{local}", timeout=self.timeout,
                              long_timeout=self.long_timeout)
        self._clients[inst.id] = (link, remote, local, client)
        return client

    async def _forget_client(self, inst: Instance) -> None:
        cached = self._clients.pop(inst.id, None)
        if cached is not None:
            await cached[3].aclose()

    async def close(self) -> None:
        """Close the HTTP clients (the forwards belong to the links, closed with them)."""
        for key in list(self._clients):
            cached = self._clients.pop(key)
            await cached[3].aclose()

    def _error(self, inst: Instance, exc: OllamaError) -> OllamaServiceError:
        return OllamaServiceError(_("{name}: ollama: {message}").format(name=inst.name,
                                                                         message=exc.message))

    # -- status --------------------------------------------------------------------------------
    async def probe(self, inst: Instance) -> ServerProbe:
        result = await self._sh(inst, probe_script(), timeout=30)
        return parse_probe(result.stdout)

    async def gpus(self, inst: Instance) -> list[GpuInfo]:
        result = await self._sh(inst, gpu_query_command(), timeout=30)
        if result.exit_status != 0:
            why = (result.stderr or result.stdout).strip().splitlines()
            raise OllamaServiceError(_("{name}: nvidia-smi failed: {why}").format(
                name=inst.name, why=why[-1] if why else ""))
        return parse_gpu_rows(result.stdout)

    async def status(
        self, inst: Instance, *, check_http: bool = True, client_version: bool = True
    ) -> OllamaStatus:
        """Server, its settings and the GPUs, in one SSH round trip (+ /api/version)."""
        marker = "@@gputui-gpus@@"
        script = probe_script(client_version=client_version)
        result = await self._sh(
            inst, f"{script}echo {marker}\n{gpu_query_command()} 2>&1", timeout=30)
        head, _sep, tail = result.stdout.partition(marker)
        probe = parse_probe(head)
        gpus = parse_gpu_rows(tail)
        gpu_error = None
        if not gpus:
            lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
            gpu_error = _clean(lines[-1]) if lines else D(N_("nvidia-smi printed no GPU"))
        status = OllamaStatus(inst.name, probe, tuple(gpus), gpu_error=gpu_error)
        if not check_http or not probe.running:
            return status
        try:
            client = await self._client(inst, status)
            version = await client.version()
        except OllamaError as exc:
            return OllamaStatus(inst.name, probe, tuple(gpus), error=exc.message,
                                gpu_error=gpu_error)
        except OllamaServiceError as exc:
            return OllamaStatus(inst.name, probe, tuple(gpus), error=str(exc),
                                gpu_error=gpu_error)
        return OllamaStatus(inst.name, probe, tuple(gpus), version=version, gpu_error=gpu_error)

    async def _ready(self, inst: Instance, status: OllamaStatus | None = None) -> tuple[
            OllamaStatus, OllamaClient]:
        st = status or await self.status(inst)
        if not st.installed:
            raise OllamaServiceError(_not_installed(inst))
        if not st.running:
            raise OllamaServiceError(_("{name}: the Ollama server is not running").format(
                name=inst.name))
        if not st.reachable:
            raise OllamaServiceError(
                _("{name}: the Ollama server does not answer on port {port}: {error}").format(
                    name=inst.name, port=st.port, error=st.error))
        return st, await self._client(inst, st)

    # -- models --------------------------------------------------------------------------------
    async def models(self, inst: Instance, *, status: OllamaStatus | None = None) -> list[
            InstalledModel]:
        _st, client = await self._ready(inst, status)
        try:
            return await client.tags()
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def running(self, inst: Instance, *, status: OllamaStatus | None = None) -> list[
            RunningModel]:
        _st, client = await self._ready(inst, status)
        try:
            return await client.ps()
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def show(self, inst: Instance, model: str) -> ModelInfo:
        _st, client = await self._ready(inst)
        try:
            return await client.show(model)
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def pull(
        self,
        inst: Instance,
        model: str,
        on_progress: ProgressCallback | None = None,
        *,
        status: OllamaStatus | None = None,
    ) -> PullProgress:
        """Pull with progress summed over layers. Cancel the task to cancel the pull (the
        connection is closed; a later pull resumes where this one stopped)."""
        _st, client = await self._ready(inst, status)
        progress = PullProgress(model)
        try:
            async with contextlib.aclosing(client.pull(model)) as events:
                async for event in events:
                    progress.update(event)
                    if on_progress is not None:
                        on_progress(progress)
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        if not progress.done:
            raise OllamaServiceError(_("{name}: pull of {model} ended before it succeeded")
                                     .format(name=inst.name, model=model))
        return progress

    async def delete(self, inst: Instance, model: str) -> None:
        _st, client = await self._ready(inst)
        try:
            await client.delete(model)
        except OllamaNotFound:
            raise OllamaServiceError(_("{name}: no model {model} is installed").format(
                name=inst.name, model=repr(model))) from None
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def fit_check(
        self, inst: Instance, model: str, *, status: OllamaStatus | None = None
    ) -> FitCheck:
        st, client = await self._ready(inst, status)
        try:
            installed = await client.tags()
            running = await client.ps()
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        full = normalize_name(model)
        mine = next((m for m in installed if normalize_name(m.name) == full), None)
        info = None
        if mine is not None:
            with contextlib.suppress(OllamaError):
                info = await client.show(mine.name)
        est = estimate_model(full, installed=mine, info=info, context=st.context,
                             parallel=st.parallel)
        loaded = any(normalize_name(m.name) == full for m in running)
        candidates = [
            estimate_model(m.name, installed=m, info=None, context=st.context,
                           parallel=st.parallel)
            for m in installed
        ]
        from gputui.catalog.fit import MODELS

        known = {c.model for c in candidates}
        for cat in MODELS.values():
            tag = _catalog_tag(cat.name)
            if tag not in known:
                candidates.append(estimate_model(tag, installed=None, info=None,
                                                 context=st.context, parallel=st.parallel))
        return check_fit(est, st.gpus, st.selected, loaded=loaded, candidates=candidates)

    async def load(
        self,
        inst: Instance,
        model: str,
        *,
        force: bool = False,
        keep_alive: float | str | None = None,
    ) -> LoadResult:
        """Fit check, load (warm with keep_alive), then verify where it went. A load that would
        not fit raises FitRefused unless `force`."""
        st, client = await self._ready(inst)
        fit = await self.fit_check(inst, model, status=st)
        if not fit.ok and not force:
            raise FitRefused(fit)
        try:
            await client.load(model, keep_alive=keep_alive)
        except OllamaNotFound:
            raise OllamaServiceError(
                _("{name}: {model} is not installed (pull it first)").format(
                    name=inst.name, model=model)) from None
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        placement = await self.verify_placement(inst, status=st)
        return LoadResult(model, fit, placement)

    async def unload(self, inst: Instance, model: str) -> None:
        _st, client = await self._ready(inst)
        try:
            await client.unload(model)
        except OllamaNotFound:
            raise OllamaServiceError(_("{name}: no model {model} is installed").format(
                name=inst.name, model=repr(model))) from None
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def verify_placement(
        self, inst: Instance, *, status: OllamaStatus | None = None
    ) -> PlacementReport:
        """Where Ollama's memory is, from nvidia-smi's compute processes, against the
        selection."""
        st, client = await self._ready(inst, status)
        try:
            running = await client.ps()
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        apps = await self._sh(inst, compute_apps_query(), timeout=30)
        return placement_report(apps.stdout, st.gpus, st.selected, running, server_pid=st.pid)

    # -- the server ----------------------------------------------------------------------------
    async def _run_all(self, inst: Instance, commands: Sequence[str], what: str) -> None:
        for cmd in commands:
            result = await self._sh(inst, cmd, timeout=120)
            if result.exit_status != 0:
                why = (result.stderr or result.stdout).strip().splitlines()
                raise OllamaServiceError(
                    _("{name}: {what} failed at `{command}`: {why}").format(
                        name=inst.name, what=_(what), command=cmd.splitlines()[0][:60],
                        why=why[-1] if why else _("exit status {status}").format(
                            status=result.exit_status)))

    async def apply_gpus(
        self, inst: Instance, indices: Sequence[int] | None, *, wait_s: float = 30.0
    ) -> OllamaStatus:
        """Restart the server with CUDA_VISIBLE_DEVICES naming `indices` (None: all GPUs).
        This unloads the running models (see `restart_warning`)."""
        st = await self.status(inst, check_http=False)
        if not st.installed:
            raise OllamaServiceError(_not_installed(inst))
        if indices is not None and not indices:
            raise OllamaServiceError(_("select at least one GPU (or all)"))
        value = None if indices is None else cuda_visible_value(st.gpus, indices)
        sudo = st.probe.uid not in (None, 0)
        if st.managed_by == "systemd":
            dropin = None if value is None else systemd_dropin({"CUDA_VISIBLE_DEVICES": value})
            await self._run_all(inst, systemd_apply_commands(dropin, sudo=sudo),
                                N_("restarting ollama.service"))
        else:
            env: dict[str, str | None] = {
                k: v for k, v in st.env.items()
                if k.startswith("OLLAMA_") or k == "CUDA_DEVICE_ORDER"
            }
            env["CUDA_VISIBLE_DEVICES"] = value
            if st.pid is not None:
                await self._run_all(inst, [stop_process_command(st.pid, sudo=sudo)],
                                    N_("stopping ollama"))
            await self._run_all(inst, [nohup_start_command(st.probe.binary or "ollama", env)],
                                N_("starting ollama"))
        await self._forget_client(inst)
        new = await self.wait_ready(inst, wait_s=wait_s)
        if new.visible_devices != value:
            raise OllamaServiceError(
                _("{name}: Ollama restarted with CUDA_VISIBLE_DEVICES={got}, not {wanted} "
                  "(another setting overrides ours?)").format(
                    name=inst.name, got=repr(new.visible_devices), wanted=repr(value)))
        return new

    async def start(self, inst: Instance, *, wait_s: float = 30.0) -> OllamaStatus:
        st = await self.status(inst, check_http=False, client_version=False)
        if not st.installed:
            raise OllamaServiceError(_not_installed(inst))
        if st.running:
            return await self.wait_ready(inst, wait_s=wait_s)
        sudo = st.probe.uid not in (None, 0)
        if st.managed_by == "systemd":
            await self._run_all(inst, systemd_start_commands(sudo=sudo), N_("starting ollama"))
        else:
            await self._run_all(inst, [nohup_start_command(st.probe.binary or "ollama", {})],
                                N_("starting ollama"))
        return await self.wait_ready(inst, wait_s=wait_s)

    async def stop(self, inst: Instance) -> None:
        st = await self.status(inst, check_http=False)
        sudo = st.probe.uid not in (None, 0)
        if st.managed_by == "systemd" and st.running:
            s = "sudo -n " if sudo else ""
            await self._run_all(inst, [f"{s}systemctl stop {UNIT}"], N_("stopping ollama"))
        elif st.pid is not None:
            await self._run_all(inst, [stop_process_command(st.pid, sudo=sudo)],
                                N_("stopping ollama"))
        await self._forget_client(inst)

    async def wait_ready(self, inst: Instance, *, wait_s: float = 30.0) -> OllamaStatus:
        """Wait until the server answers /api/version (its port read from its environment)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        last: OllamaStatus | None = None
        while True:
            last = await self.status(inst, client_version=False)
            if last.reachable:
                return last
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        tail = ""
        if last is not None and last.managed_by == "process":
            result = await self._sh(inst, f'tail -n 3 "{LOG_FILE}" 2>/dev/null', timeout=10)
            tail = " ".join(result.stdout.split())[-200:]
        why = (last.error if last is not None else None) or "no server process"
        raise OllamaServiceError(
            _("{name}: Ollama did not come up within {seconds} s ({why})").format(
                name=inst.name, seconds=f"{wait_s:g}", why=why)
            + (_("; log: {tail}").format(tail=tail) if tail else ""))

    async def install(self, inst: Instance) -> str:
        """Run the official install script (minutes). Returns the last lines of its output."""
        result = await self._sh(inst, install_run_command(), timeout=900)
        out = (result.stdout + result.stderr).strip().splitlines()
        if result.exit_status != 0:
            raise OllamaServiceError(_("{name}: the install failed: {why}").format(
                name=inst.name, why=out[-1] if out else result.exit_status))
        return "\n".join(out[-5:])


def service_for(services: Services) -> tuple[OllamaService, bool]:
    """The session's one OllamaService (it shares the instances' links and is closed with
    the session); the flag says whether the caller owns it (never: the session does)."""
    return services.attached(OllamaService, OllamaService), False
