"""Live GPU readings of a sandbox instance, worked out from (time, live processes) alone.

Stateless and deterministic: the same instance, process records and `now` always give the
same numbers, so tests can assert on them. Small "jitter" comes from a CRC of
(GPU uuid, quantity, whole second), not from a random generator.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

from .state import InstanceSpec, ProcRecord, SimGpu, memory_in_use

HEAT_TAU_S = 45.0  # time constant of the temperature rise/fall under load
FAN_START_C = 45.0


@dataclass
class GpuReading:
    index: int
    memory_used_mib: int
    memory_free_mib: int
    util_gpu: int  # %
    util_mem: int  # %
    power_w: float
    power_instant_w: float
    temp_c: int
    memory_temp_c: int | None
    fan_pct: int | None  # None: the card does not report a fan ([N/A])
    graphics_clock_mhz: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    video_clock_mhz: int
    pstate: str
    idle: bool
    processes: list[ProcRecord] = field(default_factory=list)


def jitter(seed: str, now: float, amplitude: float) -> float:
    """Deterministic value in [-amplitude, amplitude], constant within one second."""
    u = zlib.crc32(f"{seed}:{int(now)}".encode()) / 0xFFFFFFFF
    return (2.0 * u - 1.0) * amplitude


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def target_util(procs: list[ProcRecord], index: int) -> float:
    return min(100.0, sum(p.gpus[index].util for p in procs if index in p.gpus))


def heat(procs: list[ProcRecord], index: int, now: float) -> float:
    """0..1: how far the card has warmed towards its steady loaded temperature."""
    total = 0.0
    for p in procs:
        use = p.gpus.get(index)
        if use is None or use.util <= 0:
            continue
        age = max(0.0, now - p.started_at)
        total += use.util / 100.0 * (1.0 - math.exp(-age / HEAT_TAU_S))
    return min(1.0, total)


def read_gpu(gpu: SimGpu, procs: list[ProcRecord], now: float) -> GpuReading:
    mine = [p for p in procs if gpu.index in p.gpus]
    used = memory_in_use(mine, gpu.index)
    free = max(0, gpu.memory_total_mib - gpu.memory_reserved_mib - used)
    target = target_util(mine, gpu.index)
    if target <= 0:
        util = 0
    else:
        util = int(round(_clamp(target + jitter(gpu.uuid + ":util", now, 2.0), 1, 100)))
    util_mem = (
        0
        if util == 0
        else int(round(_clamp(util * 0.32 + jitter(gpu.uuid + ":mu", now, 1.5), 1, 100)))
    )

    idle_w = gpu.idle_power_w
    full_w = min(gpu.tdp_w, gpu.power_limit_w)
    power = idle_w + (full_w - idle_w) * util / 100.0
    power += jitter(gpu.uuid + ":pw", now, max(0.3, power * 0.01))
    power = _clamp(power, idle_w * 0.9, gpu.power_limit_w)
    instant = _clamp(
        power + jitter(gpu.uuid + ":pwi", now, max(0.2, power * 0.015)), 0, gpu.power_limit_w
    )

    h = heat(mine, gpu.index, now)
    temp = gpu.idle_temp_c + (gpu.load_temp_c - gpu.idle_temp_c) * h
    temp_c = int(round(temp + jitter(gpu.uuid + ":t", now, 0.6)))
    memory_temp = temp_c + 5 + int(round(h * 3)) if gpu.hbm else None

    fan: int | None
    if gpu.datacenter:
        fan = None
    elif temp_c < FAN_START_C:
        fan = 0
    else:
        fan = int(_clamp(30 + (temp_c - FAN_START_C) * 2.2, 30, 100))

    busy = bool(mine)
    if util > 0:
        sm = gpu.max_sm_clock_mhz - int(abs(jitter(gpu.uuid + ":sm", now, 1.0)) * 2) * 15
        video = gpu.max_video_clock_mhz
    elif busy:
        sm = max(gpu.idle_sm_clock_mhz, int(gpu.max_sm_clock_mhz * 0.7) // 15 * 15)
        video = gpu.max_video_clock_mhz
    else:
        sm = gpu.idle_sm_clock_mhz
        video = gpu.idle_video_clock_mhz
    mem_clock = gpu.max_mem_clock_mhz if busy else gpu.idle_mem_clock_mhz

    return GpuReading(
        index=gpu.index,
        memory_used_mib=used,
        memory_free_mib=free,
        util_gpu=util,
        util_mem=util_mem,
        power_w=round(power, 2),
        power_instant_w=round(instant, 2),
        temp_c=temp_c,
        memory_temp_c=memory_temp,
        fan_pct=fan,
        graphics_clock_mhz=sm,
        sm_clock_mhz=sm,
        mem_clock_mhz=mem_clock,
        video_clock_mhz=video,
        pstate="P0" if busy else "P8",
        idle=not busy,
        processes=mine,
    )


def read_gpus(spec: InstanceSpec, procs: list[ProcRecord], now: float) -> list[GpuReading]:
    return [read_gpu(gpu, procs, now) for gpu in spec.gpus]
