"""AutoDL releases and wipes an instance left shut down for 15 days (关机 15 天后释放). What a
stop says about it, and the opt-in keeper (`[providers.autodl] keep_stopped = true`, or
`gputui keep NAME`) that powers a stopped instance on and off shortly before that deadline,
which starts the 15 days again.

The keeper runs where gputui runs (the console, `gputui daemon`, `gputui reap` from cron): it
costs the minutes the instance runs (boot, then off again: a few minutes at its price). The API
powers on with GPUs only (无卡模式 is in AutoDL's web console alone): when the machine has no
free GPU, the keeper tries again every 10 minutes until the wipe, and says so each time it
fails (once per deadline on the phone).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from gputui.i18n import N_, Deferred
from gputui.models import Instance, InstanceStatus, Lease, LeaseState, as_utc, utcnow

if TYPE_CHECKING:
    from gputui.services.hub import Services

KEEP_BEFORE = timedelta(hours=6)  # the keeper powers it on and off this long before the wipe
RETRY_S = 600.0  # a failed power-on is tried again this much later
KEEP_MINUTES = 5  # about how long a power cycle runs (boot, sshd, off again)


def wipe_days(services: Services, inst: Instance) -> int | None:
    from gputui.services.views import WIPE_AFTER_STOPPED_DAYS

    return WIPE_AFTER_STOPPED_DAYS.get(inst.provider)


def wipe_at(services: Services, inst: Instance) -> datetime | None:
    """When the provider releases and wipes the stopped instance (None: it does not, or it is
    not stopped)."""
    days = wipe_days(services, inst)
    if days is None or inst.status != InstanceStatus.STOPPED or inst.stopped_at is None:
        return None
    return as_utc(inst.stopped_at) + timedelta(days=days)


def keeper_on(services: Services, inst: Instance, lease: Lease | None) -> bool:
    """`gputui keep NAME` (on the lease) wins over `[providers.autodl] keep_stopped`."""
    if lease is not None and lease.keep_stopped is not None:
        return lease.keep_stopped
    settings = getattr(services.config.providers, inst.provider, None)
    return bool(getattr(settings, "keep_stopped", False))


def local_time(at: datetime) -> str:
    return f"{at.astimezone():%Y-%m-%d %H:%M}"


def cycle_cost(inst: Instance) -> Decimal:
    """About what one keeper power cycle costs: KEEP_MINUTES at the instance's price."""
    return inst.billing.compute_cost(KEEP_MINUTES * 60)


def stop_notes(services: Services, inst: Instance, lease: Lease | None) -> list[Deferred]:
    """What a person must know once an instance is stopped: the wipe date, the keeper, and
    that the release timer keeps running (it releases the stopped instance at its time)."""
    from gputui.format import format_money

    notes: list[Deferred] = []
    at = wipe_at(services, inst)
    days = wipe_days(services, inst)
    if at is not None:
        notes.append(Deferred(N_("{provider} releases it and wipes its data on {date} (shut down "
                                 "{days} days: 关机 {days} 天后释放) unless it is started before"),
                              provider=inst.provider, date=local_time(at), days=days))
        if keeper_on(services, inst, lease):
            notes.append(Deferred(N_("the keeper powers it on and off about {date} (about "
                                     "{minutes} min of running, about {cost}); gputui must be "
                                     "running then (console, daemon or reap)"),
                                  date=local_time(at - KEEP_BEFORE), minutes=KEEP_MINUTES,
                                  cost=format_money(cycle_cost(inst), inst.billing.currency)))
        else:
            notes.append(Deferred(N_("`gputui keep {name}` powers it on and off before then"),
                                  name=inst.name))
    if lease is not None and lease.state == LeaseState.ACTIVE and lease.release_at is not None:
        provider = services.providers.get(inst.provider)
        if provider is not None and provider.at_deadline == "stop":
            notes.append(Deferred(N_("its release timer keeps running: at {time} it stays "
                                     "powered off (at_deadline = stop)"),
                                  time=local_time(lease.release_at)))
        else:
            notes.append(Deferred(N_("its release timer keeps running: it is RELEASED at {time}, "
                                     "stopped or not, and its data goes with it — `gputui extend "
                                     "{name}` moves it"), time=local_time(lease.release_at),
                                  name=inst.name))
    return notes


def stop_preview(services: Services, inst: Instance, lease: Lease | None,
                 now: datetime | None = None) -> list[Deferred]:
    """`stop_notes` as if it were stopped `now`: what the stop dialog says before it is."""
    if inst.status == InstanceStatus.STOPPED:
        return stop_notes(services, inst, lease)
    stopped = inst.model_copy(update={"status": InstanceStatus.STOPPED,
                                      "stopped_at": now or utcnow()})
    return stop_notes(services, stopped, lease)


class Keeper:
    """The keeper's clock, run from the lease service's tick."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._retry_at: dict[str, float] = {}

    async def tick(self, inst: Instance, lease: Lease | None, now: datetime | None = None
                   ) -> str | None:
        """Power a stopped instance on and off when its wipe is near and the keeper is on.
        Returns "kept", "failed", or None (nothing to do)."""
        from gputui.format import format_money
        from gputui.services.errors import ServiceError
        from gputui.services.hub import notify_event
        from gputui.services.notify import keep_failed

        now = as_utc(now or utcnow())
        at = wipe_at(self.services, inst)
        if at is None or not keeper_on(self.services, inst, lease) or at - now > KEEP_BEFORE:
            return None
        if lease is not None and lease.state == LeaseState.ACTIVE and \
                lease.release_at is not None and lease.release_at <= at:
            return None  # its release timer comes first: there is nothing to keep
        if time.monotonic() < self._retry_at.get(inst.id, 0.0):
            return None
        store = self.services.store
        before = inst.compute_cost()
        try:
            fresh = await self.services.start(inst)
            fresh = await self.services.stop(fresh)
        except ServiceError as exc:
            self._retry_at[inst.id] = time.monotonic() + RETRY_S
            now_inst = await store.get_instance(inst.id) or inst
            why = str(exc)
            store.notify(Deferred(N_("{name}: the keeper could not power it on ({why}); wiped at "
                                     "{time} — trying again in 10 min"),
                                  name=inst.name, why=why, time=local_time(at)), "error",
                         bell=True, instance_id=inst.id)
            if now_inst.status == InstanceStatus.STOPPED:
                notify_event(self.services, keep_failed(inst, local_time(at), why))
            return "failed"
        self._retry_at.pop(inst.id, None)
        cost = fresh.compute_cost() - before
        next_at = wipe_at(self.services, fresh)
        store.notify(Deferred(N_("{name}: kept from the wipe — powered on and off ({cost}); "
                                 "now wiped on {date} unless started"), name=inst.name,
                              cost=format_money(max(cost, Decimal(0)), inst.billing.currency),
                              date=local_time(next_at) if next_at else "-"),
                     "information", instance_id=inst.id)
        return "kept"

    async def close(self) -> None:
        """(holds nothing)"""


def session_keeper(services: Services) -> Keeper:
    return services.attached(Keeper, Keeper)


__all__ = ["KEEP_BEFORE", "Keeper", "keeper_on", "session_keeper", "stop_notes", "stop_preview",
           "wipe_at"]
