"""The telemetry service: one nvidia-smi stream per watched instance, reconnecting, into the store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal as _signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_
from gputui.i18n import Deferred as D
from gputui.models import (
    GpuSample,
    Hint,
    HostInventory,
    HostSample,
    Instance,
    InstanceStatus,
    LinkState,
    ProcessSample,
)
from gputui.nvidia.diagnose import Diagnosis, diagnose_nvidia_smi
from gputui.nvidia.nvsmi import (
    CsvStreamParser,
    NvsmiParseError,
    parse_xml,
    query_gpu_command,
    sanitize,
)
from gputui.services.telemetry.base import (
    LOCAL_ID,
    _internal_diagnosis,
    _service_diagnosis,
    clamp_interval,
    diagnosis_text,
    ssh_diagnosis,
)
from gputui.services.telemetry.hints import (
    HintRules,
    _Trend,
    evaluate_hints,
    evaluate_host_hints,
)
from gputui.services.telemetry.processes import (
    read_processes,
)
from gputui.services.telemetry.vitals import VitalsParser, vitals_command
from gputui.store import LinkChanged, SessionStore, TelemetryChanged

if TYPE_CHECKING:
    from gputui.services.hub import Services

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchStatus:
    """What the monitor shows about one instance besides its samples."""

    instance_id: str
    watching: bool
    link: LinkState
    link_detail: str | None
    age_s: float | None  # seconds since the last sample (None: none yet)
    stale: bool
    diagnosis: Diagnosis | None
    note: str | None  # e.g. "waiting for the first sample", "processes: ..." (a Deferred:
    # English, shown in the interface language with `gputui.i18n.shown`)

    @property
    def reconnecting(self) -> bool:
        return self.link in (LinkState.RECONNECTING, LinkState.CONNECTING)


@dataclass(frozen=True)
class KillResult:
    pid: int
    signal: str  # TERM | KILL
    sent: bool
    gone: bool
    message: str


@dataclass
class _Watch:
    inst: Instance
    stream_task: asyncio.Task[None] | None = None
    slow_task: asyncio.Task[None] | None = None
    batch: dict[int, GpuSample] = field(default_factory=dict)
    expected: set[int] = field(default_factory=set)
    flush_handle: asyncio.TimerHandle | None = None
    trends: dict[int, _Trend] = field(default_factory=dict)
    inventory_tried: float = 0.0
    need_inventory: bool = True
    diagnosis: Diagnosis | None = None
    note: str | None = D(N_("starting"))
    process_note: str | None = None
    last_line_at: float | None = None
    stream_started_at: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    local: bool = False
    # host vitals (CPU, memory, disks, network): their own long-lived reader
    host_task: asyncio.Task[None] | None = None
    host_recent: deque[tuple[float, float | None, float | None]] = field(
        default_factory=lambda: deque(maxlen=720))
    gpu_hints: list[Hint] = field(default_factory=list)
    host_hints: list[Hint] = field(default_factory=list)


class _Backoff:
    def __init__(self, initial: float, maximum: float) -> None:
        self.initial, self.maximum, self.attempt = initial, maximum, 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * (2**self.attempt))
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


class TelemetryService:
    """Live telemetry for every watched instance. Create on the App; call `start`/`stop`
    (or `sync` with the live instances) from the UI loop; `await close()` on exit."""

    def __init__(
        self,
        services: Services,
        store: SessionStore,
        *,
        interval: float = 1.0,
        process_interval: float | None = None,
        stale_after: float | None = None,
        rules: HintRules | None = None,
        retry_initial: float = 1.0,
        retry_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.services = services
        self.store = store
        self._interval = clamp_interval(interval)
        self._process_interval = process_interval
        self._stale_after = stale_after
        self.rules = rules or HintRules()
        self._retry = (retry_initial, retry_max)
        self._clock = clock
        self._watches: dict[str, _Watch] = {}
        self._closed = False
        # The loop the streams run on: the one it is made on (make it on the loop that will
        # run it), else the first that calls it.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._unsubscribe = store.subscribe(self._on_store_event)

    def _deferred(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Store events arrive on worker threads too: run `fn(*args)` on the service's loop
        instead when called off it (returns True: the caller should stop here). A call made
        before any loop is known is kept and run when the service first runs on one: no call
        is ever dropped."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and (self._loop is None or loop is self._loop):
            self._loop = loop
            if self._pending:
                pending, self._pending = self._pending, []
                for queued, queued_args in pending:
                    loop.call_soon(queued, *queued_args)
            return False
        target = self._loop
        if target is not None and not target.is_closed():
            target.call_soon_threadsafe(fn, *args)
        elif target is None:
            log.warning("telemetry: %s called before any loop runs it; kept for later",
                        getattr(fn, "__name__", fn))
            self._pending.append((fn, args))
        else:
            log.warning("telemetry: %s called after its loop closed; nothing to run it",
                        getattr(fn, "__name__", fn))
        return True

    # -- settings -----------------------------------------------------------------------------

    @property
    def interval(self) -> float:
        return self._interval

    # While no screen that shows the streams is in view, they sample this often at most: the
    # lease clock, idle rules and budgets still see the instances, at a fraction of the cost.
    BACKGROUND_INTERVAL = 10.0
    _background = False
    _foreground_since = float("-inf")

    @property
    def stream_interval(self) -> float:
        """What the streams sample at now: the interval, or the background pace."""
        if self._background:
            return max(self._interval, self.BACKGROUND_INTERVAL)
        return self._interval

    def set_background(self, background: bool) -> None:
        """Slow the streams while nothing on screen shows them (`True`), back to the interval
        when a screen that does is shown (`False`); running streams restart at the new pace."""
        if background == self._background:
            return
        before = self.stream_interval
        self._background = background
        if not background:
            self._foreground_since = self._clock()
        if self.stream_interval == before:
            return
        if self._deferred(self._repace):
            return
        self._repace()

    def _repace(self) -> None:
        self._pace_links()
        self._restart_all()

    def _pace_links(self) -> None:
        """Keepalives sized to the pace the streams sample at now: a stream's lines keep its
        link from ever needing one, so a probe only goes out when a host falls silent — every
        2 s at 1 s telemetry, every 10 s while nothing on screen shows the streams (a silent
        host then reads "reconnecting" in about half a minute instead of a few seconds)."""
        # (never made here: the pool, once something has used it)
        links = getattr(self.services, "__dict__", {}).get("links")
        if links is not None and hasattr(links, "set_keepalive"):
            links.set_keepalive(*self._keepalive())

    #: the process list's pace while nothing on screen shows it (only the Monitor's detail
    #: and its hints read it; the Monitor reads it again the moment it is shown)
    BACKGROUND_PROCESS_INTERVAL = 60.0

    @property
    def process_interval(self) -> float:
        if self._process_interval is not None:
            return self._process_interval
        if self._background:
            return self.BACKGROUND_PROCESS_INTERVAL
        return min(30.0, max(2.0, 3 * self.stream_interval))

    @property
    def stale_after(self) -> float:
        """Data older than this is shown as stale, with its age."""
        if self._stale_after is not None:
            return self._stale_after
        pace = self.stream_interval
        if self._clock() - self._foreground_since < 3 * self.BACKGROUND_INTERVAL:
            pace = max(pace, self.BACKGROUND_INTERVAL)  # samples taken at the slower pace
        return max(3.0, 3 * pace)

    def set_interval(self, seconds: float) -> float:
        """Sample every `seconds` (clamped to 0.5-10 s); running streams restart with it."""
        value = clamp_interval(seconds)
        if value == self._interval:
            return value
        self._interval = value
        if self._deferred(self._restart_all):
            return value
        self._restart_all()
        return value

    def _restart_all(self) -> None:
        for w in self._watches.values():
            w.wake.set()  # the process list read at once at the new pace
            if not w.local and w.stream_task is not None:
                self._restart_stream(w)

    # -- watching -----------------------------------------------------------------------------

    def watching(self) -> list[str]:
        return list(self._watches)

    def is_watching(self, instance_id: str) -> bool:
        return instance_id in self._watches

    def start(self, inst: Instance) -> None:
        """Watch an instance (idempotent; a changed SSH endpoint restarts the watch).
        Safe to call from any thread (it runs on the service's loop)."""
        if self._closed or self._deferred(self.start, inst):
            return
        w = self._watches.get(inst.id)
        if w is not None:
            old, w.inst = w.inst, inst
            if old.ssh != inst.ssh and w.stream_task is not None:
                self._restart_stream(w)
            return
        w = _Watch(inst)
        self._watches[inst.id] = w
        w.stream_task = self._spawn(self._stream_loop(w), f"telemetry stream {inst.id}")
        w.slow_task = self._spawn(self._slow_loop(w), f"telemetry processes {inst.id}")
        w.host_task = self._spawn(self._host_loop(w), f"telemetry host {inst.id}")

    def start_local(self) -> None:
        """Watch this machine's GPUs through NVML, as instance `LOCAL_ID`."""
        if self._closed or self._deferred(self.start_local) or LOCAL_ID in self._watches:
            return
        from gputui.models import BillingRule

        inst = Instance(
            id=LOCAL_ID, name="this machine", provider="local", gpu="local",
            billing=BillingRule(price_per_hour=Decimal(0)), status=InstanceStatus.RUNNING,
        )
        w = _Watch(inst, local=True)
        self._watches[LOCAL_ID] = w
        w.stream_task = self._spawn(self._local_loop(w), "telemetry local")
        w.host_task = self._spawn(self._local_host_loop(w), "telemetry local host")

    def ingest(
        self,
        instance_id: str,
        samples: Sequence[GpuSample],
        *,
        processes: Sequence[ProcessSample] | None = None,
        inventory: HostInventory | None = None,
        host: HostSample | None = None,
    ) -> None:
        """Record readings from another source (a replayed capture, a test) as if streamed:
        history, hints and inventory, without starting anything remote."""
        w = self._watches.get(instance_id)
        if w is None:
            from gputui.models import BillingRule

            inst = self.store.get_instance_sync(instance_id) if instance_id != LOCAL_ID else None
            w = _Watch(inst or Instance(id=instance_id, name=instance_id, provider="replay",
                                        gpu="?", billing=BillingRule(price_per_hour=Decimal(0))))
            self._watches[instance_id] = w
        if inventory is not None:
            self.store.set_inventory(instance_id, inventory)
        if processes is not None:
            self.store.set_processes(instance_id, list(processes))
        if host is not None:
            self._on_host(w, host)
        self._record(w, list(samples))

    def stop(self, instance_id: str) -> None:
        """Stop watching (the remote nvidia-smi is stopped; the history stays in the store)."""
        if self._deferred(self.stop, instance_id):
            return
        w = self._watches.pop(instance_id, None)
        if w is None:
            return
        self._cancel(w)
        self.store.set_hints(instance_id, [])  # nothing to act on once it is not watched

    def sync(self, instances: Iterable[Instance]) -> None:
        """Watch exactly the running instances among `instances` (the App calls this with
        the live instances on mount and after every InstanceChanged; any thread)."""
        instances = list(instances)
        if self._closed or self._deferred(self.sync, instances):
            return
        running = {i.id: i for i in instances if i.status == InstanceStatus.RUNNING}
        for iid in list(self._watches):
            if iid != LOCAL_ID and iid not in running:
                self.stop(iid)
        for inst in running.values():
            self.start(inst)

    async def close(self) -> None:
        self._closed = True
        self._unsubscribe()
        watches, self._watches = list(self._watches.values()), {}
        tasks = []
        for w in watches:
            tasks.extend(self._cancel(w))
        if tasks:
            # bounded: a stream stuck in a remote call must not hold the console open
            await asyncio.wait(tasks, timeout=5)

    def _cancel(self, w: _Watch) -> list[asyncio.Task[None]]:
        if w.flush_handle is not None:
            w.flush_handle.cancel()
            w.flush_handle = None
        tasks = [t for t in (w.stream_task, w.slow_task, w.host_task) if t is not None]
        for t in tasks:
            t.cancel()
        return tasks

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro, name=name)

    def _restart_stream(self, w: _Watch) -> None:
        if w.stream_task is not None:
            w.stream_task.cancel()
        self._flush(w)
        w.expected = set()
        w.stream_task = self._spawn(self._stream_loop(w), f"telemetry stream {w.inst.id}")
        if w.host_task is not None:
            w.host_task.cancel()
            w.host_task = self._spawn(self._host_loop(w), f"telemetry host {w.inst.id}")

    def refresh_processes(self, instance_id: str) -> None:
        """Read the process list now rather than at the next slow tick."""
        if self._deferred(self.refresh_processes, instance_id):
            return
        w = self._watches.get(instance_id)
        if w is not None:
            w.wake.set()

    # -- what the UI reads --------------------------------------------------------------------

    def inventory(self, instance_id: str) -> HostInventory | None:
        return self.store.telemetry(instance_id).inventory

    def hints(self, instance_id: str) -> list[Hint]:
        return list(self.store.telemetry(instance_id).hints)

    def diagnosis(self, instance_id: str) -> Diagnosis | None:
        w = self._watches.get(instance_id)
        return w.diagnosis if w is not None else None

    def age(self, instance_id: str) -> float | None:
        updated = self.store.telemetry(instance_id).updated
        return None if updated is None else max(0.0, self._clock() - updated)

    def status(self, instance_id: str) -> WatchStatus:
        w = self._watches.get(instance_id)
        link, detail = self.store.link(instance_id)
        if w is not None and w.local:
            link, detail = LinkState.CONNECTED, "NVML"
        age = self.age(instance_id)
        stale = age is not None and age > self.stale_after
        note = None
        if w is not None:
            note = w.note
            if note is None and w.process_note:
                note = D(N_("processes: {why}"), why=w.process_note)
        return WatchStatus(
            instance_id=instance_id,
            watching=w is not None,
            link=link,
            link_detail=detail,
            age_s=age,
            stale=stale,
            diagnosis=w.diagnosis if w is not None else None,
            note=note,
        )

    # -- store events ---------------------------------------------------------------------------

    def _on_store_event(self, event: object) -> None:
        if isinstance(event, LinkChanged) and event.state == LinkState.CONNECTED:
            if self._deferred(self._on_store_event, event):
                return
            w = self._watches.get(event.instance_id)
            if w is not None:
                w.need_inventory = True  # once per connection
                w.stream_started_at = self._clock()  # the stream starts again now
                w.wake.set()

    def _touch(self, instance_id: str) -> None:
        self.store.emit(TelemetryChanged(instance_id))

    # -- diagnoses ------------------------------------------------------------------------------

    def _set_diagnosis(self, w: _Watch, diag: Diagnosis | None) -> None:
        if diag == w.diagnosis:
            return
        w.diagnosis = diag
        if diag is not None:
            w.note = None
        if self._watches.get(w.inst.id) is w:
            self.store.set_diagnosis(w.inst.id, diagnosis_text(diag) if diag else None)

    # -- samples --------------------------------------------------------------------------------

    def _on_sample(self, w: _Watch, sample: GpuSample) -> None:
        if sample.index in w.batch:
            self._flush(w, complete=True)
        w.batch[sample.index] = sample
        if w.expected and w.expected <= w.batch.keys():
            self._flush(w)
        elif w.flush_handle is None:
            delay = min(0.1, self.stream_interval / 4)
            w.flush_handle = asyncio.get_running_loop().call_later(delay, self._flush, w)

    def _flush(self, w: _Watch, complete: bool = False) -> None:
        if w.flush_handle is not None:
            w.flush_handle.cancel()
            w.flush_handle = None
        if not w.batch:
            return
        samples = [w.batch[i] for i in sorted(w.batch)]
        if complete:
            w.expected = set(w.batch)
        else:
            w.expected |= set(w.batch)
        w.batch = {}
        if self._watches.get(w.inst.id) is not w:
            return
        self._record(w, samples)

    def _record(self, w: _Watch, samples: list[GpuSample]) -> None:
        now = self._clock()
        for s in samples:
            trend = w.trends.get(s.index)
            if trend is None:
                trend = w.trends[s.index] = _Trend(self.rules.bucket_s, self.rules.keep_s)
            trend.add(now, s)
        w.note = None
        w.diagnosis = None
        tel = self.store.telemetry(w.inst.id)
        w.gpu_hints = evaluate_hints(samples, tel.processes, w.trends, now, self.rules)
        self.store.set_hints(w.inst.id, w.gpu_hints + w.host_hints)
        self.store.add_samples(w.inst.id, samples)  # clears the store's diagnosis, emits

    # -- the stream -----------------------------------------------------------------------------

    async def _link(self, w: _Watch) -> Any:
        link = await self.services.link(w.inst)
        pace = self._keepalive()
        if hasattr(link, "set_keepalive"):  # (a link made before the pace last changed)
            link.set_keepalive(*pace)
        return link

    def _keepalive(self) -> tuple[float, int]:
        from gputui.services.hub import keepalive_for

        pace = keepalive_for(self.stream_interval)
        return pace["keepalive_interval"], int(pace["keepalive_count_max"])

    async def _node_links(self, w: _Watch) -> list[tuple[str, Any]] | None:
        """One link a machine for an instance spread over several (a multi-node Slurm
        allocation), else None."""
        from gputui.providers.base import ProviderError
        from gputui.services.hub import ServiceError

        try:
            return await self.services.provider(w.inst.provider).node_links(w.inst)
        except ProviderError as exc:
            raise ServiceError(str(exc)) from None

    async def _stream_loop(self, w: _Watch) -> None:
        from gputui.remote.ssh import SSHLayerError
        from gputui.services.hub import ServiceError

        backoff = _Backoff(*self._retry)
        while True:
            try:
                nodes = await self._node_links(w)
                if not nodes:
                    await self._stream_one(w, await self._link(w), 0, backoff)
                else:
                    # one stream a machine, its GPUs numbered on from the machine before
                    per = max(1, w.inst.gpu_count // len(nodes))
                    tasks = [asyncio.ensure_future(self._stream_one(w, link, k * per, backoff))
                             for k, (_node, link) in enumerate(nodes)]
                    try:
                        done, _pending = await asyncio.wait(
                            tasks, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for task in tasks:
                            task.cancel()
                        await asyncio.gather(*tasks, return_exceptions=True)
                    for task in done:
                        task.result()  # the first to end or fail: all start again
            except asyncio.CancelledError:
                raise
            except ServiceError as exc:
                self._set_diagnosis(w, _service_diagnosis(str(exc)))
            except SSHLayerError as exc:
                self._set_diagnosis(w, ssh_diagnosis(exc))
            except Exception as exc:  # never let the loop die: say what happened, retry
                log.exception("telemetry stream for %s failed", w.inst.id)
                self._set_diagnosis(w, _internal_diagnosis(exc))
            if not self._still_live(w):
                return
            await asyncio.sleep(backoff.next())

    async def _stream_one(self, w: _Watch, link: Any, offset: int, backoff: _Backoff) -> None:
        """One `nvidia-smi -lms` stream until it ends (a failure of nvidia-smi is diagnosed
        here; the link's failures go to the caller). `offset`: added to its GPUs' indices."""
        from gputui.remote.ssh import CommandFailed

        unparsed: deque[str] = deque(maxlen=20)
        try:
            parser = CsvStreamParser()
            command = query_gpu_command(int(round(self.stream_interval * 1000)))
            w.stream_started_at = self._clock()
            if w.diagnosis is None and self.store.telemetry(w.inst.id).updated is None:
                w.note = D(N_("waiting for the first sample"))
            async with link.stream_lines(command) as lines:
                async for line in lines:
                    w.last_line_at = self._clock()
                    skipped = parser.skipped
                    sample = parser.feed(line)
                    if sample is None:
                        if parser.skipped != skipped:
                            unparsed.append(line[:300])
                            self.store.telemetry(w.inst.id).skipped_lines += 1
                        continue
                    if offset:
                        sample = sample.model_copy(update={"index": sample.index + offset})
                    self._on_sample(w, sample)
                    backoff.reset()
            self._flush(w)
            # nvidia-smi -lms does not end by itself; if it did, say so and start again.
            if unparsed:
                diag = diagnose_nvidia_smi("\n".join(unparsed), 1)
                self._set_diagnosis(w, diag)
            else:
                w.note = D(N_("nvidia-smi stopped; restarting"))
                self._touch(w.inst.id)
        except CommandFailed as exc:
            self._flush(w)
            output = "\n".join(unparsed) + "\n" + exc.stderr
            diag = diagnose_nvidia_smi(output, exc.exit_status)
            self._set_diagnosis(w, diag or diagnose_nvidia_smi(output, 1))

    # -- host vitals ------------------------------------------------------------------------------

    def _on_host(self, w: _Watch, sample: HostSample) -> None:
        now = self._clock()
        w.host_recent.append((now, sample.cpu_pct, sample.iowait_pct))
        tel = self.store.telemetry(w.inst.id)
        w.host_hints = evaluate_host_hints(sample, w.host_recent, tel.latest(), w.trends, now,
                                           self.rules)
        self.store.set_hints(w.inst.id, w.gpu_hints + w.host_hints)
        # While the GPUs stream, their next tick tells the screens (one event a tick); when
        # they do not (nvidia-smi broken, no GPUs yet), this reading does.
        gpus_fresh = tel.updated is not None \
            and time.monotonic() - tel.updated < 2 * self.stream_interval
        self.store.set_host(w.inst.id, sample, quiet=gpus_fresh)

    async def _host_loop(self, w: _Watch) -> None:
        """The host's vitals from one long-lived `sh`/`awk` reader (see `vitals`), restarted
        with backoff. Its failures are logged, not diagnosed: the GPU stream owns the link's
        story, and a host without /proc still shows its GPUs."""
        from gputui.remote.ssh import CommandFailed, SSHLayerError
        from gputui.services.hub import ServiceError

        backoff = _Backoff(max(2.0, self._retry[0]), max(60.0, self._retry[1]))
        while True:
            try:
                link = await self._link(w)
                parser = VitalsParser()
                command = vitals_command(int(round(self.stream_interval * 1000)))
                async with link.stream_lines(command) as lines:
                    async for line in lines:
                        sample = parser.feed(line)
                        if sample is None:
                            continue
                        if self._watches.get(w.inst.id) is not w:
                            return
                        self._on_host(w, sample)
                        backoff.reset()
            except asyncio.CancelledError:
                raise
            except (CommandFailed, ServiceError, SSHLayerError) as exc:
                log.info("host vitals for %s: %s", w.inst.id, sanitize(str(exc), 200))
            except Exception:  # never let the loop die
                log.exception("host vitals for %s failed", w.inst.id)
            if not self._still_live(w):
                return
            await asyncio.sleep(backoff.next())

    def _still_live(self, w: _Watch) -> bool:
        try:
            inst = self.store.get_instance_sync(w.inst.id)
        except Exception:  # noqa: BLE001 - a state problem is not ours to report here
            return True
        if inst is None:
            return True
        if not inst.status.live:
            self.stop(w.inst.id)
            return False
        return True

    # -- processes and inventory ----------------------------------------------------------------

    def _uuid_index(self, w: _Watch) -> dict[str, int]:
        tel = self.store.telemetry(w.inst.id)
        out = {s.uuid: s.index for s in tel.latest() if s.uuid}
        if tel.inventory is not None:
            for g in tel.inventory.gpus:
                if g.uuid:
                    out.setdefault(g.uuid, g.index)
        return out

    async def _slow_loop(self, w: _Watch) -> None:
        while True:
            w.wake.clear()
            try:
                await self._slow_tick(w)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep going; the stream reports the link
                w.process_note = sanitize(str(exc), 200) or type(exc).__name__
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.process_interval):
                    await w.wake.wait()

    async def _slow_tick(self, w: _Watch) -> None:
        from gputui.remote.ssh import SSHLayerError
        from gputui.services.hub import ServiceError

        self._watchdog(w)
        if w.diagnosis is not None and w.diagnosis.code not in ("internal",):
            return  # nvidia-smi (or the link) is broken: the stream retries and reports it
        try:
            link = await self._link(w)
        except ServiceError:
            return
        now = self._clock()
        missing_retry = (self.store.telemetry(w.inst.id).inventory is None
                         and now - w.inventory_tried >= 30.0)
        if w.need_inventory or missing_retry:
            w.inventory_tried = now
            try:
                result = await link.run("nvidia-smi -q -x", timeout=30, connect_timeout=2.0)
                if result.exit_status == 0:
                    self.store.set_inventory(w.inst.id, parse_xml(result.stdout))
                    w.need_inventory = False
            except NvsmiParseError:
                w.need_inventory = False
            except SSHLayerError:
                pass
        try:
            procs, why = await read_processes(
                link, self._uuid_index(w), timeout=20, connect_timeout=1.0
            )
        except SSHLayerError:
            return
        if procs is None:
            if w.process_note != why:
                w.process_note = why
                self._touch(w.inst.id)
            return
        w.process_note = None
        if self._watches.get(w.inst.id) is not w:
            return
        tel = self.store.telemetry(w.inst.id)
        if procs != tel.processes:
            self.store.set_processes(w.inst.id, procs)
        else:
            tel.processes = procs

    def _watchdog(self, w: _Watch) -> None:
        """A stream that went silent while the link says connected is restarted."""
        if w.stream_task is None or w.diagnosis is not None:
            return
        link, _ = self.store.link(w.inst.id)
        if link != LinkState.CONNECTED:
            return
        last = max(w.last_line_at or 0.0, w.stream_started_at or 0.0)
        if not last:
            return
        if self._clock() - last > max(5 * self.stream_interval, 15.0):
            w.note = D(N_("no data; restarting nvidia-smi"))
            self._restart_stream(w)

    # -- local (NVML) -----------------------------------------------------------------------------

    async def _local_loop(self, w: _Watch) -> None:
        from gputui.nvidia.nvml import NvmlUnavailable, read_local

        w.note = D(N_("reading NVML"))
        while True:
            w.wake.clear()
            delay = self.stream_interval
            try:
                reading = await asyncio.to_thread(read_local)
            except asyncio.CancelledError:
                raise
            except NvmlUnavailable as exc:
                self._set_diagnosis(w, exc.diagnosis)
                delay = 30.0
            except Exception as exc:  # noqa: BLE001 - read_local promises not to, but never crash
                self._set_diagnosis(w, _internal_diagnosis(exc))
                delay = 30.0
            else:
                self.store.set_inventory(LOCAL_ID, reading.inventory)
                procs = list(reading.processes)
                if procs != self.store.telemetry(LOCAL_ID).processes:
                    self.store.set_processes(LOCAL_ID, procs)
                self._record(w, list(reading.samples))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await w.wake.wait()

    async def _local_host_loop(self, w: _Watch) -> None:
        """This machine's vitals, read from /proc and `statvfs` in a worker thread every
        interval (no process per tick); with or without NVML."""
        from gputui.services.telemetry.local_vitals import LocalVitals

        reader = LocalVitals()
        while True:
            try:
                sample = await asyncio.to_thread(reader.read)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - never let the loop die; /proc is not ours
                log.exception("host vitals of this machine failed")
                sample = None
            if self._watches.get(w.inst.id) is not w:
                return
            if sample is not None:
                self._on_host(w, sample)
            await asyncio.sleep(self.stream_interval)

    # -- killing a process --------------------------------------------------------------------------

    async def kill(
        self,
        instance_id: str,
        pid: int,
        *,
        force: bool = False,
        wait_s: float = 3.0,
        require_listed: bool = True,
    ) -> KillResult:
        """Send TERM (or KILL with `force`) to a GPU process on the instance, then wait up to
        `wait_s` for it to end. Only processes the monitor lists are killed unless
        `require_listed=False`. Never raises: the result says what happened."""
        sig = "KILL" if force else "TERM"
        try:
            pid = int(pid)
        except (TypeError, ValueError):
            return KillResult(-1, sig, False, False, D(N_("not a PID: {value}"), value=repr(pid)))
        if pid <= 1:
            return KillResult(pid, sig, False, False, D(N_("refusing to signal PID {pid}"),
                                                        pid=pid))
        listed = {p.pid for p in self.store.telemetry(instance_id).processes}
        if require_listed and pid not in listed:
            return KillResult(pid, sig, False, False,
                              D(N_("PID {pid} is not a GPU process here"), pid=pid))
        if instance_id == LOCAL_ID:
            return await self._kill_local(pid, sig, wait_s)
        from gputui.remote.ssh import SSHLayerError
        from gputui.services.hub import ServiceError

        w = self._watches.get(instance_id)
        inst = w.inst if w is not None else self.store.get_instance_sync(instance_id)
        if inst is None:
            return KillResult(pid, sig, False, False,
                              D(N_("no instance {name}"), name=instance_id))
        quoted = shlex.quote(str(pid))
        try:
            link = await self.services.link(inst)
            sent = await link.run(f"kill -{sig} {quoted}", timeout=15, connect_timeout=5)
            if sent.exit_status != 0:
                why = sanitize(" ".join((sent.stderr or sent.stdout).split()), 200)
                gone = not await self._alive(link, quoted)
                return KillResult(pid, sig, False, gone,
                                  why or D(N_("kill exited {status}"), status=sent.exit_status))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_s
            alive = True
            while True:
                alive = await self._alive(link, quoted)
                if not alive or loop.time() >= deadline:
                    break
                await asyncio.sleep(0.2)
        except (SSHLayerError, ServiceError) as exc:
            return KillResult(pid, sig, False, False, sanitize(str(exc), 200))
        finally:
            self.refresh_processes(instance_id)
        if alive:
            return KillResult(pid, sig, True, False,
                              D(N_("PID {pid} is still running after {signal}"), pid=pid,
                                signal=sig) if force else
                              D(N_("PID {pid} is still running after {signal} — send KILL to "
                                   "force it"), pid=pid, signal=sig))
        return KillResult(pid, sig, True, True, D(N_("PID {pid} ended ({signal})"), pid=pid,
                                                  signal=sig))

    @staticmethod
    async def _alive(link: Any, quoted_pid: str) -> bool:
        """Whether the process exists (a zombie counts as gone)."""
        r = await link.run(f"ps -o stat= -p {quoted_pid} 2>/dev/null", timeout=10,
                           connect_timeout=5)
        state = r.stdout.strip()
        return r.exit_status == 0 and bool(state) and not state.startswith("Z")

    async def _kill_local(self, pid: int, sig: str, wait_s: float) -> KillResult:
        signum = _signal.SIGKILL if sig == "KILL" else _signal.SIGTERM
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return KillResult(pid, sig, False, True, D(N_("PID {pid} is already gone"), pid=pid))
        except PermissionError:
            return KillResult(pid, sig, False, False,
                              D(N_("not allowed to signal PID {pid}"), pid=pid))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while loop.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                self.refresh_processes(LOCAL_ID)
                return KillResult(pid, sig, True, True, D(N_("PID {pid} ended ({signal})"),
                                                          pid=pid, signal=sig))
            except PermissionError:
                break
            await asyncio.sleep(0.1)
        self.refresh_processes(LOCAL_ID)
        return KillResult(pid, sig, True, False,
                          D(N_("PID {pid} is still running after {signal}"), pid=pid, signal=sig))


def session_telemetry(services: Services) -> TelemetryService:
    """The session's one TelemetryService (made on first use, on the caller's loop; closed
    with the session, before its links): streams outlive screens."""
    return services.attached(TelemetryService, lambda s: TelemetryService(s, s.store))
