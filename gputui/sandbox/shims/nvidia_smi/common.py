"""Shared pieces of the sandbox nvidia-smi: exit codes, escaping, errors, value helpers, the reading context."""

from __future__ import annotations

import time
from datetime import datetime

from ..sim import GpuReading, read_gpus
from ..state import (
    InstanceSpec,
    SimGpu,
)

NA = "[N/A]"
DEPRECATED = "[Requested functionality has been deprecated]"
EXIT_INVALID_ARG = 2
EXIT_NOT_FOUND = 6
EXIT_POWERED_OFF = 1


def escape(text: str) -> str:
    """XML text escaping (xml.sax.saxutils would pull in urllib.request: slow start-up)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def quoteattr(text: str) -> str:
    return '"' + escape(text).replace('"', "&quot;") + '"'


class Usage(Exception):
    """Bad command line: message for stdout, exit code."""

    def __init__(self, message: str, code: int = EXIT_INVALID_ARG) -> None:
        super().__init__(message)
        self.code = code


class _Stop(Exception):
    pass



# --------------------------------------------------------------------------- helpers


def _stamp(now: float) -> str:
    dt = datetime.fromtimestamp(now)
    return dt.strftime("%Y/%m/%d %H:%M:%S.") + f"{dt.microsecond // 1000:03d}"


def _ctime(now: float) -> str:
    return time.asctime(time.localtime(now))


def select_gpus(spec: InstanceSpec, ids: list[str] | None) -> list[SimGpu]:
    if not ids:
        return list(spec.gpus)
    chosen: list[SimGpu] = []
    for ident in ids:
        match = None
        for gpu in spec.gpus:
            if (ident.isdigit() and int(ident) == gpu.index) or ident.lower() in (
                gpu.uuid.lower(),
                gpu.pci_bus_id.lower(),
                gpu.pci_bus_id[4:].lower(),
            ):
                match = gpu
                break
        if match is None:
            raise Usage("No devices were found", EXIT_NOT_FOUND)
        if match not in chosen:
            chosen.append(match)
    return chosen


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _with_unit(value: str, unit: str | None, nounits: bool) -> str:
    if unit and not nounits and _is_number(value):
        return f"{value} {unit}"
    return value


def _mib(value: int) -> str:
    return str(int(value))


def _w(value: float) -> str:
    return f"{value:.2f}"


# --------------------------------------------------------------------------- context


class Context:
    """One reading of the instance: spec + live processes + simulated values at `now`."""

    def __init__(self, spec: InstanceSpec, gpus: list[SimGpu], now: float, procs: list) -> None:
        self.spec = spec
        self.gpus = gpus
        self.now = now
        self.readings = {r.index: r for r in read_gpus(spec, procs, now)}

    def selected(self) -> list[tuple[SimGpu, GpuReading]]:
        return [(g, self.readings[g.index]) for g in self.gpus]
