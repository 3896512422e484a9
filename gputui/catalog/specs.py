"""GPU specifications: package data (data/gpus.toml) loaded into `GpuSpec` models."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gputui.i18n import N_, Deferred, _

from .errors import CatalogError

GIB = 1024**3
MIB = 1024**2

# Share of the physical memory a process can actually allocate: the driver reserves a little
# (nvidia-smi -q shows "Reserved": 479 MiB of 81559 on an H100, 869 of 81920 on an A100 80GB,
# 316 of 24576 on an RTX 3090 in ../shared/fixtures), about 1 %.
USABLE_FRACTION = 0.99
# GDDR cards with ECC switched on give 1/16 of their memory to ECC (an L40S reports 46068 MiB
# of 48 GiB, a T4 15360 of 16 GiB). Datacenter GDDR cards ship with ECC on.
GDDR_ECC_FRACTION = 15 / 16


class GpuSpec(BaseModel):
    """One card. Tensor figures are dense (no 2:4 sparsity), FP16/BF16 with FP32 accumulate."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    key: str
    name: str
    architecture: str
    form_factor: str
    vram_gb: float = Field(gt=0)  # marketed capacity; NVIDIA's "GB" here are GiB
    memory_type: str
    memory_bandwidth_gbs: float = Field(gt=0)
    fp32_tflops: float = Field(ge=0)
    fp16_tflops: float = Field(ge=0, alias="fp16_tensor_tflops_dense")
    bf16_tflops: float = Field(ge=0, alias="bf16_tensor_tflops_dense")
    fp8_tflops: float = Field(ge=0, alias="fp8_tensor_tflops_dense")
    int8_tops: float = Field(ge=0, alias="int8_tensor_tops_dense")
    tdp_w: float = Field(gt=0)
    nvlink_gbs: float = Field(ge=0)
    nvlink_kind: str
    pcie_gen: int
    ecc: bool
    compute_capability: str
    source: str
    aliases: tuple[str, ...] = ()
    nvidia_smi_total_mib: int | None = None

    tensor_figures: str = "dense"

    @property
    def has_nvlink(self) -> bool:
        return self.nvlink_kind != "none" and self.nvlink_gbs > 0

    @property
    def interconnect(self) -> str:
        """A short label: 'NVLink 900 GB/s (NVSwitch)', 'NVLink bridge 112.5 GB/s (2 GPUs)', 'PCIe 4'."""
        if not self.has_nvlink:
            return f"PCIe {self.pcie_gen}"
        gbs = f"{self.nvlink_gbs:g} GB/s"
        if self.nvlink_kind == "nvswitch":
            return f"NVLink {gbs} (NVSwitch)"
        if self.nvlink_kind == "bridge-2gpu":
            return Deferred(N_("NVLink bridge {gbs} (2 GPUs)"), gbs=gbs)
        return f"NVLink {gbs} ({self.nvlink_kind})"

    @property
    def usable_bytes(self) -> int:
        """Memory one process can allocate on this card, in bytes (see USABLE_FRACTION)."""
        total: float
        if self.nvidia_smi_total_mib is not None:
            total = self.nvidia_smi_total_mib * MIB
        else:
            total = self.vram_gb * GIB
            if self.ecc and self.memory_type.upper().startswith("GDDR"):
                total *= GDDR_ECC_FRACTION
        return int(total * USABLE_FRACTION)

    @property
    def usable_gb(self) -> float:
        """usable_bytes in GB (10^9 bytes), the unit of the fit estimator."""
        return self.usable_bytes / 1e9

    @property
    def usable_gib(self) -> float:
        """usable_bytes in GiB, the unit shown."""
        return self.usable_bytes / GIB

    @property
    def usable_note(self) -> str:
        basis: str
        if self.nvidia_smi_total_mib is not None:
            basis = Deferred(N_("nvidia-smi reports {mib} MiB"), mib=self.nvidia_smi_total_mib)
        elif self.ecc and self.memory_type.upper().startswith("GDDR"):
            basis = Deferred(N_("{gib} GiB less 1/16 for ECC on {memory}"),
                             gib=f"{self.vram_gb:g}", memory=self.memory_type)
        else:
            basis = f"{self.vram_gb:g} GiB"
        return Deferred(N_("{name}: {basis}, {share} allocatable = {usable} GiB"), name=self.name,
                        basis=basis, share=f"{USABLE_FRACTION:.0%}",
                        usable=f"{self.usable_gib:.1f}")

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able figures (tensor figures dense)."""
        return self.model_dump(mode="json")


def _data_text(filename: str) -> str:
    return resources.files("gputui.catalog").joinpath("data", filename).read_text("utf-8")


def _load_toml(filename: str) -> dict[str, Any]:
    try:
        return tomllib.loads(_data_text(filename))
    except (OSError, tomllib.TOMLDecodeError) as exc:  # a broken install, not a user error
        raise CatalogError(_("catalog data {file} cannot be read: {error}").format(
            file=filename, error=exc)) from exc


@cache
def _specs() -> tuple[GpuSpec, ...]:
    raw = _load_toml("gpus.toml")
    figures = str(raw.get("tensor_figures", "dense"))
    specs = []
    for key, table in raw.items():
        if not isinstance(table, dict):
            continue  # top-level facts such as tensor_figures
        try:
            specs.append(GpuSpec(key=key, tensor_figures=figures, **table))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise CatalogError(_("gpus.toml [{key}] field {field}: {problem}").format(
                key=key, field=repr(field), problem=err["msg"])) from exc
    return tuple(specs)


def load_specs() -> dict[str, GpuSpec]:
    """Every card of the catalog by key (e.g. 'rtx_4090'), in file order. Parsed once."""
    return {s.key: s for s in _specs()}
