"""The simulated hardware of an instance: its GPUs and the instance spec."""

from __future__ import annotations

from dataclasses import dataclass

from .paths import (
    FORMAT_VERSION,
)

# --------------------------------------------------------------------------- hardware


@dataclass
class SimGpu:
    """One simulated GPU: the static facts nvidia-smi reports."""

    index: int
    name: str  # as nvidia-smi prints it: "NVIDIA H100 80GB HBM3"
    uuid: str
    serial: str  # "[N/A]"-style cards store "N/A"
    pci_bus_id: str  # "00000000:18:00.0"
    vbios_version: str
    memory_total_mib: int
    memory_reserved_mib: int
    power_limit_w: float
    tdp_w: float  # draw at 100 % utilisation (capped at power_limit_w)
    idle_power_w: float
    min_power_limit_w: float
    max_power_limit_w: float
    brand: str = "NVIDIA"
    architecture: str = "Ampere"
    compute_cap: str = "8.0"
    datacenter: bool = True  # no fan reading, ECC on, serial number, persistence on
    hbm: bool = True  # reports a memory temperature
    mig_capable: bool = False
    pcie_gen_max: int = 4
    pcie_width_max: int = 16
    pci_device_id: str = "0x20B510DE"
    pci_sub_device_id: str = "0x153310DE"
    max_sm_clock_mhz: int = 1410
    idle_sm_clock_mhz: int = 210
    max_mem_clock_mhz: int = 1593
    idle_mem_clock_mhz: int = 1593
    max_video_clock_mhz: int = 1290
    idle_video_clock_mhz: int = 585
    idle_temp_c: float = 32.0
    load_temp_c: float = 68.0
    slowdown_temp_c: int = 90
    shutdown_temp_c: int = 92
    max_operating_temp_c: int = 85

    @property
    def pci_bus(self) -> int:
        return int(self.pci_bus_id.split(":")[1], 16)

    @property
    def pci_device(self) -> int:
        return int(self.pci_bus_id.split(":")[2].split(".")[0], 16)


@dataclass
class InstanceSpec:
    instance_id: str
    driver_version: str
    cuda_version: str
    gpus: list[SimGpu]
    created_at: str = ""
    format: int = FORMAT_VERSION

    def gpu(self, index: int) -> SimGpu | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return None


# Rough per-model facts, matched by substring of the nvidia-smi name (first match wins).
# Values not listed fall back to SimGpu's defaults. Order matters: "A100" before "A10".
