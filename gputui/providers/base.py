"""The Provider protocol every rental platform implements, and what it needs from the program."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from gputui.errors import GputuiError
from gputui.i18n import N_, Deferred
from gputui.models import Instance, Offer, SSHEndpoint

if TYPE_CHECKING:
    from gputui.config import Config
    from gputui.remote.hostkeys import KnownHosts
    from gputui.remote.ssh import LinkPool


class ProviderError(GputuiError):
    """A provider refused or failed; the message is one clear line for the user."""

    def __init__(self, message: str, *, retryable: bool = False,
                 outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        # A create whose answer was lost may have launched (and be billing): the caller keeps
        # the instance for `refresh` to find or give up on, rather than marking it failed.
        self.outcome_unknown = outcome_unknown


class UnknownInstance(ProviderError):
    """The provider has no such instance (never created, or long gone)."""


class CreateRequest(BaseModel):
    offer_id: str
    gpu_count: int = Field(default=1, ge=1, le=64)
    name: str = Field(min_length=1, max_length=64)
    image: str | None = None
    disk_gb: float = Field(default=50, ge=1, le=100_000)
    # the lease's deadline, for providers that arm a timer on the instance at boot (AutoDL)
    release_at: datetime | None = None
    # machines to spread the GPUs over (a Slurm allocation's --nodes); 1 everywhere else
    nodes: int = Field(default=1, ge=1, le=64)


@dataclass(frozen=True)
class Capabilities:
    """Optional abilities, declared rather than guessed (the console reads them to offer keys)."""

    stop_start: bool = False  # `stop` (power off, keeping the disk) and `start` work
    scheduled_release: bool = False  # layer 2: the provider can terminate at a time
    power_off_stops_billing: bool = True  # layer 1 works by halting the OS
    spot: bool = False
    simulated: bool = False  # no real money: the label says "(simulated)"
    local: bool = False  # `refresh` needs no network: cheap enough for every read command
    tags: bool = False  # instances carry our id: `find_tagged` finds a lost launch
    account: bool = False  # `account()` reads a wallet (balance, vouchers)
    rentable: bool = True  # `create` rents from its offers (False: hosts are added, not rented)
    max_gpus: int = 8  # the most GPUs one instance may have (New offers no more)
    sold_out_refusals: bool = False  # a create refused for stock says so: New can wait for a card


@dataclass(frozen=True)
class QueueHost:
    """Where an instance's queue runner lives and how it starts each run, for a platform whose
    own scheduler runs the work (a Slurm allocation: the runner on the cluster's login node, in
    the shared home, and each run a job step of the allocation, started with `srun`).

    `link` is the link to that host (commands on it run there, not inside the instance);
    `folder` the runner's folder, relative to the home there (one per instance); `launch` what
    the runner reads from `launch.json` beside it: `argv`, the command each run starts under,
    and the allocation's shape (`nodes`, `gpus_per_node`, `gres`, `cpus_per_gpu`,
    `mem_per_gpu_mb`, `name`)."""

    link: Any
    folder: str
    launch: dict[str, Any]


class ProviderServices(Protocol):
    """What the session lends its providers: the shared SSH links and known hosts."""

    @property
    def links(self) -> LinkPool: ...

    @property
    def known_hosts(self) -> KnownHosts: ...


class ProviderContext:
    """What a provider may use: its folder, the config, the SSH links and known hosts.

    The links and known hosts are made on first use, so a command that only reads state
    (`gputui instances`) never loads the SSH library.
    """

    def __init__(self, state_dir: Path, config: Config, services: ProviderServices) -> None:
        self.state_dir = state_dir
        self.config = config
        self._services = services

    @property
    def links(self) -> LinkPool:
        return self._services.links

    @property
    def host_keys(self) -> KnownHosts:
        return self._services.known_hosts


class Provider:
    """The whole contract between gputui and a rental platform.

    A provider overrides the four required calls (`offers`, `create`, `refresh`, `release`)
    and any optional ability it has, declaring it in `capabilities`; every optional call has a
    default here that does the right thing for a provider without the ability, so callers
    never probe with `getattr`.

    Errors: `ProviderError` (one line for the user; `retryable`, `outcome_unknown`), and
    `UnknownInstance` when the provider has no such instance.
    """

    name: str = ""
    label: str = ""  # what the user sees, e.g. "sandbox (simulated)"
    capabilities: Capabilities = Capabilities()
    warnings: Sequence[str] = ()  # what the user should know about its setup, said once
    # What the deadline does: "release" (the default), or "stop" where the user chose to power
    # off and keep the disk (AutoDL's `at_deadline = "stop"`; needs `capabilities.stop_start`).
    at_deadline: str = "release"
    # Where pushed projects and runs go by default, relative to the home (`~/...`): None is the
    # home itself; AutoDL's data disk is `~/autodl-tmp` (the system disk is 30 GB).
    data_folder: str | None = None
    # Days a stopped instance is kept before the provider releases and wipes it (None: never).
    wipe_after_days: int | None = None
    # Where the keeper (`gputui keep`) is on for every stopped instance of this provider.
    keep_stopped: bool = False
    # For a release proved by watching the instance go (until_gone): how long it may take to go
    # before the release is doubted (retried by the caller, then the STILL BILLING alarm), and
    # how often to look.
    gone_within_s: float = 30.0
    gone_poll_s: float = 1.0

    def __init__(self, ctx: ProviderContext) -> None:
        self.ctx = ctx

    async def until_gone(self, gone: Callable[[], Awaitable[bool]]) -> bool:
        """Ask `gone()` now and every `gone_poll_s` after: True once it says so, False when it
        still says no after `gone_within_s`."""
        deadline = time.monotonic() + self.gone_within_s
        while True:
            if await gone():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.gone_poll_s)

    # -- required ---------------------------------------------------------------------------
    async def offers(self) -> list[Offer]:
        """What can be rented now, with prices and billing rules."""
        raise NotImplementedError

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        """Start renting; returns the instance with provider_id, ssh endpoint and status."""
        raise NotImplementedError

    async def refresh(self, instance: Instance) -> Instance:
        """The provider's current view: status, endpoint, power state."""
        raise NotImplementedError

    async def release(self, instance: Instance) -> None:
        """Stop the billing for good. Idempotent: releasing a released instance is fine."""
        raise NotImplementedError

    # -- optional, with defaults ----------------------------------------------------------------
    async def boot(self, instance: Instance) -> Instance:
        """Wait until a created instance runs (default: `create` already returned it running)."""
        return instance

    async def prepare(self, instance: Instance) -> Instance:
        """Make the instance reachable before a link is opened (default: nothing to do)."""
        return instance

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        """Layer 2: ask the provider to terminate at `at` (None cancels). False if it can't."""
        return False

    async def stop(self, instance: Instance) -> Instance:
        """Power off keeping the disk (`capabilities.stop_start`): compute billing stops,
        storage goes on. Returns the instance as the provider then shows it."""
        raise ProviderError(Deferred(N_("{provider}: cannot stop and start instances"),
                                     provider=instance.provider))

    async def start(self, instance: Instance, release_at: datetime | None = None) -> Instance:
        """Power a stopped instance on again (`capabilities.stop_start`); `release_at` is the
        lease's deadline, for providers that arm a timer on the instance at boot."""
        raise ProviderError(Deferred(N_("{provider}: cannot stop and start instances"),
                                     provider=instance.provider))

    async def check_request(self, request: CreateRequest) -> None:
        """Refuse (ProviderError) what the provider would refuse, before anything is recorded
        or rented. Default: nothing to check here."""

    async def live_price(self, instance: Instance) -> Decimal | None:
        """The instance's price per hour now, where the record may not know it; None: unknown."""
        return None

    async def account(self) -> dict[str, Any]:
        """The provider's wallet (`capabilities.account`)."""
        raise ProviderError(Deferred(N_("{provider}: has no account balance to read"),
                                     provider=self.name))

    async def find_tagged(self, our_id: str) -> dict[str, Any] | None:
        """The provider's instance launched for our record `our_id`, if any
        (`capabilities.tags`); the default cannot tell, and says none."""
        return None

    async def images(self) -> list[Any]:
        """The images to create from (`gputui.catalog.images.ImageInfo`): the account's private
        ones and the base ones gputui knows. Default: none (the provider takes no image)."""
        return []

    async def save_image(self, instance: Instance, name: str,
                         progress: Any = None) -> Any:
        """Save the instance as a private image, returning it (`ImageInfo`) once saved."""
        raise ProviderError(Deferred(N_("{provider}: cannot save images"),
                                     provider=self.name))

    async def addresses(self, instance: Instance) -> list[tuple[str, str]]:
        """Ways in besides SSH that the provider publishes for the instance: (what, address),
        e.g. AutoDL's Jupyter and its custom-service ports. Default: none."""
        return []

    async def link_target(self, instance: Instance) -> tuple[SSHEndpoint | None, dict[str, Any]]:
        """Where and how to connect now: the endpoint and extra link options (AutoDL reads
        port and password afresh; the sandbox takes its own key only; a Slurm allocation's
        link is its cluster's login node, with a `command_wrapper` that runs each command
        inside the allocation). Default: as recorded."""
        return instance.ssh, {}

    async def queue_host(self, instance: Instance) -> QueueHost | None:
        """Where the instance's jobs queue lives when the platform's scheduler runs the runs
        (see QueueHost). Default None: the queue runner lives on the instance itself and runs
        them there."""
        return None

    async def node_links(self, instance: Instance) -> list[tuple[str, Any]] | None:
        """An instance spread over several machines (a multi-node Slurm allocation): one link
        a machine, with the machine's name, in order, each running its commands on that machine;
        the Monitor and `smi` read each one's GPUs through its own stream (the GPUs numbered on
        from the machine before). Default None: one machine, the instance's one link."""
        return None

    async def close(self) -> None:
        """Let go of anything held (HTTP clients, servers). Default: nothing held."""
