"""`ssh`: an instance rented anywhere, reached by the `ssh -p PORT root@HOST` line it came with.

Most platforms (AutoDL and the like) stop GPU billing when the machine powers off, so releasing
means `shutdown -h now` on the instance. The price and billing rule are the user's to give.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from gputui.models import (
    BillingRule,
    Granularity,
    Instance,
    InstanceStatus,
    Offer,
    SSHEndpoint,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    Provider,
    ProviderContext,
    ProviderError,
)

POWER_OFF = "shutdown -h now || sudo -n shutdown -h now || poweroff"


class SshProvider(Provider):
    name = "ssh"
    label = "ssh (your own host)"
    capabilities = Capabilities(scheduled_release=False, power_off_stops_billing=True,
                                rentable=False)

    def __init__(self, ctx: ProviderContext) -> None:
        self.ctx = ctx

    async def offers(self) -> list[Offer]:
        return []  # nothing to rent: hosts are added with `gputui add-ssh`

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        raise ProviderError("ssh: hosts are added, not created (use `gputui add-ssh`)")

    def describe(
        self, *, instance_id: str, name: str, endpoint: SSHEndpoint, gpu: str, gpu_count: int,
        price_per_hour: Decimal, per: Granularity, currency: str = "USD",
        minimum_seconds: int = 0,
    ) -> Instance:
        """The record of an added host: running and billing from now."""
        now = utcnow()
        rule = BillingRule(price_per_hour=price_per_hour, currency=currency, granularity=per,
                           minimum_seconds=minimum_seconds)
        inst = Instance(
            id=instance_id, name=name, provider=self.name, provider_id=f"{endpoint.host}:{endpoint.port}",
            gpu=gpu, gpu_count=gpu_count, billing=rule, ssh=endpoint, created_at=now,
            status=InstanceStatus.RUNNING,
        )
        inst.mark_running(now)
        return inst

    async def refresh(self, instance: Instance) -> Instance:
        return instance  # the host says nothing about billing; it runs until released

    async def release(self, instance: Instance) -> None:
        """Power off on the instance, and return only on positive evidence that it happened.

        Evidence: the power-off command ran and said so (exit 0), or it had started (the
        session was open and running it) when the host dropped the connection — a host going
        down under us. Not evidence: a connection refused or dropped before the login (OpenSSH
        under `MaxStartups` throttling does that, and so does any listener that accepts and
        closes), a session that could not start, a timeout. Those raise a retryable
        ProviderError; the caller retries with backoff and, in the end, raises the STILL
        BILLING alarm and keeps the instance live.
        """
        from gputui.remote.ssh import CommandInterrupted, SSHLayerError

        if instance.ssh is None:
            raise ProviderError(f"{instance.name}: no SSH endpoint to power off")
        link = self.ctx.links.get(instance.id, instance.ssh)
        try:
            result = await link.run(POWER_OFF, timeout=30, connect_timeout=20)
        except CommandInterrupted:
            return  # the command was running when the host went away: powered off
        except SSHLayerError as exc:
            # Never ran (or we cannot tell that it did): the host may still be billing.
            raise ProviderError(f"{instance.name}: cannot power off: {exc}",
                                retryable=True) from None
        if result.exit_status != 0:
            err = (result.stderr or result.stdout).strip().splitlines()
            status = "no exit status" if result.exit_status is None else f"exit {result.exit_status}"
            raise ProviderError(
                f"{instance.name}: power-off refused ({status}): "
                f"{err[-1] if err else 'no message'}", retryable=True,
            )

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        return False
