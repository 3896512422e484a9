"""The nvidia-smi command: run one invocation (loops, -f, power state, signals)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from .. import fields as F
from ..state import (
    InstanceSpec,
    SandboxStateError,
    enforce_power,
    live_processes,
    load_instance,
    power_state,
    root_from_env,
)
from .args import parse_args
from .common import (
    EXIT_POWERED_OFF,
    Context,
    Usage,
    _Stop,
    select_gpus,
)
from .query import render_query_apps, render_query_gpu, resolve_fields
from .table import render_list, render_table, render_version
from .text_report import render_query_text
from .xml_report import render_xml

# --------------------------------------------------------------------------- main


def _help_fields(switch: str, order: list[str], lookup: dict[str, str]) -> list[str]:
    out = [f'List of valid properties to query for the switch "{switch}":', ""]
    for canonical in order:
        aliases = [a for a, c in lookup.items() if c == canonical and a != canonical.lower()]
        out.append(" or ".join(f'"{n}"' for n in [canonical, *aliases]))
        out.append("")
    return out


def _emit(out: TextIO, lines: list[str]) -> None:
    if lines:
        out.write("\n".join(lines) + "\n")
    out.flush()


def run(argv: list[str], out: TextIO) -> int:
    opts = parse_args(argv)
    if opts.mode == "help":
        _emit(
            out,
            [
                f"NVIDIA System Management Interface -- v{_spec_or_exit().driver_version}",
                "",
                "(sandbox) supported: <no arguments>, -L, --version, -q [-x], "
                "--query-gpu=, --query-compute-apps=, --format=csv[,noheader][,nounits], "
                "-i, -l, -lms, -f",
            ],
        )
        return 0
    if opts.mode == "help_query_gpu":
        _emit(out, _help_fields("--query-gpu=", F.GPU_FIELDS, F.GPU_LOOKUP))
        return 0
    if opts.mode == "help_query_apps":
        _emit(out, _help_fields("--query-compute-apps=", F.APP_FIELDS, F.APP_LOOKUP))
        return 0

    # Field names are checked before anything is read, as the real tool does.
    names: list[str] = []
    if opts.mode == "query_gpu":
        names = resolve_fields(opts.query or "", F.GPU_LOOKUP)
    elif opts.mode == "query_apps":
        names = resolve_fields(opts.query or "", F.APP_LOOKUP)

    root = root_from_env()
    spec = _spec_or_exit(root)
    if enforce_power(root).is_off:
        raise _PoweredOff()
    if opts.mode == "version":
        _emit(out, render_version(spec))
        return 0
    gpus = select_gpus(spec, opts.ids)

    fmt = {p.strip() for p in (opts.format or "").split(",")}
    nounits = "nounits" in fmt
    header_done = "noheader" in fmt
    renderers: dict[str, Callable[[Context], list[str]]] = {
        "table": render_table,
        "list": render_list,
        "query": render_xml if opts.xml else render_query_text,
    }

    def block(ctx: Context) -> list[str]:
        nonlocal header_done
        if opts.mode in ("query_gpu", "query_apps"):
            lines = []
            if not header_done:
                units = F.GPU_UNITS if opts.mode == "query_gpu" else F.APP_UNITS
                lines.append(", ".join(F.header(n, units) for n in names))
                header_done = True
            render = render_query_gpu if opts.mode == "query_gpu" else render_query_apps
            return lines + render(ctx, names, nounits)
        return renderers[opts.mode](ctx)

    interval = opts.loop_s
    start = time.monotonic()
    tick = 0
    while True:
        now = time.time()
        if tick and power_state(root, now).is_off:
            enforce_power(root)
            raise _PoweredOff()
        ctx = Context(spec, gpus, now, live_processes(root))
        _emit(out, block(ctx))
        if interval is None or opts.mode in ("list",):
            return 0
        tick += 1
        delay = start + tick * interval - time.monotonic()
        if delay < 0:  # fell behind (suspended?): skip missed ticks, keep the cadence
            tick += int(-delay // interval) + 1
            delay = start + tick * interval - time.monotonic()
        time.sleep(max(0.0, delay))


class _PoweredOff(Exception):
    pass


def _spec_or_exit(root: Path | None = None) -> InstanceSpec:
    try:
        return load_instance(root if root is not None else root_from_env())
    except SandboxStateError as exc:
        raise Usage(
            f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
            f"driver. (sandbox: {exc})",
            9,
        ) from None


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    out: TextIO = sys.stdout
    try:
        try:
            opts_file = _filename(argv)
            if opts_file:
                out = open(opts_file, "w", encoding="utf-8")  # noqa: SIM115
            return run(argv, out)
        except Usage as exc:
            sys.stdout.write(
                str(exc).rstrip("\n") + "\n" + ("\n" if str(exc).endswith("\n") else "")
            )
            sys.stdout.flush()
            return exc.code
        except _PoweredOff:
            sys.stderr.write("nvidia-smi: this sandbox instance is powered off.\n")
            return EXIT_POWERED_OFF
        finally:
            if out is not sys.stdout:
                out.close()
    except _Stop:
        return 0
    except BrokenPipeError:
        return 0
    except OSError as exc:
        sys.stderr.write(f"nvidia-smi: {exc}\n")
        return 255


def _filename(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(("--filename=", "-f=")):
            return arg.partition("=")[2]
        if arg in ("-f", "--filename") and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _quiet_exit(code: int) -> None:
    """Exit without Python's "Exception ignored ... BrokenPipeError" noise at shutdown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)
