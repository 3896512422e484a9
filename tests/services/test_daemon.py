"""The daemon: one per state folder, keeps deadlines and the idle release with no console open,
and never releases an instance the console is releasing (or has released)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from gputui.models import Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.daemon import (
    Daemon,
    DaemonInfo,
    DaemonLock,
    DaemonRunning,
    daemon_status,
    install,
)
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str, timeout: float = 90, env: dict | None = None):
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True,
                          env=env or run_gputui_env(home), timeout=timeout,
                          stdin=subprocess.DEVNULL)


async def _sandbox_instance(services, name: str, lease: Lease | None = None):
    offer = await services.find_offer("sandbox", "RTX 4090")
    request = CreateRequest(offer_id=offer.offer_id, gpu_count=1, name=name, disk_gb=10)
    return await services.create("sandbox", offer, request, lease=lease)


def _fetch(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


async def _until(condition, deadline_s: float = 60.0, step: float = 0.1):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if await condition() if asyncio.iscoroutinefunction(condition) else condition():
            return True
        await asyncio.sleep(step)
    return False


def test_one_daemon_per_state_folder_and_status(gputui_home: Path):
    gputui_home.mkdir(parents=True, exist_ok=True)
    out = gputui(gputui_home, "daemon", "status")
    assert out.returncode == 3 and out.stdout.startswith("not running"), out
    lock = DaemonLock.acquire(gputui_home, DaemonInfo(os.getpid(), "2026-01-01T00:00:00+00:00",
                                                      "127.0.0.1:9400", 2.0))
    try:
        assert daemon_status(gputui_home).pid == os.getpid()
        with pytest.raises(DaemonRunning, match=f"pid {os.getpid()}"):
            DaemonLock.acquire(gputui_home, DaemonInfo(1, "x"))
        status = json.loads(gputui(gputui_home, "daemon", "status", "--json").stdout)
        assert status["running"] and status["pid"] == os.getpid()
        assert status["metrics"] == "127.0.0.1:9400"
        second = gputui(gputui_home, "daemon")
        assert second.returncode == 2 and "already running" in second.stderr
        assert second.stderr.strip().count("\n") == 0 and "Traceback" not in second.stderr
    finally:
        lock.release()
    assert daemon_status(gputui_home) is None
    assert gputui(gputui_home, "daemon", "status").returncode == 3


def test_a_dead_daemon_is_not_reported_running(gputui_home: Path):
    gputui_home.mkdir(parents=True, exist_ok=True)
    code = ("import os, sys; from gputui.services.daemon import DaemonLock, DaemonInfo;"
            "from pathlib import Path;"
            "DaemonLock.acquire(Path(sys.argv[1]), DaemonInfo(os.getpid(), 'now'));"
            "os._exit(9)")  # killed: no clean-up ran
    subprocess.run([sys.executable, "-c", code, str(gputui_home)], check=False,
                   env=run_gputui_env(gputui_home), timeout=60)
    assert daemon_status(gputui_home) is None
    DaemonLock.acquire(gputui_home, DaemonInfo(os.getpid(), "now")).release()


async def test_a_claimed_release_is_left_to_its_holder(services, gputui_home: Path):
    from gputui.config import Config
    from gputui.services.hub import Services
    from gputui.store import SessionStore
    from tests.conftest import FAST_LINKS

    inst = await _sandbox_instance(services, "claimed")
    other = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                     sandbox_boot_seconds=0, link_options=dict(FAST_LINKS))
    calls: list[str] = []
    provider = other.provider("sandbox")
    real_release = provider.release

    async def counting(i):
        calls.append(i.id)
        await real_release(i)

    provider.release = counting  # type: ignore[method-assign]
    try:
        assert await services.store.claim_release(inst.id, services.claim_owner)
        assert await other.release(inst, "manual") is None  # the console holds it
        assert calls == [] and (await other.store.get_instance(inst.id)).status.live
        await services.store.drop_claim(inst.id, services.claim_owner)
        entry = await services.release(inst, "manual")
        assert entry is not None
        # the other process still holds the old record: it must not release it again
        assert await other.release(inst, "timer") is None
        assert calls == []
        assert len(await services.store.ledger()) == 1
    finally:
        await other.close()


async def test_console_and_daemon_together_release_each_instance_once(services,
                                                                     gputui_home: Path):
    """A daemon process and a console's lease clock tick over the same store as three
    deadlines pass: each instance is released once, by one of them, with no error."""
    from gputui.services.leases import LeaseService

    due = utcnow() + timedelta(seconds=12)
    names = ["both-a", "both-b", "both-c"]
    for name in names:  # only layer 3: nothing armed on the instance or at the provider
        await _sandbox_instance(services, name, Lease(instance_id="x", release_at=due))
    console_calls: list[str] = []
    provider = services.provider("sandbox")
    real_release = provider.release

    async def counting(i):
        console_calls.append(i.name)
        await real_release(i)

    provider.release = counting  # type: ignore[method-assign]
    log = gputui_home / "daemon.err"
    with log.open("w") as err:
        daemon = subprocess.Popen(  # noqa: ASYNC220 (started once; the test awaits its effects)
            [*GPUTUI, "daemon", "--interval", "1", "--metrics", "127.0.0.1:0"], stdout=err, stderr=err,
            env=run_gputui_env(gputui_home), stdin=subprocess.DEVNULL)
    try:
        assert await _until(lambda: (daemon_status(gputui_home) or DaemonInfo(0, "")).metrics
                            not in (None, "127.0.0.1:0"), 60)
        where = daemon_status(gputui_home).metrics
        scraped = await asyncio.to_thread(_fetch, f"http://{where}/metrics")
        assert scraped.count("gputui_instance_release_in_seconds{") == 3
        console = LeaseService(services)
        notices: list[str] = []
        services.store.subscribe(lambda ev: notices.append(getattr(ev, "text", "")))

        async def all_ended() -> bool:
            await console.tick()
            return not await services.store.instances(live_only=True)

        assert await _until(all_ended, 90, step=0.5)
    finally:
        daemon.terminate()
        await asyncio.to_thread(daemon.wait, 30)
    text = log.read_text()
    daemon_released = re.findall(r"information: (both-\w) released \(timer\)", text)
    assert sorted(console_calls + daemon_released) == names, (console_calls, text)
    ledger = await services.store.ledger()
    assert sorted(e.name for e in ledger) == names
    assert all(e.end_reason == "timer" for e in ledger)
    assert not [n for n in notices if "could not release" in n or "STILL BILLING" in n]
    assert "error" not in text, text
    assert daemon_status(gputui_home) is None  # SIGTERM: the lock went with it


async def test_daemon_releases_on_idle_from_telemetry(services, gputui_home: Path):
    """The idle release where a power-off would not stop the billing: from the live stream."""
    inst = await _sandbox_instance(services, "idle", Lease(
        instance_id="x", release_at=utcnow() + timedelta(hours=2), idle_util_pct=5,
        idle_minutes=0.05))
    notices: list[str] = []
    daemon = Daemon(services, interval=0.5, tick_s=0.25, on_notice=lambda n: notices.append(n.text))
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop))
    try:
        assert await _until(lambda: not services.store.get_instance_sync(inst.id).status.live, 90)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert services.store.get_instance_sync(inst.id).end_reason == "idle"
    assert any("idle released (idle)" in n for n in notices), notices
    assert daemon.watched() == []  # closed: no stream left running


def test_install_writes_a_systemd_user_unit(gputui_home: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    done = install(gputui_home, systemd=True, metrics="127.0.0.1:9400")
    assert done.kind == "systemd"
    assert done.path == tmp_path / "xdg" / "systemd" / "user" / "gputui-daemon.service"
    unit = done.path.read_text()
    assert f"ExecStart={sys.executable} -m gputui daemon --metrics 127.0.0.1:9400" in unit
    assert f"Environment=GPUTUI_HOME={gputui_home}" in unit
    assert "WantedBy=default.target" in unit
    assert "enable --now gputui-daemon.service" in done.next_step

    cron = install(gputui_home, systemd=False)
    assert cron.kind == "cron" and cron.path is None
    assert cron.text.startswith("* * * * * ") and "-m gputui reap" in cron.text


def test_install_without_systemd_prints_the_cron_line(gputui_home: Path):
    if Path("/run/systemd/system").is_dir():
        pytest.skip("systemd runs on this machine: --install writes a unit instead")
    out = gputui(gputui_home, "daemon", "--install")
    assert out.returncode == 0, out.stderr
    assert "crontab" in out.stdout and "-m gputui reap" in out.stdout


def test_notices_become_desktop_notifications_and_log_lines(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture):
    from gputui.cli.daemon import Notifier
    from gputui.store import Notice

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sent"
    script = bin_dir / "notify-send"
    script.write_text(f"#!/bin/sh\nprintf '%s|' \"$@\" >> {record}\necho >> {record}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DISPLAY", ":0")
    notifier = Notifier()
    notifier(Notice("job-1 will be released in 1 min\x1b[31m", "warning", bell=True))
    notifier(Notice("job-1 armed", "information"))
    for child in notifier._children:
        child.wait(30)
    sent = record.read_text().splitlines()
    assert sent == ["-u|normal|-a|gputui|gputui|job-1 will be released in 1 min|"]
    err = capsys.readouterr().err
    assert "warning: job-1 will be released in 1 min\n" in err and "\x1b" not in err
    assert "information: job-1 armed" in err


async def test_daemon_finishes_a_release_a_crash_left_half_done(services):
    from gputui.models import InstanceStatus

    inst = await _sandbox_instance(services, "half", Lease(
        instance_id="x", release_at=utcnow() + timedelta(hours=2)))
    # the console marked it RELEASING (reason: timer) and died before the provider was asked
    await services.store.update_instance(inst.id, lambda i: i.model_copy(update={
        "status": InstanceStatus.RELEASING, "end_reason": "timer"}))
    daemon = Daemon(services)
    try:
        await daemon.step()
    finally:
        await daemon.telemetry.close()
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "timer"
    [entry] = await services.store.ledger()
    assert entry.end_reason == "timer"


async def test_daemon_watches_budgets_and_releases_at_the_cap(services):
    from decimal import Decimal

    services.config.budget.per_instance = Decimal("0.001")
    services.config.budget.release_at_cap = True
    inst = await _sandbox_instance(services, "pricey", Lease(
        instance_id="x", release_at=utcnow() + timedelta(hours=2)))
    notices: list[str] = []
    daemon = Daemon(services, on_notice=lambda n: notices.append(n.text))

    async def over_cap() -> bool:
        await daemon.step()
        return not services.store.get_instance_sync(inst.id).status.live

    try:
        assert await _until(over_cap, 150, step=0.5)
    finally:
        await daemon.telemetry.close()
    assert services.store.get_instance_sync(inst.id).end_reason == "budget"
    assert any(n.startswith("Budget: pricey has cost") for n in notices), notices
    assert any("pricey released: budget cap reached" in n for n in notices), notices


async def test_release_command_says_another_process_is_releasing(services, gputui_home: Path):
    inst = await _sandbox_instance(services, "held")
    assert await services.store.claim_release(inst.id, "the-daemon")
    out = await asyncio.to_thread(gputui, gputui_home, "release", "held")
    assert out.returncode == 1 and "another gputui process" in out.stderr, out
    assert services.store.get_instance_sync(inst.id).status.live  # untouched
    await services.store.drop_claim(inst.id, "the-daemon")
    out = await asyncio.to_thread(gputui, gputui_home, "release", "held")
    assert out.returncode == 0 and out.stdout.startswith("released held"), out


async def test_a_daemon_alone_pulls_the_results_and_releases_when_the_queue_ends(
        services, gputui_home: Path, tmp_path: Path):
    """`gputui jobs NAME when-done release --pull` and then nothing but `gputui daemon`: no
    console, no `gputui reap`. When the queue ends, the daemon brings the results home, then
    releases the instance (reason "done"), once."""
    from gputui.models import InstanceStatus
    from gputui.services.jobs import JobService, JobSpec

    inst = await _sandbox_instance(services, "queue", Lease(
        instance_id="x", release_at=utcnow() + timedelta(hours=2)))
    # the run waits for a file, so the queue ends only once the daemon alone is watching
    await JobService(services).add(inst, [JobSpec(
        "while [ ! -e go ]; do sleep 0.2; done; mkdir -p res; echo 42 > res/x", name="train")])
    results = tmp_path / "results"
    set_policy = await asyncio.to_thread(
        gputui, gputui_home, "jobs", "queue", "when-done", "release", "--pull", "res",
        "--to", str(results))
    assert set_policy.returncode == 0, set_policy.stderr
    assert "done now" not in set_policy.stdout  # still running: nothing done yet
    log = gputui_home / "daemon.err"
    with log.open("w") as err:
        daemon = subprocess.Popen(  # noqa: ASYNC220 (started once; the test awaits its effects)
            [*GPUTUI, "daemon", "--interval", "1"], stdout=err, stderr=err,
            env=run_gputui_env(gputui_home), stdin=subprocess.DEVNULL)
    try:
        assert await _until(lambda: daemon_status(gputui_home) is not None, 60)
        assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING
        (gputui_home / "sandbox" / "instances" / inst.id / "go").touch()  # the run finishes

        def ended() -> bool:
            services.store.poll_external()
            return not services.store.get_instance_sync(inst.id).status.live

        assert await _until(ended, 120, step=0.3), log.read_text()
    finally:
        daemon.terminate()
        await asyncio.to_thread(daemon.wait, 30)
    assert (results / "x").read_text() == "42\n"  # home before the release
    ended_inst = services.store.get_instance_sync(inst.id)
    assert ended_inst.status == InstanceStatus.RELEASED and ended_inst.end_reason == "done"
    [entry] = await services.store.ledger()
    assert entry.end_reason == "done" and entry.currency == "USD"
    text = log.read_text()
    assert f"queue: queue done — released, results in {results}" in text, text
    assert "error" not in text, text


async def test_an_unreadable_when_done_record_is_said_once_and_the_others_are_released(
        services, monkeypatch: pytest.MonkeyPatch):
    """One instance's when-done record cut short: the daemon says so once (again only when the
    record changes), holds that instance, and releases the other at its deadline."""
    from gputui.services import jobs as jobs_module

    monkeypatch.setattr(jobs_module, "CHECK_EVERY_S", 0.0)  # every step looks at every record
    broken = await _sandbox_instance(services, "broken", Lease(
        instance_id="x", release_at=utcnow() - timedelta(minutes=1)))
    due = await _sandbox_instance(services, "due", Lease(
        instance_id="x", release_at=utcnow() + timedelta(hours=2)))
    record = services.state_dir / "jobs" / f"{broken.id}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"policy": "rel')
    services.store.update_lease_sync(due.id, lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(minutes=1)}))
    notices: list[tuple[str, str]] = []
    daemon = Daemon(services, on_notice=lambda n: notices.append((n.severity, n.text)))
    try:
        for _ in range(6):  # six seconds of the daemon's clock
            await daemon.step()
        assert not services.store.get_instance_sync(due.id).status.live
        assert services.store.get_instance_sync(broken.id).status.live  # held
        errors = [text for severity, text in notices if severity == "error"]
        assert len(errors) == 1, notices
        assert str(record) in errors[0] and "broken is held" in errors[0]
        assert daemon.errors == 0  # the clock itself never failed
        from gputui.services.jobs import when_done_label

        assert when_done_label(services, broken.id, short=True) == \
            "held: when-done record unreadable"  # what Home shows beside its timer

        record.write_text('{"policy": "release", "pulls": 3}')  # changed, still bad: said again
        for _ in range(3):
            await daemon.step()
        errors = [text for severity, text in notices if severity == "error"]
        assert len(errors) == 2 and "pulls is not a list" in errors[1], notices
    finally:
        await daemon.telemetry.close()


async def test_a_failing_clock_is_logged_once_until_the_error_changes(services,
                                                                       monkeypatch):
    notices: list[str] = []
    daemon = Daemon(services, on_notice=lambda n: notices.append(n.text))
    error = ["disk I/O error"]

    async def broken_tick(**_kw):
        raise OSError(error[0])

    monkeypatch.setattr(daemon.leases, "tick", broken_tick)
    try:
        for _ in range(5):
            await daemon.step()
        assert daemon.errors == 5
        assert notices == ["auto-release check failed: OSError: disk I/O error"]
        error[0] = "database is locked"
        await daemon.step()
        await daemon.step()
        assert notices[1:] == ["auto-release check failed: OSError: database is locked"]
    finally:
        await daemon.telemetry.close()
