"""Where events happen, the renter hears of them (a real receiver on 127.0.0.1, Apprise's
`json://`): a release by the lease clock (who, what it cost), STILL BILLING, a queue's end; a
release never waits for a receiver that hangs; the daemon and a console together send each
event once."""

from __future__ import annotations

import asyncio
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from gputui.config import NotifySettings
from gputui.models import Lease, SSHEndpoint, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import ServiceError, Services
from gputui.services.notify import NotifyService
from tests.conftest import GPUTUI, run_gputui_env


def send_to(services: Services, url: str, **kw) -> NotifyService:
    """The session's notifications to `url`, with short waits (made before anything sends)."""
    services.config.notify = NotifySettings(urls=[url])
    opts = {"timeout_s": 2.0, "attempts": 2, "backoff_s": 0.05, "window_s": 0.05,
            "close_wait_s": 5.0, "env": {}}
    opts.update(kw)
    return services.attached(NotifyService,
                             lambda s: NotifyService(s.store, s.config, **opts))


async def rent(services: Services, name: str, release_in: timedelta = timedelta(hours=2)):
    offer = await services.find_offer("sandbox", "RTX 4090")
    request = CreateRequest(offer_id=offer.offer_id, gpu_count=1, name=name, disk_gb=10)
    return await services.create("sandbox", offer, request, lease=Lease(
        instance_id="x", release_at=utcnow() + release_in))


async def overdue(services: Services, inst) -> None:
    await services.store.update_lease(inst.id, lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(seconds=1)}))



def _start_daemon(gputui_home: Path, url: str) -> tuple[subprocess.Popen, Path]:
    """`gputui daemon --interval 1` in its own process, notifying `url`; its output in a log."""
    env = run_gputui_env(gputui_home)
    env["GPUTUI_NOTIFY_URLS"] = url
    log = gputui_home / "daemon.err"
    with log.open("w") as err:
        daemon = subprocess.Popen([*GPUTUI, "daemon", "--interval", "1"], stdout=err,
                                  stderr=err, env=env, stdin=subprocess.DEVNULL)
    return daemon, log

async def test_a_release_by_the_timer_says_who_and_what_it_cost(services, receiver):
    from gputui.services.leases import LeaseService

    notifier = send_to(services, receiver.url("ok"))
    services.actor = "daemon"
    inst = await rent(services, "night-run")
    by_hand = await rent(services, "by-hand")
    await overdue(services, inst)
    result = await LeaseService(services).tick()
    assert result.released == ["night-run"]
    await services.release(by_hand, "manual")  # the renter did it: nothing to tell them
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = receiver.wait_for(1)
    [entry] = [e for e in await services.store.ledger() if e.name == "night-run"]
    assert got.title == "night-run released"
    assert "released by its release timer, through gputui daemon after" in got.body
    assert got.body.endswith(f"it cost ${entry.total:.2f}.")
    await asyncio.sleep(0.2)
    assert len(receiver.messages) == 1  # none for the release by hand
    assert [r["key"] for r in services.store.notifications_sync()] == [f"released:{inst.id}:"]


async def test_a_hanging_receiver_does_not_delay_a_release(services, receiver):
    from gputui.services.leases import LeaseService

    # a sender that waited would take 2 tries × 5 s
    notifier = send_to(services, receiver.url("hang"), timeout_s=5.0, attempts=2)
    inst = await rent(services, "hung")
    await overdue(services, inst)
    started = time.monotonic()
    result = await LeaseService(services).tick()
    took = time.monotonic() - started
    assert result.released == ["hung"] and not result.errors
    assert took < 4.0, took
    assert not services.store.get_instance_sync(inst.id).status.live
    assert await asyncio.to_thread(receiver.wait_hits, "hang")  # it was being sent meanwhile
    receiver.release.set()
    await asyncio.to_thread(notifier.wait_idle, 30)


async def test_still_billing_reaches_the_renter(services, receiver):
    from tests.drill.test_release_evidence import AcceptAndClose, _add

    send_to(services, receiver.url("ok"))
    listener = AcceptAndClose()
    port = await listener.start()
    try:
        inst = await _add(services, SSHEndpoint(host="127.0.0.1", port=port), "dropper")
        with pytest.raises(ServiceError, match="release failed"):
            await services.release(inst, "timer", attempts=2, backoff=0.01)
        # the lease clock tries again later: the renter is told once
        with pytest.raises(ServiceError, match="release failed"):
            await services.release(inst, "timer", attempts=1, backoff=0.01)
    finally:
        await listener.stop()
    [got] = await asyncio.to_thread(receiver.wait_for, 1)
    assert got.title == "dropper: STILL BILLING" and got.type == "failure"
    assert "could not be released and is still billing" in got.body
    await asyncio.sleep(0.3)
    assert len(receiver.messages) == 1


async def test_a_queue_end_says_how_the_runs_went_and_what_became_of_it(services, receiver,
                                                                       tmp_path: Path):
    from gputui.services.jobs import JobService, JobSpec

    notifier = send_to(services, receiver.url("ok"))
    inst = await rent(services, "q")
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("mkdir -p res; echo 1 > res/a", name="ok"),
                          JobSpec("exit 4", name="bad")])
    await jobs.set_when_done(inst, "release", pulls=[("res", str(tmp_path / "res"))])
    await jobs.wait(inst)
    assert await jobs.finish(inst, force=True) == "released"
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    got = {m.title: m for m in receiver.wait_for(2)}
    assert set(got) == {"q: queue ended", "q released"}, got
    body = got["q: queue ended"].body
    assert body.startswith("q: 1 succeeded, 1 failed, 0 cancelled in ")
    assert f"results in {tmp_path / 'res'}" in body and body.endswith("was released.")
    assert got["q: queue ended"].type == "warning"  # a run failed
    assert "by its queue's when-done" in got["q released"].body


async def test_daemon_and_console_together_send_each_event_once(services, receiver,
                                                               gputui_home: Path):
    """`gputui daemon` (its URL from GPUTUI_NOTIFY_URLS) and a console's lease clock over the
    same store as two deadlines pass: each release is told once, by whichever released it."""
    from gputui.services.daemon import daemon_status
    from gputui.services.leases import LeaseService
    from tests.services.test_daemon import _until

    url = receiver.url("ok")
    notifier = send_to(services, url)
    services.actor = "console"
    names = ["both-a", "both-b"]
    for name in names:
        await rent(services, name, release_in=timedelta(seconds=10))
    daemon, log = _start_daemon(gputui_home, url)
    try:
        assert await _until(lambda: daemon_status(gputui_home) is not None, 60)
        console = LeaseService(services)

        async def all_ended() -> bool:
            await console.tick()
            return not await services.store.instances(live_only=True)

        assert await _until(all_ended, 90, step=0.5)
    finally:
        daemon.terminate()  # drains what it has queued
        await asyncio.to_thread(daemon.wait, 30)
    await asyncio.to_thread(notifier.wait_idle, 15)
    await asyncio.sleep(0.5)
    # every message, a digest's lines counted one by one
    items = [line.removeprefix("• ") for m in receiver.messages
             for line in (m.body.splitlines() if m.title.startswith("gputui: ") else [m.title])]
    rows = services.store.notifications_sync()
    assert len(items) == len(rows), (items, rows)  # each event once, by one process
    assert sorted(t for t in items if t.endswith(" released")) == [f"{n} released"
                                                                   for n in names], items
    assert {r["kind"] for r in rows} == {"released", "deadline_warning"}
    for m in receiver.messages:
        if m.title.endswith(" released"):
            assert "by its release timer, through " in m.body
            assert "gputui daemon" in m.body or "the console" in m.body
    assert {r["state"] for r in rows} == {"sent"}
    assert "error" not in log.read_text()


async def test_a_failed_run_is_told_when_asked_for(services, receiver):
    from gputui.services.jobs import JobService, JobSpec

    services.config.notify = NotifySettings(urls=[receiver.url("ok")], run_failed=True)
    notifier = services.attached(NotifyService, lambda s: NotifyService(
        s.store, s.config, env={}, timeout_s=2.0, attempts=2, backoff_s=0.05, window_s=0.05))
    inst = await rent(services, "runs")
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("true", name="fine"), JobSpec("exit 3", name="broken")])
    await jobs.wait(inst)
    await jobs.view(inst)  # looked at again (the Jobs screen polls): told once
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = receiver.wait_for(1)
    assert got.title == "runs: run broken failed" and got.type == "warning"
    assert got.body == "runs: run broken ended with exit code 3; the queue goes on."


async def test_a_release_held_for_results_not_home_is_told_once(services, receiver,
                                                               tmp_path: Path):
    from gputui.services.jobs import WhenDone, save_when_done
    from gputui.services.leases import LeaseService

    notifier = send_to(services, receiver.url("ok"))
    inst = await rent(services, "held")
    save_when_done(services, inst.id, WhenDone(policy="keep", pulls=[
        {"remote": "no-such-results", "local": str(tmp_path / "r")}]))
    await overdue(services, inst)
    clock = LeaseService(services)
    first = await clock.tick()
    await clock.tick()
    assert first.released == [] and services.store.get_instance_sync(inst.id).status.live
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = receiver.wait_for(1)
    assert got.title == "held: release held" and got.type == "warning"
    assert got.body.startswith("held was not released: the results asked for (no-such-results) "
                               "are not home yet. It is still billing")
    await asyncio.sleep(0.2)
    assert len(receiver.messages) == 1


async def test_with_the_console_closed_the_daemon_tells_each_event_once(services, receiver,
                                                                      gputui_home: Path):
    """The renter queued runs and walked away: no console, only `gputui daemon` (its URL from
    GPUTUI_NOTIFY_URLS, run_failed asked for in config.toml). A failed run, the queue's end, the
    deadline warning and the release each reach the receiver once, from the daemon."""
    from gputui.services.daemon import daemon_status
    from gputui.services.jobs import JobService, JobSpec
    from tests.services.test_daemon import _until

    (gputui_home / "config.toml").write_text("[notify]\nrun_failed = true\n", encoding="utf-8")
    inst = await rent(services, "walked-away", release_in=timedelta(seconds=45))
    await JobService(services).add(inst, [JobSpec("true", name="fine"),
                                           JobSpec("exit 3", name="broken")])
    await services.close()  # nothing of this process watches from here on
    daemon, log = _start_daemon(gputui_home, receiver.url("ok"))
    try:
        assert await _until(lambda: daemon_status(gputui_home) is not None, 60)

        def kinds() -> set[str]:
            from gputui.store import SessionStore

            store = SessionStore(gputui_home / "state.db")
            try:
                return {r["kind"] for r in store.notifications_sync() if r["state"] == "sent"}
            finally:
                store.close()

        want = {"run_failed", "queue_ended", "deadline_warning", "released"}
        assert await _until(lambda: want <= kinds(), 150, step=1.0), (kinds(), log.read_text())
    finally:
        daemon.terminate()
        await asyncio.to_thread(daemon.wait, 30)
    titles = [line.removeprefix("• ") for m in receiver.messages
              for line in (m.body.splitlines() if m.title.startswith("gputui: ") else [m.title])]
    assert len(titles) == len(set(titles)), titles  # each once
    assert any("broken" in t or "broken" in m.body for t in titles for m in receiver.messages)
    assert any(t.endswith(" released") for t in titles), titles
    assert "Traceback" not in log.read_text()


async def test_an_unlabelled_failed_run_is_run_n_not_run_run_n(services, receiver):
    """A run queued without a label (the runner calls it "run 1"): "runs: run 1 failed", never
    "run run 1 failed" — in the notification, the console's toast, and in Chinese; the Jobs
    list and `costs --runs` show it as "run 1" / 第 1 个任务."""
    from types import SimpleNamespace

    from gputui.format import run_name
    from gputui.i18n import set_language
    from gputui.services.jobs import JobService, JobSpec
    from gputui.services.queuewatch import QueueWatch

    services.config.notify = NotifySettings(urls=[receiver.url("ok")], run_failed=True)
    notifier = services.attached(NotifyService, lambda s: NotifyService(
        s.store, s.config, env={}, timeout_s=2.0, attempts=2, backoff_s=0.05, window_s=0.05))
    inst = await rent(services, "runs")
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("exit 3")])
    view = await jobs.wait(inst)
    [job] = view.jobs
    assert job.name == "run 1"  # as the runner stores it
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = receiver.wait_for(1)
    assert got.title == "runs: run 1 failed", got.title
    assert got.body == "runs: run 1 ended with exit code 3; the queue goes on."
    # the console's toast, from the queue watch
    said: list[str] = []
    services.store.subscribe(lambda n: said.append(str(getattr(n, "text", ""))))
    QueueWatch(services)._say_failed(inst, job)
    assert "runs: run 1 failed (exit code 3)" in said, said
    set_language("zh")
    try:
        assert run_name(job.id, job.name) == "第 1 个任务"
        assert run_name(job.id, "train") == "train"
        said.clear()
        QueueWatch(services)._say_failed(inst, SimpleNamespace(id="1", name="run 1",
                                                               exit_code=3))
        assert "runs：任务 1 失败（退出码 3）" in said, said
    finally:
        set_language("en")
