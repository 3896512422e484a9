"""``nvidia-smi -L``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gputui.models import HostInventory

from .common import (
    _index,
    _lines,
    _text,
)

# --------------------------------------------------------------------------------------------
# `nvidia-smi -L`
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedGpu:
    """One line of `nvidia-smi -L`: a GPU, or (indented) a MIG device of the GPU above it.

    For a MIG device, `index` is its MIG device index, `parent_index` the GPU's index and
    `mig_profile` the profile (`3g.40gb`, `1c.3g.71gb`)."""

    index: int
    name: str | None
    uuid: str | None
    parent_index: int | None = None
    mig_profile: str | None = None

    @property
    def is_mig(self) -> bool:
        return self.parent_index is not None


_LIST_GPU_RE = re.compile(r"^GPU\s+(\d{1,6}):\s*(.*?)\s*(?:\(UUID:\s*([^)]*)\))?\s*$")
_LIST_MIG_RE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d{1,6}):\s*(?:\(UUID:\s*([^)]*)\))?\s*$")


def parse_gpu_list(text: str | bytes) -> list[ListedGpu]:
    """The GPUs and MIG devices listed by `nvidia-smi -L`; other lines are ignored."""
    out: list[ListedGpu] = []
    parent: int | None = None
    for line in _lines(text):
        if len(line) > 1024:
            continue
        m = _LIST_GPU_RE.match(line)
        if m:
            index = _index(m.group(1))
            if index is None:
                continue
            parent = index
            out.append(ListedGpu(index, _text(m.group(2)), _text(m.group(3), 96)))
            continue
        m = _LIST_MIG_RE.match(line)
        if m and parent is not None:
            profile = _text(m.group(1), 32)
            index = _index(m.group(2))
            if index is None:
                continue
            out.append(
                ListedGpu(
                    index,
                    f"MIG {profile}" if profile else None,
                    _text(m.group(3), 96),
                    parent_index=parent,
                    mig_profile=profile,
                )
            )
    return out


def apply_gpu_list(inventory: HostInventory, listed: Sequence[ListedGpu]) -> HostInventory:
    """The inventory with what `nvidia-smi -L` adds: GPU UUIDs and names where missing, and the
    exact MIG profiles and UUIDs (matched by GPU index and MIG device index)."""
    gpus_listed = {g.index: g for g in listed if not g.is_mig}
    migs_listed: dict[tuple[int | None, int | None], ListedGpu] = {
        (g.parent_index, g.index): g for g in listed if g.is_mig}
    gpus = []
    for gpu in inventory.gpus:
        entry = gpus_listed.get(gpu.index)
        devices = []
        for dev in gpu.mig_devices:
            mig = migs_listed.get((gpu.index, dev.mig_index))
            if mig is not None:
                dev = dev.model_copy(
                    update={"profile": mig.mig_profile or dev.profile, "uuid": dev.uuid or mig.uuid}
                )
            devices.append(dev)
        update: dict[str, Any] = {"mig_devices": devices}
        if entry is not None:
            update["uuid"] = gpu.uuid or entry.uuid
            update["name"] = gpu.name if gpu.name and not gpu.name.endswith("...") else entry.name
        gpus.append(gpu.model_copy(update=update))
    return inventory.model_copy(update={"gpus": gpus})
