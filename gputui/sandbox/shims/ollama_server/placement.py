"""Where a loaded model goes: Ollama's scheduler (one GPU, spread, CPU offload, or refused)."""

from __future__ import annotations

from dataclasses import dataclass

from .common import (
    GPU_OVERHEAD_BYTES,
    human_gib,
)

# --------------------------------------------------------------------------- placement


class LoadRefused(Exception):
    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Placement:
    gpus: dict[int, int]  # GPU index -> bytes
    cpu: int  # bytes left in host memory

    @property
    def vram(self) -> int:
        return sum(self.gpus.values())

    @property
    def total(self) -> int:
        return self.vram + self.cpu


def place(
    weights_kv: int, graph: int, free: list[tuple[int, int]], *, spread: bool, ram_free: int
) -> Placement:
    """Where a model of `weights_kv` bytes (+ `graph` per GPU) goes, given (GPU index, free
    bytes) of the visible GPUs, most free first."""
    fixed = GPU_OVERHEAD_BYTES + graph
    order = sorted(free, key=lambda item: -item[1])
    if order and not spread and order[0][1] >= weights_kv + fixed:
        return Placement({order[0][0]: weights_kv + fixed}, 0)
    usable = [(index, room - fixed) for index, room in order if room - fixed > 0]
    capacity = sum(room for _, room in usable)
    if usable and capacity >= weights_kv:
        parts: dict[int, int] = {}
        left = weights_kv
        for n, (index, room) in enumerate(usable):
            share = left if n == len(usable) - 1 else min(room, weights_kv * room // capacity)
            parts[index] = share + fixed
            left -= share
        return Placement(parts, 0)
    on_gpu = {index: room + fixed for index, room in usable}
    cpu = weights_kv - capacity if usable else weights_kv + graph
    if cpu > ram_free:
        raise LoadRefused(
            f"model requires more system memory ({human_gib(cpu)}) than is available "
            f"({human_gib(max(0, ram_free))})"
        )
    return Placement(on_gpu, cpu)
