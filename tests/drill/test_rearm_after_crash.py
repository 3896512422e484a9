"""Drill: after a crash, every layer a lease names is verified and re-armed — the provider's
scheduled termination and the on-instance `shutdown` alike — by `gputui reap` and at the
console's start."""

from __future__ import annotations

from datetime import timedelta

from gputui.models import Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.leases import LeaseService
from tests.conftest import FAST_LINKS


async def test_create_killed_before_the_answer_was_recorded_is_fully_rearmed(services: Services):
    """The state `kill -9` 0.6 s into `gputui create` leaves: the request and its lease are
    recorded, the platform made the instance, the answer and the arming never happened."""
    from gputui.models import Instance, InstanceStatus

    offer = await services.find_offer("sandbox", "4090")
    request = CreateRequest(offer_id=offer.offer_id, name="crash")
    inst = Instance(id="crash1", name="crash", provider="sandbox", offer_id=offer.offer_id,
                    gpu=offer.gpu, billing=offer.billing, status=InstanceStatus.REQUESTED)
    await services.store.put_instance(inst)
    await services.store.put_lease(Lease(instance_id=inst.id,
                                         release_at=utcnow() + timedelta(hours=2)))
    await services.provider("sandbox").create(request, inst)  # the platform's side happened

    # `gputui reap`: another process (again, if the platform was still booting it)
    reaper = Services(services.store, services.config, state_dir=services.state_dir,
                      sandbox_boot_seconds=0, link_options=dict(FAST_LINKS))
    try:
        for _ in range(3):
            result = await LeaseService(reaper).reap()
            assert result.errors == []
            if reaper.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING:
                break
        live = reaper.store.get_instance_sync(inst.id)
        assert live.status == InstanceStatus.RUNNING
        lease = reaper.store.get_lease_sync(inst.id)
        assert lease.armed_for == lease.release_at and lease.provider_armed
        assert lease.on_instance_armed
        shown = await reaper.run(live, "shutdown --show")
        assert "Shutdown scheduled" in shown.stdout + shown.stderr  # layer 1, on the instance
        await reaper.release(live, "manual")
    finally:
        await reaper.close()


async def test_a_layer_lost_on_the_instance_is_reestablished_by_the_next_process(services: Services):
    offer = await services.find_offer("sandbox", "4090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="r"),
                                 lease=Lease(instance_id="x",
                                             release_at=utcnow() + timedelta(hours=1)))
    await LeaseService(services).arm(inst)
    assert services.store.get_lease_sync(inst.id).on_instance_armed
    await services.run(inst, "shutdown -c")  # a reboot (or a hand) cleared it on the host
    shown = await services.run(inst, "shutdown --show")
    assert "No scheduled shutdown" in shown.stdout + shown.stderr
    result = await LeaseService(services).reap()  # a new process: verifies every layer
    assert result.errors == []
    shown = await services.run(inst, "shutdown --show")
    assert "Shutdown scheduled" in shown.stdout + shown.stderr
    await services.release(inst, "manual")


async def test_an_unarmed_layer_is_retried_by_the_console_clock(services: Services):
    offer = await services.find_offer("sandbox", "4090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="q"),
                                 lease=Lease(instance_id="x",
                                             release_at=utcnow() + timedelta(hours=1)))
    leases = LeaseService(services)
    await leases.tick(refresh=True)  # the console's first look
    # the host was unreachable when it was armed: the lease says the layer is missing
    await services.store.update_lease(inst.id, lambda le: le.model_copy(
        update={"on_instance_armed": False}))
    await services.run(inst, "shutdown -c")
    leases._retry_at.clear()  # the backoff has passed
    await leases.tick()
    assert services.store.get_lease_sync(inst.id).on_instance_armed
    shown = await services.run(inst, "shutdown --show")
    assert "Shutdown scheduled" in shown.stdout + shown.stderr
    await services.release(inst, "manual")


async def test_verifying_a_held_schedule_leaves_it_alone(services: Services):
    """A periodic `gputui reap` checks the host's schedule and does not cancel and re-make a
    good one each time (systemd tells every logged-in user about each)."""
    from gputui.sandbox.shims.state import power_state

    offer = await services.find_offer("sandbox", "4090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="k"),
                                 lease=Lease(instance_id="x",
                                             release_at=utcnow() + timedelta(hours=1)))
    await LeaseService(services).arm(inst)
    root = services.provider("sandbox").instance_root(inst.id)
    before = power_state(root)
    assert before.status == "scheduled"
    for _ in range(2):
        assert (await LeaseService(services).reap()).errors == []
    after = power_state(root)
    assert (after.at, after.requested_at) == (before.at, before.requested_at)
    await services.release(inst, "manual")
