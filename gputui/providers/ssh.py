"""`ssh`: an instance rented anywhere, reached by the `ssh -p PORT root@HOST` line it came with.

Most platforms (AutoDL and the like) stop GPU billing when the machine powers off, so releasing
means `shutdown -h now` on the instance. The price and billing rule are the user's to give.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from decimal import Decimal

from gputui.i18n import N_, Deferred
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
    ProviderError,
)

POWER_OFF = "shutdown -h now || sudo -n shutdown -h now || poweroff"


class SshProvider(Provider):
    name = "ssh"
    label = N_("ssh (your own host)")
    capabilities = Capabilities(scheduled_release=False, power_off_stops_billing=True,
                                rentable=False)

    # After the power-off command succeeded, how long the host may keep answering on its SSH
    # port before the release is doubted (a container whose `shutdown` stops nothing, a host
    # that ignored it). Real hosts stop listening within seconds of `shutdown -h now`.
    gone_within_s: float = 120.0
    gone_poll_s: float = 1.0

    async def offers(self) -> list[Offer]:
        return []  # nothing to rent: hosts are added with `gputui add-ssh`

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        raise ProviderError(Deferred(N_("ssh: hosts are added, not created (use `gputui add-ssh`)")))

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
            raise ProviderError(Deferred(N_("{name}: no SSH endpoint to power off"),
                                         name=instance.name))
        link = self.ctx.links.get(instance.id, instance.ssh)
        try:
            result = await link.run(POWER_OFF, timeout=30, connect_timeout=20)
        except CommandInterrupted:
            return  # the command was running when the host went away: powered off
        except SSHLayerError as exc:
            # Never ran (or we cannot tell that it did): the host may still be billing.
            raise ProviderError(Deferred(N_("{name}: cannot power off: {reason}"),
                                         name=instance.name, reason=str(exc)),
                                retryable=True) from None
        if result.exit_status != 0:
            err = (result.stderr or result.stdout).strip().splitlines()
            status = (Deferred(N_("no exit status")) if result.exit_status is None
                      else Deferred(N_("exit {status}"), status=result.exit_status))
            raise ProviderError(Deferred(
                N_("{name}: power-off refused ({status}): {message}"), name=instance.name,
                status=status, message=err[-1] if err else Deferred(N_("no message"))),
                retryable=True)
        # The command said yes; the evidence is the host going away after it.
        await link.close()
        if not await self._goes_away(instance.ssh.host, instance.ssh.port):
            raise ProviderError(Deferred(
                N_("{name}: the power-off command ran, but the host still answers on port "
                   "{port} after {seconds} s"), name=instance.name, port=instance.ssh.port,
                seconds=f"{self.gone_within_s:.0f}"), retryable=True)

    async def _goes_away(self, host: str, port: int) -> bool:
        """True once the host's SSH port stops answering (refused, or silent), within
        `gone_within_s`. A server that still greets with its SSH banner is up; one that accepts
        and closes without a banner (sshd throttling) proves nothing either way, so it is asked
        again."""

        async def silent() -> bool:
            return not await _ssh_answers(host, port)

        return await self.until_gone(silent)

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        return False


async def _ssh_answers(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """Whether something on host:port accepts a connection (refused or silent: it does not)."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    try:
        async with asyncio.timeout(timeout_s):
            await reader.readline()  # the banner, or EOF from a throttled accept-and-close
    except (OSError, TimeoutError):
        pass
    finally:
        writer.close()
    return True
