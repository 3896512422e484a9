"""The copy of a queue's runs and logs kept before a release never delays or stops it: an
instance that hangs or refuses is released within the bound, and the record says what was lost."""

from __future__ import annotations

import asyncio
import time

import pytest

from gputui.models import InstanceStatus
from gputui.services import run_keep, run_records
from gputui.services.hub import Services
from gputui.services.jobs import JobService, JobSpec
from tests.services.test_jobs import rent


@pytest.mark.parametrize("fault", ["hangs", "refuses"])
async def test_an_instance_that_does_not_answer_is_released_and_the_record_says_so(
        services: Services, monkeypatch: pytest.MonkeyPatch, fault: str):
    inst = await rent(services, name="mute")
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("echo one", name="first")])
    await jobs.wait(inst)  # the queue's end: kept here
    await jobs.add(inst, [JobSpec("echo two; sleep 600", name="second")])
    for _ in range(100):
        if any(j.status == "running" for j in (await jobs.view(inst)).jobs):
            break
        await asyncio.sleep(0.1)

    async def hang(*_a: object) -> dict:
        await asyncio.sleep(3600)
        return {}

    async def refuse(*_a: object) -> dict:
        raise ConnectionRefusedError("Connection refused")

    monkeypatch.setattr(run_keep, "_fetch", hang if fault == "hangs" else refuse)
    monkeypatch.setattr(run_keep, "KEEP_TIMEOUT_S", 1.0)
    started = time.monotonic()
    entry = await services.release(inst, "timer")
    assert time.monotonic() - started < 8
    assert entry is not None
    gone = await services.store.get_instance(inst.id)
    assert gone is not None and gone.status == InstanceStatus.RELEASED
    view, rec = run_records.released_view(services, gone)
    assert rec is not None and rec.logs_lost
    note = run_records.record_note(rec, gone)
    assert note.startswith("its logs could not be kept at the release (")
    assert ("no answer in 1 s" if fault == "hangs" else "Connection refused") in note
    by_id = {j.id: j for j in view.jobs}
    assert by_id["1"].status == "succeeded" and by_id["1"].cost is not None
    assert by_id["2"].status == "lost"  # how it ended is not known: never shown running
    assert run_records.kept_tail(rec, "1") == (["one"], False, False)


async def test_a_release_with_no_runs_queued_reads_nothing(services: Services,
                                                             monkeypatch: pytest.MonkeyPatch):
    """No runs were ever queued on it: the release asks the instance nothing more."""
    inst = await rent(services, name="plain")

    async def fail(*_a: object) -> dict:
        raise AssertionError("read an instance with no queue")

    monkeypatch.setattr(run_keep, "_fetch", fail)
    assert await services.release(inst, "manual") is not None
    assert run_records.load_record(services, inst.id) is None


def test_the_runner_bounds_what_it_hands_over_per_run_and_per_instance(
        tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """At most N lines and B bytes of each run's log, T bytes in all, newest runs first: an
    older run over the instance's cap says its log was not kept, never a half line."""
    import json

    from gputui.services import jobs_runner

    runs = tmp_path / "runs"
    for job_id, text in ((1, "old\n" * 10), (2, "x" * 90 + "\n" + "y" * 50 + "\n"),
                         (3, "".join(f"line {i}\n" for i in range(500)))):
        d = runs / str(job_id)
        d.mkdir(parents=True)
        (d / "spec.json").write_text(json.dumps({"command": "true"}))
        (d / "state.json").write_text(json.dumps({"status": "succeeded", "exit_code": 0}))
        (d / "log").write_text(text)
    monkeypatch.setattr(jobs_runner, "RUNS", str(runs))
    assert jobs_runner.cmd_records(200, 100, 3000) == 0
    got = json.loads(capsys.readouterr().out)["tails"]
    assert got["3"]["lines"] == [f"line {i}" for i in range(300, 500)][-len(got["3"]["lines"]):]
    assert got["3"]["cut"] and sum(len(x) + 1 for x in got["3"]["lines"]) <= 100
    assert got["2"] == {"lines": ["y" * 50], "cut": True}  # the 90-byte line would not fit
    assert jobs_runner.cmd_records(200, 64 * 1024, 1800) == 0  # run 3's 200 lines: 1800 bytes
    got = json.loads(capsys.readouterr().out)["tails"]
    assert len(got["3"]["lines"]) == 200 and got["3"]["lines"][-1] == "line 499"
    assert got["2"] == got["1"] == {"lines": [], "cut": True, "over_cap": True}


async def test_a_two_second_run_never_reads_zero_after_the_release(services: Services,
                                                                   capsys: pytest.CaptureFixture):
    """A 2-second run on a 2 × RTX 4090 costs a fraction of a cent: `gputui jobs` read $0.00
    for it once the instance was released (its cost was rounded to the cent when the run ended
    and kept so), while the queue's total read <$0.01."""
    from decimal import Decimal

    from gputui.cli.jobs import print_table

    inst = await rent(services, name="brief")
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("sleep 2", name="short")])
    live = await jobs.wait(inst)
    (run,) = live.jobs
    assert run.status == "succeeded" and run.cost is not None
    # the cost as worked out, not rounded away: the rate over the run's own seconds
    seconds = Decimal(str(round(run.seconds() or 0, 3)))
    assert run.cost == (inst.billing.price_per_hour * seconds / 3600).quantize(Decimal("1e-6"))
    assert Decimal(0) < run.cost < Decimal("0.005")
    await services.release(inst, "manual")
    gone = await services.store.get_instance(inst.id)
    view, rec = run_records.released_view(services, gone)
    (kept,) = view.jobs
    assert kept.cost == run.cost  # what was recorded as it ended, to the same fraction
    capsys.readouterr()
    print_table(view, gone)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "short" in line)
    assert row.rstrip().endswith("<$0.01"), row
    assert "$0.00" not in out
    assert "the runs cost <$0.01" in out


def test_a_run_recorded_at_zero_by_the_old_cent_rounding_is_costed_from_its_row():
    """Rows written before run costs kept their fractions say 0.00 for any run under ~$0.005:
    their own rate, seconds and GPU share say what it cost."""
    from decimal import Decimal

    row = {"cost": "0.00", "rate_per_hour": "0.69250", "seconds": 2.0, "gpus": [1],
           "gpu_count": 2}
    assert run_records.recorded_cost(row) == Decimal("0.000192")  # 0.6925 × ½ × 2 s / 3600
    assert run_records.recorded_cost({**row, "gpus": None}) == Decimal("0.000385")
    assert run_records.recorded_cost({**row, "seconds": 0}) == 0  # no time: nothing spent
    assert run_records.recorded_cost({**row, "rate_per_hour": "0"}) == 0  # a free machine
    assert run_records.recorded_cost({**row, "cost": "0.000577"}) == Decimal("0.000577")
    assert run_records.recorded_cost({**row, "cost": "1.25"}) == Decimal("1.25")


def test_the_queue_total_adds_the_column_as_read():
    from decimal import Decimal
    from types import SimpleNamespace

    from gputui.cli.jobs import summary_text
    from gputui.services.jobs import Job, QueueView

    def view(*costs: str) -> QueueView:
        return QueueView("i", jobs=[Job(id=str(n), name="r", command="x", status="succeeded",
                                        cost=Decimal(c)) for n, c in enumerate(costs, 1)])

    inst = SimpleNamespace(name="box", billing=SimpleNamespace(currency="USD"))
    assert "the runs cost $0.34 " in summary_text(view("0.165", "0.165"), inst)  # 0.17 + 0.17
    assert "the runs cost <$0.01 " in summary_text(view("0.000577", "0.000192"), inst)
    assert "the runs cost $0.01 " in summary_text(view("0.004", "0.004", "0.004"), inst)


def test_a_step_on_two_nodes_writes_one_exit_code_a_task_and_the_highest_is_the_runs(
        tmp_path, monkeypatch):
    """Both tasks of a 2-node step run the wrapper in the one shared folder at the same moment:
    neither's exit code is lost to the other's rename, and a daemon that did not start the step
    (it was restarted) reads the highest, as srun reports it."""
    import json
    import os
    import subprocess

    from gputui.services import jobs_runner

    runs = tmp_path / "runs"
    monkeypatch.setattr(jobs_runner, "RUNS", str(runs))
    d = runs / "1"
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"command": "x", "name": "both"}))
    (d / "state.json").write_text(json.dumps({"status": "running"}))
    for _ in range(20):  # the race, many times over
        procs = [subprocess.Popen(
            ["/bin/sh", "-c", jobs_runner.STEP_WRAPPER, "gputui-run", str(tmp_path),
             f"exit {code}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=dict(os.environ, GPUTUI_JOB_DIR=str(d), SLURM_PROCID=str(task)))
            for task, code in ((0, 0), (1, 3))]
        outs = [p.communicate()[0] for p in procs]
        assert outs == [b"", b""], outs  # no "mv: cannot stat" in the run's log
        assert sorted(p.name for p in d.iterdir() if p.name.startswith("exit_code")) == [
            "exit_code.task0", "exit_code.task1"]
    daemon = jobs_runner.Daemon()
    daemon.launch = {"argv": ["srun", "--jobid=7"]}
    daemon.finish(jobs_runner.load("1"), None)
    state = json.loads((d / "state.json").read_text())
    assert (state["status"], state["exit_code"]) == ("failed", 3)
