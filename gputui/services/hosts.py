"""Adding a host rented elsewhere (the `ssh` provider): connect, check its key, find its GPUs."""

from __future__ import annotations

from decimal import Decimal

from gputui.i18n import N_, Deferred, _
from gputui.models import Granularity, Instance, Lease, SSHEndpoint
from gputui.remote.sshline import parse_ssh_line
from gputui.services.hub import ServiceError, Services, new_instance_id

__all__ = ["UnknownHostKeyError", "add_ssh_host", "parse_ssh_line"]


class UnknownHostKeyError(ServiceError):
    """The host's key is not known yet: show the fingerprint and ask (or --accept-new-host-key)."""

    def __init__(self, where: str, fingerprint: str) -> None:
        super().__init__(f"{where}: unknown host key {fingerprint}; check it with the provider, "
                         "then add --accept-new-host-key")
        self.where, self.fingerprint = where, fingerprint


async def add_ssh_host(
    services: Services,
    endpoint: SSHEndpoint,
    *,
    name: str | None,
    gpu: str | None,
    price: Decimal,
    per: Granularity,
    accept_new_host_key: bool = False,
    password: str | None = None,
    lease: Lease | None = None,
) -> Instance:
    """Connect (host key checked), detect the GPUs with `nvidia-smi -L`, and record the host
    with its release timer — `lease`, or the default one (config.toml's
    `lease.default_release`) — armed on the host (`shutdown -h +N`). A host without a timer
    takes a lease with `no_timer_confirmed`, which the caller asked the user to confirm.

    Nothing is written to the store unless the connection and the GPU check succeed. A password
    is used for this process only and never stored.
    """
    from gputui.services.hub import default_lease
    from gputui.services.leases import session_leases

    if lease is None:
        lease = default_lease(services.config)
    from gputui.catalog.match import card_for_reported_name, match_card
    from gputui.nvidia.nvsmi import parse_gpu_list
    from gputui.remote.hostkeys import UnknownHostKey
    from gputui.remote.ssh import Link, SSHLayerError

    services.check_name_free(name or endpoint.host)
    link = Link(endpoint, known_hosts=services.known_hosts, accept_new_host_key=accept_new_host_key,
                password=password, config=None, connect_timeout=10.0)
    where = f"{endpoint.user}@{endpoint.host}:{endpoint.port}"
    try:
        result = await link.run("nvidia-smi -L", timeout=30)
    except UnknownHostKey as exc:
        raise UnknownHostKeyError(where, exc.fingerprint) from None
    except SSHLayerError as exc:
        said = str(exc)  # the SSH layer often names the endpoint already: say it once
        raise ServiceError(exc.translated() if where in said else Deferred(
            N_("{where}: {error}"), where=where, error=exc)) from None
    finally:
        await link.close()
    listed = [g for g in parse_gpu_list(result.stdout) if g.parent_index is None]
    if result.exit_status != 0 or not listed:
        from gputui.nvidia.diagnose import diagnose_nvidia_smi

        diag = diagnose_nvidia_smi(result.stdout + result.stderr, result.exit_status)
        if gpu is None:
            why = (f"{diag.problem} — {diag.fix}" if diag
                   else _("nvidia-smi -L listed no GPU"))
            raise ServiceError(_("{where}: cannot detect the GPUs ({why}); give --gpu").format(
                where=where, why=why))
    count = len(listed) or 1
    if gpu:
        try:
            gpu_name = match_card(gpu).name
        except ValueError:
            gpu_name = gpu  # a card the catalog does not know is still a card
    else:
        card = card_for_reported_name(listed[0].name)
        gpu_name = card.name if card else (listed[0].name or "unknown GPU")
    provider = services.provider("ssh")
    inst = provider.describe(  # type: ignore[attr-defined]
        instance_id=new_instance_id(), name=name or endpoint.host, endpoint=endpoint,
        gpu=gpu_name, gpu_count=count, price_per_hour=price, per=per,
    )
    await services.store.put_instance(inst)
    await services.store.put_lease(lease.model_copy(update={"instance_id": inst.id}))
    if password is not None:  # the pool's link must log in the same way, this process only
        services.links.get(inst.id, endpoint).set_password(password)
    await session_leases(services).arm(inst)  # a failure is a notice; the console still holds
    return inst
