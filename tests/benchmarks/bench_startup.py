"""Start-up benchmark: ratios against `python -c "import textual.app"` measured in the same run.

    python tests/benchmarks/bench_startup.py [--runs N]

Targets (issue 2, issue 16): `--help` ≤ 0.6×, `instances --json` ≤ 0.8×, first frame ≤ 2.0×.
Ratios, not seconds, so a slow or busy machine does not change the verdict much.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FIRST_FRAME = """
from gputui.app import GpuTuiApp
from gputui.config import load_config

async def auto(pilot):
    await pilot.pause()
    pilot.app.exit()

# the console as `gputui` starts it (the lease clock off: it is not part of drawing a frame)
GpuTuiApp(config=load_config(), background=False).run(headless=True, auto_pilot=auto)
"""

CASES = {
    "baseline: import textual.app": [sys.executable, "-c", "import textual.app"],
    "gputui --help": [sys.executable, "-m", "gputui", "--help"],
    "gputui instances --json": [sys.executable, "-m", "gputui", "instances", "--json"],
    "console first frame": [sys.executable, "-c", FIRST_FRAME],
}
TARGETS = {"gputui --help": 0.6, "gputui instances --json": 0.8, "console first frame": 2.0}


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        # Compiled modules, as an installed package has them: without this, a shell with
        # PYTHONDONTWRITEBYTECODE set compiles every gputui module from source at each start
        # (about 0.3× of the baseline) while Textual's installed modules come compiled.
        env = dict(os.environ, GPUTUI_HOME=home, PYTHONPATH=str(REPO),
                   PYTHONPYCACHEPREFIX=str(Path(home) / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for cmd in CASES.values():  # warm the file cache and write .pyc files
            timed(cmd, env)
        samples: dict[str, list[float]] = {name: [] for name in CASES}
        for _ in range(args.runs):  # interleaved, so drift hits every case alike
            for name, cmd in CASES.items():
                samples[name].append(timed(cmd, env))
    base = statistics.median(samples["baseline: import textual.app"])
    print(f"{'case':<32} {'median s':>9} {'ratio':>7} {'target':>7}")
    failed = False
    for name, values in samples.items():
        med = statistics.median(values)
        ratio = med / base
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"≤{target:.1f}× " + ("ok" if ratio <= target else "OVER")
            failed |= ratio > target
        print(f"{name:<32} {med:>9.3f} {ratio:>6.2f}× {verdict:>7}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
