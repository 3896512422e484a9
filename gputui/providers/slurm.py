"""`slurm`: GPUs allocated on a Slurm cluster, reached over SSH through its login node.

On the scheduler's own terms: an instance is one Slurm allocation — a job that holds its nodes
(`sbatch --wrap 'exec sleep infinity'` with `--time`, `--gres`, `--nodes` and a small CPU and
memory request) — and every fact about it is Slurm's: the queue (`squeue`), the reason it waits
and the start it expects, its start and end times, and why it ended. The deadline is Slurm's
`--time`, kept by the scheduler with no gputui running (layer 2); `extend` moves it with
`scontrol update … TimeLimit`, where the cluster lets this user. Release is `scancel`, and is
believed only when Slurm shows the job ended. Commands on the instance (nvidia-smi, runs) go to
the allocation's first node as `srun --jobid … --overlap` from the login node.

Money: an allocation bills from its start to its end, idle or not: GPUs × hours allocated at the
configured `price_per_gpu_hour`.
"""

from __future__ import annotations

import asyncio
import math
import re
import shlex
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_, Deferred
from gputui.models import (
    BillingRule,
    Granularity,
    Instance,
    InstanceStatus,
    Offer,
    SSHEndpoint,
    as_utc,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    Provider,
    ProviderContext,
    ProviderError,
    QueueHost,
    UnknownInstance,
)

if TYPE_CHECKING:
    from gputui.config import SlurmClusterSettings
    from gputui.remote.ssh import Link

JOB_PREFIX = "gputui-"  # the allocation's job name: gputui-<our instance id> (find_tagged)
HOLD = "exec sleep infinity"
# Slurm's job states: still holding (or waiting for) nodes, and ended.
PENDING_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                  "RESV_DEL_HOLD", "SPECIAL_EXIT"}
RUNNING_STATES = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                  "RESIZING"}
ENDED_STATES = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"}
# How Slurm's end states read to a renter.
ENDED_WORDS = {
    "TIMEOUT": N_("its time limit passed"),
    "NODE_FAIL": N_("a node failed"),
    "PREEMPTED": N_("preempted"),
    "CANCELLED": N_("cancelled"),
    "COMPLETED": N_("the allocation's job ended"),
    "FAILED": N_("the allocation's job failed"),
    "BOOT_FAIL": N_("a node failed to boot"),
    "DEADLINE": N_("its deadline passed"),
    "OUT_OF_MEMORY": N_("out of memory"),
}
_SQUEUE_FORMAT = "%i|%T|%r|%S|%e|%l|%D|%N"
_NODE_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z/_:]*)=")


@dataclass
class JobView:
    """One line of `squeue --states=all -o '%i|%T|%r|%S|%e|%l|%D|%N'` (times in UTC)."""

    job_id: str
    state: str
    reason: str
    start: datetime | None
    end: datetime | None
    time_limit: str
    nodes: str
    node_count: int = 1


def _slurm_time(text: str) -> datetime | None:
    """`2026-12-01T14:52:24` as Slurm prints it (the commands run with TZ=UTC), or None for
    N/A, Unknown, None and the like."""
    text = text.strip()
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def parse_squeue(text: str) -> JobView | None:
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 8 and parts[0].strip():
            return JobView(parts[0].strip(), parts[1].strip().split()[0] if parts[1].strip()
                           else "", parts[2].strip(), _slurm_time(parts[3]),
                           _slurm_time(parts[4]), parts[5].strip(), parts[7].strip(),
                           int(parts[6]) if parts[6].strip().isdigit() else 1)
    return None


def parse_nodes(text: str) -> list[dict[str, str]]:
    """`scontrol show node -o`: one node a line, `Key=Value` fields (values may hold spaces)."""
    nodes = []
    for line in text.splitlines():
        marks = list(_NODE_FIELD.finditer(line))
        fields = {}
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
            fields[m.group(1)] = line[m.end():end].strip()
        if fields.get("NodeName"):
            nodes.append(fields)
    return nodes


def parse_gres(text: str) -> dict[str, int]:
    """`gpu:h100:2(S:0),gpu:a100:1` or `gpu:h100:0(IDX:N/A)` -> {type: count} (untyped: "gpu")."""
    found: dict[str, int] = {}
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if not parts or parts[0] != "gpu" or len(parts) < 2:
            continue
        kind, count = (parts[1], parts[2]) if len(parts) >= 3 else ("gpu", parts[1])
        try:
            found[kind] = found.get(kind, 0) + int(count)
        except ValueError:
            continue
    return found


def parse_alloc_tres(text: str) -> dict[str, int]:
    """GPUs in use from a node's `AllocTRES=cpu=2,mem=512M,gres/gpu=2,gres/gpu:h100=2`
    -> {"h100": 2} (an untyped count only: {"gpu": 2})."""
    typed: dict[str, int] = {}
    untyped = 0
    for item in (text or "").split(","):
        key, _sep, value = item.strip().partition("=")
        if not key.startswith("gres/gpu") or not value.isdigit():
            continue
        if key == "gres/gpu":
            untyped = int(value)
        elif key.startswith("gres/gpu:"):
            typed[key.removeprefix("gres/gpu:")] = int(value)
    return typed or ({"gpu": untyped} if untyped else {})


def gpu_display_name(gres_type: str) -> str:
    """The catalog's name for a gres type where it names one card (`rtx4090` -> `GeForce RTX
    4090`); else the type in capitals (`h100` -> `H100`: SXM or PCIe, the gres does not say)."""
    from gputui.catalog.match import card_for_reported_name, match_card

    spec = card_for_reported_name(gres_type)
    if spec is None:
        try:
            spec = match_card(gres_type)
        except (ValueError, KeyError):  # ambiguous (AmbiguousGpu is a ValueError) or unknown
            spec = None
    return spec.name if spec is not None else gres_type.upper()


def time_limit_minutes(until: datetime, since: datetime) -> int:
    """Slurm's time limits are whole minutes: the limit that ends no later than... at least 1."""
    return max(1, math.ceil((as_utc(until) - as_utc(since)).total_seconds() / 60))


class SlurmProvider(Provider):
    name = "slurm"
    label = N_("slurm (your cluster)")
    capabilities = Capabilities(scheduled_release=True, power_off_stops_billing=False,
                                tags=True)

    # After scancel, how long Slurm may take to show the job ended (Provider.until_gone).
    gone_within_s: float = 30.0
    gone_poll_s: float = 0.5
    # How long `boot` waits for a queued allocation to start before leaving it queued.
    start_wait_s: float = 20.0

    def __init__(self, ctx: ProviderContext) -> None:
        super().__init__(ctx)
        self.clusters: dict[str, SlurmClusterSettings] = dict(ctx.config.providers.slurm)
        self._node_counts: dict[str, int] = {}  # job -> its allocation's nodes (fixed once run)
        self._node_names: dict[str, list[str]] = {}  # job -> its nodes, in order

    # -- the login node ------------------------------------------------------------------------

    def _cluster(self, name: str | None) -> tuple[str, SlurmClusterSettings]:
        if name in self.clusters:
            return name, self.clusters[name]  # type: ignore[index]
        raise ProviderError(Deferred(N_("slurm: no cluster {name} in config.toml "
                                        "([providers.slurm.NAME])"), name=repr(name)))

    def login_endpoint(self, cluster: str) -> SSHEndpoint:
        from gputui.remote.sshline import parse_ssh_line

        return parse_ssh_line(self._cluster(cluster)[1].login)

    def _login_link(self, cluster: str) -> Link:
        return self.ctx.links.get(f"slurm-login:{cluster}", self.login_endpoint(cluster),
                                  on_state=None)

    async def _sh(self, cluster: str, command: str, *, timeout: float = 60) -> tuple[int, str]:
        """Run a Slurm command on the login node (times in UTC); (exit status, output).
        A link failure is a retryable ProviderError."""
        from gputui.remote.hostkeys import UnknownHostKey
        from gputui.remote.ssh import SSHLayerError

        try:
            result = await self._login_link(cluster).run(f"TZ=UTC {command}", timeout=timeout)
        except UnknownHostKey as exc:
            raise ProviderError(Deferred(N_(
                "slurm {cluster}: the login node {where} is not trusted yet (host key "
                "{fingerprint}); check the fingerprint with the cluster's admins, then `gputui "
                "slurm trust {cluster}`"), cluster=cluster, where=f"{exc.host}:{exc.port}",
                fingerprint=exc.fingerprint)) from None
        except SSHLayerError as exc:
            raise ProviderError(Deferred(N_("slurm {cluster}: {error}"), cluster=cluster,
                                         error=str(exc)), retryable=True) from None
        status = result.exit_status if result.exit_status is not None else 255
        return status, (result.stdout or "") + (result.stderr or "")

    async def login_key(self, cluster: str) -> tuple[str, str, Any]:
        """The login node's host key, for a first-time trust: (where, SHA256 fingerprint, the
        key to pin with `known_hosts.add`, or None when it is trusted already). A key that
        differs from the one on file raises (HostKeyChanged: never accepted here)."""
        from gputui.remote.hostkeys import UnknownHostKey, fingerprint
        from gputui.remote.ssh import SSHLayerError

        endpoint = self.login_endpoint(cluster)
        where = f"{endpoint.user}@{endpoint.host}:{endpoint.port}"
        try:
            await self._login_link(cluster).run("true", timeout=30)
        except UnknownHostKey as exc:
            return where, exc.fingerprint, exc.key
        except SSHLayerError as exc:
            raise ProviderError(Deferred(N_("slurm {cluster}: {error}"), cluster=cluster,
                                         error=str(exc))) from None
        known = self.ctx.host_keys.host_keys(endpoint.host, endpoint.port)
        return where, fingerprint(known[0]) if known else "", None

    def _refused(self, cluster: str, what: str, output: str, status: int) -> ProviderError:
        lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
        return ProviderError(Deferred(N_("slurm {cluster}: {what} refused: {message}"),
                                      cluster=cluster, what=what,
                                      message=lines[-1] if lines else
                                      Deferred(N_("exit {status}"), status=status)))

    # -- offers ----------------------------------------------------------------------------------

    async def offers(self) -> list[Offer]:
        found: list[Offer] = []
        for cluster in self.clusters:
            found += await self._cluster_offers(cluster)
        return found

    async def _cluster_offers(self, cluster: str) -> list[Offer]:
        _name, cfg = self._cluster(cluster)
        # One line a node and partition: name, partition (`*`: the default), configured GPUs,
        # GPUs allocated now, state.
        status, out = await self._sh(
            cluster, "sinfo -N -h -O 'NodeList:|,Partition:|,Gres:|,GresUsed:|,StateLong:|'")
        if status != 0:
            raise self._refused(cluster, "sinfo", out, status)
        rows = [[f.strip() for f in line.split("|")] for line in out.splitlines()]
        rows = [r for r in rows if len(r) >= 5 and r[0]]
        default_partition = next((r[1].rstrip("*") for r in rows if r[1].endswith("*")), None)
        # (partition, gres type) -> [most GPUs on one node, GPUs free now]
        seen: dict[tuple[str, str], list[int]] = {}
        for _node, partition, gres, gres_used, state in (r[:5] for r in rows):
            partition = partition.rstrip("*")
            wanted = cfg.partition or default_partition
            if not partition or (wanted and partition != wanted):
                continue
            state = state.upper()
            usable = not any(s in state for s in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING",
                                                   "MAINT", "RESERVED"))
            used = parse_gres(gres_used)
            for kind, count in parse_gres(gres).items():
                row = seen.setdefault((partition, kind), [0, 0])
                row[0] = max(row[0], count)
                if usable:
                    row[1] += max(0, count - used.get(kind, 0))
        rule = BillingRule(price_per_hour=cfg.price_per_gpu_hour, currency=cfg.currency,
                           granularity=Granularity.SECOND)
        return [Offer(
            provider=self.name, offer_id=f"slurm:{cluster}:{partition}:{kind}",
            gpu=gpu_display_name(kind), gpu_count=1, price_per_gpu_hour=cfg.price_per_gpu_hour,
            billing=rule, region=cluster, available=free > 0,
            tier=Deferred(N_("partition {partition}: {free} free now, up to {most} a node"),
                          partition=partition, free=free, most=most),
            source="config.toml") for (partition, kind), (most, free) in sorted(seen.items())]

    def _offer_parts(self, offer_id: str) -> tuple[str, str, str]:
        parts = offer_id.split(":")
        if len(parts) != 4 or parts[0] != "slurm":
            raise ProviderError(Deferred(N_("slurm: no offer {offer}"), offer=repr(offer_id)))
        return parts[1], parts[2], parts[3]

    # -- lifecycle -----------------------------------------------------------------------------------

    async def check_request(self, request: CreateRequest) -> None:
        cluster, _p, _k = self._offer_parts(request.offer_id)
        self._cluster(cluster)
        if request.gpu_count % request.nodes:
            raise ProviderError(Deferred(N_(
                "slurm: {count} GPUs do not split evenly over {nodes} nodes (--count is the "
                "total)"), count=request.gpu_count, nodes=request.nodes))
        if request.release_at is None:
            raise ProviderError(Deferred(N_(
                "slurm: an allocation needs a time limit (--release-after or --release-at)")))

    def sbatch_command(self, request: CreateRequest, instance: Instance,
                       now: datetime | None = None) -> str:
        cluster, partition, kind = self._offer_parts(request.offer_id)
        _n, cfg = self._cluster(cluster)
        per_node = request.gpu_count // request.nodes
        gres = f"gpu:{kind}:{per_node}" if kind != "gpu" else f"gpu:{per_node}"
        minutes = time_limit_minutes(request.release_at or utcnow(), now or utcnow())
        args = ["sbatch", "--parsable", f"--job-name={JOB_PREFIX}{instance.id}",
                f"--partition={partition}", f"--nodes={request.nodes}",
                "--ntasks-per-node=1", f"--gres={gres}", f"--time={minutes}",
                f"--cpus-per-gpu={cfg.cpus_per_gpu}", f"--mem-per-gpu={cfg.mem_per_gpu_mb}M",
                "--output=/dev/null", "--error=/dev/null", "--no-requeue"]
        if cfg.account:
            args.append(f"--account={cfg.account}")
        return shlex.join(args) + " --wrap " + shlex.quote(HOLD)

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        await self.check_request(request)
        cluster, _partition, _kind = self._offer_parts(request.offer_id)
        status, out = await self._sh(cluster, self.sbatch_command(request, instance))
        job_id = out.strip().splitlines()[-1].split(";")[0].strip() if out.strip() else ""
        if status != 0 or not job_id.isdigit():
            raise self._refused(cluster, "sbatch", out, status)
        inst = instance.model_copy(update={
            "provider_id": f"{cluster}:{job_id}", "region": cluster,
            "ssh": self.login_endpoint(cluster), "status": InstanceStatus.BOOTING,
            "status_detail": Deferred(N_("queued in Slurm (job {job})"), job=job_id)})
        return inst

    async def boot(self, instance: Instance) -> Instance:
        """Wait a little for the scheduler to start the allocation; a queue longer than that
        leaves it booting ("queued in Slurm", with Slurm's reason and expected start)."""
        deadline = time.monotonic() + self.start_wait_s
        while True:
            instance = await self.refresh(instance)
            if instance.status != InstanceStatus.BOOTING or time.monotonic() >= deadline:
                return instance
            await asyncio.sleep(0.5)

    def _job(self, instance: Instance) -> tuple[str, str]:
        cluster, _sep, job = (instance.provider_id or "").rpartition(":")
        if not cluster or not job.isdigit():
            raise UnknownInstance(Deferred(N_("slurm: {name} has no Slurm job"),
                                           name=instance.name))
        return cluster, job

    async def job_view(self, cluster: str, job: str, *, strict: bool = False) -> JobView | None:
        """Slurm's view of the job: squeue (every state), else sacct where accounting exists;
        None when Slurm no longer knows the job (purged after MinJobAge, no accounting).
        `strict`: a cluster whose accounting exists but cannot be asked now (slurmdbd down)
        raises a retryable ProviderError rather than None — the job's end is read later, not
        guessed (a release's gone check needs no end: Slurm knows no such job, after scancel)."""
        status, out = await self._sh(
            cluster, f"squeue --states=all -h -j {job} -o '{_SQUEUE_FORMAT}'")
        view = parse_squeue(out) if status == 0 else None
        if view is not None:
            return view
        if status != 0 and "Invalid job id" not in out:
            raise self._refused(cluster, "squeue", out, status)
        status, out = await self._sh(
            cluster, f"sacct -X -n -P -j {job} -o JobID,State,Reason,Start,End,Timelimit,"
                     "NNodes,NodeList")
        if status == 0:
            return parse_squeue(out)
        if strict and "accounting storage is disabled" not in out:
            lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
            raise ProviderError(Deferred(N_(
                "slurm {cluster}: Slurm no longer lists job {job}, and its accounting cannot be "
                "asked now ({message}): its end is read again later"),
                cluster=cluster, job=job, message=lines[-1] if lines else
                Deferred(N_("exit {status}"), status=status)), retryable=True)
        return None

    async def refresh(self, instance: Instance) -> Instance:
        cluster, job = self._job(instance)
        view = await self.job_view(cluster, job, strict=True)
        inst = instance.model_copy()
        if view is None:
            # Slurm knows the job no more: it ended long enough ago to be purged, and there is
            # no accounting to ask when. It cannot have run past its time limit as last seen
            # (Slurm ends it there): billed to that, or to now if that is still ahead.
            now = utcnow()
            limit = inst.ends_by
            if limit is not None and inst.running_since is not None and limit < now:
                inst.mark_ended(max(limit, inst.running_since), "external")
                inst.status_detail = Deferred(N_(
                    "ended: Slurm no longer lists job {job} (purged, and no accounting to ask "
                    "for its end): billed to its time limit, {limit}, the latest it can have "
                    "run"), job=job, limit=limit.astimezone().strftime("%Y-%m-%d %H:%M"))
            elif inst.running_since is None:  # last seen queued: whether it ever ran is unknown
                inst.mark_ended(now, "external")
                inst.status_detail = Deferred(N_(
                    "ended: Slurm no longer lists job {job} (purged, and no accounting to ask); "
                    "it was never seen running, so nothing is billed here — the cluster's own "
                    "records say whether it ran"), job=job)
            else:
                inst.mark_ended(now, "external")
                inst.status_detail = Deferred(N_(
                    "ended: Slurm no longer lists job {job} (purged, and no accounting to ask "
                    "for its end: billed until now)"), job=job)
            return inst
        if view.state in PENDING_STATES:
            inst.status = InstanceStatus.BOOTING
            start = view.start.astimezone().strftime("%Y-%m-%d %H:%M") if view.start else None
            inst.status_detail = (
                Deferred(N_("queued in Slurm: {reason}, expected start {start}"),
                         reason=view.reason or "None", start=start) if start else
                Deferred(N_("queued in Slurm: {reason}, no expected start yet"),
                         reason=view.reason or "None"))
            return inst
        if view.state in RUNNING_STATES:
            inst.ends_by = view.end  # squeue: the start plus the time limit (None: unlimited)
            if view.start is not None:
                inst.running_since = view.start
                inst.billed_running_seconds = 0
            inst.mark_running(view.start or utcnow())
            inst.status_detail = Deferred(N_("Slurm job {job} on {nodes}, limit {limit}"),
                                          job=job, nodes=view.nodes, limit=view.time_limit)
            return inst
        if view.state in ENDED_STATES or view.end is not None:
            end = view.end or utcnow()
            inst.running_since = view.start if view.start is not None and view.start <= end \
                else None
            inst.billed_running_seconds = 0
            reason = "timer" if view.state in ("TIMEOUT", "DEADLINE") else "external"
            if inst.status == InstanceStatus.RELEASING and inst.end_reason:
                reason = inst.end_reason
            inst.mark_ended(end, reason)  # type: ignore[arg-type]
            why = ENDED_WORDS.get(view.state)
            inst.status_detail = Deferred(N_("ended by Slurm: {why} ({state}{reason})"),
                                          why=Deferred(why) if why else view.state.lower(),
                                          state=view.state,
                                          reason=f", {view.reason}" if view.reason
                                          not in ("", "None") else "")
            return inst
        inst.status_detail = Deferred(N_("Slurm shows job {job} as {state}"), job=job,
                                      state=view.state)
        return inst

    async def release(self, instance: Instance) -> None:
        """`scancel`, then positive evidence: Slurm shows the job ended (or no longer knows
        it). Anything else raises a retryable ProviderError."""
        try:
            cluster, job = self._job(instance)
        except UnknownInstance:
            if instance.provider_id is None:
                return  # never submitted: nothing allocated
            raise
        status, out = await self._sh(cluster, f"scancel {job}")
        if status != 0 and "Invalid job id" not in out and "already completing" not in out:
            raise self._refused(cluster, "scancel", out, status)
        state = ""  # what Slurm last showed

        async def ended() -> bool:
            nonlocal state
            view = await self.job_view(cluster, job)
            if view is None or view.state in ENDED_STATES:
                return True
            state = view.state
            return False

        if not await self.until_gone(ended):
            raise ProviderError(Deferred(N_(
                "slurm {cluster}: scancel {job} ran, but Slurm still shows it {state} after "
                "{seconds} s"), cluster=cluster, job=job, state=state,
                seconds=f"{self.gone_within_s:.0f}"), retryable=True)

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        """Layer 2 is Slurm's time limit: `scontrol update JobId=… TimeLimit=…` (whole minutes
        from the job's start). A cluster that lets users only shorten limits refuses a longer
        one: said plainly (the console still releases on time)."""
        cluster, job = self._job(instance)
        if at is None:
            raise ProviderError(Deferred(N_(
                "slurm: an allocation always has a time limit; it stays at Slurm's current one")))
        view = await self.job_view(cluster, job)
        if view is None or view.state in ENDED_STATES:
            return False
        since = view.start if view.state in RUNNING_STATES and view.start else utcnow()
        minutes = time_limit_minutes(at, since)
        status, out = await self._sh(
            cluster, f"scontrol update JobId={job} TimeLimit={minutes}")
        if status != 0:
            lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
            raise ProviderError(Deferred(N_(
                "slurm {cluster}: the cluster refused to change job {job}'s time limit to {min} "
                "minutes ({message}); Slurm ends it at its current limit"), cluster=cluster,
                job=job, min=minutes, message=lines[-1] if lines else status))
        return True

    async def find_tagged(self, our_id: str) -> dict[str, Any] | None:
        for cluster in self.clusters:
            status, out = await self._sh(
                cluster, f"squeue -h --name={JOB_PREFIX}{our_id} -o '{_SQUEUE_FORMAT}'")
            view = parse_squeue(out) if status == 0 else None
            if view is not None:
                ended = view.state in ENDED_STATES
                return {"id": f"{cluster}:{view.job_id}",
                        "status": "terminated" if ended else "running"}
        return None

    async def link_target(self, instance: Instance) -> tuple[SSHEndpoint | None, dict[str, Any]]:
        """The cluster's login node; each command runs in the allocation's first node."""
        cluster, job = self._job(instance)
        names = await self._nodes_of(cluster, job) if instance.status == InstanceStatus.RUNNING \
            else None
        first = names[0] if names and len(names) > 1 else None  # one node: Slurm's own choice
        return self.login_endpoint(cluster), {"command_wrapper": in_allocation(job, first)}

    async def queue_host(self, instance: Instance) -> QueueHost | None:
        """Jobs go through Slurm: the queue runner lives on the login node, in the shared home
        (`~/.gputui/slurm/CLUSTER/JOB-ID`: job ids start again on a new cluster), and starts
        each run as a job step of the allocation
        (`srun --jobid=JOB`, no `--overlap`): Slurm binds its GPUs (`--gres`, setting
        CUDA_VISIBLE_DEVICES), holds it while the allocation's resources are taken, and its exit
        code is the step's. A run on every GPU is one task a node on every node of the
        allocation; a run with `--gpus` asks for that many GPUs on one node."""
        cluster, job = self._job(instance)
        _name, cfg = self._cluster(cluster)
        nodes = self._node_counts.get(job)
        if nodes is None:
            view = await self.job_view(cluster, job)
            if view is None or view.state not in RUNNING_STATES:
                raise ProviderError(Deferred(N_(
                    "slurm {cluster}: job {job} is not running ({state}): its runs cannot start"),
                    cluster=cluster, job=job, state=view.state if view else "gone"))
            nodes = self._node_counts[job] = max(1, view.node_count)
        kind = (instance.offer_id or "").split(":")[-1] if (instance.offer_id or "").startswith(
            "slurm:") else "gpu"
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster)
        return QueueHost(link=self._login_link(cluster), folder=f".gputui/slurm/{safe}/{job}-{instance.id}",
                         launch={"argv": ["srun", f"--jobid={job}", "--kill-on-bad-exit=1"],
                                 "nodes": nodes,
                                 "gpus_per_node": max(1, instance.gpu_count // nodes),
                                 "gres": kind if kind != "gpu" else None,
                                 "cpus_per_gpu": cfg.cpus_per_gpu,
                                 "mem_per_gpu_mb": cfg.mem_per_gpu_mb,
                                 "name": "gputui-run-"})

    async def _nodes_of(self, cluster: str, job: str) -> list[str] | None:
        """The allocation's nodes in order (`scontrol show hostnames`), once it runs; None
        while it does not."""
        names = self._node_names.get(job)
        if names is None:
            view = await self.job_view(cluster, job)
            if view is None or view.state not in RUNNING_STATES or not view.nodes:
                return None
            if view.node_count <= 1:
                names = [view.nodes]
            else:
                status, out = await self._sh(
                    cluster, f"scontrol show hostnames {shlex.quote(view.nodes)}")
                if status != 0:
                    raise self._refused(cluster, "scontrol show hostnames", out, status)
                names = [n.strip() for n in out.splitlines() if n.strip()]
            self._node_names[job] = names
        return names

    async def node_links(self, instance: Instance) -> list[tuple[str, Any]] | None:
        """A multi-node allocation: one link a node (each command a step on that node,
        `srun --nodelist=NODE --overlap`); None for one node."""
        cluster, job = self._job(instance)
        names = await self._nodes_of(cluster, job)
        if names is None or len(names) <= 1:
            return None
        endpoint = self.login_endpoint(cluster)
        return [(node, self.ctx.links.get(f"{instance.id}@{node}", endpoint, on_state=None,
                                          command_wrapper=in_allocation(job, node)))
                for node in names]

    async def live_price(self, instance: Instance) -> Decimal | None:
        cluster, _job = self._job(instance)
        return self._cluster(cluster)[1].price_per_gpu_hour * instance.gpu_count


def in_allocation(job: str, node: str | None = None) -> Any:
    """The command wrapper for an allocation: a job step on its first node (or on `node`),
    sharing its resources (`--overlap`) and GPUs, in a shell."""
    where = f"--nodelist={shlex.quote(node)} " if node else ""

    def wrap(command: str) -> str:
        return (f"srun --jobid={job} --overlap --nodes=1 --ntasks=1 {where}--quiet "
                f"sh -c {shlex.quote(command)}")

    return wrap

