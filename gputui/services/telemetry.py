"""Live GPU telemetry: one long-lived nvidia-smi stream per instance, written to the store.

`TelemetryService(services, store)` lives on the App (not on a screen), so streams survive
screen switches. Per watched instance it runs two asyncio tasks it owns:

- the *stream*: `nvidia-smi --query-gpu=... --format=csv,nounits -lms N` over the instance's
  one shared SSH link (`Services.link`), read line by line; the lines of one tick are batched
  and written with `store.add_samples` (one `TelemetryChanged` per tick, not per GPU). The
  link restarts the command by itself after a reconnect; if nvidia-smi fails, its output and
  exit status become a `Diagnosis` (`store.set_diagnosis`) and the stream is retried with
  backoff, so a fixed machine resumes on its own.
- the *slow loop*: compute processes (`--query-compute-apps`, their users from `ps`) every
  `process_interval` seconds (`store.set_processes`), and the `nvidia-smi -q -x` inventory
  (driver, CUDA, MIG devices, ECC, PCIe, power limit) once per connection.

The interval is one setting for every stream (0.5-10 s); changing it restarts the streams.
Hints (one GPU busy while its peers idle, memory held without work, a GPU stuck under 50 %,
memory nearly full, thermal or power throttling) are worked out after every tick.

`start_local()` watches this machine through NVML (instance id `LOCAL_ID`) the same way.

Nothing here raises into the caller's loop: every failure becomes a diagnosis or a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal as _signal
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gputui.models import (
    GpuSample,
    Hint,
    HostInventory,
    Instance,
    InstanceStatus,
    LinkState,
    ProcessSample,
)
from gputui.nvidia.diagnose import Diagnosis, diagnose_nvidia_smi
from gputui.nvidia.nvsmi import (
    CsvStreamParser,
    NvsmiParseError,
    compute_apps_command,
    parse_compute_apps_csv,
    parse_xml,
    query_gpu_command,
    sanitize,
)
from gputui.store import LinkChanged, SessionStore, TelemetryChanged

if TYPE_CHECKING:
    from gputui.services.hub import Services

__all__ = [
    "INTERVAL_STEPS",
    "LOCAL_ID",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "Hint",
    "HintRules",
    "KillResult",
    "TelemetryService",
    "WatchStatus",
    "diagnosis_text",
    "evaluate_hints",
    "read_processes",
    "ssh_diagnosis",
]

log = logging.getLogger(__name__)

MIN_INTERVAL = 0.5
MAX_INTERVAL = 10.0
#: What +/- step through in the monitor.
INTERVAL_STEPS: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0)
#: The instance id under which `start_local()` writes this machine's GPUs.
LOCAL_ID = "local"


def clamp_interval(seconds: float) -> float:
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return 1.0
    if value != value:  # NaN
        return 1.0
    return round(min(MAX_INTERVAL, max(MIN_INTERVAL, value)), 2)


def step_interval(current: float, direction: int) -> float:
    """The next step up (+1) or down (-1) from `current` in INTERVAL_STEPS."""
    if direction > 0:
        return next((s for s in INTERVAL_STEPS if s > current + 1e-9), INTERVAL_STEPS[-1])
    return next((s for s in reversed(INTERVAL_STEPS) if s < current - 1e-9), INTERVAL_STEPS[0])


# --------------------------------------------------------------------------------------------
# Diagnoses
# --------------------------------------------------------------------------------------------


def diagnosis_text(diag: Diagnosis) -> str:
    """The one-line form of a diagnosis (what the store keeps, what commands print)."""
    text = f"{diag.problem} Fix: {diag.fix}"
    if diag.detail:
        text += f" (said: {diag.detail})"
    return text


def ssh_diagnosis(exc: BaseException) -> Diagnosis:
    """A connection problem as a diagnosis (the SSH layer's messages are already one line)."""
    from gputui.remote.ssh import (
        AuthRefused,
        HostKeyChanged,
        LinkUnreachable,
        UnknownHostKey,
    )

    message = sanitize(str(exc), 300) or type(exc).__name__
    if isinstance(exc, AuthRefused):
        return Diagnosis(
            code="ssh-auth",
            problem=f"The instance refused the login: {message}.",
            fix="Check the SSH key or password for this instance (re-add it with "
            "`gputui add-ssh` if the platform changed it).",
        )
    if isinstance(exc, HostKeyChanged | UnknownHostKey):
        return Diagnosis(
            code="ssh-host-key",
            problem=f"The instance's host key cannot be trusted: {message}.",
            fix="If the machine was re-imaged, remove its old key and accept the new one "
            "(`gputui ssh NAME --accept-new-host-key`); otherwise do not connect.",
        )
    if isinstance(exc, LinkUnreachable):
        return Diagnosis(
            code="ssh-unreachable",
            problem=f"The instance cannot be reached: {message}.",
            fix="Check that it is running (`gputui instances`) and that its SSH port is "
            "open; the monitor keeps retrying.",
        )
    return Diagnosis(
        code="ssh-error",
        problem=f"SSH to the instance failed: {message}.",
        fix="The monitor keeps retrying; check the instance is running and reachable.",
    )


def _internal_diagnosis(exc: BaseException) -> Diagnosis:
    return Diagnosis(
        code="internal",
        problem=f"Telemetry failed: {type(exc).__name__}: {sanitize(str(exc), 200)}.",
        fix="The monitor keeps retrying. If this persists, report it with ~/.local/state "
        "gputui error.log.",
    )


def _service_diagnosis(message: str) -> Diagnosis:
    return Diagnosis(
        code="unavailable",
        problem=sanitize(message, 300) + ".",
        fix="Check the instance in Home (is it running?); the monitor keeps retrying.",
    )


# --------------------------------------------------------------------------------------------
# Hints
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HintRules:
    """Thresholds and how long a condition must hold (seconds) before a hint shows."""

    busy_pct: float = 50.0
    idle_pct: float = 5.0
    imbalance_s: float = 20.0
    idle_memory_s: float = 120.0
    idle_memory_util_pct: float = 1.0
    idle_memory_mib: float = 256.0
    low_util_s: float = 180.0
    low_util_min_pct: float = 5.0
    low_util_recent_s: float = 20.0  # the last readings must agree, else the hint clears
    memory_full_ratio: float = 0.95
    hot_c: float = 85.0
    power_ratio: float = 0.97
    power_s: float = 10.0
    bucket_s: float = 5.0  # resolution of the history kept for these rules
    keep_s: float = 600.0


class _Trend:
    """Coarse per-GPU history (buckets of `bucket_s`) for the hints' time windows.

    A ring of fixed float arrays, allocated once: the console's memory does not creep up
    while the windows fill (512 GPUs × 10 min was ~18 MiB of bucket objects)."""

    GAP_S = 60.0  # a longer silence (link down) starts the history afresh

    def __init__(self, bucket_s: float, keep_s: float) -> None:
        self.bucket_s = max(0.01, bucket_s)
        self.size = max(2, int(keep_s / self.bucket_s) + 2)
        self._start = array("d", [0.0]) * self.size
        self._util_sum = array("d", [0.0]) * self.size
        self._util_n = array("d", [0.0]) * self.size
        self._power_sum = array("d", [0.0]) * self.size  # draw / limit
        self._power_n = array("d", [0.0]) * self.size
        self._count = 0  # buckets ever opened; the current one is (_count - 1) % size
        self.first: float | None = None  # when this unbroken history began
        self.last: float | None = None

    def __len__(self) -> int:
        return min(self._count, self.size)

    def add(self, now: float, sample: GpuSample) -> None:
        if self.last is not None and now - self.last > self.GAP_S:
            self.reset()
        if self.first is None:
            self.first = now
        self.last = now
        at = (self._count - 1) % self.size
        if not self._count or now - self._start[at] >= self.bucket_s:
            at = self._count % self.size
            self._count += 1
            self._start[at] = now
            self._util_sum[at] = self._util_n[at] = 0.0
            self._power_sum[at] = self._power_n[at] = 0.0
        if sample.utilization_gpu is not None:
            self._util_sum[at] += sample.utilization_gpu
            self._util_n[at] += 1
        if sample.power_draw_w is not None and sample.power_limit_w:
            self._power_sum[at] += sample.power_draw_w / sample.power_limit_w
            self._power_n[at] += 1

    def reset(self) -> None:
        self._count = 0
        self.first = self.last = None

    def window(self, now: float, span: float, what: str = "util") -> float | None:
        """The mean over (about) the last `span` seconds; None without readings."""
        sums, counts = ((self._util_sum, self._util_n) if what == "util"
                        else (self._power_sum, self._power_n))
        total = n = 0.0
        cutoff = now - span - self.bucket_s  # the bucket that straddles the window's start too
        for k in range(1, len(self) + 1):
            at = (self._count - k) % self.size
            if self._start[at] < cutoff:
                break
            total, n = total + sums[at], n + counts[at]
        return total / n if n else None

    def holds(self, now: float, span: float, what: str = "util") -> float | None:
        """The mean over `span` once the history is at least `span` long, else None."""
        if self.first is None or now - self.first + 1e-9 < span:
            return None
        return self.window(now, span, what)


def _fmt_mib(mib: float | None) -> str:
    if mib is None:
        return "?"
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def _fmt_span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _gpus(indices: Sequence[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(str(i) for i in indices)


_MODEL_SERVERS = ("ollama", "vllm", "llama-server", "llama_server", "text-generation-launcher",
                  "sglang", "tritonserver")


def _is_model_server(name: str | None) -> bool:
    lowered = (name or "").lower()
    return any(word in lowered for word in _MODEL_SERVERS)


def evaluate_hints(
    latest: Sequence[GpuSample],
    processes: Sequence[ProcessSample],
    trends: dict[int, _Trend],
    now: float,
    rules: HintRules,
) -> list[Hint]:
    """The hints for one instance's latest samples, processes and history."""
    hints: list[Hint] = []
    by_gpu: dict[int, list[ProcessSample]] = {}
    for p in processes:
        if p.gpu_index is not None:
            by_gpu.setdefault(p.gpu_index, []).append(p)
    plain = [s for s in latest if (s.mig_mode or "").lower() != "enabled"]

    # One GPU busy while its peers idle: a data-parallel split problem.
    if len(plain) >= 2:
        means = {
            s.index: m
            for s in plain
            if s.index in trends and (m := trends[s.index].holds(now, rules.imbalance_s))
            is not None
        }
        busy = sorted(i for i, m in means.items() if m >= rules.busy_pct)
        idle = sorted(i for i, m in means.items() if m <= rules.idle_pct)
        if busy and idle:
            level = ", ".join(f"{means[i]:.0f} %" for i in busy)
            hints.append(Hint(
                "imbalance",
                f"{_gpus(busy)} busy ({level}) while {_gpus(idle)} "
                f"{'is' if len(idle) == 1 else 'are'} idle: if this job should use every "
                "GPU, the work is not split across them — check the data-parallel setup "
                "(torchrun --nproc_per_node, DDP/FSDP, device_map) and CUDA_VISIBLE_DEVICES.",
            ))

    for s in latest:
        i = s.index
        trend = trends.get(i)
        procs = by_gpu.get(i, [])
        # Memory held by a process that is no longer computing.
        # Model servers (Ollama, vLLM, llama.cpp, TGI) hold memory between requests on purpose.
        holders = [p for p in procs if (p.used_memory_mib or 0) >= rules.idle_memory_mib
                   and not _is_model_server(p.name)]
        if holders and trend is not None:
            mean = trend.holds(now, rules.idle_memory_s)
            if mean is not None and mean <= rules.idle_memory_util_pct:
                top = max(holders, key=lambda p: p.used_memory_mib or 0)
                more = f" (and {len(holders) - 1} more)" if len(holders) > 1 else ""
                hints.append(Hint(
                    "idle-memory",
                    f"GPU {i}: {_fmt_mib(top.used_memory_mib)} held by PID {top.pid} "
                    f"({top.name or '?'}){more} but no work for "
                    f"{_fmt_span(rules.idle_memory_s)} — a finished or hung job still holding "
                    "memory? Kill it (k) to free the GPU.",
                    gpu_index=i,
                ))
        # Stuck under 50 % for minutes: an input-pipeline bottleneck.
        if procs and trend is not None:
            mean = trend.holds(now, rules.low_util_s)
            # the window still holds minutes of idling when a job starts: the recent readings
            # must be under the line too, or "has stayed under 50 %" is not true now
            recent = trend.window(now, min(rules.low_util_recent_s, rules.low_util_s))
            if mean is not None and rules.low_util_min_pct <= mean < rules.busy_pct \
                    and (recent is None or recent < rules.busy_pct):
                hints.append(Hint(
                    "low-util",
                    f"GPU {i} has stayed under {rules.busy_pct:.0f} % ({mean:.0f} % on average) "
                    f"for {_fmt_span(rules.low_util_s)}: it is waiting for data — an "
                    "input-pipeline bottleneck. Check CPU (top) and disk (iostat): more "
                    "DataLoader workers, pin_memory, faster storage or preprocessing ahead.",
                    gpu_index=i,
                ))
        # Memory nearly full.
        if s.memory_used_mib is not None and s.memory_total_mib:
            ratio = s.memory_used_mib / s.memory_total_mib
            if ratio >= rules.memory_full_ratio:
                hints.append(Hint(
                    "memory-full",
                    f"GPU {i} memory is {ratio * 100:.0f} % full "
                    f"({_fmt_mib(s.memory_used_mib)} of {_fmt_mib(s.memory_total_mib)}): the "
                    "next allocation may fail with CUDA out of memory — lower the batch size, "
                    "use mixed precision or gradient checkpointing, or a bigger card.",
                    gpu_index=i,
                ))
        # Thermal throttling.
        if s.temperature_c is not None and s.temperature_c >= rules.hot_c:
            hints.append(Hint(
                "thermal",
                f"GPU {i} is at {s.temperature_c:.0f} °C: hot enough to throttle its clocks "
                "(thermal slowdown) — check fans and airflow; on a rented machine, tell the "
                "provider.",
                gpu_index=i,
            ))
        # Power throttling.
        if trend is not None and s.power_limit_w:
            power_ratio = trend.holds(now, rules.power_s, "power")
            if power_ratio is not None and power_ratio >= rules.power_ratio:
                hints.append(Hint(
                    "power-cap",
                    f"GPU {i} is drawing at its power limit ({s.power_draw_w or 0:.0f} of "
                    f"{s.power_limit_w:.0f} W): its clocks are power-capped. Normal under full "
                    "load; if the limit is below the card's default, ask the provider.",
                    gpu_index=i,
                    severity="information",
                ))
    return hints


# --------------------------------------------------------------------------------------------
# Reading processes over a link (shared with `gputui smi`)
# --------------------------------------------------------------------------------------------


async def read_processes(
    link: Any,
    uuid_to_index: dict[str, int],
    *,
    timeout: float = 20.0,
    connect_timeout: float | None = None,
) -> tuple[list[ProcessSample] | None, str | None]:
    """The instance's compute processes, with their users (and command lines) from `ps`.

    Returns (processes, None), or (None, why) when nvidia-smi could not list them. Raises
    the SSH layer's errors (the caller decides whether the link matters).
    """
    result = await link.run(
        compute_apps_command(), timeout=timeout, connect_timeout=connect_timeout
    )
    if result.exit_status != 0:
        diag = diagnose_nvidia_smi(result.stdout + "\n" + result.stderr, result.exit_status)
        return None, diag.problem if diag else f"exit status {result.exit_status}"
    procs = parse_compute_apps_csv(result.stdout, uuid_to_index=uuid_to_index)
    pids = sorted({p.pid for p in procs if p.pid > 0})
    if pids:
        arg = ",".join(str(pid) for pid in pids[:200])
        ps = await link.run(
            f"ps -o pid=,user=,args= -p {shlex.quote(arg)} 2>/dev/null",
            timeout=timeout,
            connect_timeout=connect_timeout,
        )
        owners: dict[int, tuple[str, str]] = {}
        for line in ps.stdout.splitlines()[:1000]:
            parts = line.split(None, 2)
            if len(parts) >= 2 and parts[0].isdigit():
                owners[int(parts[0])] = (
                    sanitize(parts[1], 64),
                    sanitize(parts[2], 256) if len(parts) > 2 else "",
                )
        out = []
        for p in procs:
            user, args = owners.get(p.pid, (None, None))
            update: dict[str, Any] = {}
            if user:
                update["user"] = user
            # nvidia-smi on Linux gives the executable's path only; the command line says more.
            if args and (p.name is None or " " not in p.name.strip()):
                update["name"] = args
            out.append(p.model_copy(update=update) if update else p)
        procs = out
    return procs, None


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
    note: str | None  # e.g. "waiting for the first sample", "processes: ..."

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
    note: str | None = "starting"
    process_note: str | None = None
    last_line_at: float | None = None
    stream_started_at: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    local: bool = False


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

    @property
    def process_interval(self) -> float:
        if self._process_interval is not None:
            return self._process_interval
        return min(30.0, max(2.0, 3 * self._interval))

    @property
    def stale_after(self) -> float:
        """Data older than this is shown as stale, with its age."""
        if self._stale_after is not None:
            return self._stale_after
        return max(3.0, 3 * self._interval)

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
            if w.local:
                w.wake.set()
            elif w.stream_task is not None:
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

    def ingest(
        self,
        instance_id: str,
        samples: Sequence[GpuSample],
        *,
        processes: Sequence[ProcessSample] | None = None,
        inventory: HostInventory | None = None,
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
        tasks = [t for t in (w.stream_task, w.slow_task) if t is not None]
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
                note = f"processes: {w.process_note}"
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
            delay = min(0.1, self._interval / 4)
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
        self.store.set_hints(w.inst.id, evaluate_hints(samples, tel.processes, w.trends, now,
                                                       self.rules))
        self.store.add_samples(w.inst.id, samples)  # clears the store's diagnosis, emits

    # -- the stream -----------------------------------------------------------------------------

    async def _link(self, w: _Watch) -> Any:
        return await self.services.link(w.inst)

    async def _stream_loop(self, w: _Watch) -> None:
        from gputui.remote.ssh import CommandFailed, SSHLayerError
        from gputui.services.hub import ServiceError

        backoff = _Backoff(*self._retry)
        while True:
            unparsed: deque[str] = deque(maxlen=20)
            try:
                link = await self._link(w)
                parser = CsvStreamParser()
                command = query_gpu_command(int(round(self._interval * 1000)))
                w.stream_started_at = self._clock()
                if w.diagnosis is None and self.store.telemetry(w.inst.id).updated is None:
                    w.note = "waiting for the first sample"
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
                        self._on_sample(w, sample)
                        backoff.reset()
                self._flush(w)
                # nvidia-smi -lms does not end by itself; if it did, say so and start again.
                if unparsed:
                    diag = diagnose_nvidia_smi("\n".join(unparsed), 1)
                    self._set_diagnosis(w, diag)
                else:
                    w.note = "nvidia-smi stopped; restarting"
                    self._touch(w.inst.id)
            except asyncio.CancelledError:
                raise
            except CommandFailed as exc:
                self._flush(w)
                output = "\n".join(unparsed) + "\n" + exc.stderr
                diag = diagnose_nvidia_smi(output, exc.exit_status)
                self._set_diagnosis(w, diag or diagnose_nvidia_smi(output, 1))
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
        if self._clock() - last > max(5 * self._interval, 15.0):
            w.note = "no data; restarting nvidia-smi"
            self._restart_stream(w)

    # -- local (NVML) -----------------------------------------------------------------------------

    async def _local_loop(self, w: _Watch) -> None:
        from gputui.nvidia.nvml import NvmlUnavailable, read_local

        w.note = "reading NVML"
        while True:
            w.wake.clear()
            delay = self._interval
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
            return KillResult(-1, sig, False, False, f"not a PID: {pid!r}")
        if pid <= 1:
            return KillResult(pid, sig, False, False, f"refusing to signal PID {pid}")
        listed = {p.pid for p in self.store.telemetry(instance_id).processes}
        if require_listed and pid not in listed:
            return KillResult(pid, sig, False, False, f"PID {pid} is not a GPU process here")
        if instance_id == LOCAL_ID:
            return await self._kill_local(pid, sig, wait_s)
        from gputui.remote.ssh import SSHLayerError
        from gputui.services.hub import ServiceError

        w = self._watches.get(instance_id)
        inst = w.inst if w is not None else self.store.get_instance_sync(instance_id)
        if inst is None:
            return KillResult(pid, sig, False, False, f"no instance {instance_id}")
        quoted = shlex.quote(str(pid))
        try:
            link = await self.services.link(inst)
            sent = await link.run(f"kill -{sig} {quoted}", timeout=15, connect_timeout=5)
            if sent.exit_status != 0:
                why = sanitize(" ".join((sent.stderr or sent.stdout).split()), 200)
                gone = not await self._alive(link, quoted)
                return KillResult(pid, sig, False, gone, why or f"kill exited {sent.exit_status}")
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
                              f"PID {pid} is still running after {sig}"
                              + ("" if force else " — send KILL to force it"))
        return KillResult(pid, sig, True, True, f"PID {pid} ended ({sig})")

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
            return KillResult(pid, sig, False, True, f"PID {pid} is already gone")
        except PermissionError:
            return KillResult(pid, sig, False, False, f"not allowed to signal PID {pid}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while loop.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                self.refresh_processes(LOCAL_ID)
                return KillResult(pid, sig, True, True, f"PID {pid} ended ({sig})")
            except PermissionError:
                break
            await asyncio.sleep(0.1)
        self.refresh_processes(LOCAL_ID)
        return KillResult(pid, sig, True, False, f"PID {pid} is still running after {sig}")
