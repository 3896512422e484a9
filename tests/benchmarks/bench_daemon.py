"""Daemon benchmark (issue 19), reported as shares and ratios, not as a timed test.

    python tests/benchmarks/bench_daemon.py [--seconds 60] [--instances 256] [--gpus 8]
        [--interval 2] [--scrape 15]

The daemon as `gputui daemon --metrics` runs it (its lease clock every second over the shared
SQLite store, the telemetry service, the Prometheus collector) watching 256 instances × 8 GPUs
at a 2 s interval. The streams are simulated: every instance's samples arrive every interval,
each instance at its own phase within it as independent streams do, fed through the telemetry
service exactly as streamed lines are recorded (`TelemetryService.ingest`). Prometheus is
simulated by scraping the collector from another thread every 15 s.

Reported: the daemon process's CPU as a share of one core (goal < 25 %), the delay from a
sample's due time to the store holding it (p99, against the interval; goal < 1×), the scrape
time, and memory at the start, each minute and at the end (goal: flat).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from datetime import timedelta
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


def p99(hist: list[int]) -> float:
    total, seen = sum(hist), 0
    for ms, count in enumerate(hist):
        seen += count
        if seen >= 0.99 * total:
            return (ms + 1) / 1000  # the upper edge of the bucket
    return float("nan")


async def daemon_under_load(seconds: float, n_instances: int, n_gpus: int, interval: float,
                            scrape_every: float) -> dict[str, float]:
    from gputui.config import Config
    from gputui.models import (
        BillingRule,
        GpuSample,
        Instance,
        InstanceStatus,
        Lease,
        LinkState,
        utcnow,
    )
    from gputui.services.daemon import Daemon
    from gputui.services.hub import Services
    from gputui.services.metrics import FleetCollector, registry_for
    from gputui.store import SessionStore, TelemetryChanged

    home = Path(tempfile.mkdtemp())
    os.environ["GPUTUI_HOME"] = str(home)
    store = SessionStore(home / "state.db")
    ids = []
    for n in range(n_instances):
        currency = "USD" if n % 4 else "CNY"
        inst = Instance(id=f"i{n:03d}", name=f"job-{n:03d}", provider="replay", gpu="H100",
                        gpu_count=n_gpus, status=InstanceStatus.RUNNING,
                        billing=BillingRule(price_per_hour=Decimal("20"), currency=currency))
        inst.mark_running(utcnow())
        store.put_instance_sync(inst)
        # every lease has a deadline hours away; one in four has an idle rule the clock checks
        store.put_lease_sync(Lease(instance_id=inst.id, release_at=utcnow() + timedelta(hours=6),
                                   idle_util_pct=1 if n % 4 == 0 else None,
                                   idle_minutes=30 if n % 4 == 0 else None))
        store.set_link(inst.id, LinkState.CONNECTED)
        ids.append(inst.id)
    services = Services(store, Config(), state_dir=home)
    daemon = Daemon(services, interval=interval)
    telemetry = daemon.telemetry
    daemon._dirty = False  # the streams are simulated below, not started over SSH
    collector = FleetCollector(store, loop=asyncio.get_running_loop())
    registry = registry_for(collector)

    delays = [0] * 20001  # a histogram in ms (a list of every delay would grow the heap)
    due_at: dict[str, float] = {}

    def recorded(event: object) -> None:
        if isinstance(event, TelemetryChanged):
            due = due_at.pop(event.instance_id, None)
            if due is not None:
                delays[min(20000, int((time.perf_counter() - due) * 1000))] += 1

    store.subscribe(recorded)
    scrapes: list[float] = []
    stop_scraping = threading.Event()

    def prometheus() -> None:  # a scraper on its own thread, as the HTTP server's
        from prometheus_client import generate_latest

        while not stop_scraping.wait(scrape_every):
            t = time.perf_counter()
            generate_latest(registry)
            scrapes.append(time.perf_counter() - t)

    stop = asyncio.Event()
    clock = asyncio.create_task(daemon.run(stop))
    scraper = threading.Thread(target=prometheus, daemon=True)
    scraper.start()
    rss0, cpu0, t0 = rss_mib(), time.process_time(), time.perf_counter()
    tick = 0
    marks: list[str] = []
    while time.perf_counter() - t0 < seconds:
        if tick and int(tick * interval) % 60 == 0:
            marks.append(f"{int(tick * interval) // 60}m {rss_mib():.0f}")
        for n, iid in enumerate(ids):
            due = t0 + (tick + n / len(ids)) * interval
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)  # the daemon runs on this loop meanwhile
            util = float((tick * 7 + n) % 100)
            samples = [GpuSample(index=g, uuid=f"GPU-{n:03d}-{g}", name="NVIDIA H100 80GB HBM3",
                                 utilization_gpu=(util + g * 13) % 100,
                                 memory_used_mib=1000.0 + g, memory_total_mib=81559.0,
                                 temperature_c=50.0, power_draw_w=300.0, power_limit_w=700.0)
                       for g in range(n_gpus)]
            due_at.setdefault(iid, due)  # the oldest sample not yet stored
            telemetry.ingest(iid, samples)
        tick += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    rss1 = rss_mib()
    stop_scraping.set()
    stop.set()
    await clock
    await services.close()
    scraper.join(timeout=30)
    delay = p99(delays)
    print(f"daemon: {n_instances} instances × {n_gpus} GPUs at {interval:g} s for {wall:.0f} s, "
          f"lease clock every 1 s, a Prometheus scrape every {scrape_every:g} s")
    print(f"   CPU of the daemon process: {cpu / wall:.1%} of one core "
          "(includes making and feeding the samples; goal < 25 %)")
    print(f"   sample → store delay p99: {delay * 1000:.0f} ms = {delay / interval:.2f}× the "
          "interval (goal < 1×)")
    if scrapes:
        print(f"   scrape ({n_instances * n_gpus} GPUs, {len(scrapes)} scrapes): "
              f"{sum(scrapes) / len(scrapes) * 1000:.0f} ms mean, {max(scrapes) * 1000:.0f} ms max")
    print(f"   memory: RSS {rss0:.0f} → {rss1:.0f} MiB; each minute (MiB): "
          f"{', '.join(marks) or '-'}")
    print(f"   lease clock ticks: {daemon.ticks}, errors: {daemon.errors}")
    return {"cpu_share": cpu / wall, "p99_ratio": delay / interval, "rss0": rss0, "rss1": rss1}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--instances", type=int, default=256)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--scrape", type=float, default=15.0)
    args = parser.parse_args()
    asyncio.run(daemon_under_load(args.seconds, args.instances, args.gpus, args.interval,
                                  args.scrape))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
