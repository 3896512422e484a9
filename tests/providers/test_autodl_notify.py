"""AutoDL events that reach the renter's phone (a real receiver on 127.0.0.1, Apprise's
`json://`), against the AutoDL emulator: the wallet running low at the current rate, and a
stopped instance a day before AutoDL wipes it — each told once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from gputui.config import NotifySettings
from gputui.models import Lease, utcnow
from gputui.services.hub import Services
from gputui.services.leases import LeaseService
from gputui.services.notify import NotifyService
from tests.providers.autodl_emulator import AutoDLEmulator
from tests.providers.autodl_fixtures import rent

pytestmark = [pytest.mark.autodl,
              pytest.mark.autodl_emu(creating_s=0.2, starting_s=0.2, ssh_delay=0.8,
                                     shutting_s=0.2)]


def send_to(services: Services, url: str, **settings) -> NotifyService:
    services.config.notify = NotifySettings(urls=[url], **settings)
    return services.attached(NotifyService, lambda s: NotifyService(
        s.store, s.config, env={}, timeout_s=2.0, attempts=2, backoff_s=0.05, window_s=0.05))


async def test_the_wallet_running_low_is_told_once(services: Services, emu: AutoDLEmulator,
                                                    receiver):
    notifier = send_to(services, receiver.url("ok"), wallet_low_hours=720)
    inst = await rent(services)
    await LeaseService(services).tick()
    await LeaseService(services).tick()  # another process's clock, the same day: not again
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = await asyncio.to_thread(receiver.wait_for, 1)
    wallet = await services.account("autodl")
    hours = wallet["balance"] / inst.billing.price_per_hour
    assert got.title == "autodl: wallet low" and got.type == "warning"
    assert got.body.startswith("autodl: the balance ¥")
    assert f"lasts about {float(hours):.0f}" in got.body or \
        f"lasts about {float(hours):.1f} h" in got.body
    await asyncio.sleep(0.2)
    assert len(receiver.messages) == 1


async def test_a_wallet_that_lasts_is_not_told(services: Services, emu: AutoDLEmulator,
                                               receiver):
    notifier = send_to(services, receiver.url("ok"), wallet_low_hours=1)
    await rent(services)
    await LeaseService(services).tick()
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    assert notifier.deliveries == [] and receiver.messages == []


async def test_a_day_before_the_wipe_the_renter_is_told_once(services: Services,
                                                             emu: AutoDLEmulator, receiver):
    notifier = send_to(services, receiver.url("ok"))
    inst = await rent(services, Lease(instance_id="x", no_timer_confirmed=True))
    await services.stop(inst)
    await LeaseService(services).tick(utcnow() + timedelta(days=14, hours=1))
    await LeaseService(services).tick(utcnow() + timedelta(days=14, hours=2))  # another clock
    assert await asyncio.to_thread(notifier.wait_idle, 15)
    [got] = await asyncio.to_thread(receiver.wait_for, 1)
    assert got.title == "job: wiped tomorrow"
    assert got.body.startswith("job: stopped 14 d · wiped in ")
    assert "autodl releases it and wipes its data" in got.body
    await asyncio.sleep(0.2)
    assert len(receiver.messages) == 1
