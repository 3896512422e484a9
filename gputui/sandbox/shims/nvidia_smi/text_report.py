"""``-q``: the text report."""

from __future__ import annotations

from .common import (
    NA,
    Context,
    _ctime,
    _is_number,
)
from .query import gpu_values

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
