"""Host vitals on a real sandbox instance over real SSH: one long-lived reader per instance, the
rented disk (not the host's), and the data-loading hint when CPU-bound processes run beside an
idle GPU."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from gputui.models import HostSample
from gputui.services.hub import Services
from gputui.services.telemetry import HintRules
from tests.services.test_telemetry_support import (
    instance_root,
    make_services,
    make_telemetry,
    rent,
    wait_for,
)


@pytest.fixture
async def services(gputui_home: Path):
    svc = make_services(gputui_home)
    yield svc
    await svc.close()


def reader_pids(root: Path) -> set[int]:
    """The host-vitals readers (`sh -c ... gputui-vitals`) serving this sandbox instance."""
    found = set()
    wanted = f"GPUTUI_SANDBOX_ROOT={root.resolve()}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            if b"gputui-vitals" not in args or args[0] != b"sh":
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def host(services: Services, iid: str) -> HostSample | None:
    return services.store.telemetry(iid).host


async def test_cpu_bound_work_beside_an_idle_gpu_gives_the_data_loading_hint(
        services: Services):
    # saturated from 50 %: the burners get the cores this machine spares them (CI runs beside)
    rules = HintRules(bucket_s=0.2, input_s=2.0, input_cpu_pct=50.0)
    telemetry = make_telemetry(services, rules=rules)
    burners: list[int] = []
    try:
        inst = await rent(services, count=1)
        root = instance_root(services, inst)
        telemetry.start(inst)
        first = await wait_for(lambda: (s := host(services, inst.id)) is not None
                               and s.cpu_pct is not None and s, timeout=20,
                               what="host vitals with a CPU reading")
        assert isinstance(first, HostSample)
        assert first.cpu_cores and first.mem_total_mib and first.load1 is not None
        # the rented disk, as the instance's own df reports it: not the host's
        disk = next(d for d in first.disks if d.mount == "/")
        assert disk.size_kib == round(inst.disk_gb * 1e9 / 1024)
        host_fs = os.statvfs("/")
        assert disk.size_kib != host_fs.f_blocks * host_fs.f_frsize // 1024
        # one long-lived reader, not a process per tick
        pids = reader_pids(root)
        assert len(pids) == 1
        await asyncio.sleep(1.5)
        assert reader_pids(root) == pids
        # the instance's own CPU, not this machine's (busy or not): no hint while it idles
        assert first.cpu_limited and (first.cpu_pct or 0) < 30
        assert "input-bound" not in {h.code for h in services.store.telemetry(inst.id).hints}
        # CPU-bound work on the instance, one busy loop per core it has; the GPU stays idle
        cores = int(first.cpu_cores or 1)
        out = await services.run(
            inst, " ; ".join(["yes > /dev/null 2>&1 & echo $!"] * cores), timeout=20)
        burners = [int(p) for p in out.stdout.split()]
        assert len(burners) == cores
        hint = await wait_for(
            lambda: next((h for h in services.store.telemetry(inst.id).hints
                          if h.code == "input-bound"), None),
            timeout=30, what="the data-loading hint")
        text = str(hint.text)
        assert "data loading is the bottleneck" in text and "DataLoader workers" in text
        latest = services.store.telemetry(inst.id).latest()
        assert latest and all((s.utilization_gpu or 0) < 30 for s in latest)
        assert (host(services, inst.id).cpu_pct or 0) >= 50
        # still one reader
        assert reader_pids(root) == pids
    finally:
        for pid in burners:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await telemetry.close()
