"""nvidia-smi field names and the command lines that ask for them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gputui.i18n import _

# --------------------------------------------------------------------------------------------
# Field names
# --------------------------------------------------------------------------------------------

#: The `--query-gpu` fields the live stream asks for (names as `nvidia-smi --help-query-gpu`).
TELEMETRY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "timestamp",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "fan.speed",
    "clocks.sm",
    "pstate",
    "mig.mode.current",
)

#: The `--query-compute-apps` fields (the names nvidia-smi prints in its header).
COMPUTE_APPS_FIELDS: tuple[str, ...] = ("pid", "gpu_uuid", "process_name", "used_gpu_memory")

# "alias" -> the name nvidia-smi prints in the CSV header (from --help-query-gpu, drivers
# 418..610).
_GPU_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "inforom.power": "inforom.pwr",
    "gpu_operation_mode.current": "gom.current",
    "gpu_operation_mode.pending": "gom.pending",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "remapped_rows.sbe": "remapped_rows.correctable",
    "remapped_rows.dbe": "remapped_rows.uncorrectable",
    "gpu.power.draw.average": "power.draw.average",
    "gpu.power.draw.instant": "power.draw.instant",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.min_limit": "power.min_limit",
    "gpu.power.max_limit": "power.max_limit",
    "module.power.requested_limit": "module.power.limit",
    "module.power.current_limit": "module.enforced.power.limit",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.default_applications.mem": "clocks.default_applications.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
}
for _reason in (
    "supported",
    "active",
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
):
    _GPU_ALIASES[f"clocks_throttle_reasons.{_reason}"] = f"clocks_event_reasons.{_reason}"

_APPS_ALIASES = {
    "name": "process_name",
    "used_memory": "used_gpu_memory",
    "uuid": "gpu_uuid",
}

_KNOWN_GPU_FIELDS = frozenset(
    set(_GPU_ALIASES.values())
    | {
        "index",
        "uuid",
        "name",
        "serial",
        "timestamp",
        "driver_version",
        "count",
        "utilization.gpu",
        "utilization.memory",
        "memory.used",
        "memory.total",
        "memory.free",
        "memory.reserved",
        "temperature.gpu",
        "temperature.memory",
        "power.draw",
        "fan.speed",
        "pstate",
        "mig.mode.current",
        "mig.mode.pending",
        "pcie.link.gen.current",
        "pcie.link.width.current",
        "ecc.mode.current",
        "vbios_version",
        "compute_mode",
    }
)
_KNOWN_APPS_FIELDS = frozenset(
    {
        "timestamp",
        "gpu_name",
        "gpu_bus_id",
        "gpu_serial",
        "gpu_uuid",
        "pid",
        "process_name",
        "used_gpu_memory",
    }
)

_FIELD_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,127}(?:\s*\[[^\[\]]{0,16}\])?$")


def canonical_field(name: str, kind: str = "gpu") -> str:
    """The name nvidia-smi prints for a query field: units dropped (`memory.used [MiB]` ->
    `memory.used`) and aliases resolved (`clocks.sm` -> `clocks.current.sm`). `kind` is "gpu"
    for --query-gpu and "apps" for --query-compute-apps (where `name` is the process name)."""
    base = name.strip().split("[", 1)[0].strip()
    aliases = _APPS_ALIASES if kind == "apps" else _GPU_ALIASES
    return aliases.get(base, base)


def _fields_arg(fields: Sequence[str]) -> str:
    for field in fields:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", field):
            raise ValueError(_("not an nvidia-smi query field: {field}").format(field=repr(field)))
    return ",".join(fields)


def query_gpu_command(
    interval_ms: int | None = 1000,
    fields: Sequence[str] = TELEMETRY_FIELDS,
    *,
    header: bool = True,
    units: bool = False,
) -> str:
    """`nvidia-smi --query-gpu=... --format=csv,nounits -lms N` (a shell command line).

    `interval_ms=None` runs once. `header=False` adds `noheader`; `units=True` keeps units.
    """
    fmt = "csv"
    if not header:
        fmt += ",noheader"
    if not units:
        fmt += ",nounits"
    command = f"nvidia-smi --query-gpu={_fields_arg(fields)} --format={fmt}"
    if interval_ms is not None:
        if int(interval_ms) < 1:
            raise ValueError(_("interval_ms must be at least 1"))
        command += f" -lms {int(interval_ms)}"
    return command


def compute_apps_command(
    fields: Sequence[str] = COMPUTE_APPS_FIELDS, *, header: bool = True, units: bool = False
) -> str:
    """`nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_gpu_memory --format=csv,nounits`."""
    fmt = "csv"
    if not header:
        fmt += ",noheader"
    if not units:
        fmt += ",nounits"
    return f"nvidia-smi --query-compute-apps={_fields_arg(fields)} --format={fmt}"
