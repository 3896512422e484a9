"""Monitor benchmarks (issue 6), reported as ratios and shares, not as timed tests.

    python tests/benchmarks/bench_monitor.py [--seconds 60] [--instances 64] [--gpus 8]
        [--size 200x60]

1. The console with 64 instances × 8 GPUs at a 1 s refresh: samples arrive for every GPU every
   second, each instance at its own phase within the second as independent streams do (fed through the telemetry service exactly as streamed lines are recorded); the
   monitor is on screen. Reports the console's own CPU as a share of one core, the delay from a
   sample's arrival to the screen showing it (p99, against the 1 s interval), and memory at the
   start, each minute and at the end (it must stay flat: history is kept in fixed rings).
2. The load put on a monitored host: one persistent `nvidia-smi --query-gpu ... -lms 1000`
   against spawning `nvidia-smi --query-gpu ...` once a second, as CPU time of the host's
   processes (the sandbox's nvidia-smi, run locally), reported as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def console_under_load(seconds: float, n_instances: int, n_gpus: int,
                             size: tuple[int, int] = (200, 60)) -> None:
    from gputui.app import GpuTuiApp
    from gputui.config import Config
    from gputui.models import BillingRule, GpuSample, Instance, InstanceStatus, utcnow
    from gputui.store import SessionStore

    home = Path(tempfile.mkdtemp())
    os.environ["GPUTUI_HOME"] = str(home)
    store = SessionStore(home / "state.db")
    ids = []
    for n in range(n_instances):
        inst = Instance(id=f"i{n:03d}", name=f"job-{n:03d}", provider="replay", gpu="H100",
                        gpu_count=n_gpus, billing=BillingRule(price_per_hour=Decimal("20")),
                        status=InstanceStatus.RUNNING)
        inst.mark_running(utcnow())
        store.put_instance_sync(inst)
        ids.append(inst.id)
    app = GpuTuiApp(config=Config(), store=store, background=False, remember_theme=False)
    delays = [0] * 5001  # a histogram in ms (a list of every delay would grow the heap)
    sent: dict[str, float] = {}

    async with app.run_test(size=size) as pilot:
        await pilot.press("m")
        await pilot.pause()
        telemetry = app.telemetry
        screen = app.screen
        draw = screen._refresh

        def drawn(iids: object, full: bool = False) -> None:  # rows rebuilt: painted next frame
            draw(iids, full)
            now = time.perf_counter()
            for iid in iids:  # type: ignore[attr-defined]
                if iid in sent:
                    delays[min(5000, int((now - sent.pop(iid)) * 1000))] += 1

        screen._refresh = drawn
        rss0, cpu0, t0 = rss_mib(), time.process_time(), time.perf_counter()
        tick = 0
        marks: list[str] = []
        while time.perf_counter() - t0 < seconds:
            if tick and tick % 60 == 0:
                marks.append(f"{tick // 60}m {rss_mib():.0f}")
            for n, iid in enumerate(ids):
                # each instance's stream has its own phase within the second, as real streams do
                due = t0 + tick + n / len(ids)
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)  # the app runs on this loop meanwhile
                util = (tick * 7 + n) % 100
                samples = [GpuSample(index=g, utilization_gpu=float((util + g * 13) % 100),
                                     memory_used_mib=1000.0 + g, memory_total_mib=81559.0,
                                     temperature_c=50.0, power_draw_w=300.0, power_limit_w=700.0)
                           for g in range(n_gpus)]
                sent.setdefault(iid, time.perf_counter())  # the oldest sample not yet drawn
                telemetry.ingest(iid, samples)
            tick += 1
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        rss1 = rss_mib()
    total, seen, p99 = sum(delays), 0, 0.0
    for ms, count in enumerate(delays):
        seen += count
        if seen >= 0.99 * total:
            p99 = (ms + 1) / 1000  # the upper edge of the bucket
            break
    print(f"1. console at {size[0]}×{size[1]}: {n_instances} instances × {n_gpus} GPUs at 1 s "
          f"for {wall:.0f} s")
    print(f"   CPU of the console process: {cpu / wall:.1%} of one core "
          "(includes feeding the samples; target < 15 %)")
    print(f"   sample → screen delay p99: {p99 * 1000:.0f} ms = {p99:.2f}× the interval "
          "(target < 1×)")
    print(f"   memory: RSS {rss0:.0f} → {rss1:.0f} MiB; each minute (MiB): {', '.join(marks) or '-'}")
    print("   (history and hint windows are float rings allocated when a GPU first reports)")


def host_load(seconds: float) -> None:
    from gputui.sandbox.shims.state import create_instance_dir

    root = Path(tempfile.mkdtemp()) / "host"
    create_instance_dir(root, instance_id="bench", gpu_name="NVIDIA H100 80GB HBM3",
                        gpu_count=8, memory_total_mib=81559, power_limit_w=700, tdp_w=700)
    smi = str(root / "bin" / "nvidia-smi")
    query = ["--query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu,"
             "power.draw", "--format=csv,noheader,nounits"]

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    before = children_cpu()
    proc = subprocess.Popen([smi, *query, "-lms", "1000"], stdout=subprocess.DEVNULL)
    time.sleep(seconds)
    proc.terminate()
    proc.wait()
    stream = children_cpu() - before
    before = children_cpu()
    start = time.monotonic()
    for n in range(int(seconds)):
        subprocess.run([smi, *query], stdout=subprocess.DEVNULL, check=True)
        time.sleep(max(0.0, start + n + 1 - time.monotonic()))
    spawn = children_cpu() - before
    print(f"2. host load over {seconds:.0f} s, 8 GPUs at 1 s: persistent stream {stream:.2f} s CPU, "
          f"a new nvidia-smi every second {spawn:.2f} s CPU → spawning costs "
          f"{spawn / max(stream, 1e-6):.1f}× the stream")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--size", default="200x60", help="terminal size, e.g. 80x24")
    args = parser.parse_args()
    width, _, height = args.size.partition("x")
    asyncio.run(console_under_load(args.seconds, args.instances, args.gpus,
                                   (int(width), int(height))))
    host_load(min(args.seconds, 20))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
