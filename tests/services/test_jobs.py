"""The queue on a sandbox instance: real runner, real processes, real files, over real SSH."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.errors import BadInput
from gputui.models import InstanceStatus
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.jobs import JobService, JobSpec, UnknownJob


async def rent(svc: Services, count: int = 2, name: str = "q"):
    offer = await svc.find_offer("sandbox", "RTX 4090")
    req = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=svc.free_name(name))
    return await svc.create("sandbox", offer, req)


def runner_daemons(base: Path) -> list[int]:
    import os

    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                cmd = fh.read()
            cwd = os.readlink(f"/proc/{p}/cwd")
        except OSError:
            continue
        if b"runner.py\x00daemon" in cmd and cwd == str(base):
            pids.append(int(p))
    return pids


def root_of(svc: Services, inst) -> Path:
    return svc.state_dir / "sandbox" / "instances" / inst.id


async def test_runs_in_order_failures_recorded_queue_goes_on(services: Services):
    inst = await rent(services)
    jobs = JobService(services)
    ids = await jobs.add(inst, [
        JobSpec("echo one; echo $GPUTUI_JOB_ID > \"$GPUTUI_JOB_DIR/mine\"", name="first"),
        JobSpec("echo two; exit 3", name="second"),
        JobSpec("echo three; date +%s%N > t3", name="third"),
    ])
    assert ids == ["1", "2", "3"]
    view = await jobs.wait(inst)
    got = {j.id: j for j in view.jobs}
    assert [got[i].status for i in ids] == ["succeeded", "failed", "succeeded"]
    assert [got[i].exit_code for i in ids] == [0, 3, 0]
    assert got["1"].name == "first" and got["2"].command == "echo two; exit 3"
    root = root_of(services, inst)
    assert (root / ".gputui/jobs/runs/1/mine").read_text().strip() == "1"
    assert (root / "t3").exists()  # cwd defaults to the home
    # in order: each run ended before the next started (they all want every GPU)
    assert got["1"].ended_at <= got["2"].started_at and got["2"].ended_at <= got["3"].started_at
    assert await jobs.log_tail(inst, "2") == ["two"]
    for j in view.jobs:
        assert j.cost is not None and j.cost >= Decimal("0") and j.currency == "USD"
    assert view.finished and view.ended_at is not None
    costs = services.store.run_costs_sync(inst.id)
    assert [c["label"] for c in costs] == ["first", "second", "third"]
    with pytest.raises(UnknownJob):
        await jobs.cancel(inst, "99")
    with pytest.raises(UnknownJob):
        await jobs.log_tail(inst, "abc")
    with pytest.raises(BadInput, match="already"):
        await jobs.cancel(inst, "1")


async def test_gpu_sets_side_by_side_retries_and_cancel(services: Services):
    inst = await rent(services, count=2)
    jobs = JobService(services)
    ids = await jobs.add(inst, [
        JobSpec('echo "$CUDA_VISIBLE_DEVICES" > gpu0; gpu-load --mem 2G --util 80 --seconds 5',
                name="on0", gpus=(0,)),
        JobSpec('echo "$CUDA_VISIBLE_DEVICES" > gpu1; sleep 1', name="on1", gpus=(1,)),
        JobSpec("n=$(cat tries 2>/dev/null || echo 0); echo $((n+1)) > tries; [ $n -ge 1 ]",
                name="flaky", gpus=(1,), retries=2),
        JobSpec("sleep 60", name="long", gpus=(1,)),
    ])
    root = root_of(services, inst)

    def on_view(view) -> None:
        pass

    # the first two start together: different GPUs
    for _ in range(200):
        view = await jobs.view(inst)
        by = {j.id: j for j in view.jobs}
        if by[ids[3]].status == "running":
            break
        await asyncio.sleep(0.1)
    assert by[ids[3]].status == "running"
    assert (await jobs.cancel(inst, ids[3])) == "running"
    view = await jobs.wait(inst, on_view=on_view)
    by = {j.id: j for j in view.jobs}
    assert (root / "gpu0").read_text().strip() == "0" and (root / "gpu1").read_text().strip() == "1"
    assert by[ids[1]].started_at < by[ids[0]].ended_at  # side by side
    assert by[ids[2]].status == "succeeded" and by[ids[2]].attempt == 2
    assert (root / "tries").read_text().strip() == "2"
    assert by[ids[3]].status == "cancelled"
    load = by[ids[0]]
    assert load.gpu_util_avg is not None and load.gpu_util_avg >= 50
    assert load.gpu_mem_max_mib is not None and load.gpu_mem_max_mib >= 2048
    # a run on one GPU of two costs half the rate over its time
    assert by[ids[1]].cost is not None
    new = await jobs.retry(inst, ids[1])
    assert new == "5"
    await jobs.wait(inst, [new])


async def test_follow_streams_the_log_until_the_run_ends(services: Services):
    inst = await rent(services)
    jobs = JobService(services)
    [job] = await jobs.add(inst, [JobSpec("for i in 1 2 3; do echo line $i; sleep 0.3; done; "
                                          "printf '\\033[31mred\\033[0m\\n'")])
    lines: list[str] = []
    await jobs.follow(inst, job, lines.append)
    assert lines == ["line 1", "line 2", "line 3", "red"]


async def test_the_runner_survives_the_link_being_cut(services: Services):
    inst = await rent(services)
    jobs = JobService(services)
    [job] = await jobs.add(inst, [JobSpec("sleep 2; echo survived > out.txt", name="long")])
    for _ in range(100):
        if (await jobs.view(inst)).get(job).status == "running":
            break
        await asyncio.sleep(0.05)
    link = await services.link(inst)
    conn = link._conn
    assert conn is not None
    conn.abort()  # the SSH connection is cut mid-run
    # ...and the whole SSH server goes away too (the console closed)
    provider = services.provider("sandbox")
    await provider.close()
    await services.links.close_all()
    await asyncio.sleep(3)
    view = await jobs.wait(inst)  # a fresh link (the server is served again)
    assert view.get(job).status == "succeeded"
    assert (root_of(services, inst) / "out.txt").read_text() == "survived\n"


async def test_when_done_refuses_a_pull_outside_home(services: Services, tmp_path: Path):
    inst = await rent(services)
    jobs = JobService(services)
    with pytest.raises(BadInput, match="outside"):
        await jobs.set_when_done(inst, "release", pulls=[("/etc", str(tmp_path / "x"))])
    assert jobs.when_done(inst) is None
    assert (await services.store.get_instance(inst.id)).status == InstanceStatus.RUNNING


async def test_when_done_stop_pulls_then_powers_off_keeping_the_disk(services: Services,
                                                                     tmp_path: Path):
    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("mkdir -p res && echo 7 > res/x", name="w")])
    await jobs.set_when_done(inst, "stop", pulls=[("res", str(tmp_path / "res"))])
    await jobs.wait(inst)
    assert await jobs.finish(inst, force=True) == "stopped"
    assert (tmp_path / "res" / "x").read_text() == "7\n"
    stopped = await services.store.get_instance(inst.id)
    assert stopped.status == InstanceStatus.STOPPED  # compute billing ended, disk kept
    assert (root_of(services, inst) / "res" / "x").exists()
    assert await jobs.finish(inst, force=True) is None  # done once


async def test_a_dead_runner_is_started_again_and_its_lost_run_recorded(services: Services):
    import os
    import signal

    inst = await rent(services)
    jobs = JobService(services)
    [first, second] = await jobs.add(inst, [JobSpec("sleep 30", name="victim"),
                                            JobSpec("echo after", name="next")])
    for _ in range(100):
        view = await jobs.view(inst)
        if view.get(first).status == "running":
            break
        await asyncio.sleep(0.1)
    base = root_of(services, inst) / ".gputui" / "jobs"
    import json as _json

    state = _json.loads((base / "runs" / first / "state.json").read_text())
    # the machine "crashes": the runner and the run are killed, nothing is recorded
    daemon_pids = runner_daemons(base)
    assert daemon_pids
    for pid in daemon_pids:
        os.kill(pid, signal.SIGKILL)
    os.killpg(int(state["pid"]), signal.SIGKILL)
    view = await jobs.wait(inst)  # the next look starts the runner again
    assert view.get(first).status == "lost" and view.get(first).exit_code is None
    assert view.get(second).status == "succeeded"


async def test_powered_off_with_results_not_home_is_kept_where_the_provider_cannot_start_it(
        services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from dataclasses import replace

    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("mkdir -p out && echo done > out/r.txt", name="w")])
    await jobs.set_when_done(inst, "release", pulls=[("out", str(tmp_path / "out"))])
    await jobs.wait(inst)
    stopped = await services.stop(inst)  # it powered itself off before the results came home
    assert stopped.status == InstanceStatus.STOPPED
    provider = services.provider("sandbox")  # as a provider that cannot start it again
    monkeypatch.setattr(provider, "capabilities", replace(provider.capabilities, stop_start=False))
    assert await jobs.finish(stopped, force=True) == "kept"
    kept = await services.store.get_instance(inst.id)
    assert kept.status == InstanceStatus.STOPPED  # not released: the results are on its disk
    assert (root_of(services, inst) / "out" / "r.txt").read_text() == "done\n"
    assert not (tmp_path / "out").exists()


async def test_deadline_warnings_say_the_results_are_not_home(services: Services, tmp_path: Path):
    """Before the release time, where the release waits for results: the warning says they are
    not home (pulled first), and once their pull failed, that it is held and the ways out."""
    from datetime import timedelta

    from gputui.models import utcnow
    from gputui.services.leases import LeaseService
    from gputui.store import Notice

    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("while [ ! -e go ]; do sleep 0.2; done; exit 3", name="early")])
    await jobs.set_when_done(inst, "release", pulls=[("results", str(tmp_path / "results"))])
    warnings: list[str] = []
    services.store.subscribe(lambda e: warnings.append(e.text) if isinstance(e, Notice)
                             and e.severity == "warning" else None)
    leases = LeaseService(services, warn_minutes=(10,))

    def due_in_five_minutes() -> None:
        services.store.update_lease_sync(inst.id, lambda le: le.model_copy(update={
            "release_at": utcnow() + timedelta(minutes=5), "warned": []}))

    due_in_five_minutes()
    await leases.tick()
    assert warnings[-1] == (
        f"{inst.name} reaches its release time in 5 min; the results asked for (results) are "
        "not home yet: they are pulled first, and it is kept if they cannot be — on Home, e "
        "extends 1 h, E 30 min")

    (root_of(services, inst) / "go").touch()
    await jobs.wait(inst)
    assert await jobs.finish(inst, force=True) == "kept"  # nothing to pull: held
    due_in_five_minutes()
    await leases.tick()
    assert warnings[-1].startswith(
        f"{inst.name} reaches its release time in 5 min but is held: results missing (results), "
        "so it is kept, not released"), warnings[-1]
    assert f"`gputui release {inst.name}` releases it anyway" in warnings[-1]
    assert "will be released" not in " ".join(warnings)
