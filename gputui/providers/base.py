"""The Provider protocol every rental platform implements, and what it needs from the program."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from gputui.errors import GputuiError
from gputui.models import Instance, Offer

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


@dataclass(frozen=True)
class Capabilities:
    """Optional abilities, declared rather than guessed."""

    stop_start: bool = False
    scheduled_release: bool = False  # layer 2: the provider can terminate at a time
    power_off_stops_billing: bool = True  # layer 1 works by halting the OS
    spot: bool = False
    simulated: bool = False


class ProviderContext:
    """What a provider may use: its folder, the config, the SSH links and known hosts.

    The links and known hosts are made on first use, so a command that only reads state
    (`gputui instances`) never loads the SSH library.
    """

    def __init__(self, state_dir: Path, config: Config, services: Any) -> None:
        self.state_dir = state_dir
        self.config = config
        self._services = services

    @property
    def links(self) -> LinkPool:
        return self._services.links

    @property
    def host_keys(self) -> KnownHosts:
        return self._services.known_hosts


@runtime_checkable
class Provider(Protocol):
    name: str
    label: str  # what the user sees, e.g. "sandbox (simulated)"
    capabilities: Capabilities

    async def offers(self) -> list[Offer]: ...

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        """Start renting; returns the instance with provider_id, ssh endpoint and status."""
        ...

    async def refresh(self, instance: Instance) -> Instance:
        """The provider's current view: status, endpoint, power state."""
        ...

    async def release(self, instance: Instance) -> None:
        """Stop the billing for good. Idempotent: releasing a released instance is fine."""
        ...

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        """Layer 2: ask the provider to terminate at `at` (None cancels). False if it can't."""
        ...

    # Where `capabilities.stop_start`: power off (compute billing stops; storage goes on) and
    # power on again. Each returns the instance as the provider then shows it.
    async def stop(self, instance: Instance) -> Instance:
        raise ProviderError(f"{instance.provider}: cannot stop and start instances")

    async def start(self, instance: Instance, release_at: datetime | None = None) -> Instance:
        raise ProviderError(f"{instance.provider}: cannot stop and start instances")
