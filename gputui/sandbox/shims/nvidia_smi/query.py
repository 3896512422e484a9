"""``--query-gpu=`` / ``--query-compute-apps=`` values and CSV rows."""

from __future__ import annotations

from .. import fields as F
from ..sim import GpuReading
from ..state import (
    InstanceSpec,
    SimGpu,
)
from .common import (
    NA,
    Context,
    Usage,
    _mib,
    _stamp,
    _w,
    _with_unit,
)

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
