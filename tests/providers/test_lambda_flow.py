"""Lambda Cloud end to end through the real `Services` hub and lease service, against the
emulator: create → refresh → monitor over SSH → release → ledger, the per-minute meter against
the emulator's bill, and the one auto-release layer that protects a Lambda instance."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from gputui.config import Config
from gputui.models import Instance, InstanceStatus, Lease, LeaseState, utcnow
from gputui.providers.base import CreateRequest, ProviderContext
from gputui.providers.lambda_cloud import LambdaProvider
from gputui.services.hub import ServiceError, Services
from gputui.services.leases import LeaseService
from gputui.store import SessionStore
from tests.providers.lambda_emulator import TEST_KEY, LambdaEmulator

FAST = dict(api_key=TEST_KEY, env={}, poll_interval=0.03, request_interval=0, launch_interval=0,
            backoff=0.01, backoff_max=0.05, timeout=3.0, max_attempts=4)


def attach(svc: Services, emu: LambdaEmulator, **kw: object) -> LambdaProvider:
    ctx = ProviderContext(svc.state_dir, svc.config, svc)
    provider = LambdaProvider(ctx, base_url=emu.base_url, **{**FAST, **kw})
    svc.providers["lambda"] = provider
    return provider


@pytest.fixture
async def emu():
    async with LambdaEmulator(request_interval=0, launch_interval=0, boot_seconds=0.15,
                              terminate_seconds=0.3, gone_seconds=0.3) as e:
        yield e


@pytest.fixture
async def services(gputui_home: Path, emu: LambdaEmulator):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                   link_options={"connect_timeout": 5.0, "backoff_initial": 0.05,
                                 "backoff_max": 0.2})
    attach(svc, emu)
    yield svc
    await svc.close()


async def rent(svc: Services, gpu: str = "A10", lease: Lease | None = None,
               name: str = "job") -> Instance:
    offer = await svc.find_offer("lambda", gpu)
    req = CreateRequest(offer_id=offer.offer_id, gpu_count=offer.gpu_count,
                        name=svc.free_name(name))
    return await svc.create("lambda", offer, req, lease=lease)


async def test_create_refresh_release_ledger(services: Services, emu: LambdaEmulator):
    steps: list[str] = []
    offer = await services.find_offer("lambda", "H100 PCIe")
    inst = await services.create("lambda", offer, CreateRequest(
        offer_id=offer.offer_id, name="train"), progress=steps.append)
    assert steps == ["requested", "booting", "running"]
    assert inst.status == InstanceStatus.RUNNING and inst.provider_id in emu.instances
    assert inst.ssh is not None and (inst.ssh.user, inst.ssh.port) == ("ubuntu", 22)
    stored = services.store.get_instance_sync(inst.id)
    assert stored == inst and stored.billing.price_per_hour == offer.billing.price_per_hour
    # a refresh with nothing new writes nothing new
    assert await services.refresh(inst) == inst
    # the meter agrees with Lambda's per-minute bill, to the cent, at any later moment
    active = emu.active_at(inst.provider_id)
    for later in (timedelta(seconds=30), timedelta(seconds=150), timedelta(hours=2, seconds=5)):
        at = active + later
        assert inst.accrued(at) == emu.bill(inst.provider_id, at), later
    entry = await services.release(inst, "manual")
    assert entry is not None and entry.end_reason == "manual"
    assert emu.status(inst.provider_id) == "terminating"
    assert entry.total == emu.bill(inst.provider_id)  # what Lambda will invoice
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.ended_at is not None
    assert await services.release(ended, "manual") is None  # once only
    assert len(services.store.ledger_sync()) == 1
    await asyncio.sleep(0.7)
    assert emu.status(inst.provider_id) is None  # 404 now; nothing more to do
    assert await services.refresh(ended) == ended


async def test_layer_3_is_what_protects_a_lambda_instance(services: Services,
                                                          emu: LambdaEmulator):
    deadline = utcnow() + timedelta(minutes=30)
    inst = await rent(services, lease=Lease(instance_id="x", release_at=deadline,
                                            idle_util_pct=5, idle_minutes=20))
    leases = LeaseService(services)
    lease = await leases.arm(inst)
    # no shutdown timer on the instance (halting does not stop the billing), no provider timer
    assert lease.on_instance_armed is False and lease.provider_armed is False
    assert emu.count("POST", "/instance-operations") == 1  # the launch only: nothing scheduled
    assert (await leases.tick(deadline - timedelta(minutes=5))).released == []
    result = await leases.tick(deadline + timedelta(seconds=1))
    assert result.released == ["job"] and result.errors == []
    assert emu.status(inst.provider_id) == "terminating"
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "timer"
    assert services.store.get_lease_sync(inst.id).state == LeaseState.FIRED


async def test_reap_from_another_process_releases_what_is_overdue(
        services: Services, emu: LambdaEmulator, gputui_home: Path):
    deadline = utcnow() + timedelta(minutes=5)
    inst = await rent(services, lease=Lease(instance_id="x", release_at=deadline))
    cron = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(cron, emu)
    try:
        result = await LeaseService(cron).reap(deadline + timedelta(seconds=5))
    finally:
        await cron.close()
    assert result.released == ["job"]
    assert emu.status(inst.provider_id) == "terminating"
    [entry] = services.store.ledger_sync()
    assert entry.end_reason == "timer"


async def test_release_interrupted_by_a_crash_is_finished(services: Services,
                                                          emu: LambdaEmulator):
    inst = await rent(services)
    inst = await services.store.update_instance(inst.id, lambda i: i.model_copy(update={
        "status": InstanceStatus.RELEASING, "end_reason": "timer"}))
    await services.provider("lambda").release(inst)  # asked Lambda, then died
    result = await LeaseService(services).reap()
    assert result.errors == []
    ended = services.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "timer"
    [entry] = services.store.ledger_sync()
    assert entry.total == emu.bill(inst.provider_id)


async def test_release_errors_are_retried_until_confirmed(services: Services,
                                                          emu: LambdaEmulator):
    inst = await rent(services)
    emu.fail("/instance-operations/terminate", 503, times=5,
             body="<html><body>503 Service Unavailable</body></html>")
    entry = await services.release(inst, "manual", backoff=0.01)
    assert entry is not None and emu.status(inst.provider_id) == "terminating"


async def test_release_that_keeps_failing_raises_the_alarm(services: Services,
                                                           emu: LambdaEmulator):
    inst = await rent(services)
    emu.fail("/instance-operations/terminate", 500, times=100)
    with pytest.raises(ServiceError, match="release failed"):
        await services.release(inst, "manual", attempts=2, backoff=0.01)
    still = services.store.get_instance_sync(inst.id)
    assert still.status == InstanceStatus.RELEASING and services.store.ledger_sync() == []
    assert emu.status(inst.provider_id) == "active"


async def test_terminated_elsewhere_is_picked_up(services: Services, emu: LambdaEmulator):
    inst = await rent(services)
    async with httpx.AsyncClient(base_url=emu.base_url, timeout=5,
                                 headers={"Authorization": f"Bearer {TEST_KEY}"}) as http:
        r = await http.post("/instance-operations/terminate",
                            json={"instance_ids": [inst.provider_id]})
        assert r.json()["data"]["terminated_instances"][0]["status"] == "terminating"
    fresh = await services.refresh(inst)
    assert fresh.status == InstanceStatus.RELEASED and fresh.end_reason == "external"
    [entry] = services.store.ledger_sync()
    assert entry.end_reason == "external"


async def test_an_instance_that_never_boots_is_terminated_not_left_billing(
        services: Services, emu: LambdaEmulator):
    attach(services, emu, boot_timeout=0.3)
    emu.boot_seconds = 30
    with pytest.raises(ServiceError, match="it was terminated so it does not bill"):
        await rent(services)
    [remote] = emu.instances.values()
    assert emu.status(remote.id) == "terminating" and emu.bill(remote.id) == 0
    [entry] = services.store.ledger_sync()
    assert entry.end_reason == "failed"


async def test_a_create_cut_short_is_found_by_its_tag(services: Services, emu: LambdaEmulator):
    offer = await services.find_offer("lambda", "A10")
    provider = services.provider("lambda")
    inst = Instance(id="crashed01", name="job", provider="lambda", gpu=offer.gpu,
                    billing=offer.billing, region=offer.region, offer_id=offer.offer_id)
    await services.store.put_instance(inst)
    # the launch reached Lambda, the process died before storing its answer
    body = {"region_name": "test-east-1", "instance_type_name": "gpu_1x_a10",
            "ssh_key_names": [await provider.ensure_ssh_key()],
            "tags": [{"key": "gputui-id", "value": inst.id}]}
    async with httpx.AsyncClient(base_url=emu.base_url, timeout=5,
                                 headers={"Authorization": f"Bearer {TEST_KEY}"}) as http:
        [pid] = (await http.post("/instance-operations/launch", json=body)).json()["data"][
            "instance_ids"]
    await asyncio.sleep(0.2)
    found = await services.refresh(inst)
    assert found.provider_id == pid and found.status == InstanceStatus.RUNNING
    # the meter starts at the record's creation: earlier than Lambda's start, never later
    assert found.running_since == inst.created_at <= emu.active_at(pid)
    assert (await services.release(found, "manual")) is not None
    assert emu.status(pid) == "terminating"


@pytest.mark.skipif(not LambdaEmulator.loopback_aliases_work(),
                    reason="needs 127.0.0.2+ on the loopback interface (Linux has them)")
async def test_monitor_over_ssh_and_halting_does_not_stop_billing(gputui_home: Path):
    async with LambdaEmulator(request_interval=0, launch_interval=0, boot_seconds=0.1,
                              ssh_root=gputui_home / "lambda-emulator") as emu:
        svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                       link_options={"connect_timeout": 5.0, "backoff_initial": 0.05,
                                     "backoff_max": 0.2})
        attach(svc, emu, ssh_port=emu.ssh_port)
        try:
            inst = await rent(svc, gpu="RTX A6000")
            assert emu.ssh_error is None
            assert inst.ssh is not None and inst.ssh.host.startswith("127.0.0.")
            assert inst.ssh.user == "ubuntu" and inst.ssh.host != "127.0.0.1"
            # the host key is new (Lambda's API does not publish it): accepted once
            await svc.link(inst, accept_new_host_key=True)
            listed = await svc.run(inst, "nvidia-smi -L")
            assert listed.exit_status == 0 and listed.stdout.count("NVIDIA RTX A6000") == 2
            # a power-off on the instance: SSH goes away, Lambda keeps it active and billing
            await svc.run(inst, "shutdown -h now", timeout=10)
            await asyncio.sleep(0.2)
            fresh = await svc.refresh(inst)
            assert fresh.status == InstanceStatus.RUNNING
            assert emu.status(inst.provider_id) == "active"
            later = utcnow() + timedelta(minutes=3)
            assert emu.bill(inst.provider_id, later) == fresh.accrued(later) > 0
            entry = await svc.release(fresh, "manual")
            assert entry is not None and entry.total == emu.bill(inst.provider_id)
            assert svc.known_hosts.host_keys(inst.ssh.host, inst.ssh.port) == []
        finally:
            await svc.close()


async def test_a_launch_whose_outcome_is_unknown_is_kept_and_found(services: Services,
                                                                    emu: LambdaEmulator):
    """The launch happens but its answer is lost, and the listing that would find it by its tag
    fails too: the instance is kept (not ledgered as failed) and the next refresh adopts it —
    never launched twice, never left billing unseen."""
    emu.fail("/instance-operations/launch", 500, after=True)  # launched, answer lost
    emu.fail("/instances", 500, times=4, method="GET")  # and the tag lookup fails
    lease = Lease(instance_id="", release_at=utcnow() + timedelta(hours=1))
    with pytest.raises(ServiceError, match="gputui keeps looking for it by its tag"):
        await rent(services, lease=lease)
    [remote] = emu.instances.values()  # one launch only
    [kept] = services.store.instances_sync(live_only=True)
    assert kept.status == InstanceStatus.REQUESTED and kept.provider_id is None
    assert services.store.ledger_sync() == []  # not written off as failed
    assert services.store.get_lease_sync(kept.id) is not None  # its release timer stands
    await asyncio.sleep(0.2)
    found = await services.refresh(kept)
    assert found.provider_id == remote.id and found.status == InstanceStatus.RUNNING
    assert (await services.release(found, "manual")) is not None
    assert emu.status(remote.id) == "terminating"


async def test_a_launch_that_never_happened_is_given_up_after_a_while(services: Services,
                                                                      emu: LambdaEmulator):
    emu.fail("/instance-operations/launch", 500, times=4)  # refused before acting, every try
    with pytest.raises(ServiceError, match="gave up after 4 tries"):
        await rent(services)
    assert emu.instances == {}
    [kept] = services.store.instances_sync(live_only=True)
    assert kept.status == InstanceStatus.REQUESTED  # Lambda's listing could lag a launch
    later = kept.model_copy(update={"created_at": kept.created_at - timedelta(minutes=16)})
    await services.store.put_instance(later)
    gone = await services.refresh(later)
    assert not gone.status.live and "never launched" in (gone.status_detail or "")
    [entry] = services.store.ledger_sync()
    assert entry.end_reason == "failed" and entry.compute_cost == 0


async def test_an_instance_launched_for_a_written_off_record_is_terminated(
        services: Services, emu: LambdaEmulator):
    """A record given up as never launched, whose launch did happen (Lambda's listing lagged):
    `gputui reap` finds it by its tag, terminates it and corrects the ledger."""
    offer = await services.find_offer("lambda", "A10")
    provider = services.provider("lambda")
    inst = Instance(id="lost01", name="job", provider="lambda", gpu=offer.gpu,
                    billing=offer.billing, region=offer.region, offer_id=offer.offer_id,
                    created_at=utcnow() - timedelta(minutes=20))
    await services.store.put_instance(inst)
    await services._fail(inst, "never launched at Lambda (no instance carries its tag)")
    [entry] = services.store.ledger_sync()
    assert entry.compute_cost == 0
    body = {"region_name": "test-east-1", "instance_type_name": "gpu_1x_a10",
            "ssh_key_names": [await provider.ensure_ssh_key()],
            "tags": [{"key": "gputui-id", "value": inst.id}]}
    async with httpx.AsyncClient(base_url=emu.base_url, timeout=5,
                                 headers={"Authorization": f"Bearer {TEST_KEY}"}) as http:
        [pid] = (await http.post("/instance-operations/launch", json=body)).json()["data"][
            "instance_ids"]
    notices: list[str] = []
    services.store.subscribe(lambda ev: notices.append(getattr(ev, "text", "")))
    result = await LeaseService(services).reap()
    assert result.released == ["job"] and emu.status(pid) == "terminating"
    [entry] = services.store.ledger_sync()
    assert entry.end_reason == "failed" and entry.compute_cost > 0  # ~20 min of an A10
    assert entry.running_seconds >= 20 * 60
    assert any("launched after all" in n for n in notices)
    assert (await LeaseService(services).reap()).released == []  # once only
