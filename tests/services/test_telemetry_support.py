"""Helpers shared by the telemetry, monitor and smi tests (no tests of its own).

Sandbox instances are real SSH endpoints on 127.0.0.1 whose `nvidia-smi` and `gpu-load` run as
real local processes, so the tests can look at them in /proc.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from gputui.config import Config
from gputui.models import Instance
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.telemetry import HintRules, TelemetryService
from gputui.store import SessionStore

FAST_LINKS = {"connect_timeout": 5.0, "backoff_initial": 0.05, "backoff_max": 0.2}
FAST_RULES = HintRules(imbalance_s=1.0, idle_memory_s=1.0, low_util_s=1.5, power_s=1.0,
                       bucket_s=0.2)


def make_services(home: Path) -> Services:
    store = SessionStore(home / "state.db")
    return Services(store, Config(), state_dir=home, sandbox_boot_seconds=0,
                    link_options=dict(FAST_LINKS))


def make_telemetry(services: Services, **kw) -> TelemetryService:
    kw.setdefault("interval", 0.5)
    kw.setdefault("process_interval", 0.5)
    kw.setdefault("retry_initial", 0.2)
    kw.setdefault("retry_max", 0.5)
    kw.setdefault("rules", FAST_RULES)
    return TelemetryService(services, services.store, **kw)


async def rent(services: Services, gpu: str = "RTX 4090", count: int = 2,
               name: str = "job") -> Instance:
    offer = await services.find_offer("sandbox", gpu)
    req = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=services.free_name(name))
    return await services.create("sandbox", offer, req)


async def wait_for(cond: Callable[[], object], timeout: float = 10.0, step: float = 0.05,
                   what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)


async def start_load(services: Services, inst: Instance, args: str = "--gpus 0 --mem 10G "
                     "--util 80 --seconds 60") -> int:
    out = await services.run(inst, f"gpu-load {args} > load.out 2>&1 & sleep 0.3; cat load.out")
    first = out.stdout.split()[0] if out.stdout.split() else ""
    assert first.isdigit(), out
    return int(first)


def instance_root(services: Services, inst: Instance) -> Path:
    return services.provider("sandbox").instance_root(inst.id)


def stream_pids(root: Path) -> dict[int, str]:
    """The `nvidia-smi ... -lms` processes serving this sandbox instance: {pid: args}."""
    found: dict[int, str] = {}
    wanted = f"GPUTUI_SANDBOX_ROOT={root.resolve()}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            if not any(b"nvidia_smi" in a for a in args) or b"-lms" not in args:
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in env:
            found[int(entry.name)] = " ".join(a.decode(errors="replace") for a in args)
    return found


def break_nvidia_smi(root: Path, message: str, code: int) -> Path:
    """Replace the instance's nvidia-smi with one that fails like a broken driver; returns the
    saved original (rename it back to repair)."""
    shim = root / "bin" / "nvidia-smi"
    saved = root / "bin" / "nvidia-smi.orig"
    if not saved.exists():
        os.replace(shim, saved)
    shim.write_text(f"#!/bin/sh\necho {shlex.quote(message)}\nexit {code}\n", encoding="utf-8")
    shim.chmod(0o755)
    return saved


def repair_nvidia_smi(root: Path) -> None:
    os.replace(root / "bin" / "nvidia-smi.orig", root / "bin" / "nvidia-smi")


DRIVER_MESSAGE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                  "driver. Make sure that the latest NVIDIA driver is installed and running.")
