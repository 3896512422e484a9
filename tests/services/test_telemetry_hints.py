"""Hints and small pieces of the telemetry service, with fixed data (no SSH)."""

from __future__ import annotations

from datetime import UTC, datetime

from gputui.models import GpuSample, ProcessSample
from gputui.nvidia.diagnose import DIAGNOSES
from gputui.services.telemetry import (
    HintRules,
    _Trend,
    clamp_interval,
    diagnosis_text,
    evaluate_hints,
    ssh_diagnosis,
    step_interval,
)

RULES = HintRules(imbalance_s=10, idle_memory_s=60, low_util_s=120, power_s=10, bucket_s=1)


def sample(i: int, util: float, *, used: float = 1000, total: float = 24000, temp: float = 50,
           draw: float = 100, limit: float = 450, mig: str | None = None) -> GpuSample:
    return GpuSample(index=i, uuid=f"GPU-{i}", name="NVIDIA GeForce RTX 4090",
                     timestamp=datetime(2026, 1, 1, tzinfo=UTC), utilization_gpu=util,
                     memory_used_mib=used, memory_total_mib=total, temperature_c=temp,
                     power_draw_w=draw, power_limit_w=limit, mig_mode=mig)


def history(series: dict[int, list[GpuSample]], step: float = 1.0) -> tuple[dict, float]:
    trends = {i: _Trend(RULES.bucket_s, RULES.keep_s) for i in series}
    now = 0.0
    for i, samples in series.items():
        for k, s in enumerate(samples):
            trends[i].add(k * step, s)
            now = max(now, k * step)
    return trends, now


def codes(hints) -> list[tuple[str, int | None]]:
    return [(h.code, h.gpu_index) for h in hints]


def test_one_gpu_busy_while_peers_idle() -> None:
    busy = [sample(0, 95)] * 15
    idle = [sample(1, 0)] * 15
    trends, now = history({0: busy, 1: idle, 2: idle})
    hints = evaluate_hints([busy[-1], idle[-1], sample(2, 0)], [], trends, now, RULES)
    assert codes(hints) == [("imbalance", None)]
    assert "GPU 0 busy (95 %)" in hints[0].text and "GPUs 1, 2 are idle" in hints[0].text
    # not before the condition has held for the window
    trends, now = history({0: busy[:5], 1: idle[:5]})
    assert evaluate_hints([busy[-1], idle[-1]], [], trends, now, RULES) == []
    # not with one GPU, nor when all are busy
    trends, now = history({0: busy})
    assert evaluate_hints([busy[-1]], [], trends, now, RULES) == []
    trends, now = history({0: busy, 1: busy})
    assert evaluate_hints([busy[-1], busy[-1]], [], trends, now, RULES) == []


def test_memory_held_by_a_process_that_no_longer_computes() -> None:
    idle = [sample(0, 0, used=10240)] * 70
    trends, now = history({0: idle})
    procs = [ProcessSample(pid=42, gpu_index=0, used_memory_mib=10240, name="python train.py")]
    hints = evaluate_hints([idle[-1]], procs, trends, now, RULES)
    assert codes(hints) == [("idle-memory", 0)]
    assert "PID 42" in hints[0].text and "10.0 GiB" in hints[0].text and "k" in hints[0].text
    # a small context, or a process still computing, is not a hint
    small = [ProcessSample(pid=42, gpu_index=0, used_memory_mib=100)]
    assert evaluate_hints([idle[-1]], small, trends, now, RULES) == []
    working = [sample(0, 70, used=10240)] * 70
    trends, now = history({0: working})
    assert evaluate_hints([working[-1]], procs, trends, now, RULES) == []
    # a model server keeps its model loaded between requests on purpose: not a leftover
    trends, now = history({0: idle})
    server = [ProcessSample(pid=7, gpu_index=0, used_memory_mib=10240, name="/usr/local/bin/ollama")]
    assert evaluate_hints([idle[-1]], server, trends, now, RULES) == []


def test_stuck_under_half_for_minutes_is_an_input_pipeline_hint() -> None:
    spiky = [sample(0, u) for u in [0, 60, 10, 40, 0, 70] * 25]  # mean ~30 %
    trends, now = history({0: spiky})
    procs = [ProcessSample(pid=7, gpu_index=0, used_memory_mib=2000)]
    hints = evaluate_hints([spiky[-1]], procs, trends, now, RULES)
    assert ("low-util", 0) in codes(hints)
    text = next(h.text for h in hints if h.code == "low-util")
    assert "under 50 %" in text and "CPU" in text and "disk" in text
    # not for a short while, and not with no process on the GPU
    trends, now = history({0: spiky[:60]})
    assert evaluate_hints([spiky[-1]], procs, trends, now, RULES) == []
    trends, now = history({0: spiky})
    assert "low-util" not in [h.code for h in evaluate_hints([spiky[-1]], [], trends, now, RULES)]


def test_the_low_util_hint_clears_when_a_job_starts_after_idling() -> None:
    """Minutes of idling then a busy job: the 2-minute mean is still under 50 %, but the
    current readings say otherwise, so no "stayed under 50 %" hint (issue 16, item 9)."""
    procs = [ProcessSample(pid=7, gpu_index=0, used_memory_mib=2000)]
    idle_then_busy = [sample(0, 6)] * 100 + [sample(0, 98)] * 30
    trends, now = history({0: idle_then_busy})
    assert trends[0].holds(now, RULES.low_util_s) < RULES.busy_pct  # the window alone says "low"
    hints = evaluate_hints([idle_then_busy[-1]], procs, trends, now, RULES)
    assert "low-util" not in [h.code for h in hints]
    # while it was still low, the hint was there
    low = [sample(0, 20)] * 130
    trends, now = history({0: low})
    assert ("low-util", 0) in codes(evaluate_hints([low[-1]], procs, trends, now, RULES))


def test_memory_nearly_full_hot_and_power_capped() -> None:
    s = sample(0, 99, used=23900, total=24000, temp=88, draw=449, limit=450)
    trends, now = history({0: [s] * 12})
    hints = evaluate_hints([s], [], trends, now, RULES)
    assert sorted(codes(hints)) == [("memory-full", 0), ("power-cap", 0), ("thermal", 0)]
    text = {h.code: h.text for h in hints}
    assert "out of memory" in text["memory-full"] and "100 % full" in text["memory-full"]
    assert "88 °C" in text["thermal"] and "449 of 450 W" in text["power-cap"]


def test_mig_gpus_are_not_compared_for_imbalance() -> None:
    a = [sample(0, 95, mig="Enabled")] * 15
    b = [sample(1, 0, mig="Enabled")] * 15
    trends, now = history({0: a, 1: b})
    assert evaluate_hints([a[-1], b[-1]], [], trends, now, RULES) == []


def test_na_values_are_not_hints() -> None:
    s = GpuSample(index=0)
    trends, now = history({0: [s] * 20})
    assert evaluate_hints([s], [], trends, now, RULES) == []


def test_interval_steps_and_clamps() -> None:
    assert clamp_interval(0) == 0.5 and clamp_interval(60) == 10 and clamp_interval(1.25) == 1.25
    assert clamp_interval(float("nan")) == 1.0 and clamp_interval("x") == 1.0  # type: ignore[arg-type]
    assert step_interval(1.0, 1) == 2.0 and step_interval(1.0, -1) == 0.5
    assert step_interval(0.5, -1) == 0.5 and step_interval(10, 1) == 10
    assert step_interval(1.5, 1) == 2.0 and step_interval(1.5, -1) == 1.0


def test_diagnoses_read_as_one_line() -> None:
    text = diagnosis_text(DIAGNOSES["nvidia-smi-missing"])
    assert "\n" not in text and "Fix:" in text
    from gputui.remote.ssh import AuthRefused, LinkUnreachable

    assert ssh_diagnosis(AuthRefused("login refused for root@h:22")).code == "ssh-auth"
    d = ssh_diagnosis(LinkUnreachable("cannot reach root@h:22: Connection refused\x1b[31m"))
    assert d.code == "ssh-unreachable" and "\x1b" not in d.problem


def test_trend_windows_keep_the_newest_buckets_once_the_ring_wraps() -> None:
    trend = _Trend(bucket_s=5, keep_s=20)  # room for 6 buckets
    for t in range(100):  # 100 s at 1 s: 20 buckets opened, the oldest overwritten
        trend.add(float(t), sample(0, 10.0 if t < 80 else 90.0, draw=45))
    assert len(trend) == 6
    assert trend.window(99.0, 14) == 90.0  # the last 20 s read 90 %, what came before is gone
    assert trend.window(99.0, 40) == (10 * 10 + 90 * 20) / 30  # as far back as the ring reaches
    assert trend.window(99.0, 10, "power") == 0.1  # draw / limit
    assert trend.holds(99.0, 200) is None  # not yet held that long
    trend.add(200.0, sample(0, 50.0))  # after a silence longer than GAP_S: a fresh start
    assert len(trend) == 1 and trend.window(200.0, 10) == 50.0
