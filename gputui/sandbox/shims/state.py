"""The on-disk format of one sandbox instance, shared by the shims, the SSH server and the
sandbox provider.

Stdlib only (json + dataclasses): the shims import this on every start, and
`nvidia-smi -lms` starts and reads it a lot.

Layout of an instance folder ``root`` (it is also the instance's cwd and HOME)::

    root/
      bin/                      shims, first on PATH (see SHIMS / install_shims)
        nvidia-smi gpu-load shutdown poweroff
      .sandbox/
        instance.json           the hardware: GPUs, driver, CUDA (written once)
        power.json              a scheduled or past power-off (absent: running)
        procs/<pid>.json        one file per live GPU process (gpu-load, later ollama)
        lock                    flock'd while checking free memory + registering

instance.json::

    {"format": 1, "instance_id": "...", "created_at": "2026-...+00:00",
     "driver_version": "570.124.06", "cuda_version": "12.8",
     "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...",
               "serial": "1652...", "pci_bus_id": "00000000:18:00.0", "vbios_version": "...",
               "memory_total_mib": 81559, "memory_reserved_mib": 900,
               "power_limit_w": 700.0, "tdp_w": 700.0, "idle_power_w": 63.0, ...}]}

power.json (one timestamp; a power-off time in the past means "off since then")::

    {"poweroff_at": "2026-...+00:00", "requested_at": "2026-...+00:00",
     "command": "shutdown -h +30"}

procs/<pid>.json::

    {"pid": 4242, "kind": "gpu-load", "marker": "gpu_load", "name": "python train.py",
     "started_at": 1767225600.5, "ends_at": null, "proc_start": 123456,
     "gpus": {"0": {"memory_mib": 20480, "util": 90.0}}}

``marker`` must occur in ``/proc/<pid>/cmdline`` and ``proc_start`` (field 22 of
``/proc/<pid>/stat``, when recorded) must match, or the record is stale (PID dead or reused)
and is removed by readers. Any long-lived shim can take part the same way (the Ollama
server: ``kind="ollama"``, its own marker, and ``register_process`` again whenever the
models it holds change, which rewrites the file atomically); nvidia-smi then lists it on
each GPU of ``gpus`` and enforce_power()/kill_processes() end it at power-off.

Times: power.json uses ISO-8601 UTC strings, procs/*.json unix seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

FORMAT_VERSION = 1
STATE_DIR = ".sandbox"
ROOT_ENV = "GPUTUI_SANDBOX_ROOT"  # set by the bin/ wrappers: which instance a shim belongs to
PACKAGE = __name__.rpartition(".")[0]  # gputui.sandbox.shims

# Shim command name -> module of this package that implements it (run as `python -m`).
# install_shims()/create_instance_dir() write one bin/ wrapper per entry, so adding a shim is:
# add a module here (with a main()), then add one entry, e.g. SHIMS["ollama"] = "ollama".
# Existing instances pick it up the next time install_shims(root) runs on them.
SHIMS: dict[str, str] = {
    "nvidia-smi": "nvidia_smi",
    "gpu-load": "gpu_load",
    "shutdown": "shutdown",
    "poweroff": "poweroff",
    "ollama": "ollama_shim",  # `ollama serve` runs ollama_server (the simulated Ollama API)
}
# Modules known to import nothing outside the stdlib: their wrappers run `python -S` (no
# site-packages, no .pth files), which starts noticeably faster. A shim that needs
# third-party packages simply stays out of this set.
SITE_FREE: set[str] = {"nvidia_smi", "gpu_load", "shutdown", "poweroff", "ollama_shim"}


class SandboxStateError(Exception):
    """The instance folder is missing, unreadable or from a newer format."""


# --------------------------------------------------------------------------- paths


def state_dir(root: Path) -> Path:
    return Path(root) / STATE_DIR


def instance_file(root: Path) -> Path:
    return state_dir(root) / "instance.json"


def power_file(root: Path) -> Path:
    return state_dir(root) / "power.json"


def procs_dir(root: Path) -> Path:
    return state_dir(root) / "procs"


def root_from_env() -> Path:
    """The instance a shim runs for: $GPUTUI_SANDBOX_ROOT (set by its wrapper), else cwd."""
    value = os.environ.get(ROOT_ENV)
    return Path(value) if value else Path.cwd()


def _write_json(path: Path, data: Any) -> None:
    """Atomic write: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat()


def _parse_iso(value: str) -> datetime:
    dt = datetime.fromisoformat(value)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _as_utc(now: datetime | float | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if isinstance(now, int | float):
        return datetime.fromtimestamp(now, UTC)
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)


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


def create_instance_dir(
    root: Path,
    *,
    instance_id: str,
    gpu_name: str,
    gpu_count: int,
    memory_total_mib: int,
    power_limit_w: float,
    tdp_w: float,
    driver_version: str = "570.124.06",
    cuda_version: str = "12.8",
    python: str = sys.executable,
    **overrides: Any,
) -> Path:
    """Create (or re-create the hardware description of) a sandbox instance folder.

    Writes ``root/.sandbox/instance.json`` and the ``root/bin`` shims, and returns ``root``.
    ``gpu_name`` is the name exactly as nvidia-smi prints it ("NVIDIA GeForce RTX 4090").
    ``overrides`` sets any other SimGpu field for every GPU (e.g. ``compute_cap="8.9"``,
    ``datacenter=False``, ``idle_power_w=20``); unknown names raise TypeError.
    """
    if gpu_count < 1:
        raise ValueError("gpu_count must be at least 1")
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    known = set(SimGpu.__dataclass_fields__)
    bad = set(overrides) - known
    if bad:
        raise TypeError(f"unknown GPU fields: {', '.join(sorted(bad))}")
    profile = _profile(gpu_name)
    vbios = profile.pop("vbios", "94.00.00.00.01")
    gpus = []
    for index in range(gpu_count):
        values: dict[str, Any] = dict(
            index=index,
            name=gpu_name,
            uuid=gpu_uuid(instance_id, index),
            serial="N/A",
            pci_bus_id=_bus_id(index, gpu_count),
            vbios_version=vbios,
            memory_total_mib=int(memory_total_mib),
            memory_reserved_mib=default_reserved_mib(int(memory_total_mib)),
            power_limit_w=float(power_limit_w),
            tdp_w=float(tdp_w),
            idle_power_w=round(max(8.0, float(tdp_w) * 0.09), 2),
            min_power_limit_w=round(float(power_limit_w) * 0.3 if power_limit_w > 100 else 10, 2),
            max_power_limit_w=float(power_limit_w),
        )
        values.update(profile)
        if values.get("datacenter", True):
            values["serial"] = "1652" + f"{_stable(f'{instance_id}:{index}:serial'):09d}"[-9:]
        else:
            values.setdefault("idle_temp_c", 38.0)
            values.setdefault("load_temp_c", 72.0)
        values.update(overrides)
        gpus.append(SimGpu(**values))
    spec = InstanceSpec(
        instance_id=instance_id,
        driver_version=driver_version,
        cuda_version=cuda_version,
        gpus=gpus,
        created_at=_iso(datetime.now(UTC)),
    )
    procs_dir(root).mkdir(parents=True, exist_ok=True)
    _write_json(instance_file(root), asdict(spec))
    install_shims(root, python=python)
    return root


def install_shims(root: Path, *, python: str = sys.executable) -> list[Path]:
    """(Re)write ``root/bin/<name>`` for every entry of SHIMS; returns the paths written.

    Each wrapper is a /bin/sh script that pins the instance root and the gputui source tree,
    then execs ``<python> [-S] -m gputui.sandbox.shims.<module> "$@"``.
    """
    root = Path(root).resolve()
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    # The folder holding the `gputui` package, so the shim runs this very code even when
    # gputui is not installed into `python`'s site-packages.
    source_root = Path(__file__).resolve().parents[3]
    written = []
    for command, module in SHIMS.items():
        path = bin_dir / command
        text = (
            "#!/bin/sh\n"
            f"# gputui sandbox shim `{command}` (generated by install_shims; do not edit)\n"
            f"{ROOT_ENV}={shlex.quote(str(root))}\n"
            f"export {ROOT_ENV}\n"
            f"PYTHONPATH={shlex.quote(str(source_root))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            "export PYTHONPATH\n"
            f"exec {shlex.quote(str(python))} {'-S ' if module in SITE_FREE else ''}"
            f'-m {PACKAGE}.{module} "$@"\n'
        )
        tmp = path.with_name(f".{command}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
        os.replace(tmp, path)
        written.append(path)
    return written


def load_instance(root: Path) -> InstanceSpec:
    path = instance_file(root)
    try:
        data = _read_json(path)
    except FileNotFoundError:
        raise SandboxStateError(f"not a sandbox instance (no {path})") from None
    except (OSError, ValueError) as exc:
        raise SandboxStateError(f"cannot read {path}: {exc}") from None
    try:
        if int(data.get("format", 1)) > FORMAT_VERSION:
            raise SandboxStateError(f"{path} is from a newer gputui (format {data['format']})")
        known = set(SimGpu.__dataclass_fields__)
        gpus = [SimGpu(**{k: v for k, v in g.items() if k in known}) for g in data["gpus"]]
        return InstanceSpec(
            instance_id=data["instance_id"],
            driver_version=data["driver_version"],
            cuda_version=data["cuda_version"],
            gpus=gpus,
            created_at=data.get("created_at", ""),
            format=int(data.get("format", 1)),
        )
    except SandboxStateError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SandboxStateError(f"{path} is malformed: {exc!r}") from None


# --------------------------------------------------------------------------- power


@dataclass(frozen=True)
class PowerState:
    """``status``: "running" (at is None), "scheduled" (at = the power-off time, in the
    future) or "off" (at = when it went off)."""

    status: Literal["running", "scheduled", "off"]
    at: datetime | None = None
    command: str | None = None  # what asked for it, e.g. "shutdown -h +30"
    requested_at: datetime | None = None

    @property
    def is_off(self) -> bool:
        return self.status == "off"

    @property
    def scheduled_at(self) -> datetime | None:
        return self.at if self.status == "scheduled" else None

    @property
    def off_since(self) -> datetime | None:
        return self.at if self.status == "off" else None


def power_state(root: Path, now: datetime | float | None = None) -> PowerState:
    """Worked out from timestamps alone: a power-off time that has passed is "off since"
    that time, whether or not anything was running then."""
    try:
        data = _read_json(power_file(root))
    except FileNotFoundError:
        return PowerState("running")
    except (OSError, ValueError) as exc:
        raise SandboxStateError(f"cannot read {power_file(root)}: {exc}") from None
    at_text = data.get("poweroff_at") if isinstance(data, dict) else None
    if not at_text:
        return PowerState("running")
    try:
        at = _parse_iso(at_text)
        requested = _parse_iso(data["requested_at"]) if data.get("requested_at") else None
    except (TypeError, ValueError) as exc:
        raise SandboxStateError(f"{power_file(root)} is malformed: {exc}") from None
    status: Literal["scheduled", "off"] = "off" if at <= _as_utc(now) else "scheduled"
    return PowerState(status, at, data.get("command"), requested)


def schedule_poweroff(
    root: Path, at: datetime, *, command: str | None = None, now: datetime | None = None
) -> PowerState:
    """Schedule (or move) the power-off to ``at``; ``at`` <= now powers off at once (the
    caller, or the next enforce_power(), then kills the instance's GPU processes).
    Refused (SandboxStateError) when the instance is already off."""
    current = power_state(root, now)
    if current.is_off:
        raise SandboxStateError(f"instance is already powered off (since {current.at})")
    requested = _as_utc(now)
    _write_json(
        power_file(root),
        {"poweroff_at": _iso(_as_utc(at)), "requested_at": _iso(requested), "command": command},
    )
    return power_state(root, now)


def cancel_poweroff(root: Path, now: datetime | None = None) -> bool:
    """Cancel a pending power-off. Returns False when none was pending (also when the
    instance is already off: that cannot be cancelled, use power_on)."""
    current = power_state(root, now)
    if current.status != "scheduled":
        return False
    with contextlib.suppress(FileNotFoundError):
        power_file(root).unlink()
    return True


def power_on(root: Path) -> None:
    """Start a stopped instance again (the provider's start): forget any power-off."""
    with contextlib.suppress(FileNotFoundError):
        power_file(root).unlink()


def enforce_power(root: Path, now: datetime | None = None, *, grace_s: float = 2.0) -> PowerState:
    """Apply the power state: when the instance is off, kill its registered GPU processes
    (SIGTERM, then SIGKILL after ``grace_s``) and drop their records. Cheap when running.
    The SSH server calls this on each connection/command; the shims call it on start."""
    state = power_state(root, now)
    if state.is_off:
        kill_processes(root, grace_s=grace_s)
    return state


# --------------------------------------------------------------------------- processes


@dataclass
class GpuUse:
    memory_mib: int
    util: float  # target utilisation, %


@dataclass
class ProcRecord:
    pid: int
    name: str  # process_name as nvidia-smi shows it
    kind: str  # "gpu-load", "ollama", ...
    started_at: float  # unix time
    gpus: dict[int, GpuUse] = field(default_factory=dict)
    marker: str = "gpu_load"  # must occur in /proc/<pid>/cmdline
    ends_at: float | None = None
    proc_start: int | None = None  # /proc/<pid>/stat starttime, guards against PID reuse

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = {str(k): asdict(v) for k, v in self.gpus.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcRecord:
        return cls(
            pid=int(data["pid"]),
            name=str(data.get("name") or "python"),
            kind=str(data.get("kind") or "gpu-load"),
            started_at=float(data["started_at"]),
            gpus={
                int(k): GpuUse(int(v["memory_mib"]), float(v.get("util", 0)))
                for k, v in data.get("gpus", {}).items()
            },
            marker=str(data.get("marker") or ""),
            ends_at=None if data.get("ends_at") is None else float(data["ends_at"]),
            proc_start=None if data.get("proc_start") is None else int(data["proc_start"]),
        )


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks); None where unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rpartition(")")[2].split()[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int, marker: str = "", proc_start: int | None = None) -> bool:
    """A live (non-zombie) process whose cmdline contains ``marker`` and, when given, whose
    start time is ``proc_start``: survives PID reuse after a SIGKILL."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    proc = Path(f"/proc/{pid}")
    if not Path("/proc/self").exists():
        return True  # no procfs (macOS): the signal probe is all we have
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X", "x"):
        return False
    if marker and marker.encode() not in cmdline:
        return False
    if proc_start is not None:
        try:
            if int(fields[19]) != proc_start:
                return False
        except (IndexError, ValueError):
            return False
    return True


def register_process(root: Path, record: ProcRecord) -> Path:
    path = procs_dir(root) / f"{record.pid}.json"
    _write_json(path, record.to_json())
    return path


def unregister_process(root: Path, pid: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        (procs_dir(root) / f"{pid}.json").unlink()


def live_processes(root: Path, *, clean: bool = True) -> list[ProcRecord]:
    """The registered GPU processes that are really alive, oldest first. Stale records
    (dead PID, reused PID, unreadable file) are skipped and, with ``clean``, removed."""
    out: list[ProcRecord] = []
    try:
        entries = list(os.scandir(procs_dir(root)))
    except FileNotFoundError:
        return out
    for entry in entries:
        if not entry.name.endswith(".json") or entry.name.startswith("."):
            continue
        try:
            record = ProcRecord.from_json(_read_json(Path(entry.path)))
        except FileNotFoundError:
            continue  # went away while we looked
        except (OSError, ValueError, KeyError, TypeError):
            record = None
        if record is not None and pid_alive(record.pid, record.marker, record.proc_start):
            out.append(record)
        elif clean:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    out.sort(key=lambda r: (r.started_at, r.pid))
    return out


def kill_processes(root: Path, *, grace_s: float = 2.0) -> list[int]:
    """SIGTERM every live registered process, SIGKILL what is left after ``grace_s``,
    remove all records. Returns the PIDs that were signalled."""
    procs = live_processes(root)
    for record in procs:
        with contextlib.suppress(OSError):
            os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    pending = list(procs)
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = [r for r in pending if pid_alive(r.pid, r.marker, r.proc_start)]
    for record in pending:
        with contextlib.suppress(OSError):
            os.kill(record.pid, signal.SIGKILL)
    for record in procs:
        unregister_process(root, record.pid)
    return [r.pid for r in procs]


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Exclusive lock on the instance (check free memory + register, atomically)."""
    path = state_dir(root) / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def memory_in_use(procs: list[ProcRecord], index: int) -> int:
    return sum(p.gpus[index].memory_mib for p in procs if index in p.gpus)


def memory_free_mib(gpu: SimGpu, procs: list[ProcRecord]) -> int:
    return max(0, gpu.memory_total_mib - gpu.memory_reserved_mib - memory_in_use(procs, gpu.index))
