"""What `gputui ollama NAME ACTION` prints: status, models, GPUs, as text or JSON."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Any

from gputui.cli.output import print_json
from gputui.i18n import N_, _, pad_cells, shown, truncate_cells
from gputui.models import Instance
from gputui.remote.ollama_client import (
    PullProgress,
    RunningModel,
)
from gputui.services.ollama.common import (
    INSTALL_COMMAND,
    LOG_FILE,
    MIB,
    SHOWN_ENV,
    FitRefused,
    OllamaBadInput,
    OllamaServiceError,
)
from gputui.services.ollama.fit import (
    _gb,
    _human,
)
from gputui.services.ollama.gpus import (
    cuda_visible_value,
    gpu_words,
    parse_gpu_selection,
)
from gputui.services.ollama.service import (
    OllamaService,
    OllamaStatus,
    service_for,
)
from gputui.services.ollama.systemd import (
    restart_warning,
)

if TYPE_CHECKING:
    from gputui.services.hub import Services


# --------------------------------------------------------------------------- the command




def _err(text: str) -> None:
    print(text, file=sys.stderr)


# The server's state (`OllamaStatus.state`, English in --json) for people, in a whole line
# (a word alone would take the translation an instance's state has).
_STATES = {
    "stopped": N_("ollama on {name}: stopped"),
    "running": N_("ollama on {name}: running"),
    "not answering": N_("ollama on {name}: not answering"),
}


def _field(label: str, value: str) -> str:
    """`  label     value`: labels padded by cells, so Chinese ones line up too."""
    return f"  {pad_cells(label, 9)} {value}"


def _status_lines(st: OllamaStatus) -> list[str]:
    p = st.probe
    if not st.installed:
        return [_("ollama on {name}: not installed").format(name=st.instance),
                "  " + _("install: {command}").format(command=INSTALL_COMMAND)]
    how = (_("systemd unit {unit} ({active})").format(unit=p.unit, active=p.unit_active or "?")
           if st.managed_by == "systemd"
           else _("process {pid}").format(pid=p.pid) if p.pid else _("no process"))
    template = _STATES.get(st.state)
    head = (_(template).format(name=st.instance) if template
            else _("ollama on {name}: {state}").format(name=st.instance, state=st.state))
    if st.version:
        head += _(", version {version}").format(version=st.version)
    elif p.client_version:
        head += _(" (installed: {version})").format(version=p.client_version)
    lines = [head, _field(_("runs as"), how)]
    if st.running:
        lines.append(_field(_("listens"), f"{st.host}:{st.port}"))
    if st.error:
        lines.append(_field(_("error"), str(shown(st.error))))
    env = [f"{k}={st.env[k]}" for k in SHOWN_ENV if k in st.env]
    lines.append(_field(_("env"), "  ".join(env) if env else _("(defaults)")))
    sel = st.selected
    lines.append(_field("GPUs", (",".join(map(str, sel)) if sel else _("none"))
                        + ("" if st.visible_devices is not None
                           else _(" (all: CUDA_VISIBLE_DEVICES unset)"))))
    if st.managed_by == "process":
        lines.append(_field(_("log"), LOG_FILE.replace("$HOME", p.home or "~")))
    if not st.running:
        lines.append("  " + _("start it: gputui ollama {name} start").format(name=st.instance))
    lines.append("")
    lines += _gpu_lines(st)
    return lines


def _gpu_lines(st: OllamaStatus) -> list[str]:
    if not st.gpus:
        return [_("GPUs: unknown ({why})").format(
            why=shown(st.gpu_error) if st.gpu_error else _("nvidia-smi printed nothing"))]
    # headers translated outside f-strings (Babel does not look inside them)
    name, free, total = _("NAME"), _("FREE"), _("TOTAL")
    lines = [f"{pad_cells('GPU', 4)} {pad_cells(name, 22)} {pad_cells(free, 9, '>')} "
             f"{pad_cells(total, 9, '>')}  " + _("SELECTED")]
    for g in st.gpus:
        chosen = _("yes") if g.index in st.selected else ""
        lines.append(
            f"{g.index:<4} {pad_cells(truncate_cells(g.short_name, 22, ''), 22)} "
            f"{_gb((g.memory_free_mib or 0) * MIB):>9} "
            f"{_gb((g.memory_total_mib or 0) * MIB):>9}  {chosen}")
    return lines


def _ago(ts: Any) -> str:
    if ts is None:
        return ""
    seconds = max(0.0, time.time() - ts.timestamp())
    if seconds < 60:
        return _("{n} s ago").format(n=int(seconds))
    if seconds < 3600:
        return _("{n} min ago").format(n=int(seconds // 60))
    if seconds < 86400:
        return _("{n} h ago").format(n=int(seconds // 3600))
    return _("{n} days ago").format(n=int(seconds // 86400))


def _until(ts: Any) -> str:
    if ts is None:
        return ""
    seconds = ts.timestamp() - time.time()
    if seconds > 100 * 365 * 86400:
        return _("forever")
    if seconds <= 0:
        return _("stopping")
    return _("{min} min {s} s").format(min=int(seconds // 60), s=int(seconds % 60))


async def ollama_command(
    services: Services,
    inst: Instance,
    action: str,
    arg: str | None,
    as_json: bool,
    *,
    force: bool = False,
) -> int:
    """`gputui ollama NAME ACTION [ARG] [--json]`: list | ps | pull MODEL | rm MODEL |
    load MODEL | unload MODEL | gpus [0,1|all] | status | start | stop | fit MODEL | verify.
    Prints its output; ServiceError for failures; returns 1 for a load refused by the fit
    check (printed), else 0."""
    svc, owned = service_for(services)
    try:
        return await _command(svc, inst, action, arg, as_json, force=force)
    finally:
        if owned:
            await svc.close()


async def _command(
    svc: OllamaService, inst: Instance, action: str, arg: str | None, as_json: bool, *,
    force: bool,
) -> int:
    needs_arg = {"pull", "rm", "load", "unload", "fit"}
    if action in needs_arg and not arg:
        raise OllamaBadInput(_("ollama {action}: give a model name (e.g. qwen2.5:7b)")
                             .format(action=action))
    if action == "status":
        st = await svc.status(inst)
        if as_json:
            print_json(st.as_dict())
        else:
            print("\n".join(_status_lines(st)))
        return 0
    if action == "list":
        models = await svc.models(inst)
        if as_json:
            print_json([m.as_dict() for m in models])
        elif not models:
            print(_("No models on {name}. Pull one: gputui ollama {name} pull qwen2.5:7b").format(name=inst.name))
        else:
            name, size, quant, family = _("NAME"), _("SIZE"), _("QUANT"), _("FAMILY")
            print(f"{pad_cells(name, 28)} {pad_cells(size, 8, '>')}  "
                  f"{pad_cells(quant, 8)} {pad_cells(family, 8)} " + _("MODIFIED"))
            for m in models:
                print(f"{m.name[:28]:<28} {_gb(m.size):>8}  {(m.quantization or '')[:8]:<8} "
                      f"{(m.family or '')[:8]:<8} {_ago(m.modified_at)}")
        return 0
    if action == "ps":
        loaded = await svc.running(inst)
        if as_json:
            print_json([r.as_dict() for r in loaded])
        elif not loaded:
            print(_("No model is loaded on {name}.").format(name=inst.name))
        else:
            name, size, vram, processor = _("NAME"), _("SIZE"), _("IN VRAM"), _("PROCESSOR")
            print(f"{pad_cells(name, 28)} {pad_cells(size, 8, '>')} "
                  f"{pad_cells(vram, 8, '>')}  {pad_cells(processor, 16)} "
                  + _("UNTIL"))
            for r in loaded:
                print(f"{r.name[:28]:<28} {_gb(r.size):>8} {_gb(r.size_vram):>8}  "
                      f"{r.processor:<16} {_until(r.expires_at)}")
        return 0
    if action == "pull":
        assert arg is not None
        st = await svc.status(inst)
        fit = await svc.fit_check(inst, arg, status=st)
        if not fit.ok and not as_json:
            _err(_("warning: {message}").format(message=shown(fit.message)))
        last: list[object] = [None]

        def show(p: PullProgress) -> None:
            if as_json:
                return
            if p.digest and p.digest in p.layers:
                total, done = p.layers[p.digest]
                pct = 100 if done >= total else done * 100 // total // 10 * 10
                key: object = (p.digest, pct)
                line = _("{status} {pct} of {total}").format(status=p.status, pct=f"{pct:3d}%",
                                                              total=_human(total))
            else:
                key = line = p.status
            if key != last[0]:
                last[0] = key
                _err(line)

        progress = await svc.pull(inst, arg, show, status=st)
        if as_json:
            print_json({"model": arg, "status": "success", "total": progress.total,
                         "fit": fit.as_dict()})
        else:
            print(_("pulled {arg} ({gb})").format(arg=arg, gb=_gb(progress.total)))
        return 0
    if action == "rm":
        assert arg is not None
        await svc.delete(inst, arg)
        if as_json:
            print_json({"model": arg, "deleted": True})
        else:
            print(_("deleted {arg}").format(arg=arg))
        return 0
    if action == "fit":
        assert arg is not None
        fit = await svc.fit_check(inst, arg)
        if as_json:
            print_json(fit.as_dict())
        else:
            print(shown(fit.message))
        return 0 if fit.ok else 1
    if action == "load":
        assert arg is not None
        try:
            result = await svc.load(inst, arg, force=force)
        except FitRefused as exc:
            if as_json:
                print_json({"model": arg, "loaded": False, "fit": exc.fit.as_dict()})
            else:
                _err(_("not loaded: {message}").format(message=shown(exc.fit.message)))
                _err(_("(load anyway with --force)"))
            return 1
        if as_json:
            print_json({"model": arg, "loaded": True, "fit": result.fit.as_dict(),
                         "placement": result.placement.as_dict()})
        else:
            print(_("loaded {arg}").format(arg=arg))
            print(shown(result.placement.message))
        return 0
    if action == "unload":
        assert arg is not None
        await svc.unload(inst, arg)
        if as_json:
            print_json({"model": arg, "unloaded": True})
        else:
            print(_("unloaded {arg}").format(arg=arg))
        return 0
    if action == "verify":
        report = await svc.verify_placement(inst)
        if as_json:
            print_json(report.as_dict())
        else:
            print(shown(report.message))
        return 0 if report.ok else 1
    if action == "gpus":
        if not arg:
            st = await svc.status(inst)
            if as_json:
                print_json({"selected": st.selected, "gpus": [g.as_dict() for g in st.gpus],
                             "cuda_visible_devices": st.visible_devices})
            else:
                print("\n".join(_gpu_lines(st)))
            return 0
        indices = parse_gpu_selection(arg)
        st = await svc.status(inst)
        if indices is not None:
            cuda_visible_value(st.gpus, indices)  # a GPU it does not have: said before anything
        running: list[RunningModel] = []
        if st.reachable:
            with contextlib.suppress(OllamaServiceError):
                running = await svc.running(inst, status=st)
        if not as_json:
            _err(str(shown(restart_warning(running))))
        new = await svc.apply_gpus(inst, indices)
        if as_json:
            print_json({**new.as_dict(), "unloaded": [m.name for m in running]})
        else:
            print(_("ollama on {name} now uses {gpus} (CUDA_VISIBLE_DEVICES={value})").format(
                name=inst.name, gpus=shown(gpu_words(new.selected)),
                value=new.visible_devices or _("unset")))
        return 0
    if action == "start":
        new = await svc.start(inst)
        if as_json:
            print_json(new.as_dict())
        else:
            print(_("ollama on {name} is running (version {version}, port {port})").format(name=inst.name, version=new.version, port=new.port))
        return 0
    if action == "stop":
        await svc.stop(inst)
        if as_json:
            print_json({"stopped": True})
        else:
            print(_("ollama on {name} stopped").format(name=inst.name))
        return 0
    raise OllamaServiceError(
        _("unknown action {action}: list, ps, pull, rm, load, unload, gpus, status, start, "
          "stop, fit, verify").format(action=repr(action)))
