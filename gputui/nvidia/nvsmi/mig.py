"""Guessing a MIG profile from what a report says of the instance."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

# --------------------------------------------------------------------------------------------
# MIG profiles
# --------------------------------------------------------------------------------------------

# SMs per compute slice, by architecture (NVIDIA MIG user guide profile tables).
_SMS_PER_SLICE = {"ampere": 14, "hopper": 16}
# Nominal memory (GB) of MIG-capable parts whose name does not say it.
_NOMINAL_GB = {"h200": 141, "h20": 96, "a30": 24, "h100 pcie": 80, "h100 sxm": 80, "h800": 80}
# memory slices (of 8) a GPU instance of g compute slices can have
_MEM_SLICES_FOR = {1: {1, 2}, 2: {2}, 3: {4}, 4: {4}, 7: {8}}


def _architecture(product: str | None, arch: str | None) -> str | None:
    if arch:
        return arch.strip().lower()
    name = (product or "").lower()
    if re.search(r"\b(a100|a30|a800)\b", name) or "a100-" in name:
        return "ampere"
    if re.search(r"\b(gh200|h100|h200|h800|h20)\b", name):
        return "hopper"
    return None


def guess_mig_profile(
    product: str | None,
    sm_count: int | None,
    memory_mib: float | None,
    gpu_memory_mib: float | None,
    architecture: str | None = None,
) -> str | None:
    """A MIG profile name such as `3g.40gb`, inferred from the instance's SM count and memory
    (the XML and the table do not print it; `nvidia-smi -L` does, see `apply_gpu_list`).

    Known for Ampere (A100, A30) and Hopper (H100, H200); None where it cannot be told
    (other architectures, compute-instance profiles such as `1c.3g.71gb`)."""
    per_slice = _SMS_PER_SLICE.get(_architecture(product, architecture) or "")
    if not per_slice or not sm_count or not memory_mib or not gpu_memory_mib:
        return None
    g = min(7, sm_count // per_slice)
    if g == 5 or g == 6:
        g = 4
    if g < 1:
        return None
    slices = round(memory_mib / gpu_memory_mib * 8)
    if slices not in _MEM_SLICES_FOR.get(g, set()):
        return None
    name = (product or "").lower()
    m = re.search(r"(\d+)\s*gb\b", name)
    if m:
        nominal = Decimal(m.group(1))
    else:
        nominal = next(
            (Decimal(gb) for key, gb in _NOMINAL_GB.items() if key in name),
            Decimal(round(gpu_memory_mib / 1024)),
        )
    gb = (nominal * slices / 8).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{g}g.{gb}gb"
