"""The telemetry service against real sandbox instances over real SSH: one persistent
nvidia-smi stream per instance into the store, processes, kill, reconnects, interval changes,
stale data and diagnoses."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from gputui.models import InstanceStatus, LinkState
from gputui.services.hub import Services
from gputui.services.telemetry import LOCAL_ID, TelemetryService
from gputui.store import TelemetryChanged
from tests.services.test_telemetry_support import (
    DRIVER_MESSAGE,
    break_nvidia_smi,
    instance_root,
    make_services,
    make_telemetry,
    rent,
    repair_nvidia_smi,
    start_load,
    stream_pids,
    wait_for,
)


@pytest.fixture
async def services(gputui_home: Path):
    svc = make_services(gputui_home)
    yield svc
    await svc.close()


@pytest.fixture
async def telemetry(services: Services):
    tel = make_telemetry(services)
    yield tel
    await tel.close()


def samples_of(services: Services, iid: str, index: int) -> int:
    buf = services.store.telemetry(iid).history.get(index)
    return len(buf) if buf else 0


async def test_one_persistent_stream_fills_the_store(services: Services,
                                                     telemetry: TelemetryService):
    inst = await rent(services, count=2)
    events: list[TelemetryChanged] = []
    services.store.subscribe(
        lambda ev: events.append(ev) if isinstance(ev, TelemetryChanged) else None)
    telemetry.start(inst)
    telemetry.start(inst)  # idempotent
    await wait_for(lambda: samples_of(services, inst.id, 1) >= 3, what="3 samples per GPU")
    tel = services.store.telemetry(inst.id)
    latest = tel.latest()
    assert [s.index for s in latest] == [0, 1]
    s0 = latest[0]
    assert s0.name == "NVIDIA GeForce RTX 4090" and s0.uuid and s0.uuid.startswith("GPU-")
    assert s0.memory_total_mib == 24564 and s0.power_limit_w == 450
    assert s0.utilization_gpu == 0 and s0.temperature_c is not None
    assert s0.mig_mode is None  # [N/A] on a GeForce card is a value, not a crash
    # the lines of one tick arrive as one batch: one event per tick, not one per GPU
    sample_events = [e for e in events if e.instance_id == inst.id]
    assert len(sample_events) <= samples_of(services, inst.id, 0) + 3
    # one long-lived nvidia-smi process, not a new one every tick
    root = instance_root(services, inst)
    first = stream_pids(root)
    assert len(first) == 1 and "-lms 500" in next(iter(first.values()))
    await asyncio.sleep(1.0)
    assert stream_pids(root) == first
    # the inventory comes once per connection from nvidia-smi -q -x
    inv = await wait_for(lambda: telemetry.inventory(inst.id), what="inventory")
    assert inv.driver_version == "570.124.06" and inv.cuda_version == "12.8"
    assert [g.index for g in inv.gpus] == [0, 1] and inv.gpus[0].power_limit_w == 450
    status = telemetry.status(inst.id)
    assert status.watching and status.link == LinkState.CONNECTED
    assert status.age_s is not None and status.age_s < 2 and not status.stale
    assert status.diagnosis is None and tel.diagnosis is None
    # stopping ends the remote process
    telemetry.stop(inst.id)
    await wait_for(lambda: not stream_pids(root), what="the stream to end")
    assert not telemetry.is_watching(inst.id)


async def test_load_shows_up_and_kill_removes_it(services: Services,
                                                 telemetry: TelemetryService):
    inst = await rent(services, count=2)
    pid = await start_load(services, inst)
    telemetry.start(inst)
    tel = services.store.telemetry(inst.id)
    procs = await wait_for(lambda: [p for p in tel.processes if p.pid == pid],
                           what="the load in the process list")
    p = procs[0]
    assert p.gpu_index == 0 and p.used_memory_mib == 10240
    assert p.name == "python train.py" and p.user  # user from ps on the instance
    await wait_for(lambda: (tel.latest() and (tel.latest()[0].utilization_gpu or 0) >= 60),
                   what="GPU 0 busy")
    assert (tel.latest()[0].memory_used_mib or 0) >= 10240
    assert (tel.latest()[1].utilization_gpu or 0) < 10
    # one GPU busy while its peer idles: the data-parallel hint
    hints = await wait_for(lambda: [h for h in telemetry.hints(inst.id)
                                    if h.code == "imbalance"], what="the imbalance hint")
    assert "GPU 0 busy" in hints[0].text and "GPU 1" in hints[0].text
    # only listed GPU processes, and only PIDs, are signalled
    refused = await telemetry.kill(inst.id, 1)
    assert not refused.sent
    refused = await telemetry.kill(inst.id, "1; touch pwned")  # type: ignore[arg-type]
    assert not refused.sent and not (instance_root(services, inst) / "pwned").exists()
    refused = await telemetry.kill(inst.id, pid + 100000)
    assert not refused.sent and "not a GPU process" in refused.message
    result = await telemetry.kill(inst.id, pid)
    assert result.sent and result.gone and result.signal == "TERM"
    await wait_for(lambda: not [q for q in tel.processes if q.pid == pid],
                   what="the process list without it")
    await wait_for(lambda: (tel.latest()[0].memory_used_mib or 0) < 1024, what="memory freed")


async def test_term_then_kill_on_request(services: Services, telemetry: TelemetryService):
    inst = await rent(services, count=1)
    out = await services.run(inst, "sh -c 'trap \"\" TERM; exec sleep 30' >/dev/null 2>&1 & "
                                   "echo $!")
    pid = int(out.stdout.split()[0])
    telemetry.start(inst)
    term = await telemetry.kill(inst.id, pid, require_listed=False, wait_s=0.6)
    assert term.sent and not term.gone and "still running" in term.message
    assert "KILL" in term.message
    kill = await telemetry.kill(inst.id, pid, force=True, require_listed=False)
    assert kill.sent and kill.gone and kill.signal == "KILL"


async def test_dropped_link_shows_reconnecting_goes_stale_and_resumes(
        services: Services, gputui_home: Path):
    telemetry = make_telemetry(services, stale_after=0.8)
    try:
        inst = await rent(services, count=1)
        telemetry.start(inst)
        tel = services.store.telemetry(inst.id)
        await wait_for(lambda: tel.updated is not None, what="first sample")
        provider = services.provider("sandbox")
        # the platform drops every connection and stops answering
        await provider.client.call("outage", id=inst.id, down=True)
        await wait_for(lambda: services.store.link(inst.id)[0] == LinkState.RECONNECTING,
                       what="reconnecting")
        assert telemetry.status(inst.id).reconnecting
        status = await wait_for(lambda: (st := telemetry.status(inst.id)).stale and st,
                                what="stale data")
        assert status.age_s is not None and status.age_s > 0.8
        assert status.diagnosis is None  # a drop is not a diagnosis: it says reconnecting
        before = tel.updated
        # the instance comes back on the same port; nobody restarts anything by hand
        await provider.client.call("outage", id=inst.id, down=False)
        await wait_for(lambda: tel.updated is not None and before is not None
                       and tel.updated > before, timeout=15, what="samples after reconnect")
        assert services.store.link(inst.id)[0] == LinkState.CONNECTED
        status = telemetry.status(inst.id)
        assert not status.stale and status.diagnosis is None
        # and there is still exactly one stream
        await asyncio.sleep(0.3)
        assert len(stream_pids(instance_root(services, inst))) == 1
    finally:
        await telemetry.close()


async def test_interval_change_restarts_the_stream(services: Services,
                                                   telemetry: TelemetryService):
    assert telemetry.set_interval(0.1) == 0.5
    assert telemetry.set_interval(99) == 10.0
    assert telemetry.set_interval(0.5) == 0.5
    inst = await rent(services, count=1)
    telemetry.start(inst)
    root = instance_root(services, inst)
    await wait_for(lambda: samples_of(services, inst.id, 0) >= 2, what="samples")
    old = stream_pids(root)
    assert "-lms 500" in next(iter(old.values()))
    assert telemetry.set_interval(1.5) == 1.5
    assert telemetry.interval == 1.5 and telemetry.process_interval == 0.5
    new = await wait_for(lambda: (p := stream_pids(root)) and set(p) != set(old) and p,
                         what="a new stream")
    assert len(new) == 1 and "-lms 1500" in next(iter(new.values()))
    n = samples_of(services, inst.id, 0)
    await asyncio.sleep(1.7)
    assert 1 <= samples_of(services, inst.id, 0) - n <= 2  # at 0.5 s it would be 3-4


async def test_failing_nvidia_smi_gives_a_diagnosis_then_recovers(
        services: Services, telemetry: TelemetryService):
    inst = await rent(services, count=1)
    root = instance_root(services, inst)
    break_nvidia_smi(root, DRIVER_MESSAGE, 9)
    telemetry.start(inst)
    diag = await wait_for(lambda: telemetry.diagnosis(inst.id), what="a diagnosis")
    assert diag.code == "driver-not-loaded"
    text = services.store.telemetry(inst.id).diagnosis
    assert text and "driver" in text and "Fix:" in text and "Traceback" not in text
    status = telemetry.status(inst.id)
    assert status.diagnosis == diag and status.age_s is None
    assert services.store.telemetry(inst.id).latest() == []
    repair_nvidia_smi(root)
    await wait_for(lambda: services.store.telemetry(inst.id).latest(), timeout=10,
                   what="samples once fixed")
    assert telemetry.diagnosis(inst.id) is None
    assert services.store.telemetry(inst.id).diagnosis is None


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None,
                    reason="a real nvidia-smi on PATH would stand in for the missing shim")
async def test_missing_nvidia_smi_says_command_not_found(services: Services,
                                                         telemetry: TelemetryService):
    inst = await rent(services, count=1)
    root = instance_root(services, inst)
    (root / "bin" / "nvidia-smi").rename(root / "bin" / "nvidia-smi.off")
    telemetry.start(inst)
    diag = await wait_for(lambda: telemetry.diagnosis(inst.id), what="a diagnosis")
    assert diag.code == "nvidia-smi-missing"
    assert "not installed" in diag.problem and "driver" in diag.fix


async def test_sync_follows_the_running_instances_from_any_thread(
        services: Services, telemetry: TelemetryService):
    a = await rent(services, count=1, name="a")
    b = await rent(services, count=1, name="b")
    telemetry.sync([a])  # on the loop: remembers it
    # store events come from worker threads: sync must hop onto the loop by itself
    await asyncio.to_thread(telemetry.sync, [a, b])
    await wait_for(lambda: telemetry.is_watching(b.id), what="b watched")
    stopped = b.model_copy(update={"status": InstanceStatus.STOPPED})
    await asyncio.to_thread(telemetry.sync, [a, stopped])
    await wait_for(lambda: not telemetry.is_watching(b.id), what="b unwatched")
    assert telemetry.watching() == [a.id]


async def test_local_nvml_without_a_driver_is_a_diagnosis(services: Services,
                                                          telemetry: TelemetryService):
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("libnvidia-ml.so.1 is installed here")
    except OSError:
        pass
    telemetry.start_local()
    diag = await wait_for(lambda: telemetry.diagnosis(LOCAL_ID), what="NVML diagnosis")
    assert diag.code == "nvml-library-missing"
    assert telemetry.status(LOCAL_ID).watching


async def test_stopping_a_watch_is_not_lost_when_a_wake_up_arrives_at_once(services: Services):
    """Python 3.11's asyncio.wait_for swallows a cancellation that lands as the awaited thing
    finishes; a slow loop caught that way would never stop (a leaked task per instance)."""
    from gputui.models import BillingRule, Instance
    from gputui.nvidia.diagnose import DIAGNOSES
    from gputui.services.telemetry import _Watch

    tel = make_telemetry(services)
    w = _Watch(Instance(id="x", name="x", provider="replay", gpu="?",
                        billing=BillingRule(price_per_hour=0)))
    w.diagnosis = DIAGNOSES["driver-not-loaded"]  # the tick returns at once: only the wait runs
    for _ in range(20):
        task = asyncio.create_task(tel._slow_loop(w))
        await asyncio.sleep(0.01)  # parked in the wait for a wake-up
        w.wake.set()
        task.cancel()  # in the same step: the wait finishes as the cancel lands
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)
    await tel.close()


async def test_in_the_background_links_probe_less_and_processes_wait_but_the_monitor_gets_them_at_once(
        services: Services):
    """While no screen shows the streams (Home in view), the streams sample every 5 s, their
    links probe a silent host every 10 s instead of 2 s and the process list is read once a
    minute: a console left on Home costs little. The Monitor shown again has the process
    list at once, not a minute later, and its links probe every 2 s again."""
    tel = make_telemetry(services, interval=1.0, process_interval=None)  # the built-in paces
    try:
        inst = await rent(services, count=1)
        tel.start(inst)
        await wait_for(lambda: samples_of(services, inst.id, 0) >= 1, what="samples")
        link = services.links.peek(inst.id)
        assert link is not None and link.keepalive_interval == 2.0
        assert tel.process_interval == 3.0

        tel.set_background(True)
        conn = await link.connection()
        assert (link.keepalive_interval, tel.process_interval) == (10.0, 60.0)
        assert conn._keepalive_interval == 10.0  # the open connection, not only the next one
        await asyncio.sleep(1.0)  # the read that going to the background wakes is over
        pid = await start_load(services, inst)
        await asyncio.sleep(2.0)
        tel_now = services.store.telemetry(inst.id)
        assert pid not in {p.pid for p in tel_now.processes}  # the next read is a minute away

        tel.set_background(False)
        await wait_for(lambda: pid in {p.pid for p in services.store.telemetry(inst.id).processes},
                       timeout=5.0, what="the load, read as the Monitor is shown")
        assert (link.keepalive_interval, conn._keepalive_interval) == (2.0, 2.0)
    finally:
        await tel.close()
