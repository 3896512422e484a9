"""Console benchmarks (issue 16), reported as figures and ratios, never as timed tests.

    python tests/benchmarks/bench_console.py [--switches 20] [--idle-seconds 30] [--skip-idle]

1. Screen switch, key to frame: a screen key pressed, until the new screen's first frame has
   been painted (the callback Textual runs after the next refresh). Median and worst of
   `--switches` presses per screen at 80×24, the first opening of each screen apart (it imports
   the screen's module). Baseline in the same run: a bare Textual app switching between two
   screens holding one table each. Goal: < 100 ms.
2. Idle CPU on Home with four sandbox instances of 2 GPUs each, their telemetry streams running
   (as in a real session): the console process's CPU time over `--idle-seconds`, as a share of
   one core. Goal: < 2 %. The simulated cloud runs in its own process, so this is the console
   alone (Home does not draw the streams: they run at the background pace); the same figure
   with no instance is printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _send_key(app, key: str) -> None:
    """The key as the terminal driver delivers it (Pilot.press also waits for the process to
    go idle, which would be measured too)."""
    from textual import events

    event = events.Key(key, key if len(key) == 1 else None)
    event.set_sender(app)
    app._driver.send_message(event)


async def _spin(condition) -> None:
    """Yield to the app's loop until `condition()` (no sleep: a sleep would be measured)."""
    for _ in range(10_000_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise RuntimeError("the screen never came")


async def _frame(pilot, screen) -> None:
    """Until `screen` has painted a frame."""
    painted = asyncio.Event()
    screen.call_after_refresh(painted.set)
    await painted.wait()


async def switch_times(n: int) -> dict[str, list[float]]:
    from gputui.app import SCREENS, GpuTuiApp, screen_class
    from gputui.config import Config
    from gputui.store import SessionStore

    home = Path(tempfile.mkdtemp())
    os.environ["GPUTUI_HOME"] = str(home)
    app = GpuTuiApp(config=Config(), store=SessionStore(home / "state.db"), background=False,
                    remember_theme=False)
    times: dict[str, list[float]] = {}
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.freeze_heap = True  # as the console (the lease clock stays off)
        app.collect_when_idle()
        app._preload()  # as the console does after its first frame
        await app.workers.wait_for_complete()
        order = [s for s in SCREENS if s[0] != "home"] + [SCREENS[0]]
        for rnd in range(n + 1):
            for mode, key, _label, spec, _what in order:
                cls = screen_class(spec)
                start = time.perf_counter()
                _send_key(app, key)
                await _spin(lambda cls=cls: isinstance(app.screen, cls) and app.screen.is_mounted)
                await _frame(pilot, app.screen)
                took = time.perf_counter() - start
                times.setdefault(f"{mode} (first)" if rnd == 0 else mode, []).append(took)
                await pilot.pause()  # the screen settles, as between a user's keys
        # The catalog builds a tab on its first visit: once a renter has been through all
        # four, a switch to it restyles them all. Home ↔ Catalog, every tab opened:
        from gputui.ui.catalog import CatalogScreen
        from gputui.ui.home import HomeScreen

        _send_key(app, "g")
        await _spin(lambda: isinstance(app.screen, CatalogScreen) and app.screen.is_mounted)
        for tab in "2341":
            await pilot.press(tab)
            await pilot.pause()
        for _ in range(n):
            for key, cls in (("h", HomeScreen), ("g", CatalogScreen)):
                start = time.perf_counter()
                _send_key(app, key)
                await _spin(lambda cls=cls: isinstance(app.screen, cls) and app.screen.is_mounted)
                await _frame(pilot, app.screen)
                if cls is CatalogScreen:
                    times.setdefault("catalog (all 4 tabs built)", []).append(
                        time.perf_counter() - start)
                await pilot.pause()
        await pilot.pause()
    return times


async def baseline_switch(n: int) -> list[float]:
    from textual.app import App, ComposeResult
    from textual.screen import Screen
    from textual.widgets import DataTable, Footer

    class Plain(Screen):
        def compose(self) -> ComposeResult:
            yield DataTable()
            yield Footer()

    class Bare(App):
        MODES = {"a": Plain, "b": Plain}
        DEFAULT_MODE = "a"
        BINDINGS = [("a", "switch_mode('a')", "A"), ("b", "switch_mode('b')", "B")]

    app = Bare()
    out: list[float] = []
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for i in range(2 * n):
            key = "b" if i % 2 == 0 else "a"
            before = app.screen
            start = time.perf_counter()
            _send_key(app, key)
            await _spin(lambda before=before: app.screen is not before)
            await _frame(pilot, app.screen)
            out.append(time.perf_counter() - start)
            await pilot.pause()
    return out


async def idle_cpu(seconds: float, instances: int) -> float:
    from gputui.app import GpuTuiApp
    from gputui.config import Config
    from gputui.providers.base import CreateRequest
    from gputui.services.hub import Services
    from gputui.store import SessionStore

    home = Path(tempfile.mkdtemp())
    os.environ["GPUTUI_HOME"] = str(home)
    store = SessionStore(home / "state.db")
    services = Services(store, Config(), state_dir=home, sandbox_boot_seconds=0)
    for n in range(instances):
        offer = await services.find_offer("sandbox", "RTX 4090")
        await services.create("sandbox", offer, CreateRequest(
            offer_id=offer.offer_id, gpu_count=2, name=f"idle-{n}"))
    app = GpuTuiApp(config=Config(), store=store, services=services, remember_theme=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            # let the streams connect and settle, then measure on Home
            await asyncio.sleep(min(10.0, seconds / 2))
            await pilot.pause()
            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(seconds)
            share = (time.process_time() - cpu0) / (time.perf_counter() - t0)
            live = store.instances_sync(live_only=True)
            streaming = sum(1 for i in live if store.telemetry(i.id).gpus)
            assert streaming == instances, f"only {streaming} of {instances} instances streamed"
    finally:
        for inst in store.instances_sync(live_only=True):
            try:
                await services.release(inst, "manual")
            except Exception:  # noqa: BLE001 - a benchmark: report, do not stop
                pass
        await services.close()
    return share


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--switches", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--skip-idle", action="store_true")
    args = parser.parse_args()
    base = asyncio.run(baseline_switch(args.switches))
    times = asyncio.run(switch_times(args.switches))
    b_med = statistics.median(base)
    print(f"1. screen switch, key to painted frame at 80×24 ({args.switches} per screen)")
    print(f"   {'baseline: bare Textual app':<28} median {b_med * 1000:6.1f} ms  "
          f"worst {max(base) * 1000:6.1f} ms")
    worst_all = 0.0
    for name, values in times.items():
        med = statistics.median(values)
        if "(first)" not in name:
            worst_all = max(worst_all, max(values))
        print(f"   {name:<28} median {med * 1000:6.1f} ms  worst {max(values) * 1000:6.1f} ms"
              f"  ({med / b_med:.1f}× baseline)")
    print(f"   worst switch after first opens: {worst_all * 1000:.0f} ms (goal < 100 ms)")
    if not args.skip_idle:
        none = asyncio.run(idle_cpu(args.idle_seconds, 0))
        four = asyncio.run(idle_cpu(args.idle_seconds, 4))
        print(f"2. idle on Home, {args.idle_seconds:.0f} s: no instance {none:.1%} of a core; "
              f"4 sandbox instances × 2 GPUs {four:.1%} (goal < 2 %; the console process "
              "alone)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
