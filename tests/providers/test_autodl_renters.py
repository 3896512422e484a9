"""AutoDL as renters live it (issue 26, items 1–3), against the AutoDL emulator: waiting for a
sold-out card, the 15-day wipe (its date, the timer that keeps running, the keeper), and the
data disk (push/cwd there, the disks' use with a warning at 90 %)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from gputui.config import Config, NotifySettings
from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.keeper import KEEP_BEFORE, Keeper, stop_notes
from gputui.services.leases import LeaseService
from gputui.services.notify import NotifyService
from gputui.services.pushes import default_remote, resolve_cwd
from gputui.services.views import instance_view
from gputui.services.waiting import (
    MIN_BACKOFF_S,
    WaitExpired,
    WaitPlan,
    command_backoff,
    create_waiting,
    start_waiting,
)
from gputui.store import SessionStore
from tests.conftest import GPUTUI
from tests.providers.autodl_emulator import AutoDLEmulator
from tests.providers.autodl_fixtures import attach, rent
from tests.providers.test_autodl_cli import env_for, gputui

pytestmark = [pytest.mark.autodl,
              pytest.mark.autodl_emu(ssh_delay=0.3)]


def tiny(limit: float = 30.0) -> WaitPlan:
    return WaitPlan(limit=timedelta(seconds=limit), backoff=lambda _n: 0.05)


async def offer_and_request(svc: Services, name: str = "wait"):
    offer = await svc.find_offer("autodl", "4090 D")
    return offer, CreateRequest(offer_id=offer.offer_id, name=name)


# -- 1. waiting for a card ------------------------------------------------------------------


def test_the_command_backoff_is_at_least_20_s_with_jitter():
    gaps = [command_backoff(n) for n in (1, 1, 1, 1, 2, 5, 50)]
    assert min(gaps) >= MIN_BACKOFF_S == 20
    assert len({round(g, 3) for g in gaps[:4]}) > 1  # jitter: not in step
    assert max(gaps) <= 130  # well under the 15 minutes a silent record is kept


async def test_a_sold_out_card_is_waited_for_and_rented_once(
        services: Services, emu: AutoDLEmulator, receiver):
    services.config.notify = NotifySettings(urls=[receiver.url("ok")])
    notifier = services.attached(NotifyService, lambda s: NotifyService(
        s.store, s.config, env={}, timeout_s=2.0, attempts=2, backoff_s=0.05, window_s=0.05))
    emu.sell_out("4090D", 3)
    offer, req = await offer_and_request(services)
    said: list[str] = []
    plan = tiny()
    inst = await create_waiting(services, "autodl", offer, req, plan,
                                lease=Lease(instance_id="x",
                                            release_at=utcnow() + timedelta(hours=2)),
                                keep_span=timedelta(hours=2), progress=said.append)
    assert inst.status == InstanceStatus.RUNNING and plan.tries == 4
    # four creates, three refused for stock, one instance — never two
    assert emu.count("/instance/pro/create") == 4 and len(emu.instances) == 1
    names = {b["instance_name"] for b in emu.bodies}
    assert names == {f"wait.gputui-{inst.id}"}  # every try carries the one record's name
    tries = [s for s in said if "try" in s]
    assert len(tries) == 3 and "no GeForce RTX 4090 D (China SKU) free — try 1; next in 0 s" \
        in tries[0] and "left" in tries[0]
    # one record only, and its timer counts from the try that rented
    [rec] = services.store.instances_sync()
    lease = services.store.get_lease_sync(rec.id)
    assert lease is not None and lease.release_at is not None
    assert timedelta(hours=1, minutes=59) < lease.release_at - inst.created_at <= \
        timedelta(hours=2, seconds=5)
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = await asyncio.to_thread(receiver.wait_for, 1)
    assert got.title == "wait: a card was free — it is starting"
    assert "after 4 tries" in got.body


async def test_waiting_stops_at_the_limit_with_nothing_rented(services: Services,
                                                              emu: AutoDLEmulator):
    emu.sell_out("4090D", 1000)
    offer, req = await offer_and_request(services)
    plan = WaitPlan(limit=timedelta(seconds=0.5), backoff=lambda _n: 0.1)
    with pytest.raises(WaitExpired, match=r"no GeForce RTX 4090 D .* was free within .*"
                                          r"nothing was rented"):
        await create_waiting(services, "autodl", offer, req, plan)
    assert plan.tries >= 2 and emu.instances == {}
    [rec] = services.store.instances_sync()
    assert rec.status == InstanceStatus.FAILED and "nothing was rented" in (rec.status_detail
                                                                            or "")
    assert rec.accrued() == 0


async def test_a_lost_answer_while_waiting_is_found_by_name_not_created_again(
        services: Services, emu: AutoDLEmulator):
    emu.sell_out("4090D", 2)
    offer, req = await offer_and_request(services)
    pauses = 0

    async def sleep(_s: float) -> None:
        nonlocal pauses
        pauses += 1
        if pauses == 2:  # the third try is made, and its answer is lost
            emu.fail("/instance/pro/create", 500, after=True)

    plan = WaitPlan(limit=timedelta(seconds=30), backoff=lambda _n: 0.0, sleep=sleep)
    inst = await create_waiting(services, "autodl", offer, req, plan)
    assert plan.tries == 3 and emu.count("/instance/pro/create") == 3
    assert len(emu.instances) == 1 and inst.status == InstanceStatus.RUNNING
    assert inst.provider_id in emu.instances


async def test_a_lost_refusal_stops_the_wait_and_keeps_looking(services: Services,
                                                               emu: AutoDLEmulator):
    emu.sell_out("4090D", 1000)
    emu.fail("/instance/pro/create", 500, after=True)  # a refusal whose answer is lost
    offer, req = await offer_and_request(services)
    plan = tiny()
    with pytest.raises(Exception, match="not created again"):
        await create_waiting(services, "autodl", offer, req, plan)
    assert plan.tries == 1 and emu.count("/instance/pro/create") == 1
    [rec] = services.store.instances_sync()
    assert rec.status == InstanceStatus.REQUESTED  # kept: refresh looks for it by name


async def test_ctrl_c_between_tries_rents_nothing(services: Services, emu: AutoDLEmulator):
    emu.sell_out("4090D", 1000)
    offer, req = await offer_and_request(services)
    plan = WaitPlan(limit=timedelta(hours=2), backoff=lambda _n: 30.0)
    task = asyncio.create_task(create_waiting(services, "autodl", offer, req, plan))
    while emu.count("/instance/pro/create") < 1:  # noqa: ASYNC110 - the emulator has no event
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert emu.instances == {}
    [rec] = services.store.instances_sync()
    assert rec.status == InstanceStatus.FAILED and "nothing was rented" in (rec.status_detail
                                                                            or "")


async def test_another_refusal_is_not_waited_for(services: Services, emu: AutoDLEmulator):
    emu.refuse("/instance/pro/create", "请求参数错误")
    offer, req = await offer_and_request(services)
    plan = tiny()
    with pytest.raises(Exception, match="refused as invalid"):
        await create_waiting(services, "autodl", offer, req, plan)
    assert plan.tries == 1 and emu.instances == {}


async def test_start_waits_for_a_free_gpu_on_its_machine(services: Services,
                                                         emu: AutoDLEmulator):
    inst = await rent(services, Lease(instance_id="x", no_timer_confirmed=True))
    stopped = await services.stop(inst)
    emu.machine_full(inst.provider_id, 2)
    said: list[str] = []
    plan = tiny()
    fresh = await start_waiting(services, stopped, plan, progress=said.append)
    assert fresh.status == InstanceStatus.RUNNING and plan.tries == 3
    assert emu.status_of(inst.provider_id) == "running"
    assert any("no free GPU on its machine — try 1" in s for s in said)
    # at the limit it stays stopped, and says so
    await services.stop(fresh)
    emu.machine_full(inst.provider_id, 1000)
    again = services.store.get_instance_sync(inst.id)
    with pytest.raises(WaitExpired, match="no free GPU within .* it stays stopped"):
        await start_waiting(services, again, WaitPlan(limit=timedelta(seconds=0.3),
                                                      backoff=lambda _n: 0.1))
    assert emu.status_of(inst.provider_id) == "shutdown"


async def test_the_cli_wait_shows_tries_and_stops_on_ctrl_c(gputui_home: Path,
                                                           emu: AutoDLEmulator):
    emu.sell_out("4090D", 1000)
    env = env_for(gputui_home, emu)
    proc = await asyncio.to_thread(
        subprocess.Popen, [*GPUTUI, "create", "--provider", "autodl", "--gpu", "4090D",
                           "--name", "w", "--wait", "2h"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not any("try 1" in x for x in lines):
            line = await asyncio.to_thread(proc.stderr.readline)
            assert line, lines
            lines.append(line)
        assert any("next in 2" in x or "next in 3" in x for x in lines), lines  # ≥ 20 s
        assert "left" in lines[-1]
        proc.send_signal(signal.SIGINT)
        rest = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    tail = [x for x in rest[1].splitlines() if x.strip()]
    assert len(tail) == 1 and "Traceback" not in rest[1], rest[1]
    assert "stopped waiting for a card after 1 try (Ctrl-C)" in tail[0] and "nothing was rented" in \
        tail[0]
    assert emu.instances == {}
    out = await gputui(env, "instances", "--all", "--json")
    [view] = json.loads(out.stdout)
    assert view["status"] == "failed"


async def test_the_cli_wait_at_its_limit_is_one_line(gputui_home: Path, emu: AutoDLEmulator):
    emu.sell_out("4090D", 1000)
    env = env_for(gputui_home, emu)
    out = await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--wait", "5s")
    assert out.returncode == 1
    assert "was free within 0m 05s (1 try); nothing was rented" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 2  # "requested", then the one line
    assert emu.instances == {}
    bad = await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--wait", "soon")
    assert bad.returncode == 2 and "--wait" in bad.stderr and emu.count(
        "/instance/pro/create") == 1


# -- 2. the 15-day wipe -------------------------------------------------------------------------


async def test_stop_says_the_wipe_date_and_that_the_timer_keeps_running(
        gputui_home: Path, emu: AutoDLEmulator):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(svc, emu)
    try:
        inst = await rent(svc, Lease(instance_id="x", release_at=utcnow() + timedelta(hours=3)),
                          name="wipe")
    finally:
        await svc.close()
    env = env_for(gputui_home, emu)
    out = await gputui(env, "stop", "wipe")
    assert out.returncode == 0, out.stderr
    wipe = emu.wipe_at(inst.provider_id)
    assert wipe is not None
    from datetime import datetime

    date = f"{datetime.fromtimestamp(wipe - emu.offset).astimezone():%Y-%m-%d}"
    assert f"wipes its data on {date}" in out.stdout and "关机 15 天后释放" in out.stdout
    assert "release timer keeps running: it is RELEASED at" in out.stdout
    assert "gputui keep wipe" in out.stdout
    [view] = json.loads((await gputui(env, "instances", "--json")).stdout)
    assert view["wipe_at"].startswith(date)
    zh = await gputui({**env, "LANG": "zh_CN.UTF-8", "LANGUAGE": "zh_CN"}, "keep", "wipe")
    assert zh.returncode == 0, zh.stderr
    assert "无卡模式" in zh.stdout and "每 10 分钟" in zh.stdout, zh.stdout
    assert "¥" in zh.stdout


async def test_the_keeper_powers_it_on_and_off_before_the_wipe(services: Services,
                                                               emu: AutoDLEmulator):
    inst = await rent(services, Lease(instance_id="x", no_timer_confirmed=True))
    stopped = await services.stop(inst)
    before_wipe = emu.wipe_at(inst.provider_id)
    cycles = len(emu.instances[inst.provider_id].cycles)
    keeper = Keeper(services)
    lease = services.store.get_lease_sync(inst.id)
    # off by default; not yet due
    assert await keeper.tick(stopped, lease, utcnow() + timedelta(days=14, hours=20)) is None
    await services.store.update_lease(inst.id, lambda le: le.model_copy(
        update={"keep_stopped": True}))
    lease = services.store.get_lease_sync(inst.id)
    assert await keeper.tick(stopped, lease, utcnow() + timedelta(days=10)) is None
    # no free GPU: told, retried later, still stopped
    emu.machine_full(inst.provider_id, 1)
    due = utcnow() + timedelta(days=15) - KEEP_BEFORE + timedelta(minutes=5)
    notices: list[str] = []
    services.store.subscribe(lambda ev: notices.append(str(getattr(ev, "text", ""))))
    assert await keeper.tick(stopped, lease, due) == "failed"
    assert any("could not power it on" in n for n in notices)
    assert emu.status_of(inst.provider_id) == "shutdown"
    keeper._retry_at.clear()  # ten minutes later
    assert await keeper.tick(stopped, lease, due) == "kept"
    fresh = services.store.get_instance_sync(inst.id)
    assert fresh.status == InstanceStatus.STOPPED
    after = emu.wipe_at(inst.provider_id)
    assert after is not None and before_wipe is not None and after > before_wipe
    # one power cycle that ran (and billed) between on and off
    run = emu.instances[inst.provider_id].cycles
    assert len(run) == cycles + 1 and run[-1].off_at is not None
    assert run[-1].off_at > run[-1].running_from


async def test_the_keeper_runs_in_the_lease_tick_from_config(gputui_home: Path,
                                                             emu: AutoDLEmulator):
    config = Config()
    config.providers.autodl.keep_stopped = True
    svc = Services(SessionStore(gputui_home / "state.db"), config, state_dir=gputui_home)
    attach(svc, emu)
    try:
        inst = await rent(svc, Lease(instance_id="x", no_timer_confirmed=True))
        await svc.stop(inst)
        first = len(emu.instances[inst.provider_id].cycles)
        await LeaseService(svc).tick(utcnow() + timedelta(days=15) - timedelta(hours=1))
        assert len(emu.instances[inst.provider_id].cycles) == first + 1
        assert emu.status_of(inst.provider_id) in ("shutting_down", "shutdown")
        notes = stop_notes(svc, svc.store.get_instance_sync(inst.id),
                           svc.store.get_lease_sync(inst.id))
        assert any("the keeper powers it on and off about" in n for n in notes)
    finally:
        await svc.close()


# -- 3. the data disk ---------------------------------------------------------------------------


async def test_disks_use_in_json_with_a_warning_at_90_percent(services: Services,
                                                              emu: AutoDLEmulator):
    inst = await rent(services)
    view = instance_view(services.store.get_instance_sync(inst.id), None)
    assert view["disks"]["system"]["percent"] == 24.0  # 12 of 30 + 20 GB (--disk 50)
    assert view["disks"]["data"]["total_bytes"] == 50 << 30 and view["disks"]["warnings"] == []
    emu.use_disk(inst.provider_id, data_gb=47)
    fresh = await services.refresh(inst)
    view = instance_view(fresh, None)
    assert view["disks"]["data"]["percent"] == 94.0
    assert view["disks"]["warnings"] == ["the data disk is at 94 % — runs fail when it fills"]


async def test_push_and_cwd_default_to_the_data_disk(services: Services, emu: AutoDLEmulator):
    inst = await rent(services)
    assert default_remote(services, inst, "proj") == "~/autodl-tmp/proj"
    assert resolve_cwd(services, inst, "proj") == "autodl-tmp/proj"
    assert resolve_cwd(services, inst, "autodl-tmp/proj") == "autodl-tmp/proj"  # not twice
    assert resolve_cwd(services, inst, "~/proj") == "proj"  # the home, as written
    assert resolve_cwd(services, inst, "/data/x") == "/data/x"
    assert resolve_cwd(services, inst, None) is None


async def test_push_lands_on_the_data_disk_from_the_cli(gputui_home: Path, emu: AutoDLEmulator,
                                                        tmp_path: Path):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(svc, emu)
    try:
        inst = await rent(svc, name="disk")
    finally:
        await svc.close()
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text("print('hi')\n")
    env = env_for(gputui_home, emu)
    out = await gputui(env, "push", "disk", str(proj))
    assert out.returncode == 0, out.stderr
    box = emu.instances[inst.provider_id].root
    assert box is not None and (box / "autodl-tmp" / "proj" / "train.py").exists()
    assert not (box / "proj").exists()


async def test_the_stop_dialog_in_chinese_says_the_wipe_date_and_the_timer(
        gputui_home: Path, emu: AutoDLEmulator):
    from gputui.app import GpuTuiApp
    from gputui.i18n import set_language
    from tests.ui.waits import question

    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(svc, emu)
    await rent(svc, Lease(instance_id="x", release_at=utcnow() + timedelta(hours=2)),
               name="train")
    set_language("zh")
    try:
        app = GpuTuiApp(config=Config(), store=svc.store, services=svc, remember_theme=False,
                        background=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("s")
            text = await question(pilot)
            wipe = (utcnow() + timedelta(days=15)).astimezone()
            assert f"autodl 将于 {wipe:%Y-%m-%d}" in text and "关机 15 天后释放" in text, text
            assert "释放计时器仍在运行" in text and "gputui keep train" in text
            await pilot.press("n")
    finally:
        set_language("en")
        await svc.close()
