"""Waiting for a card: `create … --wait 2h` and `start NAME --wait` (AutoDL's 4090D is often sold
out, and a stopped instance's machine may have no free GPU when it is powered on again).

Each try is one create (or one power-on) that the provider either refuses — for stock only is
the wait kept up — or does. Nothing is ever created twice:

- one record, written before the first try, carries every try: the provider names the instance
  after the record's id, so an answer lost on any try is found by that name (the lost-answer
  rule), and the wait stops there, never trying again;
- the record's `created_at` and the lease's deadline move to each try, so the record is not
  written off (15 minutes without an answer) while it waits, and a relative release timer
  (`--release-after 2h`) counts from the try that rents;
- a refusal for stock is a definite answer (nothing was made): the next try is after a backoff
  (the command's is at least 20 s, plus jitter), until the limit; Ctrl-C between tries ends the
  record as failed (nothing rented), during a try it keeps the record to be found by name.

The stock endpoint (`gpu_stock`) is observed not to reflect Pro availability: nothing here
reads it; only a create says whether a card is free.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gputui.format import GpuName
from gputui.i18n import N_, Deferred
from gputui.models import Instance, InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest, ProviderError
from gputui.services.errors import ServiceError

if TYPE_CHECKING:
    from gputui.models import Offer
    from gputui.services.hub import Services

MIN_BACKOFF_S = 20.0  # the command's least gap between two tries
MAX_BACKOFF_S = 120.0  # (well under the 15 minutes after which a silent record is written off)
JITTER_S = 10.0
MAX_WAIT = timedelta(days=7)  # the longest wait asked for (`--wait`, New's "Wait up to")

Say = Callable[[str], None]


def command_backoff(attempt: int) -> float:
    """The gap after try `attempt`: 20 s growing by half each try to 2 min, plus 0–10 s of
    jitter (so that many renters waiting for the same card do not ask in step)."""
    base = min(MAX_BACKOFF_S, MIN_BACKOFF_S * 1.5 ** max(0, attempt - 1))
    return base + random.uniform(0, JITTER_S)


class WaitExpired(ServiceError):
    """The limit came and no card was free: nothing was rented (or started)."""


@dataclass
class WaitPlan:
    """How long to wait and how to space the tries (tests pass a tiny backoff; the command
    never less than `MIN_BACKOFF_S`). `tries` counts as it goes (the command's Ctrl-C line
    says it)."""

    limit: timedelta
    backoff: Callable[[int], float] = command_backoff
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    tries: int = 0
    started: float | None = field(default=None)

    def begin(self) -> None:
        self.tries = 0
        self.started = self.clock()

    def left(self) -> float:
        assert self.started is not None
        return self.limit.total_seconds() - (self.clock() - self.started)

    def waited(self) -> float:
        assert self.started is not None
        return self.clock() - self.started

    async def pause(self, say: Say, what: str) -> bool:
        """After a refused try: sleep the backoff and True, or False when the limit comes
        first."""
        delay = max(0.0, float(self.backoff(self.tries)))
        left = self.left()
        if left <= delay:
            return False
        from gputui.format import format_remaining

        say(Deferred(N_("{what} — try {tries}; next in {seconds} s, {left} left"), what=what,
                     tries=self.tries, seconds=f"{delay:.0f}", left=format_remaining(left)))
        await self.sleep(delay)
        return True


def _count(n: int) -> Deferred:
    """"1 try" / "3 tries", translated where shown."""
    return Deferred(N_("1 try")) if n == 1 else Deferred(N_("{n} tries"), n=n)


def _span(seconds: float) -> str:
    from gputui.format import format_remaining

    return format_remaining(max(1.0, seconds))


async def create_waiting(services: Services, provider_name: str, offer: Offer,
                         request: CreateRequest, plan: WaitPlan, *, lease: Lease | None = None,
                         keep_span: timedelta | None = None, progress: Say | None = None
                         ) -> Instance:
    """`create` that waits for stock: try, and while the provider says the spec is sold out,
    try again after the backoff until `plan.limit`. `keep_span`: the release timer is this long
    from the try that rents (else the lease's deadline is kept as it is)."""
    from gputui.services.hub import _service_error, default_lease, new_instance_id, notify_event
    from gputui.services.notify import card_found

    say = progress or (lambda _m: None)
    store = services.store
    provider = services.provider(provider_name)
    services.check_name_free(request.name)
    if lease is None:  # the default timer counts from the try that rents
        lease = default_lease(services.config)
        if lease.release_at is not None and keep_span is None:
            keep_span = lease.release_at - utcnow()
    try:  # refused before anything is recorded or rented
        await provider.check_request(request.model_copy(update={"release_at": lease.release_at}))
    except ProviderError as exc:
        raise _service_error(exc) from None
    inst = Instance(
        id=new_instance_id(), name=request.name, provider=provider_name,
        offer_id=offer.offer_id, gpu=offer.gpu, gpu_count=request.gpu_count,
        billing=offer.billing.model_copy(
            update={"price_per_hour": offer.price_per_gpu_hour * request.gpu_count}),
        disk_gb=request.disk_gb, image=request.image, region=offer.region,
        status=InstanceStatus.REQUESTED, status_detail=Deferred(N_("waiting for a card")))
    lease = lease.model_copy(update={"instance_id": inst.id})
    await store.put_instance(inst)
    await store.put_lease(lease)
    plan.begin()
    say("requested")
    while True:
        plan.tries += 1
        now = utcnow()
        release_at = now + keep_span if keep_span is not None else lease.release_at
        if release_at is not None and release_at <= now:
            await services._fail(inst, Deferred(N_("stopped waiting: the release time passed")))
            raise WaitExpired(Deferred(
                N_("{name}: the release time passed while waiting for a card ({tries}); "
                   "nothing was rented"), name=inst.name, tries=_count(plan.tries - 1)))
        if release_at != lease.release_at:
            def move(le: Lease, at: datetime | None = release_at) -> Lease:
                return le.model_copy(update={"release_at": at})

            lease = await store.update_lease(inst.id, move)
        inst = inst.model_copy(update={
            "created_at": now,
            "status_detail": Deferred(N_("waiting for a card: try {tries}"), tries=plan.tries)})
        await store.put_instance(inst)
        try:
            made = await provider.create(request.model_copy(update={"release_at": release_at}),
                                         inst)
        except asyncio.CancelledError:
            # interrupted while the provider was asked: the answer is lost, it may exist
            await asyncio.shield(store.put_instance(inst.model_copy(update={
                "status_detail": Deferred(N_("launch outcome unknown: looking for it"))})))
            raise
        except ProviderError as exc:
            if exc.outcome_unknown:  # the lost-answer rule: kept, found by name; never again
                await store.put_instance(inst.model_copy(update={
                    "status_detail": Deferred(N_("launch outcome unknown: looking for it"))}))
                raise ServiceError(Deferred(N_("{error} (it is listed as {name}, requested)"),
                                            error=str(exc), name=inst.name)) from None
            if getattr(exc, "kind", None) != "stock":
                await services._fail(inst, str(exc))
                raise _service_error(exc) from None
            try:
                again = await plan.pause(say, Deferred(N_("no {gpu} free"), gpu=GpuName(offer.gpu)))
            except asyncio.CancelledError:
                await asyncio.shield(services._fail(inst, Deferred(
                    N_("stopped waiting for a card after {tries}: nothing was rented"),
                    tries=_count(plan.tries))))
                raise
            if not again:
                await services._fail(inst, Deferred(
                    N_("no card free within {limit} ({tries}): nothing was rented"),
                    limit=_span(plan.limit.total_seconds()), tries=_count(plan.tries)))
                raise WaitExpired(Deferred(
                    N_("{name}: no {gpu} was free within {limit} ({tries}); nothing was "
                       "rented"), name=inst.name, gpu=GpuName(offer.gpu),
                    limit=_span(plan.limit.total_seconds()), tries=_count(plan.tries))) from None
            continue
        break
    inst = made
    await store.put_instance(inst)
    waited = _span(plan.waited())
    store.notify(Deferred(N_("{name}: a card was free after {tries} ({waited}); it is "
                             "starting and bills from now"), name=inst.name,
                          tries=_count(plan.tries), waited=waited), "information", bell=True, instance_id=inst.id)
    notify_event(services, card_found(inst, _count(plan.tries), waited, "create",
                                      inst.created_at.isoformat()))
    say("booting")
    try:
        inst = await provider.boot(inst)
    except ProviderError as exc:
        await services._fail(inst, str(exc))
        raise ServiceError(str(exc)) from None
    await store.put_instance(inst)
    say("running")
    return inst


async def start_waiting(services: Services, inst: Instance, plan: WaitPlan, *,
                        progress: Say | None = None) -> Instance:
    """`start` that waits for a free GPU on the instance's machine: power on, and while the
    provider says there is none, try again after the backoff until `plan.limit`. Between tries
    the instance stays stopped (the GPU charge stays off)."""
    from gputui.services.hub import notify_event
    from gputui.services.notify import card_found

    say = progress or (lambda _m: None)
    since = inst.stopped_at.isoformat() if inst.stopped_at else ""
    plan.begin()
    while True:
        plan.tries += 1
        try:
            fresh = await services.start(inst, progress=say if plan.tries == 1 else None)
        except ServiceError as exc:
            if exc.kind != "stock":
                raise
            now = await services.store.get_instance(inst.id)
            if now is None or now.status != InstanceStatus.STOPPED:
                raise
            inst = now
            if not await plan.pause(say, Deferred(N_("no free GPU on its machine"))):
                raise WaitExpired(Deferred(
                    N_("{name}: its machine had no free GPU within {limit} ({tries}); it "
                       "stays stopped"), name=inst.name, limit=_span(plan.limit.total_seconds()),
                    tries=_count(plan.tries))) from None
            continue
        if plan.tries > 1:
            waited = _span(plan.waited())
            services.store.notify(Deferred(
                N_("{name}: its machine had a free GPU after {tries} ({waited}); it is "
                   "running"), name=fresh.name, tries=_count(plan.tries), waited=waited),
                "information", bell=True, instance_id=fresh.id)
            notify_event(services, card_found(fresh, _count(plan.tries), waited, "start", since))
        return fresh


__all__ = ["MAX_WAIT", "MIN_BACKOFF_S", "WaitExpired", "WaitPlan", "command_backoff", "create_waiting",
           "start_waiting"]
