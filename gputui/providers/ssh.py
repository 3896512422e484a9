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
from gputui.providers.base import Capabilities, CreateRequest, ProviderContext, ProviderError

POWER_OFF = "shutdown -h now || sudo -n shutdown -h now || poweroff"


class SshProvider:
    name = "ssh"
    label = "ssh (your own host)"
    capabilities = Capabilities(scheduled_release=False, power_off_stops_billing=True)

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
        """Power off on the instance. The connection dropping under us counts as done."""
        from gputui.remote.ssh import LinkDown, SSHLayerError

        if instance.ssh is None:
            raise ProviderError(f"{instance.name}: no SSH endpoint to power off")
        link = self.ctx.links.get(instance.id, instance.ssh)
        try:
            result = await link.run(POWER_OFF, timeout=30)
        except LinkDown:
            return  # powered off while we spoke
        except SSHLayerError as exc:
            raise ProviderError(f"{instance.name}: cannot power off: {exc}") from None
        if result.exit_status not in (0, None):
            err = (result.stderr or result.stdout).strip().splitlines()
            raise ProviderError(
                f"{instance.name}: power-off refused (exit {result.exit_status}): "
                f"{err[-1] if err else 'no message'}"
            )

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        return False
