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


# -- one run never wedges the queue (issue 24, item 9) ------------------------------------------
def test_a_runs_file_line_the_instance_cannot_run_is_refused_by_number(tmp_path: Path):
    from gputui.services.jobs import MAX_COMMAND_BYTES, read_runs_file

    long = tmp_path / "long.txt"
    long.write_text("# sweep\necho one\n\necho " + "y" * MAX_COMMAND_BYTES + "\necho four\n")
    with pytest.raises(BadInput) as err:
        read_runs_file(long)
    text = str(err.value)
    assert f"{long} line 4:" in text and "131,076 bytes" in text and "\n" not in text
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"echo one\necho t\x00wo\n")
    with pytest.raises(BadInput, match=r"nul\.txt line 2: the command has a NUL byte"):
        read_runs_file(nul)
    # line numbers as an editor counts them: a form feed does not start a line
    ff = tmp_path / "ff.txt"
    ff.write_text("echo a\x0cecho b\necho \x00\n")
    with pytest.raises(BadInput, match="line 2:"):
        read_runs_file(ff)
    just = tmp_path / "just.txt"  # the longest command that runs is taken
    just.write_text(": " + "y" * (MAX_COMMAND_BYTES - 2) + "\n")
    assert len(read_runs_file(just)[0]) == MAX_COMMAND_BYTES


async def test_add_refuses_what_cannot_start_and_queues_nothing(services: Services):
    from gputui.services.jobs import MAX_COMMAND_BYTES

    inst = await rent(services)
    jobs = JobService(services)
    for specs, words in (
        ([JobSpec("echo a\x00b")], "NUL byte"),
        ([JobSpec("true"), JobSpec(": " + "é" * (MAX_COMMAND_BYTES // 2))], "run 2: the command is"),
        ([JobSpec("true", cwd="a\x00b")], "folder"),
        ([JobSpec("true", name="x\x00")], "label"),
    ):
        with pytest.raises(BadInput, match=words):
            await jobs.add(inst, specs)
    assert (await jobs.view(inst)).jobs == []


def _hand_record(base: Path, job_id: int, spec: object = None, state: object = None,
                 raw: str | None = None) -> Path:
    """A run record written straight into the instance's queue folder, as no `add` would."""
    import json as _json

    d = base / "runs" / str(job_id)
    d.mkdir(parents=True)
    (d / "spec.json").write_text(raw if raw is not None else _json.dumps(spec))
    if state is not None:
        (d / "state.json").write_text(_json.dumps(state))
    return d


async def test_bad_run_records_fail_with_the_reason_and_the_queue_goes_on(services: Services):
    inst = await rent(services)
    jobs = JobService(services)
    [first] = await jobs.add(inst, [JobSpec("echo first", name="first")])
    await jobs.wait(inst)
    base = root_of(services, inst) / ".gputui" / "jobs"
    _hand_record(base, 2, {"command": "echo " + "y" * 200_000, "name": "huge"})  # E2BIG
    _hand_record(base, 3, {"command": "echo a\x00b", "name": "nul"})  # embedded null byte
    _hand_record(base, 4, raw='{"command": "echo tru')  # cut short
    _hand_record(base, 5, ["not", "a", "run"])
    _hand_record(base, 6, {"command": "echo odd", "gpus": "all", "retries": "x"})
    # a daemon that died mid-step: recorded running, pid garbage / never started
    _hand_record(base, 7, {"command": "sleep 100"}, {"status": "running", "pid": "abc"})
    _hand_record(base, 8, {"command": "sleep 100"},
                 {"status": "running", "pid": None, "started_at": "2020-01-01T00:00:00+00:00"})
    (_hand_record(base, 9, {"command": "echo unwritable log"}) / "log").mkdir()  # Popen fails
    [last] = await jobs.add(inst, [JobSpec("echo after > after.txt", name="after")])
    assert last == "10"
    view = await asyncio.wait_for(jobs.wait(inst), 60)
    by = {j.id: j for j in view.jobs}
    assert by[first].status == "succeeded" and by[last].status == "succeeded"
    assert (root_of(services, inst) / "after.txt").read_text() == "after\n"
    for job_id in ("2", "3", "4", "5", "6", "9"):
        assert by[job_id].status == "failed" and by[job_id].exit_code == 126, by[job_id]
        assert by[job_id].error and by[job_id].error.startswith("could not start:")
    assert "200005 bytes" in (await jobs.log_tail(inst, "2"))[0]
    assert "NUL byte" in (await jobs.log_tail(inst, "3"))[0]
    assert "IsADirectoryError" in by["9"].error
    for job_id in ("7", "8"):
        assert by[job_id].status == "lost" and by[job_id].exit_code is None
    assert view.finished and view.ended_at is not None and not view.daemon


# -- a run's GPU figures are its own (issue 24, item 5) -------------------------------------------
async def test_a_runs_gpu_figures_are_its_own_processes_not_the_cards(services: Services):
    inst = await rent(services, count=2)
    jobs = JobService(services)
    # someone else's work on GPU 1, outside the queue (a notebook, Ollama)
    await services.run(inst, "nohup gpu-load --gpus 1 --mem 10G --util 80 --seconds 120 "
                             "> /dev/null 2>&1 &")
    for _ in range(100):
        apps = await services.run(inst, "nvidia-smi --query-compute-apps=pid "
                                        "--format=csv,noheader")
        if apps.stdout.strip():
            break
        await asyncio.sleep(0.1)
    assert apps.stdout.strip()
    ids = await jobs.add(inst, [
        JobSpec("sleep 5", name="idle", gpus=(1,)),
        JobSpec("echo hi; sleep 3", name="echo"),  # every GPU
        # its own load on GPU 1 (device 0 of CUDA_VISIBLE_DEVICES=1), beside the other one
        JobSpec("sh -c 'gpu-load --gpus 0 --mem 2G --util 60 --seconds 5'", name="own", gpus=(1,)),
    ])
    view = await asyncio.wait_for(jobs.wait(inst), 90)
    idle, echo, own = (view.get(i) for i in ids)
    assert [j.status for j in (idle, echo, own)] == ["succeeded"] * 3
    # the card held 10240 MiB at 80 % all along: none of it was theirs
    assert idle.gpu_mem_max_mib == 0 and idle.gpu_util_avg is None
    assert echo.gpu_mem_max_mib == 0 and echo.gpu_util_avg is None
    # its own process (a grandchild) holds 2 GiB; the card's use while it had a process there
    assert own.gpu_mem_max_mib == 2048
    assert own.gpu_util_avg is not None and own.gpu_util_avg >= 50


async def test_when_done_release_brings_results_reached_through_links_home(services: Services,
                                                                           tmp_path: Path):
    """A run writes ckpt/ and links to it from the folder asked for (`out2/final.pt ->
    ../ckpt/final.pt`, `best -> ckpt/step_2`): the links come home as what they point to,
    then the instance is released."""
    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec(
        "mkdir -p ckpt/step_2 out2 && echo weights > ckpt/final.pt && echo s2 > ckpt/step_2/m.pt"
        " && ln -s ../ckpt/final.pt out2/final.pt && ln -s ../ckpt/step_2 out2/best", name="w")])
    dest = tmp_path / "results"
    await jobs.set_when_done(inst, "release", pulls=[("out2", str(dest))])
    await jobs.wait(inst)
    assert await jobs.finish(inst, force=True) == "released"
    assert (dest / "final.pt").read_text() == "weights\n" and not (dest / "final.pt").is_symlink()
    assert (dest / "best" / "m.pt").read_text() == "s2\n"
    assert (await services.store.get_instance(inst.id)).status == InstanceStatus.RELEASED


def _unreadable(tmp_path: Path) -> Path:
    from tests.remote.test_transfer import unreadable_target

    return unreadable_target(tmp_path)


@pytest.mark.parametrize(("case", "why"), [
    ("dangling", "a link to ../ckpt/final.pt, which does not exist"),
    ("cycle", "a folder that contains the link: a cycle"),
    ("unreadable", "ermission denied"),
])
async def test_a_link_that_cannot_come_holds_the_release_and_says_why(
        services: Services, tmp_path: Path, case: str, why: str):
    from gputui.store import Notice

    inst = await rent(services)
    jobs = JobService(services)
    make = {"dangling": "ln -s ../ckpt/final.pt out2/final.pt",
            "cycle": "mkdir -p out2/sub && ln -s .. out2/sub/final.pt",
            "unreadable": f"ln -s {_unreadable(tmp_path)} out2/final.pt"}[case]
    await jobs.add(inst, [JobSpec(f"mkdir -p out2 && echo ok > out2/log.txt && {make}")])
    dest = tmp_path / "results"
    await jobs.set_when_done(inst, "release", pulls=[("out2", str(dest))])
    notices: list[Notice] = []
    services.store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    await jobs.wait(inst)
    assert await jobs.finish(inst, force=True) == "kept"
    kept = await services.store.get_instance(inst.id)
    assert kept.status == InstanceStatus.RUNNING  # not released: a result is not home
    assert (dest / "log.txt").read_text() == "ok\n"  # what could come, came
    [alarm] = [n for n in notices if n.severity == "error"]
    entry = "out2/sub/final.pt" if case == "cycle" else "out2/final.pt"
    assert entry in alarm.text and why in alarm.text, alarm.text
    assert "kept, not released" in alarm.text
    assert f"`gputui release {inst.name}` releases it anyway" in alarm.text
    assert "tried again" in alarm.text
    assert not any("queue done" in n.text for n in notices)
    # the way out: the link is fixed on the instance, and the next look pulls and releases
    root = root_of(services, inst)
    target = root / entry
    target.unlink()
    target.write_text("fixed\n")
    assert await jobs.finish(inst, force=True) == "released"
    assert (dest / entry.removeprefix("out2/")).read_text() == "fixed\n"


async def test_a_timed_release_is_held_while_a_linked_result_cannot_come(services: Services,
                                                                         tmp_path: Path):
    """The timer (or idle, or budget) releasing: the same rule — held, with the reason."""
    from gputui.services.jobs import release_allowed

    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("mkdir -p out && ln -s missing.pt out/best.pt", name="w")])
    await jobs.set_when_done(inst, "keep", pulls=[("out", str(tmp_path / "out"))])
    await jobs.wait(inst)
    assert await release_allowed(services, inst) is False
    assert (await services.store.get_instance(inst.id)).status == InstanceStatus.RUNNING


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


# -- when-done on a queue that has already ended ---------------------------------------------
async def test_when_done_at_once_on_an_ended_queue_is_finished_by_gputui_not_a_power_off(
        services: Services, tmp_path: Path):
    """`when-done release --grace 0s` after the last run ended: the instance does not power
    itself off (that cut the command's own link: "the queue runner failed: exit -1", nothing
    recorded here, the results' pull cut short); gputui, there and waiting, finishes it at
    once — the results home, then the release by the provider."""
    from gputui.sandbox.shims.state import power_state

    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("mkdir -p out && echo done > out/r.txt", name="w")])
    await jobs.wait(inst)
    root = root_of(services, inst)
    rec = await jobs.set_when_done(inst, "release", pulls=[("out", str(tmp_path / "out"))],
                                   grace_s=0)
    assert jobs.when_done(inst) == rec and rec.pulls == [{"remote": "out",
                                                         "local": str(tmp_path / "out")}]
    assert power_state(root).status == "running"
    assert (await jobs.view(inst)).poweroff_at is None  # no power-off armed to cut the pull
    assert await jobs.finish(inst, force=True) == "released"
    assert (tmp_path / "out" / "r.txt").read_text() == "done\n"  # home before the release
    assert (await services.store.get_instance(inst.id)).status == InstanceStatus.RELEASED


async def test_the_lease_clock_finishes_a_when_done_from_one_look_at_the_records(
        services: Services, tmp_path: Path):
    """The clock lists the when-done records once a tick (not a file per instance): the
    instance whose queue ended with `when-done release` has its results brought home and is
    released by the clock's tick; the other, whose record is only being written (a temporary
    file beside the records), is left running."""
    from gputui.services.jobs import WHEN_DONE_DIR, when_done_ids
    from gputui.services.leases import LeaseService

    done, other = await rent(services, name="done"), await rent(services, name="other")
    jobs = JobService(services)
    await jobs.add(done, [JobSpec("mkdir -p out && echo done > out/r.txt", name="w")])
    await jobs.wait(done)
    await jobs.set_when_done(done, "release", pulls=[("out", str(tmp_path / "out"))], grace_s=0)
    folder = services.state_dir / WHEN_DONE_DIR
    (folder / f".{other.id}.json.tmp4242").write_text("{")  # a record mid-write
    assert when_done_ids(services) == {done.id}
    result = await LeaseService(services).tick()
    assert result.released == [done.name]
    assert (tmp_path / "out" / "r.txt").read_text() == "done\n"
    assert (await services.store.get_instance(done.id)).status == InstanceStatus.RELEASED
    assert (await services.store.get_instance(other.id)).status == InstanceStatus.RUNNING


async def test_when_done_with_grace_on_an_ended_queue_still_powers_off_after_it(
        services: Services):
    """With a grace period the instance still powers itself off when it has passed, even if
    no gputui is left to finish it (billing stops; the disk and results are kept)."""
    from gputui.sandbox.shims.state import power_state

    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("true", name="w")])
    await jobs.wait(inst)
    await jobs.set_when_done(inst, "release", grace_s=60)
    power = power_state(root_of(services, inst))
    assert power.status == "scheduled" and power.at is not None
    view = await jobs.view(inst)
    assert view.poweroff_at is not None and view.poweroff_in_s == 60


async def test_a_when_done_answer_lost_is_kept_here_and_a_refused_one_is_not(
        services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The link closing before the instance answered: it may have the policy (and act on it),
    so the record stays here, and the user is told how to check. The instance refusing it:
    the record before is left as it was."""
    from types import SimpleNamespace

    from gputui.services.jobs import JobError

    inst = await rent(services)
    jobs = JobService(services)
    first = await jobs.set_when_done(inst, "keep")
    answers = iter([SimpleNamespace(exit_status=3, stdout="", stderr="grace_s: not a number\n"),
                    SimpleNamespace(exit_status=-1, stdout="", stderr="")])

    async def answer(self, inst, args, *, input=None, timeout=60.0):
        return next(answers)

    monkeypatch.setattr(JobService, "_runner", answer)
    with pytest.raises(BadInput, match="grace_s: not a number"):
        await jobs.set_when_done(inst, "release", pulls=[("out", str(tmp_path / "o"))])
    assert jobs.when_done(inst) == first  # refused: as it was
    with pytest.raises(JobError, match=f"kept here.*gputui jobs {inst.name}"):
        await jobs.set_when_done(inst, "release", pulls=[("out", str(tmp_path / "o"))])
    kept = jobs.when_done(inst)
    assert kept is not None and kept.policy == "release"
    assert kept.pulls == [{"remote": "out", "local": str(tmp_path / "o")}]
