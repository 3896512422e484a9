"""`nvidia-smi` for a sandbox instance, in the real tool's formats.

Supported: the plain table; ``-L``; ``--version``; ``-q`` (text) and ``-q -x`` (XML, DTD v12);
``--query-gpu=`` (any field of the real field list) and ``--query-compute-apps=`` with
``--format=csv[,noheader][,nounits]``; ``-i`` (indexes, UUIDs or PCI bus ids, comma
separated); ``-l SEC`` / ``-lms MS`` loops; ``-f FILE``; ``--help-query-gpu`` /
``--help-query-compute-apps`` (names only). Formats follow the captures in
../shared/fixtures/nvidia-smi; see fields.py for where the field names come from.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TextIO

from . import fields as F
from .sim import GpuReading, read_gpus
from .state import (
    InstanceSpec,
    SandboxStateError,
    SimGpu,
    enforce_power,
    live_processes,
    load_instance,
    power_state,
    root_from_env,
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


# --------------------------------------------------------------------------- arguments


class Options:
    def __init__(self) -> None:
        self.mode = "table"  # table | list | version | query | query_gpu | query_apps | help_*
        self.xml = False
        self.ids: list[str] | None = None
        self.loop_s: float | None = None
        self.query: str | None = None
        self.format: str | None = None
        self.filename: str | None = None


_WITH_VALUE = {
    "-i": "id",
    "--id": "id",
    "-l": "loop",
    "--loop": "loop",
    "-lms": "loop_ms",
    "--loop-ms": "loop_ms",
    "-f": "filename",
    "--filename": "filename",
    "--format": "format",
    "--query-gpu": "query_gpu",
    "--query-compute-apps": "query_apps",
    "-d": "display",
    "--display": "display",
}
_FLAGS = {
    "-L": "list",
    "--list-gpus": "list",
    "-q": "query",
    "--query": "query",
    "-x": "xml",
    "--xml-format": "xml",
    "-h": "help",
    "--help": "help",
    "--version": "version",
    "--help-query-gpu": "help_query_gpu",
    "--help-query-compute-apps": "help_query_apps",
    "-u": "unit",
    "--unit": "unit",
    "--dtd": "dtd",
}
_SUBCOMMANDS = {
    "dmon",
    "pmon",
    "topo",
    "nvlink",
    "mig",
    "clocks",
    "drain",
    "vgpu",
    "c2c",
    "daemon",
    "replay",
    "encodersessions",
    "fbcsessions",
    "compute-policy",
    "boost-slider",
    "power-hint",
    "base-clocks",
    "conf-compute",
    "gpm",
    "pci",
    "power-smoothing",
    "power-profiles",
    "rusd",
    "prm",
    "soc",
}


def _not_recognized(arg: str) -> Usage:
    return Usage(f"ERROR: Option {arg} is not recognized. Please run 'nvidia-smi -h'.")


def parse_args(argv: list[str]) -> Options:
    opts = Options()
    seen: set[str] = set()
    i = 0
    if argv and argv[0] in _SUBCOMMANDS:
        raise Usage(f"nvidia-smi {argv[0]}: not simulated on this sandbox instance.")
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if name in _WITH_VALUE:
            key = _WITH_VALUE[name]
            if eq:
                value = inline
            else:
                i += 1
                if i >= len(argv):
                    raise Usage(
                        f"ERROR: Option {name} requires an argument. Please run 'nvidia-smi -h'."
                    )
                value = argv[i]
            if key == "id":
                opts.ids = [v.strip() for v in value.split(",") if v.strip()]
            elif key in ("loop", "loop_ms"):
                try:
                    number = float(value)
                except ValueError:
                    raise Usage(f'Invalid loop value "{value}".') from None
                if number <= 0:
                    raise Usage(f'Invalid loop value "{value}".')
                opts.loop_s = number if key == "loop" else number / 1000.0
            elif key == "filename":
                opts.filename = value
            elif key == "format":
                opts.format = value
            elif key in ("query_gpu", "query_apps"):
                opts.query = value
                seen.add(key)
            # -d/--display is accepted and ignored (all sections are shown)
        elif arg in _FLAGS:
            seen.add(_FLAGS[arg])
        else:
            raise _not_recognized(arg)
        i += 1

    exclusive = seen & {
        "list",
        "query",
        "version",
        "query_gpu",
        "query_apps",
        "help",
        "help_query_gpu",
        "help_query_apps",
        "unit",
        "dtd",
    }
    if "unit" in exclusive or "dtd" in exclusive:
        raise Usage("This sandbox has no S-class units and no DTD to show.")
    if len(exclusive) > 1:
        raise Usage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    if "xml" in seen and "query" not in seen:
        raise Usage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    opts.xml = "xml" in seen
    opts.mode = next(iter(exclusive), "table")
    if opts.mode in ("query_gpu", "query_apps"):
        fmt = [p.strip() for p in (opts.format or "").split(",") if p.strip()]
        if "csv" not in fmt or any(p not in ("csv", "noheader", "nounits") for p in fmt):
            raise Usage(
                '"--format=" must be given with "csv" (plus optional "noheader", '
                "\"nounits\"). Please run 'nvidia-smi -h' for help."
            )
    return opts


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


# --------------------------------------------------------------------------- --query-gpu


def gpu_values(spec: InstanceSpec, gpu: SimGpu, r: GpuReading, now: float) -> dict[str, str]:
    """Every --query-gpu field this sandbox knows, as text without units; others are [N/A]."""
    dc = gpu.datacenter
    v: dict[str, str] = {
        "timestamp": _stamp(now),
        "driver_version": spec.driver_version,
        "kmd_version": spec.driver_version,
        "count": str(len(spec.gpus)),
        "name": gpu.name,
        "serial": NA if gpu.serial in ("", "N/A") else gpu.serial,
        "uuid": gpu.uuid,
        "pci.bus_id": gpu.pci_bus_id,
        "pci.domain": "0x0000",
        "pci.bus": f"0x{gpu.pci_bus:02X}",
        "pci.device": f"0x{gpu.pci_device:02X}",
        "pci.baseClass": "0x3",
        "pci.subClass": "0x2" if dc else "0x0",
        "pci.device_id": gpu.pci_device_id,
        "pci.sub_device_id": gpu.pci_sub_device_id,
        "pcie.link.gen.current": str(gpu.pcie_gen_max if (dc or not r.idle) else 1),
        "pcie.link.gen.max": str(gpu.pcie_gen_max),
        "pcie.link.gen.gpumax": str(gpu.pcie_gen_max),
        "pcie.link.gen.hostmax": str(gpu.pcie_gen_max),
        "pcie.link.width.current": str(gpu.pcie_width_max),
        "pcie.link.width.max": str(gpu.pcie_width_max),
        "index": str(gpu.index),
        "display_mode": "Disabled",
        "display_attached": "No",
        "display_active": "Disabled",
        "persistence_mode": "Enabled" if dc else "Disabled",
        "addressing_mode": "None",
        "accounting.mode": "Disabled",
        "accounting.buffer_size": "4000",
        "vbios_version": gpu.vbios_version,
        "inforom.img": "G520.0200.00.05" if dc else "G002.0000.00.03",
        "inforom.oem": "2.1" if dc else "2.0",
        "inforom.ecc": "7.16" if dc else NA,
        "inforom.checksum_validation": "valid",
        "gpu_recovery_action": "None",
        "fan.speed": NA if r.fan_pct is None else str(r.fan_pct),
        "pstate": r.pstate,
        "clocks_event_reasons.supported": "0x00000000000001FF",
        "clocks_event_reasons.active": "0x0000000000000001"
        if r.util_gpu == 0
        else "0x0000000000000000",
        "clocks_event_reasons.gpu_idle": "Active" if r.util_gpu == 0 else "Not Active",
        "memory.total": _mib(gpu.memory_total_mib),
        "memory.reserved": _mib(gpu.memory_reserved_mib),
        "memory.used": _mib(r.memory_used_mib),
        "memory.free": _mib(r.memory_free_mib),
        "compute_mode": "Default",
        "compute_cap": gpu.compute_cap,
        "utilization.gpu": str(r.util_gpu),
        "utilization.memory": str(r.util_mem),
        "encoder.stats.sessionCount": "0",
        "encoder.stats.averageFps": "0",
        "encoder.stats.averageLatency": "0",
        "ecc.mode.current": "Enabled" if dc else NA,
        "ecc.mode.pending": "Enabled" if dc else NA,
        "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded": "No",
        "temperature.gpu": str(r.temp_c),
        "temperature.gpu.tlimit": str(gpu.max_operating_temp_c - r.temp_c) if dc else NA,
        "temperature.memory": "N/A" if r.memory_temp_c is None else str(r.memory_temp_c),
        "power.management": "Enabled",
        "power.draw": _w(r.power_w),
        "power.draw.average": _w(r.power_w),
        "power.draw.instant": _w(r.power_instant_w),
        "power.limit": _w(gpu.power_limit_w),
        "enforced.power.limit": _w(gpu.power_limit_w),
        "power.default_limit": _w(gpu.power_limit_w),
        "power.min_limit": _w(gpu.min_power_limit_w),
        "power.max_limit": _w(gpu.max_power_limit_w),
        "edpp_multiplier": "100.00" if dc else NA,
        "clocks.current.graphics": str(r.graphics_clock_mhz),
        "clocks.current.sm": str(r.sm_clock_mhz),
        "clocks.current.memory": str(r.mem_clock_mhz),
        "clocks.current.video": str(r.video_clock_mhz),
        "clocks.applications.graphics": str(gpu.max_sm_clock_mhz) if dc else NA,
        "clocks.applications.memory": str(gpu.max_mem_clock_mhz) if dc else NA,
        "clocks.default_applications.graphics": str(gpu.max_sm_clock_mhz) if dc else NA,
        "clocks.default_applications.memory": str(gpu.max_mem_clock_mhz) if dc else NA,
        "clocks.max.graphics": str(gpu.max_sm_clock_mhz),
        "clocks.max.sm": str(gpu.max_sm_clock_mhz),
        "clocks.max.memory": str(gpu.max_mem_clock_mhz),
        "mig.mode.current": "Disabled" if gpu.mig_capable else NA,
        "mig.mode.pending": "Disabled" if gpu.mig_capable else NA,
        "gsp.mode.current": "Enabled",
        "gsp.mode.default": "Enabled",
        "c2c.mode": "Disabled" if dc else NA,
        "protected_memory.total": "0",
        "protected_memory.used": "0",
        "protected_memory.free": "0",
        "platform.chassis_serial_number": "",
        "platform.slot_number": "0",
        "platform.tray_index": "0",
        "platform.host_id": "1",
        "platform.peer_type": "Direct Connected",
        "platform.module_id": str(gpu.index + 1),
        "platform.gpu_fabric_guid": "0x0000000000000000",
    }
    v["pcie.link.gen.gpucurrent"] = v["pcie.link.gen.current"]
    for reason in (
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
        "sync_boost",
    ):
        v[f"clocks_event_reasons.{reason}"] = "Not Active"
    for counter in (
        "sw_power_cap",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ):
        v[f"clocks_event_reasons_counters.{counter}"] = "0"
    for engine in ("encoder", "decoder", "jpeg", "ofa"):
        v[f"utilization.{engine}"] = "0"
    for kind in ("corrected", "uncorrected"):
        for span in ("volatile", "aggregate"):
            for where in ("device_memory", "dram", "sram", "total"):
                v[f"ecc.errors.{kind}.{span}.{where}"] = "0" if dc else NA
    for name in (
        "volatile.sram.parity",
        "volatile.sram.secded",
        "aggregate.sram.parity",
        "aggregate.sram.secded",
        "aggregate.sram.l2",
        "aggregate.sram.sm",
        "aggregate.sram.mcu",
        "aggregate.sram.pcie",
        "aggregate.sram.other",
    ):
        v[f"ecc.errors.uncorrected.{name}"] = "0"
    if dc and gpu.hbm:
        v.update(
            {
                "remapped_rows.correctable": "0",
                "remapped_rows.uncorrectable": "0",
                "remapped_rows.pending": "No",
                "remapped_rows.failure": "No",
                "remapped_rows.histogram.max": "2560",
                "remapped_rows.histogram.high": "0",
                "remapped_rows.histogram.partial": "0",
                "remapped_rows.histogram.low": "0",
                "remapped_rows.histogram.none": "0",
            }
        )
    for name in (
        "state",
        "status",
        "cliqueId",
        "clusterUuid",
        "health.summary",
        "health.bandwidth",
        "health.route_recovery_in_progress",
        "health.route_unhealthy",
        "health.access_timeout_recovery",
        "health.incorrect_configuration",
        "health.partition_assigned",
    ):
        v[f"fabric.{name}"] = "N/A"
    return v


def resolve_fields(query: str, lookup: dict[str, str]) -> list[str]:
    names = [p.strip() for p in query.split(",")]
    out = []
    for name in names:
        canonical = lookup.get(name.lower()) if name else None
        if canonical is None:
            raise Usage(f'Field "{name}" is not a valid field to query.\n')
        out.append(canonical)
    return out


def render_query_gpu(ctx: Context, names: list[str], nounits: bool) -> list[str]:
    rows = []
    for gpu, reading in ctx.selected():
        values = gpu_values(ctx.spec, gpu, reading, ctx.now)
        row = [_with_unit(values.get(n, NA), F.GPU_UNITS.get(n), nounits) for n in names]
        rows.append(", ".join(row))
    return rows


def render_query_apps(ctx: Context, names: list[str], nounits: bool) -> list[str]:
    rows = []
    for gpu, reading in ctx.selected():
        for proc in reading.processes:
            values = {
                "timestamp": _stamp(ctx.now),
                "gpu_name": gpu.name,
                "gpu_bus_id": gpu.pci_bus_id,
                "gpu_serial": NA if gpu.serial in ("", "N/A") else gpu.serial,
                "gpu_uuid": gpu.uuid,
                "pid": str(proc.pid),
                "process_name": proc.name,
                "used_gpu_memory": _mib(proc.gpus[gpu.index].memory_mib),
            }
            row = [_with_unit(values.get(n, NA), F.APP_UNITS.get(n), nounits) for n in names]
            rows.append(", ".join(row))
    return rows


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


# --------------------------------------------------------------------------- -L, --version


def render_list(ctx: Context) -> list[str]:
    return [f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in ctx.gpus]


def render_version(spec: InstanceSpec) -> list[str]:
    nvml = ".".join(spec.driver_version.split(".")[:2])
    return [
        f"NVIDIA-SMI version  : {spec.driver_version}",
        f"NVML version        : {nvml}",
        f"DRIVER version      : {spec.driver_version}",
        f"CUDA Version        : {spec.cuda_version}",
    ]


# --------------------------------------------------------------------------- the table

_RULE = (
    "+-----------------------------------------+------------------------+----------------------+"
)
_WIDE = "+" + "-" * 89 + "+"


def _short_name(name: str, width: int = 27) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _tail_name(name: str, width: int) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3) :]


def render_table(ctx: Context) -> list[str]:
    spec = ctx.spec
    lines = [
        _ctime(ctx.now) + "       ",
        _WIDE,
        f"| NVIDIA-SMI {spec.driver_version:<23}Driver Version: {spec.driver_version:<15}CUDA Version: {spec.cuda_version:<9}|",
        _RULE,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for n, (gpu, r) in enumerate(ctx.selected()):
        if n:
            lines.append(_RULE)
        persistence = "On" if gpu.datacenter else "Off"
        fan = " N/A" if r.fan_pct is None else f"{r.fan_pct:3d}%"
        ecc = "0" if gpu.datacenter else "N/A"
        mig = "Disabled" if gpu.mig_capable else "N/A"
        lines.append(
            f"|{gpu.index:4d}  {_short_name(gpu.name):<31}{persistence:<3} |"
            f"   {gpu.pci_bus_id} {'Off':>3} |{ecc:>21} |"
        )
        lines.append(
            f"|{fan}{r.temp_c:5d}C{r.pstate:>6}{int(round(r.power_w)):>15d}W / "
            f"{int(round(gpu.power_limit_w)):>4d}W |"
            f"{r.memory_used_mib:>8d}MiB / {gpu.memory_total_mib:>6d}MiB |"
            f"{r.util_gpu:>7d}%{'Default':>13} |"
        )
        lines.append(f"|{'':41}|{'':24}|{mig:>21} |")
    lines.append(_RULE)
    lines.append("")
    lines += [
        _WIDE,
        f"|{' Processes:':<89}|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
    ]
    rows = []
    for gpu, r in ctx.selected():
        for proc in r.processes:
            mem = f"{proc.gpus[gpu.index].memory_mib}MiB"
            rows.append(
                f"|{gpu.index:5d}   N/A  N/A{proc.pid:16d}{'C':>7}   "
                f"{_tail_name(proc.name, 37):<37} {mem:>8} |"
            )
    if not rows:
        rows.append(f"|{'  No running processes found':<89}|")
    lines += rows
    lines.append(_WIDE)
    return lines


# --------------------------------------------------------------------------- XML (-q -x)

Node = tuple[str, "str | list[Node]"]


def _xml_gpu(ctx: Context, gpu: SimGpu, r: GpuReading) -> list[Node]:
    dc = gpu.datacenter
    v = gpu_values(ctx.spec, gpu, r, ctx.now)

    def bare(key: str) -> str:  # XML spells [N/A] as N/A
        value = v.get(key, NA)
        return value[1:-1] if value.startswith("[") and value.endswith("]") else value

    def unit(key: str, u: str) -> str:
        value = bare(key)
        return f"{value} {u}" if _is_number(value) else value

    na = "N/A"
    processes: list[Node] = [
        (
            "process_info",
            [
                ("gpu_instance_id", na),
                ("compute_instance_id", na),
                ("pid", str(p.pid)),
                ("type", "C"),
                ("process_name", p.name),
                ("used_memory", f"{p.gpus[gpu.index].memory_mib} MiB"),
            ],
        )
        for p in r.processes
    ]
    ecc_counts = "0" if dc else na
    return [
        ("product_name", gpu.name),
        ("product_brand", "NVIDIA" if dc else "GeForce" if "GeForce" in gpu.name else "NVIDIA RTX"),
        ("product_architecture", gpu.architecture),
        ("display_mode", "Disabled"),
        ("display_active", "Disabled"),
        ("persistence_mode", bare("persistence_mode")),
        ("addressing_mode", "None"),
        (
            "mig_mode",
            [("current_mig", bare("mig.mode.current")), ("pending_mig", bare("mig.mode.pending"))],
        ),
        ("mig_devices", "None"),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("driver_model", [("current_dm", na), ("pending_dm", na)]),
        ("serial", bare("serial")),
        ("uuid", gpu.uuid),
        ("minor_number", str(gpu.index)),
        ("vbios_version", gpu.vbios_version),
        ("multigpu_board", "No"),
        ("board_id", f"0x{gpu.pci_bus:x}00"),
        ("board_part_number", na),
        ("gpu_part_number", na),
        ("gpu_fru_part_number", na),
        (
            "platformInfo",
            [
                ("chassis_serial_number", na),
                ("slot_number", na),
                ("tray_index", na),
                ("host_id", na),
                ("peer_type", na),
                ("module_id", str(gpu.index + 1)),
                ("gpu_fabric_guid", na),
            ],
        ),
        (
            "inforom_version",
            [
                ("img_version", bare("inforom.img")),
                ("oem_object", bare("inforom.oem")),
                ("ecc_object", bare("inforom.ecc")),
                ("pwr_object", na),
            ],
        ),
        ("inforom_bbx_flush", [("latest_timestamp", na), ("latest_duration", na)]),
        ("gpu_operation_mode", [("current_gom", na), ("pending_gom", na)]),
        ("c2c_mode", bare("c2c.mode")),
        (
            "gpu_virtualization_mode",
            [
                ("virtualization_mode", "Pass-Through" if dc else "None"),
                ("host_vgpu_mode", na),
                ("vgpu_heterogeneous_mode", na),
            ],
        ),
        ("gpu_reset_status", [("reset_required", "No"), ("drain_and_reset_recommended", "No")]),
        ("gpu_recovery_action", "None"),
        ("gsp_firmware_version", ctx.spec.driver_version),
        ("ibmnpu", [("relaxed_ordering_mode", na)]),
        (
            "pci",
            [
                ("pci_bus", f"{gpu.pci_bus:02X}"),
                ("pci_device", f"{gpu.pci_device:02X}"),
                ("pci_domain", "0000"),
                ("pci_base_class", "3"),
                ("pci_sub_class", "2" if dc else "0"),
                ("pci_device_id", gpu.pci_device_id[2:]),
                ("pci_bus_id", gpu.pci_bus_id),
                ("pci_sub_system_id", gpu.pci_sub_device_id[2:]),
                (
                    "pci_gpu_link_info",
                    [
                        (
                            "pcie_gen",
                            [
                                ("max_link_gen", str(gpu.pcie_gen_max)),
                                ("current_link_gen", bare("pcie.link.gen.current")),
                                ("device_current_link_gen", bare("pcie.link.gen.current")),
                                ("max_device_link_gen", str(gpu.pcie_gen_max)),
                                ("max_host_link_gen", str(gpu.pcie_gen_max)),
                            ],
                        ),
                        (
                            "link_widths",
                            [
                                ("max_link_width", f"{gpu.pcie_width_max}x"),
                                ("current_link_width", f"{gpu.pcie_width_max}x"),
                            ],
                        ),
                    ],
                ),
                ("pci_bridge_chip", [("bridge_chip_type", na), ("bridge_chip_fw", na)]),
                ("replay_counter", "0"),
                ("replay_rollover_counter", "0"),
                ("tx_util", "0 KB/s" if r.idle else "1250 KB/s"),
                ("rx_util", "0 KB/s" if r.idle else "3100 KB/s"),
                ("atomic_caps_outbound", na),
                ("atomic_caps_inbound", na),
            ],
        ),
        ("fan_speed", na if r.fan_pct is None else f"{r.fan_pct} %"),
        ("performance_state", r.pstate),
        (
            "clocks_event_reasons",
            [
                ("clocks_event_reason_gpu_idle", bare("clocks_event_reasons.gpu_idle")),
                ("clocks_event_reason_applications_clocks_setting", "Not Active"),
                ("clocks_event_reason_sw_power_cap", "Not Active"),
                ("clocks_event_reason_hw_slowdown", "Not Active"),
                ("clocks_event_reason_hw_thermal_slowdown", "Not Active"),
                ("clocks_event_reason_hw_power_brake_slowdown", "Not Active"),
                ("clocks_event_reason_sync_boost", "Not Active"),
                ("clocks_event_reason_sw_thermal_slowdown", "Not Active"),
                ("clocks_event_reason_display_clocks_setting", "Not Active"),
            ],
        ),
        ("sparse_operation_mode", na),
        (
            "fb_memory_usage",
            [
                ("total", f"{gpu.memory_total_mib} MiB"),
                ("reserved", f"{gpu.memory_reserved_mib} MiB"),
                ("used", f"{r.memory_used_mib} MiB"),
                ("free", f"{r.memory_free_mib} MiB"),
            ],
        ),
        (
            "bar1_memory_usage",
            [
                ("total", "131072 MiB" if dc else "256 MiB"),
                ("used", "1 MiB"),
                ("free", "131071 MiB" if dc else "255 MiB"),
            ],
        ),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"), ("free", "0 MiB")]),
        ("compute_mode", "Default"),
        (
            "utilization",
            [
                ("gpu_util", f"{r.util_gpu} %"),
                ("memory_util", f"{r.util_mem} %"),
                ("encoder_util", "0 %"),
                ("decoder_util", "0 %"),
                ("jpeg_util", "0 %"),
                ("ofa_util", "0 %"),
            ],
        ),
        ("encoder_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        ("fbc_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        (
            "dram_encryption_mode",
            [("current_dram_encryption", na), ("pending_dram_encryption", na)],
        ),
        (
            "ecc_mode",
            [("current_ecc", bare("ecc.mode.current")), ("pending_ecc", bare("ecc.mode.pending"))],
        ),
        (
            "ecc_errors",
            [
                (
                    "volatile",
                    [
                        ("sram_correctable", ecc_counts),
                        ("sram_uncorrectable_parity", ecc_counts),
                        ("sram_uncorrectable_secded", ecc_counts),
                        ("dram_correctable", ecc_counts),
                        ("dram_uncorrectable", ecc_counts),
                    ],
                ),
                (
                    "aggregate",
                    [
                        ("sram_correctable", ecc_counts),
                        ("sram_uncorrectable_parity", ecc_counts),
                        ("sram_uncorrectable_secded", ecc_counts),
                        ("dram_correctable", ecc_counts),
                        ("dram_uncorrectable", ecc_counts),
                        ("sram_threshold_exceeded", "No" if dc else na),
                    ],
                ),
                (
                    "aggregate_uncorrectable_sram_sources",
                    [
                        ("sram_l2", ecc_counts),
                        ("sram_sm", ecc_counts),
                        ("sram_microcontroller", ecc_counts),
                        ("sram_pcie", ecc_counts),
                        ("sram_other", ecc_counts),
                    ],
                ),
            ],
        ),
        (
            "retired_pages",
            [
                (
                    "multiple_single_bit_retirement",
                    [("retired_count", na), ("retired_pagelist", na)],
                ),
                ("double_bit_retirement", [("retired_count", na), ("retired_pagelist", na)]),
                ("pending_blacklist", na),
                ("pending_retirement", na),
            ],
        ),
        (
            "remapped_rows",
            [
                ("remapped_row_corr", "0"),
                ("remapped_row_unc", "0"),
                ("remapped_row_pending", "No"),
                ("remapped_row_failure", "No"),
                (
                    "row_remapper_histogram",
                    [
                        ("row_remapper_histogram_max", "2560 bank(s)"),
                        ("row_remapper_histogram_high", "0 bank(s)"),
                        ("row_remapper_histogram_partial", "0 bank(s)"),
                        ("row_remapper_histogram_low", "0 bank(s)"),
                        ("row_remapper_histogram_none", "0 bank(s)"),
                    ],
                ),
            ]
            if (dc and gpu.hbm)
            else na,
        ),
        (
            "temperature",
            [
                ("gpu_temp", f"{r.temp_c} C"),
                ("gpu_temp_tlimit", unit("temperature.gpu.tlimit", "C")),
                ("gpu_temp_max_threshold", f"{gpu.shutdown_temp_c} C"),
                ("gpu_temp_slow_threshold", f"{gpu.slowdown_temp_c} C"),
                ("gpu_temp_max_gpu_threshold", f"{gpu.max_operating_temp_c} C"),
                ("gpu_target_temperature", na if dc else "83 C"),
                ("memory_temp", na if r.memory_temp_c is None else f"{r.memory_temp_c} C"),
                ("gpu_temp_max_mem_threshold", "95 C" if gpu.hbm else na),
            ],
        ),
        (
            "supported_gpu_target_temp",
            [
                ("gpu_target_temp_min", na if dc else "65 C"),
                ("gpu_target_temp_max", na if dc else "90 C"),
            ],
        ),
        (
            "gpu_power_readings",
            [
                ("power_state", r.pstate),
                ("average_power_draw", f"{r.power_w:.2f} W"),
                ("instant_power_draw", f"{r.power_instant_w:.2f} W"),
                ("current_power_limit", f"{gpu.power_limit_w:.2f} W"),
                ("requested_power_limit", f"{gpu.power_limit_w:.2f} W"),
                ("default_power_limit", f"{gpu.power_limit_w:.2f} W"),
                ("min_power_limit", f"{gpu.min_power_limit_w:.2f} W"),
                ("max_power_limit", f"{gpu.max_power_limit_w:.2f} W"),
            ],
        ),
        ("gpu_memory_power_readings", [("average_power_draw", na), ("instant_power_draw", na)]),
        (
            "module_power_readings",
            [
                ("power_state", r.pstate),
                ("average_power_draw", na),
                ("instant_power_draw", na),
                ("current_power_limit", na),
                ("requested_power_limit", na),
                ("default_power_limit", na),
                ("min_power_limit", na),
                ("max_power_limit", na),
            ],
        ),
        ("power_smoothing", na),
        (
            "power_profiles",
            [
                ("power_profile_requested_profiles", na),
                ("power_profile_enforced_profiles", na),
            ],
        ),
        (
            "clocks",
            [
                ("graphics_clock", f"{r.graphics_clock_mhz} MHz"),
                ("sm_clock", f"{r.sm_clock_mhz} MHz"),
                ("mem_clock", f"{r.mem_clock_mhz} MHz"),
                ("video_clock", f"{r.video_clock_mhz} MHz"),
            ],
        ),
        (
            "applications_clocks",
            [
                ("graphics_clock", unit("clocks.applications.graphics", "MHz")),
                ("mem_clock", unit("clocks.applications.memory", "MHz")),
            ],
        ),
        (
            "default_applications_clocks",
            [
                ("graphics_clock", unit("clocks.default_applications.graphics", "MHz")),
                ("mem_clock", unit("clocks.default_applications.memory", "MHz")),
            ],
        ),
        ("deferred_clocks", [("mem_clock", na)]),
        (
            "max_clocks",
            [
                ("graphics_clock", f"{gpu.max_sm_clock_mhz} MHz"),
                ("sm_clock", f"{gpu.max_sm_clock_mhz} MHz"),
                ("mem_clock", f"{gpu.max_mem_clock_mhz} MHz"),
                ("video_clock", f"{gpu.max_video_clock_mhz} MHz"),
            ],
        ),
        (
            "max_customer_boost_clocks",
            [("graphics_clock", f"{gpu.max_sm_clock_mhz} MHz" if dc else na)],
        ),
        ("clock_policy", [("auto_boost", na), ("auto_boost_default", na)]),
        ("voltage", [("graphics_volt", na if dc else "880.000 mV")]),
        (
            "fabric",
            [
                ("state", na),
                ("status", na),
                ("cliqueId", na),
                ("clusterUuid", na),
                (
                    "health",
                    [
                        ("bandwidth", na),
                        ("route_recovery_in_progress", na),
                        ("route_unhealthy", na),
                        ("access_timeout_recovery", na),
                    ],
                ),
            ],
        ),
        ("processes", processes),
        ("accounted_processes", []),
        ("capabilities", [("egm", "disabled")]),
    ]


def _xml_lines(nodes: list[Node], depth: int, out: list[str]) -> None:
    pad = "\t" * depth
    for tag, value in nodes:
        if isinstance(value, list):
            out.append(f"{pad}<{tag}>")
            _xml_lines(value, depth + 1, out)
            out.append(f"{pad}</{tag}>")
        elif tag == "mig_devices":
            out.append(f"{pad}<{tag}>")
            out.append(f"{pad}\t{escape(value)}")
            out.append(f"{pad}</{tag}>")
        else:
            out.append(f"{pad}<{tag}>{escape(value)}</{tag}>")


def render_xml(ctx: Context) -> list[str]:
    out = [
        '<?xml version="1.0"?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{escape(_ctime(ctx.now))}</timestamp>",
        f"\t<driver_version>{escape(ctx.spec.driver_version)}</driver_version>",
        f"\t<cuda_version>{escape(ctx.spec.cuda_version)}</cuda_version>",
        f"\t<attached_gpus>{len(ctx.spec.gpus)}</attached_gpus>",
    ]
    for gpu, r in ctx.selected():
        out.append(f"\t<gpu id={quoteattr(gpu.pci_bus_id)}>")
        _xml_lines(_xml_gpu(ctx, gpu, r), 2, out)
        out.append("\t</gpu>")
        out.append("")
    out.append("</nvidia_smi_log>")
    return out


# --------------------------------------------------------------------------- -q (text)


def _q_value(value: str) -> str:
    return value[1:-1] if value.startswith("[") and value.endswith("]") else value


def _q_lines(nodes: list[tuple[str, object]], depth: int, out: list[str], width: int = 55) -> None:
    for label, value in nodes:
        pad = "    " * depth
        if isinstance(value, list):
            out.append(f"{pad}{label}")
            _q_lines(value, depth + 1, out, width)
        else:
            out.append(f"{pad}{label:<{width - len(pad)}}: {_q_value(str(value))}")


def render_query_text(ctx: Context) -> list[str]:
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"{'Timestamp':<55}: {_ctime(ctx.now)}",
        f"{'Driver Version':<55}: {ctx.spec.driver_version}",
        f"{'CUDA Version':<55}: {ctx.spec.cuda_version}",
        "",
        f"{'Attached GPUs':<55}: {len(ctx.spec.gpus)}",
    ]
    for gpu, r in ctx.selected():
        v = gpu_values(ctx.spec, gpu, r, ctx.now)

        def u(key: str, unit: str, v: dict[str, str] = v) -> str:
            value = _q_value(v.get(key, NA))
            return f"{value} {unit}" if _is_number(value) else value

        out.append(f"GPU {gpu.pci_bus_id}")
        nodes: list[tuple[str, object]] = [
            ("Product Name", gpu.name),
            ("Product Architecture", gpu.architecture),
            ("Persistence Mode", v["persistence_mode"]),
            ("MIG Mode", [("Current", v["mig.mode.current"]), ("Pending", v["mig.mode.pending"])]),
            ("Serial Number", v["serial"]),
            ("GPU UUID", gpu.uuid),
            ("Minor Number", str(gpu.index)),
            ("VBIOS Version", gpu.vbios_version),
            (
                "PCI",
                [
                    ("Bus", v["pci.bus"]),
                    ("Device", v["pci.device"]),
                    ("Domain", "0x0000"),
                    ("Device Id", gpu.pci_device_id),
                    ("Bus Id", gpu.pci_bus_id),
                    ("Sub System Id", gpu.pci_sub_device_id),
                ],
            ),
            ("Fan Speed", u("fan.speed", "%")),
            ("Performance State", r.pstate),
            (
                "FB Memory Usage",
                [
                    ("Total", f"{gpu.memory_total_mib} MiB"),
                    ("Reserved", f"{gpu.memory_reserved_mib} MiB"),
                    ("Used", f"{r.memory_used_mib} MiB"),
                    ("Free", f"{r.memory_free_mib} MiB"),
                ],
            ),
            ("Compute Mode", "Default"),
            (
                "Utilization",
                [
                    ("GPU", f"{r.util_gpu} %"),
                    ("Memory", f"{r.util_mem} %"),
                    ("Encoder", "0 %"),
                    ("Decoder", "0 %"),
                    ("JPEG", "0 %"),
                    ("OFA", "0 %"),
                ],
            ),
            ("ECC Mode", [("Current", v["ecc.mode.current"]), ("Pending", v["ecc.mode.pending"])]),
            (
                "Temperature",
                [
                    ("GPU Current Temp", f"{r.temp_c} C"),
                    ("GPU T.Limit Temp", u("temperature.gpu.tlimit", "C")),
                    ("Memory Current Temp", u("temperature.memory", "C")),
                ],
            ),
            (
                "GPU Power Readings",
                [
                    ("Average Power Draw", f"{r.power_w:.2f} W"),
                    ("Instantaneous Power Draw", f"{r.power_instant_w:.2f} W"),
                    ("Current Power Limit", f"{gpu.power_limit_w:.2f} W"),
                    ("Requested Power Limit", f"{gpu.power_limit_w:.2f} W"),
                    ("Default Power Limit", f"{gpu.power_limit_w:.2f} W"),
                    ("Min Power Limit", f"{gpu.min_power_limit_w:.2f} W"),
                    ("Max Power Limit", f"{gpu.max_power_limit_w:.2f} W"),
                ],
            ),
            (
                "Clocks",
                [
                    ("Graphics", f"{r.graphics_clock_mhz} MHz"),
                    ("SM", f"{r.sm_clock_mhz} MHz"),
                    ("Memory", f"{r.mem_clock_mhz} MHz"),
                    ("Video", f"{r.video_clock_mhz} MHz"),
                ],
            ),
            (
                "Max Clocks",
                [
                    ("Graphics", f"{gpu.max_sm_clock_mhz} MHz"),
                    ("SM", f"{gpu.max_sm_clock_mhz} MHz"),
                    ("Memory", f"{gpu.max_mem_clock_mhz} MHz"),
                    ("Video", f"{gpu.max_video_clock_mhz} MHz"),
                ],
            ),
        ]
        _q_lines(nodes, 1, out)
        if not r.processes:
            out.append(f"    {'Processes':<51}: None")
        else:
            out.append("    Processes")
            for p in r.processes:
                _q_lines(
                    [
                        ("GPU instance ID", "N/A"),
                        ("Compute instance ID", "N/A"),
                        ("Process ID", str(p.pid)),
                    ],
                    2,
                    out,
                    width=42,
                )
                _q_lines(
                    [
                        ("Type", "C"),
                        ("Name", p.name),
                        ("Used GPU Memory", f"{p.gpus[gpu.index].memory_mib} MiB"),
                    ],
                    3,
                    out,
                    width=42,
                )
        out.append("")
    return out


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


if __name__ == "__main__":
    _quiet_exit(main())
