"""The --query-gpu / --query-compute-apps field lists of the real nvidia-smi.

Taken from the `--help-query-gpu` outputs and the CSV headers of the real captures in
../shared/fixtures/nvidia-smi (drivers 5xx-610): one line per field,
``canonical|alias,alias|unit``. The header always prints the canonical name, with
`` [unit]`` when the field has a unit (also with ``nounits``, which only drops the unit from
the values). Lookups are case-insensitive.
"""

from __future__ import annotations

_QUERY_GPU = """
timestamp||
driver_version||
kmd_version||
vgpu_driver_capability.heterogenous_multivGPU||
count||
name|gpu_name|
serial|gpu_serial|
uuid|gpu_uuid|
pci.bus_id|gpu_bus_id|
pci.domain||
pci.bus||
pci.device||
pci.baseClass||
pci.subClass||
pci.device_id||
pci.sub_device_id||
vgpu_device_capability.fractional_multiVgpu||
vgpu_device_capability.heterogeneous_timeSlice_profile||
vgpu_device_capability.heterogeneous_timeSlice_sizes||
vgpu_device_capability.homogeneous_placements||
vgpu_device_capability.mig_timeSlicing||
vgpu_device_capability.mig_timeSlicing_mode||
pcie.link.gen.current||
pcie.link.gen.gpucurrent||
pcie.link.gen.max||
pcie.link.gen.gpumax||
pcie.link.gen.hostmax||
pcie.link.width.current||
pcie.link.width.max||
index||
display_mode||
display_attached||
display_active||
persistence_mode||
addressing_mode||
accounting.mode||
accounting.buffer_size||
driver_model.current||
driver_model.pending||
vbios_version||
inforom.img|inforom.image|
inforom.oem||
inforom.ecc||
inforom.pwr|inforom.power|
inforom.checksum_validation||
gpu_recovery_action||
gom.current|gpu_operation_mode.current|
gom.pending|gpu_operation_mode.pending|
fan.speed||%
pstate||
clocks_event_reasons.supported|clocks_throttle_reasons.supported|
clocks_event_reasons.active|clocks_throttle_reasons.active|
clocks_event_reasons.gpu_idle|clocks_throttle_reasons.gpu_idle|
clocks_event_reasons.applications_clocks_setting|clocks_throttle_reasons.applications_clocks_setting|
clocks_event_reasons.sw_power_cap|clocks_throttle_reasons.sw_power_cap|
clocks_event_reasons.hw_slowdown|clocks_throttle_reasons.hw_slowdown|
clocks_event_reasons.hw_thermal_slowdown|clocks_throttle_reasons.hw_thermal_slowdown|
clocks_event_reasons.hw_power_brake_slowdown|clocks_throttle_reasons.hw_power_brake_slowdown|
clocks_event_reasons.sw_thermal_slowdown|clocks_throttle_reasons.sw_thermal_slowdown|
clocks_event_reasons.sync_boost|clocks_throttle_reasons.sync_boost|
clocks_event_reasons_counters.sw_power_cap||us
clocks_event_reasons_counters.sync_boost||us
clocks_event_reasons_counters.sw_thermal_slowdown||us
clocks_event_reasons_counters.hw_thermal_slowdown||us
clocks_event_reasons_counters.hw_power_brake_slowdown||us
memory.total||MiB
memory.reserved||MiB
memory.used||MiB
memory.free||MiB
compute_mode||
compute_cap||
utilization.gpu||%
utilization.memory||%
utilization.encoder||%
utilization.decoder||%
utilization.jpeg||%
utilization.ofa||%
encoder.stats.sessionCount||
encoder.stats.averageFps||
encoder.stats.averageLatency||
dramEncryption.mode.current||
dramEncryption.mode.pending||
ecc.mode.current||
ecc.mode.pending||
ecc.errors.corrected.volatile.device_memory||
ecc.errors.corrected.volatile.dram||
ecc.errors.corrected.volatile.register_file||
ecc.errors.corrected.volatile.l1_cache||
ecc.errors.corrected.volatile.l2_cache||
ecc.errors.corrected.volatile.texture_memory||
ecc.errors.corrected.volatile.cbu||
ecc.errors.corrected.volatile.sram||
ecc.errors.corrected.volatile.total||
ecc.errors.corrected.aggregate.device_memory||
ecc.errors.corrected.aggregate.dram||
ecc.errors.corrected.aggregate.register_file||
ecc.errors.corrected.aggregate.l1_cache||
ecc.errors.corrected.aggregate.l2_cache||
ecc.errors.corrected.aggregate.texture_memory||
ecc.errors.corrected.aggregate.cbu||
ecc.errors.corrected.aggregate.sram||
ecc.errors.corrected.aggregate.total||
ecc.errors.uncorrected.volatile.device_memory||
ecc.errors.uncorrected.volatile.dram||
ecc.errors.uncorrected.volatile.register_file||
ecc.errors.uncorrected.volatile.l1_cache||
ecc.errors.uncorrected.volatile.l2_cache||
ecc.errors.uncorrected.volatile.texture_memory||
ecc.errors.uncorrected.volatile.cbu||
ecc.errors.uncorrected.volatile.sram||
ecc.errors.uncorrected.volatile.total||
ecc.errors.uncorrected.aggregate.device_memory||
ecc.errors.uncorrected.aggregate.dram||
ecc.errors.uncorrected.aggregate.register_file||
ecc.errors.uncorrected.aggregate.l1_cache||
ecc.errors.uncorrected.aggregate.l2_cache||
ecc.errors.uncorrected.aggregate.texture_memory||
ecc.errors.uncorrected.aggregate.cbu||
ecc.errors.uncorrected.aggregate.sram||
ecc.errors.uncorrected.aggregate.total||
ecc.errors.uncorrected.volatile.sram.parity||
ecc.errors.uncorrected.volatile.sram.secded||
ecc.errors.uncorrected.aggregate.sram.parity||
ecc.errors.uncorrected.aggregate.sram.secded||
ecc.errors.uncorrected.aggregate.sram.thresholdExceeded||
ecc.errors.uncorrected.aggregate.sram.l2||
ecc.errors.uncorrected.aggregate.sram.sm||
ecc.errors.uncorrected.aggregate.sram.mcu||
ecc.errors.uncorrected.aggregate.sram.pcie||
ecc.errors.uncorrected.aggregate.sram.other||
retired_pages.single_bit_ecc.count|retired_pages.sbe|
retired_pages.double_bit.count|retired_pages.dbe|
retired_pages.pending||
remapped_rows.correctable|remapped_rows.sbe|
remapped_rows.correctable_inactive||
remapped_rows.uncorrectable|remapped_rows.dbe|
remapped_rows.uncorrectable_inactive||
remapped_rows.pending||
remapped_rows.failure||
remapped_rows.histogram.max||
remapped_rows.histogram.high||
remapped_rows.histogram.partial||
remapped_rows.histogram.low||
remapped_rows.histogram.none||
temperature.gpu||
temperature.gpu.tlimit||
temperature.memory||
power.management||
power.draw||W
power.draw.average|gpu.power.draw.average|W
power.draw.instant|gpu.power.draw.instant|W
power.limit|gpu.power.requested_limit|W
enforced.power.limit|gpu.power.current_limit|W
power.default_limit|gpu.power.default_limit|W
power.min_limit|gpu.power.min_limit|W
power.max_limit|gpu.power.max_limit|W
module.power.draw.average||W
module.power.draw.instant||W
module.power.limit|module.power.requested_limit|W
module.enforced.power.limit|module.power.current_limit|W
module.power.default_limit||W
module.power.min_limit||W
module.power.max_limit||W
edpp_multiplier||%
clocks.current.graphics|clocks.gr|MHz
clocks.current.sm|clocks.sm|MHz
clocks.current.memory|clocks.mem|MHz
clocks.current.video|clocks.video|MHz
clocks.applications.graphics|clocks.applications.gr|MHz
clocks.applications.memory|clocks.applications.mem|MHz
clocks.default_applications.graphics|clocks.default_applications.gr|MHz
clocks.default_applications.memory|clocks.default_applications.mem|MHz
clocks.max.graphics|clocks.max.gr|MHz
clocks.max.sm||MHz
clocks.max.memory|clocks.max.mem|MHz
mig.mode.current||
mig.mode.pending||
gsp.mode.current||
gsp.mode.default||
c2c.mode||
protected_memory.total||MiB
protected_memory.used||MiB
protected_memory.free||MiB
fabric.state||
fabric.status||
fabric.cliqueId||
fabric.clusterUuid||
fabric.health.summary||
fabric.health.bandwidth||
fabric.health.route_recovery_in_progress||
fabric.health.route_unhealthy||
fabric.health.access_timeout_recovery||
fabric.health.incorrect_configuration||
fabric.health.partition_assigned||
platform.chassis_serial_number||
platform.slot_number||
platform.tray_index||
platform.host_id||
platform.peer_type||
platform.module_id||
platform.gpu_fabric_guid||
hostname||
gpu.base.current||W
gpu.base.requested||W
gpu.base.default||W
gpu.base.min||W
gpu.base.max||W
power_smoothing.tmp_floor||W
power_smoothing.tmp_ceil||W
power_smoothing.hw_lifetime_remaining_percent||%
power_smoothing.enabled||
power_smoothing.delayed_power_smoothing_supported||
power_smoothing.soc_power_smoothing_enabled||
power_smoothing.priv_level||
power_smoothing.imm_ramp_down||
power_smoothing.max_percent_tmp_floor||%
power_smoothing.min_percent_tmp_floor||%
power_smoothing.primary_power_floor||W
power_smoothing.secondary_power_floor||W
power_smoothing.min_primary_floor_activation_offset||W
power_smoothing.min_primary_floor_activation_point||W
power_smoothing.window_multiplier||ms
power_smoothing.num_preset_profiles||
power_smoothing.curr_profile.percent_tmp_floor||%
power_smoothing.curr_profile.ramp_up_rate||W/s
power_smoothing.curr_profile.ramp_down_rate||W/s
power_smoothing.curr_profile.ramp_down_hysteresis||ms
power_smoothing.curr_profile.secondary_power_floor||W
power_smoothing.curr_profile.primary_floor_act_window_multiplier||
power_smoothing.curr_profile.primary_floor_tar_window_multiplier||
power_smoothing.curr_profile.primary_floor_act_offset||W
power_smoothing.active_profile||
power_smoothing.admin_override.percent_tmp_floor||%
power_smoothing.admin_override.ramp_up_rate||W/s
power_smoothing.admin_override.ramp_down_rate||W/s
power_smoothing.admin_override.ramp_down_hysteresis||ms
power_smoothing.admin_override.secondary_power_floor||W
power_smoothing.admin_override.primary_floor_act_window_multiplier||
power_smoothing.admin_override.primary_floor_tar_window_multiplier||
power_smoothing.admin_override.primary_floor_act_offset||W
bbx.time_run||seconds
"""

_QUERY_COMPUTE_APPS = """
timestamp||
gpu_name||
gpu_bus_id||
gpu_serial||
gpu_uuid||
pid||
process_name|name|
used_gpu_memory|used_memory|MiB
"""


def _parse(table: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    order: list[str] = []
    lookup: dict[str, str] = {}
    units: dict[str, str] = {}
    for line in table.strip().splitlines():
        canonical, aliases, unit = line.split("|")
        order.append(canonical)
        lookup[canonical.lower()] = canonical
        for alias in filter(None, aliases.split(",")):
            lookup.setdefault(alias.lower(), canonical)
        if unit:
            units[canonical] = unit
    return order, lookup, units


GPU_FIELDS, GPU_LOOKUP, GPU_UNITS = _parse(_QUERY_GPU)
APP_FIELDS, APP_LOOKUP, APP_UNITS = _parse(_QUERY_COMPUTE_APPS)


def header(canonical: str, units: dict[str, str]) -> str:
    unit = units.get(canonical)
    return f"{canonical} [{unit}]" if unit else canonical
