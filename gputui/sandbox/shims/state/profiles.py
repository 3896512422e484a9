"""Real GPU models the sandbox offers (values from real captures), bus ids and UUIDs."""

from __future__ import annotations

import zlib
from typing import Any

_PROFILES: list[tuple[str, dict[str, Any]]] = [
    (
        "H200",
        dict(
            architecture="Hopper",
            compute_cap="9.0",
            mig_capable=True,
            pcie_gen_max=5,
            pci_device_id="0x233510DE",
            pci_sub_device_id="0x18A610DE",
            max_sm_clock_mhz=1980,
            idle_sm_clock_mhz=345,
            max_mem_clock_mhz=3201,
            idle_mem_clock_mhz=3201,
            max_video_clock_mhz=1545,
            idle_video_clock_mhz=765,
            vbios="96.00.99.00.01",
        ),
    ),
    (
        "H100",
        dict(
            architecture="Hopper",
            compute_cap="9.0",
            mig_capable=True,
            pcie_gen_max=5,
            pci_device_id="0x233010DE",
            pci_sub_device_id="0x16C110DE",
            max_sm_clock_mhz=1980,
            idle_sm_clock_mhz=345,
            max_mem_clock_mhz=2619,
            idle_mem_clock_mhz=2619,
            max_video_clock_mhz=1545,
            idle_video_clock_mhz=765,
            vbios="96.00.A5.00.01",
        ),
    ),
    (
        "B200",
        dict(
            architecture="Blackwell",
            compute_cap="10.0",
            mig_capable=True,
            pcie_gen_max=5,
            pci_device_id="0x290110DE",
            pci_sub_device_id="0x199910DE",
            max_sm_clock_mhz=1965,
            idle_sm_clock_mhz=345,
            max_mem_clock_mhz=3996,
            idle_mem_clock_mhz=3996,
            max_video_clock_mhz=1770,
            idle_video_clock_mhz=765,
            vbios="97.00.4B.00.01",
        ),
    ),
    (
        "A100",
        dict(
            architecture="Ampere",
            compute_cap="8.0",
            mig_capable=True,
            pci_device_id="0x20B210DE",
            pci_sub_device_id="0x147F10DE",
            max_sm_clock_mhz=1410,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=1593,
            idle_mem_clock_mhz=1593,
            vbios="92.00.45.00.03",
        ),
    ),
    (
        "A800",
        dict(
            architecture="Ampere",
            compute_cap="8.0",
            mig_capable=True,
            pci_device_id="0x20F310DE",
            max_sm_clock_mhz=1410,
            max_mem_clock_mhz=1593,
            idle_mem_clock_mhz=1593,
            vbios="92.00.81.00.01",
        ),
    ),
    (
        "H20",
        dict(
            architecture="Hopper",
            compute_cap="9.0",
            mig_capable=True,
            pcie_gen_max=5,
            pci_device_id="0x232910DE",
            max_sm_clock_mhz=1980,
            idle_sm_clock_mhz=345,
            max_mem_clock_mhz=2619,
            idle_mem_clock_mhz=2619,
            vbios="96.00.D0.00.01",
        ),
    ),
    (
        "V100",
        dict(
            architecture="Volta",
            compute_cap="7.0",
            pcie_gen_max=3,
            pci_device_id="0x1DB610DE",
            max_sm_clock_mhz=1530,
            idle_sm_clock_mhz=135,
            max_mem_clock_mhz=877,
            idle_mem_clock_mhz=877,
            max_video_clock_mhz=1372,
            idle_video_clock_mhz=555,
            vbios="88.00.98.00.01",
        ),
    ),
    (
        "L40S",
        dict(
            architecture="Ada Lovelace",
            compute_cap="8.9",
            hbm=False,
            pci_device_id="0x26B910DE",
            pci_sub_device_id="0x185110DE",
            max_sm_clock_mhz=2520,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=9001,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=1965,
            idle_video_clock_mhz=1185,
            vbios="95.02.66.00.02",
        ),
    ),
    (
        "L4",
        dict(
            architecture="Ada Lovelace",
            compute_cap="8.9",
            hbm=False,
            pci_device_id="0x27B810DE",
            max_sm_clock_mhz=2040,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=6251,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=1770,
            vbios="95.04.29.00.06",
        ),
    ),
    (
        "A10",
        dict(
            architecture="Ampere",
            compute_cap="8.6",
            hbm=False,
            pci_device_id="0x223610DE",
            max_sm_clock_mhz=1695,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=6251,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=1470,
            vbios="94.02.5C.00.02",
        ),
    ),
    (
        "T4",
        dict(
            architecture="Turing",
            compute_cap="7.5",
            hbm=False,
            pcie_gen_max=3,
            pci_device_id="0x1EB810DE",
            max_sm_clock_mhz=1590,
            idle_sm_clock_mhz=300,
            max_mem_clock_mhz=5001,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=1470,
            vbios="90.04.96.00.02",
        ),
    ),
    (
        "RTX 5090",
        dict(
            architecture="Blackwell",
            compute_cap="12.0",
            datacenter=False,
            hbm=False,
            pcie_gen_max=5,
            pci_device_id="0x2B8510DE",
            max_sm_clock_mhz=3090,
            idle_sm_clock_mhz=180,
            max_mem_clock_mhz=14001,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=3090,
            idle_video_clock_mhz=600,
            vbios="98.02.2E.00.A6",
        ),
    ),
    (
        "RTX 4090",
        dict(
            architecture="Ada Lovelace",
            compute_cap="8.9",
            datacenter=False,
            hbm=False,
            pci_device_id="0x268410DE",
            pci_sub_device_id="0x889A1043",
            max_sm_clock_mhz=3120,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=10501,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=2415,
            idle_video_clock_mhz=1185,
            vbios="95.02.18.80.87",
        ),
    ),
    (
        "RTX 3090",
        dict(
            architecture="Ampere",
            compute_cap="8.6",
            datacenter=False,
            hbm=False,
            pci_device_id="0x220410DE",
            max_sm_clock_mhz=2100,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=9751,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=1950,
            idle_video_clock_mhz=555,
            vbios="94.02.42.00.A9",
        ),
    ),
    (
        "RTX 6000 Ada",
        dict(
            architecture="Ada Lovelace",
            compute_cap="8.9",
            datacenter=False,
            hbm=False,
            pci_device_id="0x26B110DE",
            max_sm_clock_mhz=3105,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=10001,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=2415,
            idle_video_clock_mhz=1185,
            vbios="95.02.5D.00.01",
        ),
    ),
    (
        "RTX A6000",
        dict(
            architecture="Ampere",
            compute_cap="8.6",
            datacenter=False,
            hbm=False,
            pci_device_id="0x223010DE",
            max_sm_clock_mhz=2100,
            idle_sm_clock_mhz=210,
            max_mem_clock_mhz=8001,
            idle_mem_clock_mhz=405,
            max_video_clock_mhz=1950,
            idle_video_clock_mhz=555,
            vbios="94.02.5C.00.01",
        ),
    ),
]

# PCI bus numbers of an 8-GPU HGX board; single cards sit on bus 01.
_HGX_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]


def _profile(name: str) -> dict[str, Any]:
    for needle, values in _PROFILES:
        if needle.lower() in name.lower():
            return dict(values)
    consumer = "geforce" in name.lower() or "rtx" in name.lower()
    return {"datacenter": not consumer, "hbm": not consumer}


def _bus_id(index: int, count: int) -> str:
    if count == 1:
        bus = 0x01
    elif index < len(_HGX_BUSES):
        bus = _HGX_BUSES[index]
    else:
        bus = 0xE0 + index - len(_HGX_BUSES)
    return f"00000000:{bus:02X}:00.0"


def _stable(seed: str) -> int:
    return zlib.crc32(seed.encode("utf-8"))


def gpu_uuid(instance_id: str, index: int) -> str:
    """Deterministic "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for (instance, index)."""
    import uuid  # only needed at creation; keeps shim start-up lean

    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gputui-sandbox:{instance_id}:{index}"))


def default_reserved_mib(memory_total_mib: int) -> int:
    """What the driver/firmware keeps for itself (memory.reserved): ~1.2 %, 250..900 MiB."""
    return int(max(250, min(900, round(memory_total_mib * 0.012))))
