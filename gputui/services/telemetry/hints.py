"""Telemetry hints: rules over the recent readings that say what the user may want to do.

A hint's text is a `Deferred`: English as a string, shown in the interface language with
`gputui.i18n.shown`."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputui.i18n import N_
from gputui.i18n import Deferred as D
from gputui.models import (
    GpuSample,
    Hint,
    HostSample,
    ProcessSample,
)

if TYPE_CHECKING:
    pass


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
    # host vitals: GPUs under `input_gpu_pct` while the CPUs the instance may use are over
    # `input_cpu_pct` busy (or `input_iowait_pct` of the time waits on I/O) for `input_s`
    input_s: float = 30.0
    input_gpu_pct: float = 30.0
    input_cpu_pct: float = 90.0
    input_iowait_pct: float = 20.0
    disk_full_pct: float = 90.0


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


def _fmt_span(seconds: float) -> D:
    if seconds >= 90:
        return D(N_("{n} min"), n=f"{seconds / 60:.0f}")
    return D(N_("{n} s"), n=f"{seconds:.0f}")


def _gpus(indices: Sequence[int]) -> D:
    ids = ", ".join(str(i) for i in indices)
    return D(N_("GPU {ids}"), ids=ids) if len(indices) == 1 else D(N_("GPUs {ids}"), ids=ids)


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
            template = (
                N_("{busy} busy ({level}) while {idle} is idle: if this job should use every "
                   "GPU, the work is not split across them — check the data-parallel setup "
                   "(torchrun --nproc_per_node, DDP/FSDP, device_map) and CUDA_VISIBLE_DEVICES.")
                if len(idle) == 1 else
                N_("{busy} busy ({level}) while {idle} are idle: if this job should use every "
                   "GPU, the work is not split across them — check the data-parallel setup "
                   "(torchrun --nproc_per_node, DDP/FSDP, device_map) and CUDA_VISIBLE_DEVICES."))
            hints.append(Hint("imbalance", D(template, busy=_gpus(busy), level=level,
                                             idle=_gpus(idle))))

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
                more = (D(N_(" (and {n} more)"), n=len(holders) - 1) if len(holders) > 1
                        else "")
                hints.append(Hint(
                    "idle-memory",
                    D(N_("GPU {index}: {memory} held by PID {pid} ({name}){more} but no work for "
                         "{span} — a finished or hung job still holding memory? Kill it (k) to "
                         "free the GPU."),
                      index=i, memory=_fmt_mib(top.used_memory_mib), pid=top.pid,
                      name=top.name or "?", more=more, span=_fmt_span(rules.idle_memory_s)),
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
                    D(N_("GPU {index} has stayed under {line} ({mean} on average) for "
                         "{span}: it is waiting for data — an input-pipeline bottleneck. Check "
                         "CPU (top) and disk (iostat): more DataLoader workers, pin_memory, "
                         "faster storage or preprocessing ahead."),
                      index=i, line=f"{rules.busy_pct:.0f} %", mean=f"{mean:.0f} %",
                      span=_fmt_span(rules.low_util_s)),
                    gpu_index=i,
                ))
        # Memory nearly full.
        if s.memory_used_mib is not None and s.memory_total_mib:
            ratio = s.memory_used_mib / s.memory_total_mib
            if ratio >= rules.memory_full_ratio:
                hints.append(Hint(
                    "memory-full",
                    D(N_("GPU {index} memory is {pct} full ({used} of {total}): the next "
                         "allocation may fail with CUDA out of memory — lower the batch size, "
                         "use mixed precision or gradient checkpointing, or a bigger card."),
                      index=i, pct=f"{ratio * 100:.0f} %", used=_fmt_mib(s.memory_used_mib),
                      total=_fmt_mib(s.memory_total_mib)),
                    gpu_index=i,
                ))
        # Thermal throttling.
        if s.temperature_c is not None and s.temperature_c >= rules.hot_c:
            hints.append(Hint(
                "thermal",
                D(N_("GPU {index} is at {temp} °C: hot enough to throttle its clocks (thermal "
                     "slowdown) — check fans and airflow; on a rented machine, tell the "
                     "provider."),
                  index=i, temp=f"{s.temperature_c:.0f}"),
                gpu_index=i,
            ))
        # Power throttling.
        if trend is not None and s.power_limit_w:
            power_ratio = trend.holds(now, rules.power_s, "power")
            if power_ratio is not None and power_ratio >= rules.power_ratio:
                hints.append(Hint(
                    "power-cap",
                    D(N_("GPU {index} is drawing at its power limit ({draw} of {limit} W): its "
                         "clocks are power-capped. Normal under full load; if the limit is below "
                         "the card's default, ask the provider."),
                      index=i, draw=f"{s.power_draw_w or 0:.0f}", limit=f"{s.power_limit_w:.0f}"),
                    gpu_index=i,
                    severity="information",
                ))
    return hints




# --------------------------------------------------------------------------------------------
# Host vitals
# --------------------------------------------------------------------------------------------


def _fmt_kib(kib: float) -> str:
    gib = kib / 1048576
    if gib >= 1024:
        return f"{gib / 1024:.1f} TiB"
    return f"{gib:.1f} GiB" if gib >= 1 else f"{kib / 1024:.0f} MiB"


def input_bound_hint(host: HostSample, cpu: float | None, wait: float | None, gpu: float,
                     rules: HintRules) -> Hint | None:
    """"Data loading is the bottleneck" when the GPUs' mean use `gpu` is low while the CPUs
    (`cpu`, % of the cores the instance may use) are saturated or wait on I/O (`wait`)."""
    saturated = cpu is not None and cpu >= rules.input_cpu_pct
    waiting = wait is not None and wait >= rules.input_iowait_pct
    if gpu >= rules.input_gpu_pct or not (saturated or waiting):
        return None
    cores = f"{host.cpu_cores:g}" if host.cpu_cores else "?"
    if saturated:
        text = D(N_("The CPUs are saturated ({cpu} of {cores} cores) while the GPUs "
                    "idle ({gpu}): if a training job runs, data loading is the "
                    "bottleneck — more DataLoader workers (num_workers), faster disk, "
                    "or preprocess ahead; a bigger CPU share if the machine has one."),
                 cpu=f"{cpu:.0f} %", cores=cores, gpu=f"{gpu:.0f} %")
    else:
        text = D(N_("The CPUs wait on I/O ({wait} of their time) while the GPUs idle "
                    "({gpu}): data loading is the bottleneck — a faster disk (copy "
                    "the data set to local NVMe), fewer, larger files, more "
                    "DataLoader workers."),
                 wait=f"{wait:.0f} %", gpu=f"{gpu:.0f} %")
    return Hint("input-bound", text)


def disk_hints(host: HostSample, rules: HintRules) -> list[Hint]:
    """A disk nearly full: runs die writing checkpoints and logs."""
    hints = []
    for d in host.disks:
        pct = d.used_pct
        if pct is not None and pct >= rules.disk_full_pct:
            hints.append(Hint(
                "disk-full",
                D(N_("Disk {mount} is {pct} full ({free} free): a run dies when it cannot "
                     "write its checkpoint or log — delete old checkpoints and caches, or "
                     "move data to a bigger disk."),
                  mount=d.mount, pct=f"{pct:.0f} %", free=_fmt_kib(d.avail_kib)),
                severity="error" if pct >= 98 else "warning",
            ))
    return hints


def snapshot_host_hints(host: HostSample | None, samples: Sequence[GpuSample],
                        rules: HintRules | None = None) -> list[Hint]:
    """The host hints of a one-shot reading (`gputui smi`): the bottleneck hint over the
    reading's own interval (the GPUs as read, the CPUs over the half second between the two
    host readings) and the disks nearly full."""
    if host is None:
        return []
    rules = rules or HintRules()
    hints = []
    utils = [s.utilization_gpu for s in samples if (s.mig_mode or "").lower() != "enabled"]
    if utils and all(u is not None for u in utils):
        known = [u for u in utils if u is not None]
        hint = input_bound_hint(host, host.cpu_pct, host.iowait_pct, sum(known) / len(known),
                                rules)
        if hint is not None:
            hints.append(hint)
    return hints + disk_hints(host, rules)


def evaluate_host_hints(
    host: HostSample | None,
    recent: Sequence[tuple[float, float | None, float | None]],
    latest: Sequence[GpuSample],
    trends: dict[int, _Trend],
    now: float,
    rules: HintRules,
) -> list[Hint]:
    """What the host's vitals say beside the GPUs: a data-loading bottleneck (GPUs idle while
    the CPUs are saturated or wait on I/O) and a disk nearly full. `recent` is the host's
    (time, CPU %, iowait %) readings, oldest first."""
    hints: list[Hint] = []
    if host is None:
        return hints
    # GPUs waiting while the CPUs work or wait on the disk, for the whole window
    window = [(c, w) for t, c, w in recent if now - t <= rules.input_s]
    spans_window = bool(recent) and now - recent[0][0] + 1e-9 >= rules.input_s
    gpu_means = [m for s in latest if (s.mig_mode or "").lower() != "enabled"
                 and s.index in trends
                 and (m := trends[s.index].holds(now, rules.input_s)) is not None]
    if spans_window and window and gpu_means and len(gpu_means) == len(latest):
        cpus = [c for c, _w in window if c is not None]
        waits = [w for _c, w in window if w is not None]
        cpu = sum(cpus) / len(cpus) if cpus and len(cpus) == len(window) else None
        wait = sum(waits) / len(waits) if waits and len(waits) == len(window) else None
        hint = input_bound_hint(host, cpu, wait, sum(gpu_means) / len(gpu_means), rules)
        if hint is not None:
            hints.append(hint)
    hints.extend(disk_hints(host, rules))
    return hints
