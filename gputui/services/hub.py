"""The services both the console and the commands use: providers, SSH links, instance lifecycle.

`Services` owns the long-lived things (the link pool, the providers' servers) so a screen never
does; screens and commands call its methods and read the store.
"""

from __future__ import annotations

import contextlib
import shlex
import uuid
from collections.abc import Callable, Iterator, MutableMapping
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gputui.config import Config, ensure_state_dir
from gputui.errors import BadInput
from gputui.format import format_money, gpu_name, status_text, status_word
from gputui.i18n import N_, Deferred, _
from gputui.models import (
    EndReason,
    Instance,
    InstanceStatus,
    Lease,
    LedgerEntry,
    Offer,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    Provider,
    ProviderContext,
    ProviderError,
    UnknownInstance,
)
from gputui.services.errors import InvalidRequest, ServiceError
from gputui.store import SessionStore

if TYPE_CHECKING:
    from gputui.remote.hostkeys import KnownHosts
    from gputui.remote.ssh import LinkPool
    from gputui.services.notify import NotifyEvent

__all__ = ["CreateRequest", "InvalidRequest", "ProviderSet", "ServiceError", "Services",
           "new_instance_id", "notify_event", "provider_class", "quote_args"]

Progress = Callable[[str], None]
T = TypeVar("T", bound="Closable")


class Closable(Protocol):
    async def close(self) -> None: ...


class ProviderSet(MutableMapping[str, "Provider"]):
    """The providers this session may use, each made when first asked for: the console's first
    frame does not pay for importing the Lambda client and the sandbox. One that cannot be made
    says why (a notice) and is left out."""

    def __init__(self, factories: dict[str, Callable[[], Provider | None]]) -> None:
        self._factories = dict(factories)
        self._made: dict[str, Provider] = {}

    def __getitem__(self, name: str) -> Provider:
        made = self._made.get(name)
        if made is not None:
            return made
        factory = self._factories.get(name)
        provider = factory() if factory is not None else None
        if provider is None:
            self._factories.pop(name, None)
            raise KeyError(name)
        self._made[name] = provider
        return provider

    def __setitem__(self, name: str, provider: Provider) -> None:
        self._made[name] = provider

    def __delitem__(self, name: str) -> None:
        if name not in self._made and name not in self._factories:
            raise KeyError(name)
        self._made.pop(name, None)
        self._factories.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(dict.fromkeys([*self._factories, *self._made])))

    def __len__(self) -> int:
        return len(set(self._factories) | set(self._made))

    def __contains__(self, name: object) -> bool:  # without making it
        return name in self._made or name in self._factories

    def items(self) -> list[tuple[str, Provider]]:  # type: ignore[override]
        """Every provider that can be made (making them)."""
        out = []
        for name in list(self):
            with contextlib.suppress(KeyError):
                out.append((name, self[name]))
        return out

    def values(self) -> list[Provider]:  # type: ignore[override]
        return [p for _name, p in self.items()]

    def made(self) -> list[Provider]:
        return list(self._made.values())


def keepalive_for(interval_s: float) -> dict[str, float | int]:
    """SSH keepalive settings for a telemetry interval: a probe after twice the interval of
    silence (2-10 s), the link declared down after two unanswered ones — a silent host shows
    as stale for a few intervals, then reconnecting."""
    every = min(10.0, max(2.0, 2.0 * interval_s))
    return {"keepalive_interval": every, "keepalive_count_max": 2}


# The providers gputui knows: name -> "module:Class" (imported when first used).
PROVIDER_CLASSES: dict[str, str] = {
    "sandbox": "gputui.providers.sandbox:SandboxProvider",
    "autodl": "gputui.providers.autodl:AutoDLProvider",
    "ssh": "gputui.providers.ssh:SshProvider",
    "lambda": "gputui.providers.lambda_cloud:LambdaProvider",
    "slurm": "gputui.providers.slurm:SlurmProvider",
}


def provider_class(name: str) -> type[Provider]:
    """The class of provider `name` (KeyError: no such provider)."""
    import importlib

    module, _sep, cls = PROVIDER_CLASSES[name].partition(":")
    found: type[Provider] = getattr(importlib.import_module(module), cls)
    return found


def default_lease(config: object, instance_id: str = "pending") -> Lease:
    """The timer every instance gets unless the user asked otherwise: config.toml's
    `lease.default_release` from now (checked when the config was read)."""
    from gputui.config import lease_span

    text = getattr(getattr(config, "lease", None), "default_release", None) or "2h"
    return Lease(instance_id=instance_id,
                 release_at=utcnow() + lease_span(text, "config.toml lease.default_release"))


CREATE_CLAIM_S = 24 * 3600.0  # a create's claim: lapses when its process is gone, or after this


def _create_claim(instance_id: str) -> str:
    return f"create:{instance_id}"


def new_instance_id() -> str:
    return uuid.uuid4().hex[:10]


class Services:
    def __init__(
        self,
        store: SessionStore,
        config: Config,
        *,
        state_dir: Path | None = None,
        link_options: dict[str, Any] | None = None,
        sandbox_boot_seconds: float = 1.5,
    ) -> None:
        self.store = store
        self.config = config
        self.claim_owner = uuid.uuid4().hex  # who holds a release claim in the store
        # which gputui process this is, for "released by the timer, through gputui daemon":
        # "daemon", "reap", "console", "run" (None: not said)
        self.actor: str | None = None
        # instances this process released or stopped itself (the console says so at once; an
        # end it did not do is told on Home: who did it, what it cost)
        self.ended_here: set[str] = set()
        self.stopped_here: set[str] = set()
        # called with (instance, QueueView) at every read of a jobs queue (the queue watch)
        self.queue_observers: list[Callable[[Instance, Any], None]] = []
        self._attached: dict[type, Closable] = {}
        self.state_dir = state_dir or ensure_state_dir()
        # No ~/.ssh/config: an instance is reached exactly as recorded. Keys: the instance's own
        # key file, else the user's default keys and ssh-agent (bring-your-own hosts).
        # Keepalives sized to the telemetry interval: a host that goes silent without closing
        # the connection (frozen, a dropped route) is noticed in seconds, not a minute.
        refresh = float(getattr(getattr(config, "ui", None), "refresh_seconds", 1.0) or 1.0)
        self._link_options = {"config": None, "connect_timeout": 10.0,
                              **keepalive_for(refresh)}
        self._link_options.update(link_options or {})
        ctx = ProviderContext(self.state_dir, config, self)

        def sandbox() -> Provider:
            return provider_class("sandbox")(ctx, boot_seconds=sandbox_boot_seconds)  # type: ignore[call-arg]

        def ssh() -> Provider:
            return provider_class("ssh")(ctx)

        def lambda_cloud() -> Provider | None:
            try:
                made = provider_class("lambda")(ctx)
            except ProviderError as exc:  # e.g. a malformed base_url
                store.notify(str(exc), "error")
                return None
            for warning in made.warnings:  # e.g. config.toml not 0600
                store.notify(warning, "warning")
            return made

        def autodl() -> Provider | None:
            try:
                return provider_class("autodl")(ctx)
            except ProviderError as exc:  # e.g. a malformed base_url or token
                store.notify(str(exc), "error")
                return None

        factories: dict[str, Callable[[], Provider | None]] = {}
        if config.providers.sandbox.enabled:
            factories["sandbox"] = sandbox
        factories["ssh"] = ssh
        if config.providers.lambda_cloud.wanted():  # enabled = true, or LAMBDA_API_KEY set
            factories["lambda"] = lambda_cloud
        if config.providers.autodl.wanted():  # enabled, a token in config, or AUTODL_TOKEN
            factories["autodl"] = autodl
        if config.providers.slurm:  # one or more [providers.slurm.NAME] clusters
            factories["slurm"] = lambda: provider_class("slurm")(ctx)
        self.providers = ProviderSet(factories)

    @cached_property
    def known_hosts(self) -> KnownHosts:
        from gputui.remote.hostkeys import KnownHosts

        return KnownHosts(self.state_dir / "known_hosts")

    @cached_property
    def links(self) -> LinkPool:
        """One SSH link per instance, shared by every service (made on first use)."""
        from gputui.remote.ssh import LinkPool

        return LinkPool(known_hosts=self.known_hosts, on_state=self.store.set_link,
                        **self._link_options)

    # -- providers and offers -------------------------------------------------------------------

    def capabilities(self, name: str) -> Capabilities:
        """What a provider can do, read from its class (nothing is made or asked)."""
        try:
            return provider_class(name).capabilities
        except KeyError:
            return Capabilities()

    def provider(self, name: str) -> Provider:
        try:
            return self.providers[name]
        except KeyError:
            known = ", ".join(sorted(self.providers))
            hint = {"autodl": _(" — autodl needs a token: set AUTODL_TOKEN, or token under "
                                "[providers.autodl] in config.toml (mode 0600)"),
                    "lambda": _(" — set LAMBDA_API_KEY")}.get(name, "")
            raise InvalidRequest(_("unknown or disabled provider {name} (available: "
                                   "{known})").format(name=repr(name), known=known)
                                 + hint) from None

    async def offers(self, provider: str) -> list[Offer]:
        try:
            return await self.provider(provider).offers()
        except ProviderError as exc:
            raise _service_error(exc) from None

    async def find_offer(self, provider: str, gpu: str, *, region: str | None = None) -> Offer:
        """Match a typed GPU name loosely against the provider's offers (the design's rule);
        `region`: only that region's (a Slurm cluster's name)."""
        from gputui.catalog.match import catalog_aliases, match_gpu

        offers = await self.offers(provider)
        if region is not None:
            offers = [o for o in offers if o.region == region]
            if not offers:
                raise InvalidRequest(_("{provider}: no offers in {region}").format(
                    provider=provider, region=repr(region)))
        if not offers:
            raise ServiceError(_("{provider}: no offers").format(provider=provider))
        names = [o.gpu for o in offers]
        try:
            name = match_gpu(gpu, names, aliases=catalog_aliases(names))
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        _not_another_card(gpu, name, provider)
        return next(o for o in offers if o.gpu == name)

    # -- create -------------------------------------------------------------------------------------

    async def create(
        self,
        provider_name: str,
        offer: Offer,
        request: CreateRequest,
        *,
        lease: Lease | None = None,
        progress: Progress | None = None,
    ) -> Instance:
        """Rent an instance: requested → booting → running, every step in the store.

        The record is written before the provider is asked, so a crash mid-create leaves
        something to reconcile rather than an instance nobody knows about.
        """
        say = progress or (lambda _m: None)
        provider = self.provider(provider_name)
        self.check_name_free(request.name)
        if lease is not None and request.release_at is None:
            request = request.model_copy(update={"release_at": lease.release_at})
        try:  # refused before anything is recorded or rented
            await provider.check_request(request)
        except ProviderError as exc:
            raise _service_error(exc) from None
        inst = Instance(
            id=new_instance_id(), name=request.name, provider=provider_name,
            offer_id=offer.offer_id, gpu=offer.gpu, gpu_count=request.gpu_count,
            billing=offer.billing.model_copy(
                update={"price_per_hour": offer.price_per_gpu_hour * request.gpu_count}),
            disk_gb=request.disk_gb, image=request.image, region=offer.region,
            status=InstanceStatus.REQUESTED,
        )
        if lease is None:  # every instance gets a timer: the default one unless told otherwise
            lease = default_lease(self.config)
        # While this process creates it, it holds the record's create claim: a record still
        # requested or booting without one was left mid-create (Ctrl-C, a crash, the console
        # closed) and is asked of its provider at the next look (`left_mid_create`).
        key = _create_claim(inst.id)
        await self.store.claim_release(key, self.claim_owner, ttl_s=CREATE_CLAIM_S)
        try:
            await self.store.put_instance(inst)
            await self.store.put_lease(lease.model_copy(update={"instance_id": inst.id}))
            say("requested")
            return await self._create(provider, request, inst, say)
        finally:
            await self.store.drop_claim(key, self.claim_owner)

    async def _create(self, provider: Provider, request: CreateRequest, inst: Instance,
                      say: Progress) -> Instance:
        try:
            inst = await provider.create(request, inst)
        except ProviderError as exc:
            if exc.outcome_unknown:  # kept: refresh finds it by its tag, or gives up on it
                await self.store.put_instance(inst.model_copy(update={
                    "status_detail": Deferred(N_("launch outcome unknown: looking for it"))}))
                raise ServiceError(_("{error} (it is listed as {name}, requested)").format(
                    error=exc, name=inst.name)) from None
            await self._fail(inst, str(exc))
            raise ServiceError(str(exc)) from None
        await self.store.put_instance(inst)
        say("booting")
        try:
            inst = await provider.boot(inst)
        except ProviderError as exc:
            await self._fail(inst, str(exc))
            raise ServiceError(str(exc)) from None
        await self.store.put_instance(inst)
        say("running")
        return inst

    def creating(self, inst: Instance) -> bool:
        """A gputui process is creating this instance now (it holds the create claim)."""
        return self.store.claim_held_sync(_create_claim(inst.id))

    def left_mid_create(self, inst: Instance) -> bool:
        """A record a create left behind: still requested or booting, and no process is
        creating it. The instance may be running and billing at the provider: ask it."""
        return inst.status in (InstanceStatus.REQUESTED, InstanceStatus.BOOTING) and \
            not self.creating(inst)

    def free_name(self, base: str) -> str:
        """`base`, or `base-2`, `base-3`... — the first name no live instance uses."""
        taken = {i.name for i in self.store.instances_sync(live_only=True)}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        return name

    def check_name_free(self, name: str) -> None:
        """Names are how people and scripts refer to instances: two live ones may not share one.
        A name with a control character (an escape sequence...) is refused."""
        from gputui.format import check_label

        check_label(name, "name")
        if any(i.name == name for i in self.store.instances_sync(live_only=True)):
            raise InvalidRequest(_("an instance named {name} is running already; choose another "
                                   "name").format(name=repr(name)))

    async def sweep_strays(self, *, within: timedelta = timedelta(days=2)) -> list[str]:
        """Find instances a provider runs for a record this store wrote off as never launched
        (a launch answer lost, and the provider's listing showed nothing for 15 minutes), and
        terminate them: nobody is watching them and no timer covers them. Their ledger entry
        is corrected to what they ran. Asks a provider only when there is such a record."""
        now = utcnow()
        written_off = [i for i in await self.store.instances()
                       if i.status == InstanceStatus.FAILED and i.provider_id is None
                       and i.ended_at is not None and now - i.ended_at < within]
        swept: list[str] = []
        for inst in written_off:
            provider = self.providers.get(inst.provider)
            if provider is None or not provider.capabilities.tags:
                continue
            try:
                found = await provider.find_tagged(inst.id)
            except ProviderError as exc:
                self.store.notify(Deferred(N_("could not check for a stray {name}: {error}"),
                                           name=inst.name, error=str(exc)), "warning")
                continue
            if found is None or found.get("status") in ("terminating", "terminated"):
                continue
            pid = str(found.get("id"))
            ran = inst.model_copy(update={
                "provider_id": pid, "running_since": inst.created_at, "billed_running_seconds": 0,
                "status": InstanceStatus.RUNNING, "ended_at": None, "end_reason": None})
            price = await provider.live_price(ran)  # the record may not know it (AutoDL)
            if price is not None:
                ran.billing = ran.billing.model_copy(update={"price_per_hour": price})
            try:
                await provider.release(ran)
            except ProviderError as exc:
                self.store.notify(Deferred(N_(
                    "{name} was launched after all ({provider} instance {pid}) and "
                    "terminating it failed: {error} — terminate it in the provider's dashboard"),
                    name=inst.name, provider=inst.provider, pid=pid, error=str(exc)),
                    "error", bell=True, instance_id=inst.id)
                continue
            ended = utcnow()
            ran.mark_ended(ended, "failed")
            ran.status_detail = Deferred(N_("launched after all (found by its tag as {pid}); "
                                            "terminated by gputui"), pid=pid)
            entry = LedgerEntry.from_instance(ran, "failed", ended)
            await self.store.amend_ledger(entry, ran)
            self.store.notify(Deferred(N_(
                "{name} had been launched after all and ran unwatched; terminated it "
                "(billed about {cost})"), name=inst.name,
                cost=format_money(entry.compute_cost, entry.currency)), "warning",
                bell=True, instance_id=inst.id)
            swept.append(inst.name)
        return swept

    async def _fail(self, inst: Instance, why: str) -> None:
        failed = inst.model_copy(update={"status_detail": why})
        failed.mark_ended(utcnow(), "failed")
        entry = LedgerEntry.from_instance(failed, "failed", failed.ended_at or utcnow())
        await self.store.end_instance(inst.id, entry, failed)

    # -- the link to an instance --------------------------------------------------------------------

    async def link(self, inst: Instance, *, accept_new_host_key: bool = False) -> Any:
        """The instance's one shared SSH link (its provider makes it reachable first).

        Every command and screen that reaches an instance comes here, so this is where one
        that cannot be reached is refused, before anything is asked or changed: a stopped
        instance (bad input, exit 2: start it first), or one that has ended. A record that is
        behind (powered off on the instance, or at the provider's site) is refreshed when the
        provider cannot give an endpoint, and refused the same way if it is stopped."""
        await self.reachable(inst)
        provider = self.provider(inst.provider)
        try:
            prepared = await provider.prepare(inst)
            # Where and how to connect now (AutoDL: port and password from the snapshot, on
            # every connection); only the endpoint is recorded, the rest stays in the link.
            endpoint, target_options = await provider.link_target(prepared)
        except ProviderError as exc:
            try:  # stopped meanwhile (a power-off on the instance, the provider's site)?
                fresh = await self.refresh(await self.store.get_instance(inst.id) or inst)
            except ServiceError:
                fresh = None
            if fresh is not None:
                await self.reachable(fresh)  # says so if it is
            raise ServiceError(str(exc)) from None
        if endpoint != inst.ssh:
            inst = await self.store.update_instance(
                inst.id, lambda i: i.model_copy(update={"ssh": endpoint}))
        if inst.ssh is None:
            raise ServiceError(_("{name}: has no SSH endpoint (status {status})").format(
                name=inst.name, status=status_text(inst.status)))
        options: dict[str, Any] = dict(target_options)
        if accept_new_host_key:
            options["accept_new_host_key"] = True
        return self.links.get(inst.id, inst.ssh, **options)

    async def reachable(self, inst: Instance) -> Instance:
        """The instance as last recorded, if an SSH link can be made to it (its record says
        it is not stopped or ended); else one line (InvalidRequest: exit 2) saying why and
        what to do."""
        fresh = await self.store.get_instance(inst.id) or inst
        if fresh.status == InstanceStatus.STOPPED:
            if self.capabilities(fresh.provider).stop_start:
                raise InvalidRequest(_("{name} is stopped: `gputui start {name}` first").format(
                    name=fresh.name))
            raise InvalidRequest(_("{name} is stopped (powered off): power it on first").format(
                name=fresh.name))
        if not fresh.status.live:
            raise InvalidRequest(_("{name} is {status}").format(
                name=fresh.name, status=status_text(fresh.status)))
        return fresh

    async def run(self, inst: Instance, command: str, *, timeout: float = 60.0) -> Any:
        from gputui.remote.ssh import SSHLayerError

        link = await self.link(inst)
        try:
            return await link.run(self.remote_command(inst, command), timeout=timeout)
        except SSHLayerError as exc:
            raise ServiceError(Deferred(
                N_("{name}: {error}"), name=inst.name, error=exc)) from None

    def remote_command(self, inst: Instance, command: str) -> str:
        """The command as the instance's provider needs it run (AutoDL: in a login shell, where
        conda's PATH is)."""
        wrap = getattr(self.providers.get(inst.provider), "remote", None)
        return wrap(command) if wrap is not None else command

    # -- stop and start ------------------------------------------------------------------------------

    async def stop(self, inst: Instance) -> Instance:
        """Power off through the provider (compute billing stops; the disk may still cost)."""
        provider = self.provider(inst.provider)
        if not provider.capabilities.stop_start:
            raise InvalidRequest(_("{name}: {provider} cannot stop and start instances").format(
                name=inst.name, provider=inst.provider))
        if inst.status == InstanceStatus.STOPPED:
            return inst
        if inst.status not in (InstanceStatus.RUNNING, InstanceStatus.BOOTING):
            raise InvalidRequest(_("{name} is {status}: nothing to stop").format(
                name=inst.name, status=status_text(inst.status)))
        self.stopped_here.add(inst.id)
        try:
            fresh = await provider.stop(inst)
        except ProviderError as exc:
            self.stopped_here.discard(inst.id)
            raise _service_error(exc) from None
        if "links" in self.__dict__:
            await self.links.close(inst.id)
        return await self._store_fresh(inst, fresh)

    async def start(self, inst: Instance, *, progress: Progress | None = None) -> Instance:
        """Power on again (the lease's deadline is re-armed where the provider can)."""
        provider = self.provider(inst.provider)
        if not provider.capabilities.stop_start:
            raise InvalidRequest(_("{name}: {provider} cannot stop and start instances").format(
                name=inst.name, provider=inst.provider))
        if inst.status == InstanceStatus.RUNNING:
            return inst
        if inst.status != InstanceStatus.STOPPED:
            raise InvalidRequest(_("{name} is {status}: only a stopped instance starts").format(
                name=inst.name, status=status_text(inst.status)))
        lease = await self.store.get_lease(inst.id)
        release_at = lease.release_at if lease is not None and lease.state == "active" else None
        if progress:
            progress("starting")
        try:
            fresh = await provider.start(inst, release_at)
        except ProviderError as exc:
            raise _service_error(exc) from None
        return await self._store_fresh(inst, fresh)

    async def _store_fresh(self, inst: Instance, fresh: Instance) -> Instance:
        if not fresh.status.live and fresh.ended_at is not None:
            entry = LedgerEntry.from_instance(fresh, fresh.end_reason or "external", fresh.ended_at)
            await self.store.end_instance(inst.id, entry, fresh)
            await self._close_lease(inst.id)
            return fresh
        return await self.store.update_instance(inst.id, lambda _old: fresh)

    async def account(self, provider_name: str) -> dict[str, Any]:
        """The provider's wallet (AutoDL: balance, vouchers, lifetime spend)."""
        provider = self.provider(provider_name)
        if not provider.capabilities.account:
            raise InvalidRequest(_("{provider}: has no account balance to read").format(
                provider=provider_name))
        try:
            return await provider.account()
        except ProviderError as exc:
            raise _service_error(exc) from None

    # -- refresh and release -------------------------------------------------------------------------

    async def refresh(self, inst: Instance) -> Instance:
        """Ask the provider; if its view differs, store it. A power-off that happened while
        nothing was running is picked up here."""
        if not inst.status.live:
            return inst
        try:
            fresh = await self.provider(inst.provider).refresh(inst)
        except UnknownInstance as exc:
            if inst.status == InstanceStatus.REQUESTED:
                # The console stopped between recording the request and the provider's answer,
                # and the provider never made it: nothing ran, nothing bills.
                await self._fail(inst, Deferred(N_("never created: {error}"), error=str(exc)))
                return await self.store.get_instance(inst.id) or inst
            raise ServiceError(str(exc)) from None
        except (ProviderError, ServiceError) as exc:
            raise ServiceError(str(exc)) from None
        if fresh == inst:
            return inst
        if not fresh.status.live and fresh.ended_at is not None:
            if inst.status == InstanceStatus.RELEASING and inst.end_reason:
                fresh.end_reason = inst.end_reason  # our own release, interrupted
            entry = LedgerEntry.from_instance(fresh, fresh.end_reason or "external", fresh.ended_at)
            if await self.store.end_instance(inst.id, entry, fresh) and \
                    entry.end_reason != "manual":
                _notify(self, "released", entry, self.actor)
            await self._close_lease(inst.id)
            return fresh
        return await self.store.update_instance(inst.id, lambda _old: fresh)

    async def release(self, inst: Instance, reason: EndReason, *, attempts: int = 4,
                      backoff: float = 1.0) -> LedgerEntry | None:
        """Release through the provider, verify it, then record the end once.

        A state machine, durable at each step: the instance is marked RELEASING (with the
        reason) before the provider is asked, so a crash in between is finished at the next
        start; provider errors are retried with backoff; the provider is then asked again to
        confirm the instance is gone, and an alarm is raised if it is not.
        """
        if not inst.status.live:
            return None
        # One releaser at a time across processes (the console, the daemon, `gputui reap`):
        # whoever holds the claim releases; the others leave it alone. Under the claim the record
        # is read again, so an instance another process just released is not released twice.
        if not await self.store.claim_release(inst.id, self.claim_owner):
            return None
        try:
            fresh = await self.store.get_instance(inst.id)
            if fresh is None or not fresh.status.live:
                return None
            if fresh.status != InstanceStatus.RELEASING:  # (a retry: kept the first time)
                # its runs and their last lines, kept here before the disk goes: bounded in
                # time, never raising; the release goes ahead whatever happens
                from gputui.services.run_keep import keep_before_release

                await keep_before_release(self, fresh)
            return await self._release(fresh, reason, attempts=attempts, backoff=backoff)
        finally:
            await self.store.drop_claim(inst.id, self.claim_owner)

    async def _release(self, inst: Instance, reason: EndReason, *, attempts: int,
                       backoff: float) -> LedgerEntry | None:
        import asyncio

        provider = self.provider(inst.provider)
        reason = inst.end_reason if inst.status == InstanceStatus.RELEASING and inst.end_reason else reason
        inst = await self.store.update_instance(inst.id, lambda i: i.model_copy(update={
            "status": InstanceStatus.RELEASING, "end_reason": reason,
            "status_detail": Deferred(N_("releasing ({reason})"), reason=reason)}))
        last_error = ""
        for attempt in range(attempts):
            try:
                await provider.release(inst)
                last_error = ""
                break
            except ProviderError as exc:
                last_error = str(exc)
                detail = Deferred(N_("release failed, retrying: {error}"), error=last_error)

                def retrying(i: Instance, detail: str = detail) -> Instance:
                    return i.model_copy(update={"status_detail": detail})

                await self.store.update_instance(inst.id, retrying)
                if attempt + 1 < attempts:
                    await asyncio.sleep(backoff * 2**attempt)
        if last_error:
            alarm = Deferred(N_("STILL BILLING — release failed: {error}"), error=last_error)

            def still_billing(i: Instance, detail: str = alarm) -> Instance:
                return i.model_copy(update={"status_detail": detail})

            await self.store.update_instance(inst.id, still_billing)
            self.store.notify(Deferred(N_("{name}: STILL BILLING — release failed: {error}"),
                                       name=inst.name, error=last_error),
                              "error", bell=True, instance_id=inst.id)
            _notify(self, "still_billing", inst, last_error)
            raise ServiceError(_("{name}: release failed: {error}").format(name=inst.name,
                                                                           error=last_error))
        # Verify through the provider: gone (or powered off where that stops the billing).
        try:
            confirmed = await provider.refresh(inst)
        except ProviderError:
            confirmed = inst  # a provider that cannot tell: its release call is our evidence
        if confirmed.status in (InstanceStatus.RUNNING, InstanceStatus.BOOTING):
            self.store.notify(Deferred(N_("{name}: the provider still shows it {status} after "
                                          "release — check it by hand"), name=inst.name,
                                       status=status_word(confirmed.status)), "error", bell=True,
                              instance_id=inst.id)
            raise ServiceError(_("{name}: still {status} after release").format(
                name=inst.name, status=status_text(confirmed.status)))
        ended = confirmed.model_copy() if not confirmed.status.live else inst.model_copy()
        if ended.status.live:
            ended.mark_ended(utcnow(), reason)
        ended.end_reason = reason
        ended.status_detail = None
        entry = LedgerEntry.from_instance(ended, reason, ended.ended_at or utcnow())
        entry.ended_by = self.actor
        self.ended_here.add(inst.id)
        if not await self.store.end_instance(inst.id, entry, ended):
            self.ended_here.discard(inst.id)
        elif reason != "manual":
            _notify(self, "released", entry, self.actor)
        await self._close_lease(inst.id, fired=reason in ("timer", "idle", "budget"))
        if "links" in self.__dict__:
            await self.links.close(inst.id)
        return entry

    async def _close_lease(self, instance_id: str, *, fired: bool = False) -> None:
        from gputui.models import LeaseState

        state = LeaseState.FIRED if fired else LeaseState.CANCELLED
        with contextlib.suppress(KeyError):
            await self.store.update_lease(instance_id, lambda lease: lease.model_copy(
                update={"state": state}) if lease.state == LeaseState.ACTIVE else lease)

    def attached(self, kind: type[T], make: Callable[[Services], T]) -> T:
        """The session's one `kind` service (e.g. the Ollama manager, sharing the instances'
        links), made by `make(self)` the first time; closed with the session. Services attach
        themselves here so the session does not import them (no import cycle)."""
        found = self._attached.get(kind)
        if found is None:
            found = make(self)
            self._attached[kind] = found
        return found  # type: ignore[return-value]

    def find_attached(self, kind: type[T]) -> T | None:
        """The session's `kind` service where one was made (None: none; nothing is made)."""
        return self._attached.get(kind)  # type: ignore[return-value]

    async def close(self) -> None:
        for service in list(self._attached.values()):
            with contextlib.suppress(Exception):
                await service.close()
        self._attached.clear()
        if "links" in self.__dict__:
            await self.links.close_all()
        for provider in self.providers.made():  # not the ones never used
            with contextlib.suppress(Exception):
                await provider.close()


def notify_event(services: Services, event: NotifyEvent) -> bool:
    """Tell the renter wherever they are (`[notify] urls`): queued and sent in the background,
    once across processes. Returns at once and never raises: a notification never delays or
    stops what raised it. False when it is not sent (no URL, an event not chosen)."""
    import logging

    try:
        from gputui.services.notify import session_notifier

        return session_notifier(services).submit(event)
    except Exception as exc:  # a bug here must not stop a release
        logging.getLogger("gputui.notify").warning("notification not queued: %s",
                                                   type(exc).__name__)
        return False


def _notify(services: Services, kind: str, *args: Any) -> None:
    """Build the event `kind` from `args` (services/notify.py's builder of that name) and
    send it; nothing is built when no URL is configured."""
    from gputui.services.notify import configured_urls

    try:
        if not configured_urls(services.config):
            return
        from gputui.services import notify

        notify_event(services, getattr(notify, kind)(*args))
    except Exception as exc:  # as notify_event: never in the way of a release
        import logging

        logging.getLogger("gputui.notify").warning("notification %s not queued: %s", kind,
                                                   type(exc).__name__)


def _service_error(exc: ProviderError) -> ServiceError:
    """A provider's error for the user: bad input (a refused token, a request the provider
    would refuse) stays bad input (exit 2)."""
    err = InvalidRequest(str(exc)) if isinstance(exc, BadInput) else ServiceError(str(exc))
    err.kind = getattr(exc, "kind", None)
    return err


def quote_args(args: list[str]) -> str:
    """A command line for the remote shell, every user-supplied value quoted."""
    return " ".join(shlex.quote(a) for a in args)


def _not_another_card(query: str, offer_name: str, provider: str) -> None:
    """Refuse a loose match that rents another card than the one typed: on AutoDL `3090` is
    the catalog's RTX 3090 (24 GB), which it does not rent; its only 3090 is the modified
    48 GB board — said, and rented only when its own name is typed."""
    from gputui.catalog.match import card_for_reported_name, match_card

    try:
        meant = match_card(query)
    except ValueError:
        return  # not a catalog card's name: the offer match stands
    offered = card_for_reported_name(offer_name)
    if offered is not None and offered.key == meant.key:
        return
    raise InvalidRequest(_("{provider} does not rent the {card}; its nearest is {offer} — "
                           "give that name to rent it").format(
                               provider=provider, card=gpu_name(meant.name), offer=gpu_name(offer_name)))
