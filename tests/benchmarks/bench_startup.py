"""Start-up benchmark: ratios against `python -c "import textual.app"` measured in the same run.

    python tests/benchmarks/bench_startup.py [--runs N]

Targets (issue 2, issue 16): `--help` ≤ 0.6×, `instances --json` ≤ 0.8×, first frame ≤ 2.0×.
Ratios, not seconds, so a slow or busy machine does not change the verdict much.

The console is timed as a person sees it: `gputui` runs in a pseudo-terminal of 80×24 and the
clock stops when its first frame reaches the terminal (the footer's "Quit"), and again when
Home has read the state and says so ("No instances yet": the session is opened after the
first frame, see GpuTuiApp.open_session).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONSOLE = [sys.executable, "-m", "gputui", "--lang", "en"]
FIRST_FRAME, FILLED_IN = "Quit", "No instances yet"
# For scale: a bare Textual app with a top line, a table and a footer, timed the same way.
BARE_APP = [sys.executable, "-c", """
from textual.app import App
from textual.widgets import DataTable, Footer, Static

class Bare(App):
    BINDINGS = [("q", "quit", "Quit")]
    def compose(self):
        yield Static("top")
        yield DataTable()
        yield Footer()
    def on_mount(self):
        self.query_one(DataTable).add_columns("Name", "GPU", "Status")

Bare().run()
"""]

CASES: dict[str, list[str]] = {
    "baseline: import textual.app": [sys.executable, "-c", "import textual.app"],
    "gputui --help": [sys.executable, "-m", "gputui", "--help"],
    "gputui instances --json": [sys.executable, "-m", "gputui", "instances", "--json"],
}
CONSOLE_CASES = {"console first frame": FIRST_FRAME, "console filled in (Home read)": FILLED_IN}
BARE_CASE = "bare Textual app first frame"
TARGETS = {"gputui --help": 0.6, "gputui instances --json": 0.8, "console first frame": 2.0}


def console_times(env: dict[str, str], timeout: float = 20.0, cmd: list[str] = CONSOLE,
                  cases: dict[str, str] = CONSOLE_CASES) -> dict[str, float]:
    """Seconds from the start of `cmd` (the console) in an 80×24 pseudo-terminal until each
    marker of `cases` has been written to it."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the console, on the pseudo-terminal
        os.execve(cmd[0], cmd, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    start = time.perf_counter()
    seen, got = b"", {}
    try:
        while len(got) < len(cases) and time.perf_counter() - start < timeout:
            ready, _w, _x = select.select([fd], [], [], 0.05)
            if not ready:
                continue
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the console ended
                break
            for name, marker in cases.items():
                if name not in got and marker.encode() in seen:
                    got[name] = time.perf_counter() - start
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    missing = set(cases) - set(got)
    if missing:
        raise RuntimeError(f"the console never showed {sorted(missing)}")
    return got


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
                   PYTHONPYCACHEPREFIX=str(Path(home) / "pycache"), TERM="xterm-256color")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for cmd in CASES.values():  # warm the file cache and write .pyc files
            timed(cmd, env)
        console_times(env)
        samples: dict[str, list[float]] = {
            name: [] for name in [*CASES, BARE_CASE, *CONSOLE_CASES]}
        for _ in range(args.runs):  # interleaved, so drift hits every case alike
            for name, cmd in CASES.items():
                samples[name].append(timed(cmd, env))
            samples[BARE_CASE] += console_times(env, cmd=BARE_APP,
                                                cases={BARE_CASE: FIRST_FRAME}).values()
            for name, seconds in console_times(env).items():
                samples[name].append(seconds)
    base = statistics.median(samples["baseline: import textual.app"])
    print(f"{'case':<34} {'median s':>9} {'ratio':>7} {'target':>7}")
    failed = False
    for name, values in samples.items():
        med = statistics.median(values)
        ratio = med / base
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"≤{target:.1f}× " + ("ok" if ratio <= target else "OVER")
            failed |= ratio > target
        print(f"{name:<34} {med:>9.3f} {ratio:>6.2f}× {verdict:>7}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
