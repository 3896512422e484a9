"""Auto-release: the promise that a forgotten instance stops billing at its deadline.

Three independent layers, so the deadline holds with the laptop shut:
1. On the instance: `shutdown -h +N` scheduled at creation and re-armed on every extend; an
   idle watchdog (a small sh loop reading nvidia-smi) powers off after N idle minutes.
   This layer covers providers whose billing stops at power-off (sandbox, ssh hosts).
2. At the provider, where its API can schedule termination (`schedule_release`).
3. Here: the lease service releases through the provider at the deadline, releases anything
   overdue when it starts, and `gputui reap` does the same headless (cron, systemd timer).

Deadlines are absolute UTC times, so a clock change or a restart never moves them, and the
store's once-only ledger write makes every path safe to run at the same time as another.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from gputui.errors import GputuiError
from gputui.format import end_reason_word
from gputui.i18n import N_, Deferred, _
from gputui.models import (
    EndReason,
    Instance,
    InstanceStatus,
    Lease,
    LeaseState,
    LedgerEntry,
    as_utc,
    utcnow,
)
from gputui.services.arming import (  # noqa: F401 - re-exported: where they always were
    WATCHDOG_FILE,
    WATCHDOG_PID,
    LeaseArmer,
    shutdown_command,
    start_watchdog_command,
    watchdog_script,
)
from gputui.services.hub import InvalidRequest, ServiceError, Services, notify_event

if TYPE_CHECKING:
    from gputui.services.costs import BudgetAlert, BudgetWatch

WARN_MINUTES = (10, 1)
_T = TypeVar("_T")
SWEEP_EVERY_S = 300.0  # the console looks for strays this often; `gputui reap` every run
WALLET_EVERY_S = 600.0  # with notifications on: each provider's wallet is read this often
SETTLE_EVERY_S = 5.0  # a record left mid-create is asked of its provider this often


@dataclass
class ReapResult:
    released: list[str]
    warned: list[str]
    errors: list[str]


class LeaseService(LeaseArmer):
    """The lease clock: warnings, releases at the deadline and when idle, budgets, strays."""

    def __init__(self, services: Services, warn_minutes: tuple[int, ...] | None = None,
                 *, idle_interval_s: int = 60) -> None:
        if warn_minutes is None:  # config.toml's lease.warn_minutes (checked when read)
            configured = getattr(getattr(services.config, "lease", None), "warn_minutes", None)
            warn_minutes = tuple(configured) if configured else WARN_MINUTES
        super().__init__(services, idle_interval_s=idle_interval_s)
        self._swept: float | None = None  # when written-off records were last checked
        self._idle_since: dict[str, datetime] = {}
        self._wipe_warned: set[str] = set()  # stopped instances already warned of their wipe
        self._verified: set[str] = set()  # leases re-established since this process started
        self._retry_at: dict[str, float] = {}  # a missing layer: when to try it again
        self._retry_gap: dict[str, float] = {}
        self._release_retry_at: dict[str, float] = {}  # a failed release: when to try again
        self._release_gap: dict[str, float] = {}
        self._wallets_read: float | None = None  # when the wallets were last read (runway)
        self._wallets_looked = float("-inf")  # when notifications were last looked at
        self._settle_at: dict[str, float] = {}  # a record left mid-create: next look
        self._tick_errors: dict[str, str] = {}  # instance id -> its last unforeseen error
        # what `_as_of` read, by what for, with the store's stamp it was read under
        self._kept: dict[str, tuple[tuple[int, int] | None, Any]] = {}
        self.store = services.store
        self.warn_minutes = tuple(sorted(warn_minutes, reverse=True))

    @cached_property
    def budget_watch(self) -> BudgetWatch:  # made at the first tick, not before the first frame
        from gputui.services.costs import BudgetWatch

        return BudgetWatch()

    async def close(self) -> None:
        """Nothing to let go of (it holds no task or connection); here so the session can own
        it like its other services."""


    # -- changing ---------------------------------------------------------------------------------

    async def extend(self, inst: Instance, *, by: timedelta | None = None,
                     to: datetime | None = None) -> Lease:
        """Move the deadline (from the current deadline, or from now if it has none) and
        re-arm every layer."""
        now = utcnow()

        from gputui.config import MAX_LEASE, check_lease_span, check_release_at

        if by is not None:
            check_lease_span(by, "extend")

        def change(lease: Lease) -> Lease:
            base = lease.release_at if lease.release_at and lease.release_at > now else now
            new_at = as_utc(to) if to is not None else base + (by or timedelta(hours=1))
            if new_at <= now:
                raise InvalidRequest(_("extend: the new release time is in the past"))
            if new_at - now > MAX_LEASE:  # the same cap as create: a year from now
                check_release_at(new_at, "extend", now)
            return lease.model_copy(update={"release_at": new_at, "no_timer_confirmed": False,
                                            "warned": [], "state": LeaseState.ACTIVE})

        before = await self.store.get_lease(inst.id)  # every check is in `change`, first
        try:
            await self.store.update_lease(inst.id, change)
        except KeyError:
            await self.store.put_lease(change(Lease(instance_id=inst.id)))
        try:
            return await self.arm(inst) or await self._lease(inst.id)
        except Exception:  # an extend that fails changes nothing: a retry does not extend twice
            if before is not None:
                await self.store.put_lease(before)
            raise

    async def remove_timer(self, inst: Instance) -> Lease:
        """No timer (the caller has the user's explicit confirmation)."""
        await self.store.update_lease(inst.id, lambda le: le.model_copy(update={
            "release_at": None, "no_timer_confirmed": True, "warned": []}))
        return await self.arm(inst) or await self._lease(inst.id)

    async def _lease(self, instance_id: str) -> Lease:
        lease = await self.store.get_lease(instance_id)
        assert lease is not None
        return lease

    # -- the clock ----------------------------------------------------------------------------------

    async def tick(self, now: datetime | None = None, *, refresh: bool = False) -> ReapResult:
        """Warn before deadlines and release what is due. `refresh` asks each provider first
        (to pick up power-offs that happened while nothing watched). One instance that fails
        in a way nobody foresaw is reported (once, until the error changes) and skipped: every
        other instance is still released on time."""
        now = as_utc(now or utcnow())
        result = ReapResult([], [], [])
        stamp = self.store.version_now()  # taken before reading: a change meanwhile moves it
        leases, live = await self._books(stamp)
        from gputui.services.jobs import when_done_ids

        records = when_done_ids(self.services)  # who has a queue's when-done (one listing)
        for inst in live:
            try:
                await self._tick_one(inst, leases.get(inst.id), now, refresh, result,
                                     inst.id in records)
            except Exception as exc:  # noqa: BLE001 - one instance never stops the others
                error = str(exc) if isinstance(exc, GputuiError) else f"{type(exc).__name__}: {exc}"
                line = Deferred("{name}: {error}", name=inst.name, error=error)
                result.errors.append(line)
                if self._tick_errors.get(inst.id) != error:
                    self._tick_errors[inst.id] = error
                    self.store.notify(Deferred(N_("auto-release check of {name} failed: "
                                                  "{error}"), name=inst.name, error=error),
                                      "error", instance_id=inst.id)
            else:
                self._tick_errors.pop(inst.id, None)
        self._watch_queues(live, records)
        await self._budgets(now, result)
        await self._wallets(now)
        if refresh and (self._swept is None or time.monotonic() - self._swept >= SWEEP_EVERY_S):
            self._swept = time.monotonic()
            result.released += await self.services.sweep_strays()
        return result

    async def _as_of(self, key: str, stamp: tuple[int, int] | None,
                     read: Callable[[], Awaitable[_T]]) -> _T:
        """What `read()` gave, read again only when anything was committed to the store since
        (here, or by another process: the store's `stamp`, taken before reading, moved) — and
        every time where the stamp cannot be had. The clock ticks every second and compares
        its deadlines and caps with the time on every tick; its reads (each through a worker
        thread) are skipped while nothing changed."""
        kept = self._kept.get(key)
        if stamp is None or kept is None or kept[0] != stamp:
            kept = (stamp, await read())
            self._kept[key] = kept
        return kept[1]

    async def _books(self, stamp: tuple[int, int] | None) -> tuple[dict[str, Lease], list[Instance]]:
        """The leases and the live instances, as of `stamp`."""
        async def read() -> tuple[dict[str, Lease], list[Instance]]:
            leases = {le.instance_id: le for le in await self.store.leases()}
            return leases, await self.store.instances(live_only=True)

        leases, live = await self._as_of("books", stamp, read)
        return dict(leases), list(live)

    async def _budget_books(self) -> tuple[list[Instance], list[LedgerEntry]]:
        """Every instance and the whole ledger, for the budgets (a long ledger is not read every
        second). The stamp is the store's as the budgets are looked at, after this tick's own
        commits (a deadline warning, a release)."""
        async def read() -> tuple[list[Instance], list[LedgerEntry]]:
            return await self.store.instances(), await self.store.ledger()

        instances, ledger = await self._as_of("budgets", self.store.version_now(), read)
        return list(instances), list(ledger)

    def _watch_queues(self, live: list[Instance], records: set[str]) -> None:
        """Where this process keeps a queue watch (the console, the daemon): the queues nothing
        read lately are read in the background, so a queue that ends or a run that fails on
        any instance is said."""
        from gputui.services.queuewatch import QueueWatch

        watch = self.services.find_attached(QueueWatch)
        if watch is not None:
            watch.tick(live, records)

    def _left_mid_create(self, inst: Instance) -> bool:
        """A record a create left behind (Ctrl-C, a crash, a console closed mid-create): asked
        of its provider at once, then every few seconds until it settles — it may be running
        and billing. Once running, the tick arms its timer's layers (they are missing)."""
        if not self.services.left_mid_create(inst):
            return False
        now = time.monotonic()
        if now < self._settle_at.get(inst.id, 0.0):
            return False
        self._settle_at[inst.id] = now + SETTLE_EVERY_S
        return True

    async def _tick_one(self, inst: Instance, lease: Lease | None, now: datetime, refresh: bool,
                        result: ReapResult, when_done: bool) -> None:
        if refresh or self._left_mid_create(inst):
            try:
                inst = await self.services.refresh(inst)
            except ServiceError as exc:
                result.errors.append(Deferred("{name}: {error}", name=inst.name,
                                              error=str(exc)))
            if not inst.status.live:
                return
        self._warn_wipe(inst, now)
        if inst.status == InstanceStatus.STOPPED:  # AutoDL's 15-day wipe: the keeper
            from gputui.services.keeper import session_keeper

            if await session_keeper(self.services).tick(inst, lease, now) == "kept":
                self._wipe_warned.discard(inst.id)
                return
        # a queue's when-done: pulled, then released
        done = await self._jobs_done(inst) if when_done else None
        if done == "released":
            result.released.append(inst.name)
            return
        if done == "kept":
            self._tell_held(inst, "queue")
            result.errors.append(self._held(inst))
            return
        if lease is None or lease.state != LeaseState.ACTIVE:
            return
        reason = self._due(inst, lease, now)
        if reason in ("timer", "idle") and self._stops_at_deadline(inst):
            await self._power_off_at_deadline(inst, reason, result)
            return
        if reason and not await self._results_home(inst):
            result.errors.append(self._held(inst))
            at = lease.release_at.isoformat() if lease.release_at else ""
            self._tell_held(inst, f"{reason}:{at}")
            return
        if reason:
            # a release that failed (already retried with backoff, STILL BILLING raised)
            # is tried again later, 30 s doubling to 10 min: not on every tick
            if time.monotonic() < self._release_retry_at.get(inst.id, 0.0):
                result.errors.append(Deferred(N_("{name}: STILL BILLING — release failed; "
                                                 "retrying"), name=inst.name))
                return
            try:
                if await self.services.release(inst, reason) is None:
                    return  # released (or being released) by another process
                result.released.append(inst.name)
                self._release_retry_at.pop(inst.id, None)
                self._release_gap.pop(inst.id, None)
                self.store.notify(Deferred(N_("{name} released ({reason})"), name=inst.name,
                                           reason=end_reason_word(reason)), "information",
                                  bell=True, instance_id=inst.id)
            except ServiceError as exc:
                result.errors.append(str(exc))
                gap = min(600.0, self._release_gap.get(inst.id, 15.0) * 2)
                self._release_gap[inst.id] = gap
                self._release_retry_at[inst.id] = time.monotonic() + gap
                self.store.notify(Deferred(N_("{name}: could not release: {error}"),
                                           name=inst.name, error=str(exc)), "error",
                                  bell=True, instance_id=inst.id)
            return
        if inst.status == InstanceStatus.RUNNING:
            await self._rearm(inst, lease, verify=refresh and inst.id not in self._verified,
                              result=result)
        await self._warn(inst, lease, now, result)

    def _held(self, inst: Instance) -> Deferred:
        """Why it is kept (results not home, a when-done record that cannot be read) and the
        ways out."""
        from gputui.services.jobs import held_reason

        return held_reason(self.services, inst)

    async def _jobs_done(self, inst: Instance) -> str | None:
        """What a jobs queue's when-done policy did ("released", "kept"...), if anything."""
        from gputui.services.jobs import on_tick

        return await on_tick(self.services, inst)

    async def _results_home(self, inst: Instance) -> bool:
        """No automatic release while results asked for are still on the instance."""
        from gputui.services.jobs import release_allowed

        return await release_allowed(self.services, inst)

    async def _rearm(self, inst: Instance, lease: Lease, *, verify: bool,
                     result: ReapResult) -> None:
        """After a crash or a restart (the first look with `refresh`: `gputui reap`, the
        console's start) every layer the lease names is re-established; later, a layer that
        is still missing is retried with backoff (30 s doubling to 10 min)."""
        now = time.monotonic()
        if not verify:
            if not self._missing(inst, lease) or now < self._retry_at.get(inst.id, 0.0):
                return
        try:
            armed = await self.arm(inst, verify=True)
        except ServiceError as exc:
            result.errors.append(Deferred(N_("{name}: re-arming: {error}"), name=inst.name,
                                          error=str(exc)))
            armed = None
        self._verified.add(inst.id)
        if armed is not None and not self._missing(inst, armed):
            self._retry_at.pop(inst.id, None)
            self._retry_gap.pop(inst.id, None)
            return
        gap = min(600.0, self._retry_gap.get(inst.id, 15.0) * 2)
        self._retry_gap[inst.id] = gap
        self._retry_at[inst.id] = now + gap

    async def _budgets(self, now: datetime, result: ReapResult) -> None:
        """Alerts at 80 % and 100 % of the caps; at 100 %, release if the user asked for it."""
        budget = self.services.config.budget
        if budget.daily is None and budget.monthly is None and budget.per_instance is None:
            return
        instances, ledger = await self._budget_books()
        for alert in self.budget_watch.check(budget, instances, ledger, now):
            self.store.notify(alert.text, "warning" if alert.level < 100 else "error", bell=True,
                              instance_id=alert.instance_id)
            self._tell_budget(alert, now)
            if alert.level < 100 or not budget.release_at_cap:
                continue
            targets = [i for i in instances if i.status.live and
                       (alert.instance_id is None or i.id == alert.instance_id)]
            for inst in targets:
                if not await self._results_home(inst):
                    continue
                try:
                    if await self.services.release(inst, "budget") is None:
                        continue  # released (or being released) by another process
                    result.released.append(inst.name)
                    self.store.notify(Deferred(N_("{name} released: budget cap reached"),
                                               name=inst.name), "error",
                                      bell=True, instance_id=inst.id)
                except ServiceError as exc:
                    result.errors.append(str(exc))

    async def _wallets(self, now: datetime) -> None:
        """Wallet low: a provider's balance lasts under `[notify] wallet_low_hours` at what
        bills in it now. Read every 10 minutes, only when notifications are configured; told
        once a day per provider. (Whether they are configured is looked at every 10 s, not on
        every tick of the clock.)"""
        mono = time.monotonic()
        if mono < self._wallets_looked + 10.0:
            return
        self._wallets_looked = mono
        from gputui.services.notify import configured_urls, wanted

        config = self.services.config
        if not configured_urls(config) or not wanted(config, "wallet_low"):
            return
        if self._wallets_read is not None and mono - self._wallets_read < WALLET_EVERY_S:
            return
        from decimal import Decimal

        from gputui.errors import GputuiError
        from gputui.format import format_money
        from gputui.services.notify import wallet_low
        self._wallets_read = mono
        live = [i for i in await self.store.instances(live_only=True) if i.status.billing_compute]
        limit = Decimal(str(config.notify.wallet_low_hours))
        for name in sorted({i.provider for i in live}):
            if not self.services.capabilities(name).account:
                continue
            try:
                wallet = await self.services.account(name)
            except GputuiError:
                continue  # the top bar and `gputui account` say why
            balance, currency = wallet.get("balance"), wallet.get("currency")
            rate = sum((i.billing.price_per_hour for i in live
                        if i.provider == name and i.billing.currency == currency), Decimal(0))
            if balance is None or rate <= 0:
                continue
            hours = Decimal(str(balance)) / rate
            if hours < limit:
                notify_event(self.services, wallet_low(
                    name, format_money(Decimal(str(balance)), str(currency)), float(hours),
                    now.astimezone().date().isoformat()))

    def _stops_at_deadline(self, inst: Instance) -> bool:
        """The user chose power-off rather than release at the deadline (AutoDL:
        `[providers.autodl] at_deadline = "stop"`); billing is by power state there."""
        provider = self.services.providers.get(inst.provider)
        return (provider is not None and provider.at_deadline == "stop"
                and provider.capabilities.stop_start)

    async def _power_off_at_deadline(self, inst: Instance, reason: str,
                                     result: ReapResult) -> None:
        try:
            if inst.status != InstanceStatus.STOPPED:
                await self.services.stop(inst)
        except ServiceError as exc:
            result.errors.append(str(exc))
            self.store.notify(Deferred(N_("{name}: could not power off: {error}"),
                                       name=inst.name, error=str(exc)), "error", bell=True,
                              instance_id=inst.id)
            return
        await self.services._close_lease(inst.id, fired=True)
        result.released.append(inst.name)
        self.store.notify(Deferred(N_("{name} powered off ({reason}); its disk stays until you "
                                      "release it"), name=inst.name,
                                   reason=end_reason_word(reason)),
                          "information", bell=True, instance_id=inst.id)

    def _warn_wipe(self, inst: Instance, now: datetime) -> None:
        """A day before a provider wipes a stopped instance (AutoDL: 15 days shut down), say so
        once: starting it resets the clock."""
        if inst.status != InstanceStatus.STOPPED or inst.id in self._wipe_warned:
            return  # (first: every running instance comes here every second)
        from gputui.services.views import WIPE_AFTER_STOPPED_DAYS, deletion_note

        days = WIPE_AFTER_STOPPED_DAYS.get(inst.provider)
        if days is None:
            return
        text, warn = deletion_note(inst.stopped_at, days, now)
        if warn:
            self._wipe_warned.add(inst.id)
            self.store.notify(Deferred(N_("{name}: {clock} — {provider} releases it and wipes "
                                          "its data; start it (s on Home) or save what you need"),
                                       name=inst.name, clock=text, provider=inst.provider),
                              "warning", bell=True, instance_id=inst.id)
            from gputui.services.notify import wipe_soon

            notify_event(self.services, wipe_soon(
                inst, text, inst.stopped_at.isoformat() if inst.stopped_at else ""))

    def _due(self, inst: Instance, lease: Lease, now: datetime) -> EndReason | None:
        if inst.status == InstanceStatus.RELEASING:
            return inst.end_reason or "manual"  # a release interrupted (crash): finish it
        if lease.release_at is not None and lease.release_at <= now:
            return "timer"
        if self._idle_long_enough(inst, lease, now):
            return "idle"
        if inst.status == InstanceStatus.STOPPED:
            # Powered off on the instance (its timer or the idle watchdog): finish the release.
            if lease.release_at is not None and inst.stopped_at and inst.stopped_at >= lease.release_at - timedelta(minutes=1):
                return "timer"
            if lease.idle_minutes:
                return "idle"
        return None

    def _idle_long_enough(self, inst: Instance, lease: Lease, now: datetime) -> bool:
        """The console's own idle check, from the live telemetry: it is the idle layer where a
        power-off does not stop the billing (Lambda), and a second one everywhere else. Missing
        or stale readings are not idleness."""
        if lease.idle_util_pct is None or not lease.idle_minutes or inst.status != InstanceStatus.RUNNING:
            return False
        import time

        tel = self.store.telemetry(inst.id)
        latest = tel.latest()
        fresh = tel.updated is not None and time.monotonic() - tel.updated < 30
        idle = fresh and bool(latest) and all(
            s.utilization_gpu is not None and s.utilization_gpu < lease.idle_util_pct for s in latest)
        if not idle:
            self._idle_since.pop(inst.id, None)
            return False
        since = self._idle_since.setdefault(inst.id, now)
        return (now - since).total_seconds() >= lease.idle_minutes * 60

    async def _warn(self, inst: Instance, lease: Lease, now: datetime, result: ReapResult) -> None:
        left = lease.remaining(now)
        if left is None:
            return
        crossed = [m for m in self.warn_minutes if left <= m * 60 and m not in lease.warned]
        if not crossed:
            return
        # one warning, the most urgent: a deadline first seen 45 s away is not also "10 min"
        # (every threshold crossed is marked, so the next tick does not warn again)
        minutes = min(crossed)

        def warned(le: Lease) -> Lease:
            return le.model_copy(update={"warned": sorted({*le.warned, *crossed})})

        await self.store.update_lease(inst.id, warned)
        mins = max(1, math.ceil(left / 60))
        from gputui.services.jobs import deadline_warning

        # where the release waits for results that are not home, the warning says so
        text = deadline_warning(self.services, inst, mins) or Deferred(N_(
            "{name} will be released in {mins} min — on Home, e extends 1 h, E 30 min"),
            name=inst.name, mins=mins)
        self.store.notify(text, "warning", bell=True, instance_id=inst.id)
        result.warned.append(inst.name)
        self._tell_deadline(inst, lease, minutes, mins)

    def _tell_deadline(self, inst: Instance, lease: Lease, minutes: int, mins: int) -> None:
        """The deadline warning to the renter's phone, naming results asked for that are not
        home yet (they would hold the release)."""
        from gputui.services.jobs import JobError, load_when_done
        from gputui.services.notify import deadline_warning

        try:
            rec = load_when_done(self.services, inst.id)
        except JobError:
            rec = None
        missing = ", ".join(p["remote"] for p in rec.pulls) if rec and rec.pending_pull else None
        notify_event(self.services, deadline_warning(
            inst, mins, release_at=lease.release_at.isoformat() if lease.release_at else "",
            warning=minutes, results_not_home=missing))

    def _tell_held(self, inst: Instance, discriminator: str) -> None:
        """A release held because results asked for are not home: told once per deadline."""
        from gputui.services.jobs import JobError, load_when_done
        from gputui.services.notify import release_held

        try:
            rec = load_when_done(self.services, inst.id)
        except JobError:
            rec = None
        pulls = ", ".join(p["remote"] for p in rec.pulls) if rec else ""
        why = (Deferred(N_("the results asked for ({pulls}) are not home yet"), pulls=pulls)
               if pulls else Deferred(N_("the results asked for are not home yet")))
        notify_event(self.services, release_held(inst, why, discriminator))

    def _tell_budget(self, alert: BudgetAlert, now: datetime) -> None:
        """A budget alert to the renter's phone: once per cap, threshold and day (or month)."""
        from gputui.services.costs import local_day_start, local_month_start
        from gputui.services.notify import budget

        period = {"daily": local_day_start(now).isoformat(),
                  "monthly": local_month_start(now).isoformat()}.get(alert.scope, "")
        notify_event(self.services, budget(alert.text, alert.level, alert.percent,
                                           alert.instance_id, f"{alert.scope}:{period}"))

    async def reap(self, now: datetime | None = None) -> ReapResult:
        """Headless: refresh every live instance, release what is overdue, and terminate any
        instance launched for a record that was written off. Idempotent."""
        return await self.tick(now, refresh=True)


def session_leases(services: Services) -> LeaseService:
    """The session's one LeaseService (made on first use, closed with the session): the
    console's lease clock and its screens share it."""
    return services.attached(LeaseService, LeaseService)
