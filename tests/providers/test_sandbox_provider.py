"""The sandbox platform end to end: real SSH, real processes, power-offs worked out from time,
and the three auto-release layers."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.models import InstanceStatus, Lease, LeaseState, LinkState, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import ServiceError, Services
from gputui.services.leases import LeaseService
from gputui.store import Notice, SessionStore


async def rent(svc: Services, gpu: str = "RTX 4090", count: int = 2, lease: Lease | None = None,
               name: str = "job"):
    offer = await svc.find_offer("sandbox", gpu)
    req = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=svc.free_name(name))
    return await svc.create("sandbox", offer, req, lease=lease)


async def test_create_gives_a_running_instance_with_real_ssh(services: Services):
    steps: list[str] = []
    offer = await services.find_offer("sandbox", "RTX 4090")
    inst = await services.create("sandbox", offer, CreateRequest(
        offer_id=offer.offer_id, gpu_count=2, name="job"), progress=steps.append)
    assert steps == ["requested", "booting", "running"]
    assert inst.status == InstanceStatus.RUNNING and inst.ssh and inst.ssh.host == "127.0.0.1"
    assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING
    listed = await services.run(inst, "nvidia-smi -L")
    assert listed.exit_status == 0
    assert listed.stdout.count("NVIDIA GeForce RTX 4090") == 2
    assert services.store.link(inst.id)[0] == LinkState.CONNECTED
    pwd = await services.run(inst, "pwd")
    assert pwd.stdout.strip().endswith(inst.id)


async def test_load_process_is_real_and_killable(services: Services):
    inst = await rent(services)
    start = await services.run(inst, "gpu-load --gpus 1 --mem 6G --util 90 --seconds 120 "
                                     "> load.out 2>&1 & sleep 1; cat load.out")
    pid = int(start.stdout.split()[0]) if start.stdout.split()[0].isdigit() else None
    apps = await services.run(inst, "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory "
                                    "--format=csv,noheader,nounits")
    rows = [r.split(", ") for r in apps.stdout.strip().splitlines()]
    assert len(rows) == 1 and rows[0][2] == "6144"
    real_pid = int(rows[0][0])
    if pid is not None:
        assert pid == real_pid
    util = await services.run(inst, "nvidia-smi -i 1 --query-gpu=utilization.gpu,memory.used "
                                    "--format=csv,noheader,nounits")
    used_util, used_mem = (float(x) for x in util.stdout.split(","))
    assert used_util >= 80 and used_mem >= 6144
    await services.run(inst, f"kill {real_pid}")
    await asyncio.sleep(0.3)
    apps = await services.run(inst, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")
    assert apps.stdout.strip() == ""


async def test_nvidia_smi_stream_arrives_line_by_line(services: Services):
    inst = await rent(services, count=1)
    link = await services.link(inst)
    lines: list[str] = []
    async with link.stream_lines(
        "nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms 200"
    ) as stream:
        async for line in stream:
            lines.append(line)
            if len(lines) == 4:
                break
    assert all(line.startswith("0, ") for line in lines)


async def test_power_off_in_the_past_ends_compute_billing_at_that_time(services: Services):
    from gputui.sandbox.shims.state import schedule_poweroff

    inst = await rent(services)
    provider = services.provider("sandbox")
    off_at = utcnow() + timedelta(seconds=1)
    schedule_poweroff(provider.instance_root(inst.id), off_at, command="shutdown -h +0")
    await asyncio.sleep(1.2)
    # nothing watched when it went off; the next look works it out from the timestamps
    fresh = await services.refresh(inst)
    assert fresh.status == InstanceStatus.STOPPED
    assert fresh.stopped_at == off_at
    later = utcnow() + timedelta(hours=1)
    running = fresh.running_seconds(later)
    assert running == pytest.approx((off_at - inst.running_since).total_seconds(), abs=0.01)
    # the platform's own books agree with the console's meter, to the cent
    rec = provider.read_record(inst.id)
    assert rec.billed(later) == fresh.accrued(later)
    # a powered-off instance refuses new sessions
    with pytest.raises(ServiceError):
        await services.run(fresh, "true", timeout=5)


async def test_release_writes_one_ledger_entry_that_matches_the_platform(services: Services):
    inst = await rent(services)
    await asyncio.sleep(0.2)
    entry = await services.release(inst, "manual")
    assert entry is not None and entry.end_reason == "manual"
    again = await services.release(services.store.get_instance_sync(inst.id), "manual")
    assert again is None
    assert len(services.store.ledger_sync()) == 1
    rec = services.provider("sandbox").read_record(inst.id)
    assert rec.terminated_at is not None
    assert rec.billed() == entry.total
    assert not services.provider("sandbox").instance_root(inst.id).exists()


async def test_lease_arms_the_instance_and_the_platform(services: Services):
    from gputui.sandbox.shims.state import power_state

    deadline = utcnow() + timedelta(minutes=30)
    inst = await rent(services, lease=Lease(instance_id="x", release_at=deadline,
                                            idle_util_pct=5, idle_minutes=20))
    lease = await LeaseService(services).arm(inst)
    assert lease.on_instance_armed and lease.provider_armed
    provider = services.provider("sandbox")
    power = power_state(provider.instance_root(inst.id))
    assert power.status == "scheduled"
    assert timedelta(0) <= power.at - deadline <= timedelta(minutes=1)
    assert provider.scheduled_release(inst.id) == deadline
    pid = await services.run(inst, "cat .gputui-idle-watchdog.pid && kill -0 $(cat .gputui-idle-watchdog.pid) && echo alive")
    assert "alive" in pid.stdout
    # extending moves every layer
    lease = await LeaseService(services).extend(inst, by=timedelta(hours=1))
    assert lease.release_at == deadline + timedelta(hours=1)
    assert power_state(provider.instance_root(inst.id)).at >= lease.release_at
    assert provider.scheduled_release(inst.id) == lease.release_at


async def test_deadline_releases_with_warnings_first(services: Services):
    notices: list[Notice] = []
    services.store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    deadline = utcnow() + timedelta(minutes=30)
    inst = await rent(services, lease=Lease(instance_id="x", release_at=deadline))
    leases = LeaseService(services)
    await leases.tick(deadline - timedelta(minutes=9))
    await leases.tick(deadline - timedelta(minutes=8))
    assert [n.text for n in notices if n.bell] == [
        "job will be released in 9 min — on Home, e extends 1 h, E 30 min"]
    await leases.tick(deadline - timedelta(seconds=30))
    assert sum(1 for n in notices if "in 1 min" in n.text) == 1
    result = await leases.tick(deadline + timedelta(seconds=1))
    assert result.released == ["job"]
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "timer"
    assert services.store.get_lease_sync(inst.id).state == LeaseState.FIRED
    assert [e.end_reason for e in services.store.ledger_sync()] == ["timer"]


async def test_platform_terminates_at_its_scheduled_time_even_unwatched(services: Services):
    inst = await rent(services)
    provider = services.provider("sandbox")
    at = utcnow() + timedelta(seconds=1)
    await provider.schedule_release(inst, at)
    await asyncio.sleep(1.1)
    result = await LeaseService(services).reap()
    assert result.released == [] and result.errors == []
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.ended_at == at
    [entry] = services.store.ledger_sync()
    assert entry.end_reason == "timer"
    assert provider.read_record(inst.id).billed() == entry.total


async def test_concurrent_reaps_release_once(services: Services, gputui_home: Path):
    deadline = utcnow() + timedelta(minutes=5)
    await rent(services, lease=Lease(instance_id="x", release_at=deadline))
    other = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                     sandbox_boot_seconds=0)
    try:
        later = deadline + timedelta(seconds=5)
        a, b = await asyncio.gather(LeaseService(services).tick(later),
                                    LeaseService(other).tick(later))
    finally:
        await other.close()
    assert len(services.store.ledger_sync()) == 1
    assert len(a.released) + len(b.released) >= 1


async def test_unknown_gpu_and_ambiguous_names_are_refused(services: Services):
    with pytest.raises(ServiceError, match="ambiguous"):
        await services.find_offer("sandbox", "A100")
    with pytest.raises(ServiceError):
        await services.find_offer("sandbox", "RTX 9999")
    offer = await services.find_offer("sandbox", "h100 sxm")
    assert offer.gpu.startswith("H100") and offer.billing.granularity.value == "minute"


async def test_idle_release_fires_when_idle_and_not_under_load(services: Services):
    leases = LeaseService(services, idle_interval_s=1)
    busy = await rent(services, count=1, lease=Lease(instance_id="x", idle_util_pct=10,
                                                      idle_minutes=0.05))
    await services.run(busy, "nohup gpu-load --gpus 0 --mem 1G --util 80 --seconds 60 "
                             ">/dev/null 2>&1 &")
    idle = await rent(services, count=1, lease=Lease(instance_id="y", idle_util_pct=10,
                                                      idle_minutes=0.05), name="idle")
    for inst in (busy, idle):
        assert (await leases.arm(inst)).on_instance_armed is False  # no timer: layer 1 is idle-only
    await asyncio.sleep(5.5)  # 3 idle checks of 1 s, plus slack
    await leases.reap()
    assert services.store.get_instance_sync(idle.id).end_reason == "idle"
    assert services.store.get_instance_sync(busy.id).status == InstanceStatus.RUNNING


async def test_release_interrupted_by_a_crash_is_finished_at_next_start(services: Services):
    inst = await rent(services)
    provider = services.provider("sandbox")
    # the console marked it releasing and asked the provider, then died before recording
    inst = await services.store.update_instance(inst.id, lambda i: i.model_copy(update={
        "status": InstanceStatus.RELEASING, "end_reason": "timer"}))
    await provider.release(inst)
    result = await LeaseService(services).reap()
    assert result.errors == []
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "timer"
    [entry] = services.store.ledger_sync()
    assert entry.total == provider.read_record(inst.id).billed()


async def test_console_idle_check_releases_from_live_telemetry(services: Services):
    """The idle layer that also covers providers where a power-off does not stop billing."""
    from gputui.models import GpuSample

    lease_rule = {"idle_util_pct": 5.0, "idle_minutes": 10}
    idle = await rent(services, count=2, lease=Lease(instance_id="x", **lease_rule))
    busy = await rent(services, count=2, lease=Lease(instance_id="y", **lease_rule), name="busy")
    leases = LeaseService(services)
    start = utcnow()
    for minute in range(0, 12):
        services.store.add_samples(idle.id, [GpuSample(index=0, utilization_gpu=1),
                                             GpuSample(index=1, utilization_gpu=3)])
        services.store.add_samples(busy.id, [GpuSample(index=0, utilization_gpu=0),
                                             GpuSample(index=1, utilization_gpu=97 if minute == 6 else 0)])
        result = await leases.tick(start + timedelta(minutes=minute))
        if minute < 10:
            assert result.released == []
    assert services.store.get_instance_sync(idle.id).end_reason == "idle"
    assert services.store.get_instance_sync(busy.id).status == InstanceStatus.RUNNING


async def test_stop_keeps_the_disk_and_bills_storage_only_then_start_runs_it_again(
        services: Services):
    inst = await rent(services, count=1)
    await services.run(inst, "echo kept > notes.txt")
    provider = services.provider("sandbox")
    assert provider.capabilities.stop_start
    stopped = await provider.stop(inst)
    assert stopped.status == InstanceStatus.STOPPED and stopped.running_since is None
    assert "stopped at" in (stopped.status_detail or "")
    later = utcnow() + timedelta(hours=10)
    rec = provider.read_record(inst.id)
    # compute billing ended at the stop; only storage goes on
    assert stopped.billed_running_seconds == pytest.approx(rec.running_seconds(later))
    assert rec.billed(later) - rec.billed(utcnow()) > 0  # the disk still bills
    assert provider.instance_root(inst.id).joinpath("notes.txt").exists()
    with pytest.raises(ServiceError):
        await services.run(stopped, "true", timeout=5)
    started = await provider.start(stopped)
    assert started.status == InstanceStatus.RUNNING and started.running_since is not None
    await services.store.update_instance(inst.id, lambda _i: started)
    out = await services.run(started, "cat notes.txt")
    assert out.stdout.strip() == "kept"
    assert len(provider.read_record(inst.id).periods) == 2


async def test_providers_without_stop_say_so(services: Services):
    from gputui.providers.base import ProviderError

    inst = await rent(services, count=1)
    ssh = services.provider("ssh")
    assert not ssh.capabilities.stop_start
    with pytest.raises(ProviderError, match="cannot stop and start"):
        await ssh.stop(inst)
    with pytest.raises(ProviderError, match="cannot stop and start"):
        await ssh.start(inst)
