"""``-q -x``: the XML report (DTD v12)."""

from __future__ import annotations

from ..sim import GpuReading
from ..state import (
    SimGpu,
)
from .common import (
    NA,
    Context,
    _ctime,
    _is_number,
    escape,
    quoteattr,
)
from .query import gpu_values

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
