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
