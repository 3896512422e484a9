"""AutoDL end to end through the real `Services` hub and lease service, against the emulator
with real SSH: create → sshd → commands in a login shell → stop (port and password change) →
start → release only after a completed shutdown → ledger in yuan; the on-instance timer armed
at boot; the 15-day wipe; and no secret anywhere gputui writes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.leases import LeaseService
from gputui.services.views import instance_view
from gputui.store import SessionStore
from tests.providers.autodl_emulator import TEST_TOKEN, AutoDLEmulator
from tests.providers.autodl_fixtures import attach, rent

pytestmark = [pytest.mark.autodl,
              pytest.mark.autodl_emu(creating_s=0.2, starting_s=0.2, ssh_delay=0.8,
                                     shutting_s=0.2)]


async def until(cond, what: str, timeout: float = 20.0):  # noqa: ANN001
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await cond()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_rent_ssh_stop_start_release_in_yuan(services: Services, emu: AutoDLEmulator,
                                                   gputui_home: Path):
    inst = await rent(services)
    assert inst.status == InstanceStatus.RUNNING and inst.billing.currency == "CNY"
    assert inst.billing.price_per_hour == Decimal("1.88")  # live payg_price, not the offer's 0
    assert emu.ssh_error is None
    uuid = inst.provider_id
    # create came back only once sshd accepted (it starts 0.8 s after `running`)
    assert emu.instances[uuid].server is not None and inst.status_detail is None
    first_pw, first_port = emu.password(uuid), emu.instances[uuid].cycles[-1].port
    # commands run in a login shell, so conda's PATH is there; a bare one has no conda
    out = await services.run(inst, "conda --version && nvidia-smi -L | head -1")
    assert out.exit_status == 0 and "conda 24.5.0" in out.stdout and "4090 D" in out.stdout
    link = await services.link(inst)
    bare = await link.run("conda --version")
    assert bare.exit_status == 127
    # stop: billing stops at shutdown; the record says so, and what the disk still costs
    stopped = await services.stop(services.store.get_instance_sync(inst.id))
    assert stopped.status == InstanceStatus.STOPPED and emu.status_of(uuid) == "shutdown"
    view = instance_view(stopped, None)
    assert view["currency"] == "CNY" and "wiped in 14 d" in view["state_detail"]
    assert "(disk)" in view["state_detail"]
    charged = emu.charged(uuid)
    await asyncio.sleep(0.3)
    assert emu.charged(uuid) == charged  # a shut-down instance does not bill
    # start: it comes back elsewhere (new port, new password) and gputui follows the snapshot
    started = await services.start(services.store.get_instance_sync(inst.id))
    assert started.status == InstanceStatus.RUNNING
    assert emu.password(uuid) != first_pw and emu.instances[uuid].cycles[-1].port != first_port
    out = await services.run(started, "echo again")
    assert out.stdout.strip() == "again"
    assert services.store.get_instance_sync(inst.id).ssh.port == emu.instances[uuid].cycles[-1].port
    # release: powers off, waits for shutdown, releases; ledger in yuan, what AutoDL charged
    entry = await services.release(services.store.get_instance_sync(inst.id), "manual")
    assert entry is not None and entry.currency == "CNY"
    assert emu.status_of(uuid) in ("releasing", "released")
    assert abs(entry.compute_cost - emu.charged(uuid)) <= Decimal("0.01")
    # nothing gputui wrote holds the token or any root password
    _assert_no_secrets(gputui_home, emu, [first_pw, emu.password(uuid), TEST_TOKEN])


async def test_release_is_never_sent_before_shutdown_completes(services: Services,
                                                                emu: AutoDLEmulator):
    inst = await rent(services)
    await services.release(inst, "manual")
    calls = [(p.rsplit("/", 1)[-1], code) for _, p, _, code in emu.calls]
    assert ("release", "Success") in calls
    refused = [c for c in calls if c[0] == "release" and c[1] != "Success"]
    assert refused == []  # release came only once shutdown was complete


async def test_on_instance_timer_armed_at_boot_stops_the_meter(services: Services,
                                                               emu: AutoDLEmulator):
    deadline = utcnow() + timedelta(minutes=1)
    inst = await rent(services, lease=Lease(instance_id="x", release_at=deadline))
    [body] = emu.bodies
    assert "shutdown -h" in body["start_command"]
    root = emu.instances[inst.provider_id].root
    from gputui.sandbox.shims.state import power_state

    state = await until(lambda: _async(power_state(root)) if root else _async(None),
                        "the boot-time timer")
    assert state.status == "scheduled" and abs((state.at - deadline).total_seconds()) < 61
    # re-armed over SSH (extend): the lease records the on-instance layer, not a provider one
    lease = await LeaseService(services).arm(inst)
    assert lease.on_instance_armed and not lease.provider_armed


async def _async(value):  # noqa: ANN001, ANN202
    return value


async def test_the_deletion_clock_and_the_wipe(services: Services, emu: AutoDLEmulator):
    inst = await rent(services)
    stopped = await services.stop(inst)
    later = utcnow() + timedelta(days=14, hours=2)
    view = instance_view(stopped, None, now=later)
    assert "⚠" in view["state_detail"] and "stopped 14 d" in view["state_detail"]
    emu.advance(15 * 86400 + 5)
    fresh = await services.refresh(stopped)
    assert fresh.status == InstanceStatus.RELEASED and "released at AutoDL" in fresh.status_detail
    [entry] = services.store.ledger_sync()
    assert entry.currency == "CNY"


async def test_wallet_runs_down_with_use(services: Services, emu: AutoDLEmulator):
    before = await services.account("autodl")
    await rent(services)

    async def lower():  # noqa: ANN202
        after = await services.account("autodl")
        return after if after["balance"] < before["balance"] else None

    after = await until(lower, "the wallet to run down")
    assert after["lifetime_spend"] > before["lifetime_spend"]
    assert after["balance"] + after["lifetime_spend"] == before["balance"] + before["lifetime_spend"]


def _assert_no_secrets(home: Path, emu: AutoDLEmulator, secrets: list[str]) -> None:
    """Search every file under the state folder, the log records, and a CSV export."""
    from gputui.services.costs import export_rows, to_csv

    store = SessionStore(home / "state.db")
    blobs: list[tuple[str, bytes]] = []
    for path in home.rglob("*"):
        if path.is_file():
            blobs.append((str(path), path.read_bytes()))
    blobs.append(("export", to_csv(export_rows(store.ledger_sync(), store.instances_sync()))
                  .encode()))
    blobs.append(("json", json.dumps([instance_view(i, None) for i in store.instances_sync()])
                  .encode()))
    for secret in secrets:
        assert secret
        for where, blob in blobs:
            assert secret.encode() not in blob, f"a secret reached {where}"


async def test_cli_writes_no_secret_and_logs_none(services: Services, emu: AutoDLEmulator,
                                                  gputui_home: Path, caplog,  # noqa: ANN001
                                                  monkeypatch: pytest.MonkeyPatch):
    import logging

    caplog.set_level(logging.DEBUG)
    inst = await rent(services)
    await services.run(inst, "true")
    await services.stop(services.store.get_instance_sync(inst.id))
    await services.start(services.store.get_instance_sync(inst.id))
    pw = emu.password(inst.provider_id)
    from gputui.cli import main

    monkeypatch.setenv("AUTODL_TOKEN", TEST_TOKEN)
    monkeypatch.setenv("AUTODL_API_BASE", emu.base_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        await asyncio.to_thread(main, ["instances", "--json"])
        await asyncio.to_thread(main, ["costs", "--json"])
    text = out.getvalue() + caplog.text
    assert inst.name in text
    for secret in (TEST_TOKEN, pw):
        assert secret not in text
    _assert_no_secrets(gputui_home, emu, [TEST_TOKEN, pw])


async def test_layer_3_releases_at_the_deadline(services: Services, emu: AutoDLEmulator):
    deadline = utcnow() + timedelta(minutes=30)
    inst = await rent(services, lease=Lease(instance_id="x", release_at=deadline))
    leases = LeaseService(services)
    lease = await leases.arm(inst)
    assert lease.provider_armed is False  # no scheduled-shutdown endpoint: nothing claimed
    assert (await leases.tick(deadline - timedelta(minutes=5))).released == []
    result = await leases.tick(deadline + timedelta(seconds=1))
    assert result.released == ["job"] and result.errors == []
    assert emu.status_of(inst.provider_id) in ("releasing", "released")
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "timer"


async def test_at_deadline_stop_powers_off_and_keeps_the_disk(gputui_home: Path,
                                                              emu: AutoDLEmulator):
    config = Config()
    config.providers.autodl.at_deadline = "stop"
    svc = Services(SessionStore(gputui_home / "state.db"), config, state_dir=gputui_home)
    attach(svc, emu)
    try:
        deadline = utcnow() + timedelta(minutes=30)
        inst = await rent(svc, lease=Lease(instance_id="x", release_at=deadline))
        result = await LeaseService(svc).tick(deadline + timedelta(seconds=1))
        assert result.released == ["job"]
        assert emu.status_of(inst.provider_id) == "shutdown"
        kept = svc.store.get_instance_sync(inst.id)
        assert kept.status == InstanceStatus.STOPPED and svc.store.ledger_sync() == []
        # and the next tick leaves it be (the lease has fired)
        assert (await LeaseService(svc).tick(deadline + timedelta(minutes=2))).released == []
        assert svc.store.get_instance_sync(inst.id).status == InstanceStatus.STOPPED
    finally:
        await svc.close()


async def test_a_day_before_the_wipe_it_says_so_once(services: Services, emu: AutoDLEmulator):
    from gputui.store import Notice

    said: list[str] = []
    services.store.subscribe(lambda e: said.append(e.text) if isinstance(e, Notice) else None)
    # kept stopped for two weeks: a confirmed "no timer" (every instance gets one otherwise)
    inst = await rent(services, Lease(instance_id="x", no_timer_confirmed=True))
    await services.stop(inst)
    leases = LeaseService(services)
    await leases.tick(utcnow() + timedelta(days=13))
    assert not [t for t in said if "wiped" in t]
    await leases.tick(utcnow() + timedelta(days=14, hours=1))
    await leases.tick(utcnow() + timedelta(days=14, hours=2))
    [warning] = [t for t in said if "wiped" in t]
    assert "job: stopped 14 d · wiped in 22 h" in warning


async def test_an_ambiguous_create_is_kept_and_found_by_name_later(services: Services,
                                                                   emu: AutoDLEmulator):
    from gputui.services.hub import ServiceError

    emu.fail("/instance/pro/create", 502, after=True)  # made, but the answer is lost
    emu.fail("/instance/pro/list", 500, times=40)  # and looking for it fails for now
    offer = await services.find_offer("autodl", "4090D")
    with pytest.raises(ServiceError, match="it may exist"):
        await services.create("autodl", offer, CreateRequest(offer_id=offer.offer_id, name="job"))
    assert len(emu.bodies) == 1  # never created a second time
    [kept] = services.store.instances_sync(live_only=True)
    assert kept.status == InstanceStatus.REQUESTED and kept.provider_id is None
    emu.clear_faults()  # the listing answers again
    found = await services.refresh(kept)
    assert found.provider_id in emu.instances
    assert found.status in (InstanceStatus.BOOTING, InstanceStatus.RUNNING)
    entry = await services.release(services.store.get_instance_sync(kept.id), "manual")
    assert entry is not None and emu.status_of(found.provider_id) in ("releasing", "released")


async def test_a_written_off_create_that_appears_later_is_released(services: Services,
                                                                   emu: AutoDLEmulator):
    emu.fail("/instance/pro/create", 502, after=True)  # made, answer lost...
    emu.list_hidden = True  # ...and the listing does not show it for a long while
    offer = await services.find_offer("autodl", "4090D")
    with pytest.raises(Exception, match="not created again"):
        await services.create("autodl", offer, CreateRequest(offer_id=offer.offer_id, name="job"))
    [kept] = services.store.instances_sync(live_only=True)
    kept = await services.store.update_instance(kept.id, lambda i: i.model_copy(
        update={"created_at": i.created_at - timedelta(minutes=20)}))
    written_off = await services.refresh(kept)
    assert written_off.status == InstanceStatus.FAILED  # nothing found for 15 minutes
    emu.list_hidden = False  # it shows up after all, running unwatched
    [uuid] = emu.instances
    assert emu.status_of(uuid) in ("creating", "starting", "running")
    assert await services.sweep_strays() == ["job"]
    assert emu.status_of(uuid) in ("releasing", "released")
    [entry] = services.store.ledger_sync()
    assert entry.currency == "CNY" and entry.running_seconds > 0
    assert entry.compute_cost >= emu.charged(uuid) - Decimal("0.01")  # at its live price
    assert entry.compute_cost > 0


async def test_the_lease_clock_settles_a_create_left_midway(gputui_home: Path, tmp_path: Path):
    """A create cut off while AutoDL boots it (Ctrl-C, a console closed) leaves a `booting`
    record while the instance runs and bills. The next tick of the lease clock — not the 30 s
    provider round — asks AutoDL, records it running at its rate, and arms its timer. A create
    still in progress in this process is its own creator's to record, and is left alone."""
    async with AutoDLEmulator(ssh_root=tmp_path / "slow-boxes", creating_s=1.5, starting_s=0.2,
                              ssh_delay=0.2, shutting_s=0.2) as emu:
        svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
        attach(svc, emu)
        try:
            creating = asyncio.create_task(rent(svc, name="cut"))
            await until(lambda: _async(bool(emu.instances)), "the create request")
            [inst] = svc.store.instances_sync()
            await until(lambda: _async(svc.store.get_instance_sync(inst.id).provider_id
                                       is not None), "AutoDL's answer")
            assert not svc.left_mid_create(svc.store.get_instance_sync(inst.id))  # its creator's
            creating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await creating
            left = svc.store.get_instance_sync(inst.id)
            assert left.status == InstanceStatus.BOOTING and svc.left_mid_create(left)
            await until(lambda: _async(emu.status_of(left.provider_id) == "running"),
                        "AutoDL to run it")
            port = emu.instances[left.provider_id].cycles[-1].port
            await until(lambda: _accepts(port), "sshd on the instance")  # (arming needs it)
            await LeaseService(svc).tick()  # refresh=False: an ordinary one-second tick
            now = svc.store.get_instance_sync(inst.id)
            assert now.status == InstanceStatus.RUNNING and now.running_since is not None
            assert instance_view(now, None)["price_per_hour"] == 1.88
            lease = svc.store.get_lease_sync(inst.id)
            assert lease.armed_for == lease.release_at and lease.on_instance_armed
        finally:
            await svc.close()


async def _async(value: object) -> object:
    return value


async def _accepts(port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True
