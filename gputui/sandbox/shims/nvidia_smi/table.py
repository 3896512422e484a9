"""``-L``, ``--version`` and the plain table."""

from __future__ import annotations

from ..state import (
    InstanceSpec,
)
from .common import (
    Context,
    _ctime,
)

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
