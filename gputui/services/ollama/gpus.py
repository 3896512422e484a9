"""The instance's GPUs as Ollama sees them, and which ones it may use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_, _
from gputui.i18n import Deferred as D
from gputui.services.ollama.common import (
    MIB,
    OllamaBadInput,
    OllamaServiceError,
)
from gputui.services.ollama.probe import (
    _clean,
)

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str | None
    name: str | None
    memory_total_mib: float | None
    memory_used_mib: float | None
    memory_free_mib: float | None

    @property
    def short_name(self) -> str:
        from gputui.format import short_gpu

        return short_gpu(self.name) if self.name else "GPU"

    @property
    def free_bytes(self) -> int:
        return int((self.memory_free_mib or 0) * MIB)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "uuid": self.uuid, "name": self.name,
            "memory_total_mib": self.memory_total_mib, "memory_used_mib": self.memory_used_mib,
            "memory_free_mib": self.memory_free_mib,
        }


def _num(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value >= 0 else None  # NaN, negatives: unknown


def parse_gpu_rows(text: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free
    --format=csv,noheader,nounits` -> GpuInfo (odd lines skipped)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        name = ", ".join(cells[2:-3])
        uuid = cells[1] if cells[1].startswith(("GPU-", "MIG-")) else None
        out.append(GpuInfo(
            index=int(cells[0]), uuid=_clean(uuid, 96) if uuid else None,
            name=_clean(name, 96) or None, memory_total_mib=_num(cells[-3]),
            memory_used_mib=_num(cells[-2]), memory_free_mib=_num(cells[-1]),
        ))
    return out


def selection_of(value: str | None, gpus: Sequence[GpuInfo]) -> list[int]:
    """The GPU indices a CUDA_VISIBLE_DEVICES value lets a program use, in its order (None:
    all). Entries are indices or (prefixes of) GPU UUIDs; like CUDA, the list stops at the
    first entry that names no GPU."""
    if value is None:
        return [g.index for g in gpus]
    out: list[int] = []
    for item in (s.strip() for s in value.split(",")):
        match = None
        for gpu in gpus:
            if (item.isdigit() and int(item) == gpu.index) or (
                item.startswith(("GPU-", "MIG-")) and gpu.uuid and gpu.uuid.startswith(item)
            ):
                match = gpu.index
        if match is None or match in out:
            break
        out.append(match)
    return out


def cuda_visible_value(gpus: Sequence[GpuInfo], indices: Sequence[int]) -> str:
    """CUDA_VISIBLE_DEVICES naming `indices` by UUID (unambiguous whatever CUDA's device order);
    by index only where a GPU reports no UUID."""
    by_index = {g.index: g for g in gpus}
    out = []
    for index in indices:
        gpu = by_index.get(index)
        if gpu is None:
            known = ", ".join(str(i) for i in sorted(by_index)) or _("none")
            raise OllamaBadInput(_("no GPU {index} on this instance (GPUs: {known})").format(
                index=index, known=known))
        out.append(gpu.uuid or str(index))
    return ",".join(out)


def parse_gpu_selection(text: str) -> list[int] | None:
    """'0,1' / '1' / 'all' -> indices (None: all GPUs)."""
    text = text.strip().lower()
    if text in ("all", "*", ""):
        return None
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part.isdigit():
            raise OllamaServiceError(_("not a GPU index: {value} (give e.g. 0,1 or all)").format(
                value=repr(part)))
        if int(part) not in out:
            out.append(int(part))
    return out


def gpu_words(indices: Sequence[int]) -> D:
    """'GPU 0', 'GPUs 0,1', 'no GPU' (a Deferred: shown in the interface language with
    `shown`)."""
    if not indices:
        return D(N_("no GPU"))
    ids = ",".join(map(str, indices))
    return D(N_("GPU {ids}"), ids=ids) if len(indices) == 1 else D(N_("GPUs {ids}"), ids=ids)


