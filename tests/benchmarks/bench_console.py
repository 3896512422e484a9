"""Console benchmarks (issues 16 and 27): the console as a renter runs it, in a real terminal.

    python tests/benchmarks/bench_console.py [--quick] [--settle 30] [--window 20]
        [--rounds 10] [--profile DIR]

`gputui` runs in a pseudo-terminal (as `bench_startup.py` times its first frame), against the
sandbox cloud with four instances of 2 GPUs each rented by `gputui create` with a 50-minute
release timer (under an hour Home's countdowns tick every second: the busiest Home there is), their
telemetry streams connected. Beside it, in the same
run and the same minutes, a bare Textual app is measured exactly the same way: four screens,
each a one-line top bar with a clock ticking every second, a DataTable of four rows and a footer
(the smallest app that shows what Home shows). Ratios against it are the verdict; seconds on a
shared machine are not.

1. Idle CPU: the process's utime + stime (/proc/PID/stat, every thread) over `--window`
   seconds, as a share of one core, after `--settle` seconds, on Home at 80×24 and at 120×40
   (the terminal resized, as a tmux pane is), and on the Monitor with its 8 GPUs at 80×24.
   Goals: Home < 1 % of a core at both sizes; the Monitor < 5 %.
2. Screen switches, key to visible: the key is written to the terminal and the clock stops when
   the new screen's title ("· Jobs") has been written back to the terminal. A warm-up round
   first (each screen's first opening builds it); then `--rounds` rounds through every screen,
   console and bare app interleaved. Median and worst. Goals: median ≤ 1.3× and worst ≤ 2×
   the bare app's.

`--quick` settles 5 s, measures over 5 s and runs 3 rounds (a smoke run, not figures to quote).
`--profile DIR` profiles the console's main thread over the Home 80×24 window, the switch
rounds and the Monitor's window (DIR/home-idle.prof, switches.prof, monitor-idle.prof; cProfile
slows it, so its figures are then not ones to quote).
Benchmarks print figures; they are not timed tests (pytest collects nothing here).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The console's screens: key, what its top bar then says.
CONSOLE_SCREENS = [("g", "GPU catalog"), ("n", "New instance"), ("m", "Monitor"), ("j", "Jobs"),
                   ("o", "Ollama"), ("c", "Costs"), ("h", "Instances")]
BARE_SCREENS = [("b", "Bravo"), ("c", "Charlie"), ("d", "Delta"), ("a", "Alpha")]
BARE_APP = """
import time
from textual.app import App
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

class Plain(Screen):
    def __init__(self, title):
        super().__init__()
        self.title_text = title
    def compose(self):
        yield Static(id="top")
        yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True)
    def on_mount(self):
        table = self.query_one(DataTable)
        table.add_columns("Name", "GPU", "Status", "Release in", "Cost", "Queue", "Link", "$/h")
        for n in range(4):
            table.add_row(f"bench-{n}", "2x RTX 4090", "running", "1h 59m", "$0.01", "-", "ok",
                          "$0.69")
        self.tick()
        self.set_interval(1.0, self.tick)
    def tick(self):
        self.query_one("#top", Static).update(
            f"bare · {self.title_text}   nothing billing · {time.strftime('%H:%M:%S')}")

class Bare(App):
    CSS = "#top { height: 1; } DataTable { height: 1fr; }"
    MODES = {k: (lambda t=t: Plain(t)) for k, t in
             [("a", "Alpha"), ("b", "Bravo"), ("c", "Charlie"), ("d", "Delta")]}
    DEFAULT_MODE = "a"
    BINDINGS = [(k, f"switch_mode('{k}')", t) for k, t in
                [("a", "Alpha"), ("b", "Bravo"), ("c", "Charlie"), ("d", "Delta")]] + [
                ("q", "quit", "Quit")]

Bare().run()
"""

# The console with a profiler of its main thread, on between SIGUSR1 and SIGUSR2; each
# SIGUSR2 writes the next of the files named (a fresh profile each time).
PROFILED = """
import cProfile, runpy, signal, sys
outs = {outs!r}
profiler = None
def start(*_args):
    global profiler
    profiler = cProfile.Profile()
    profiler.enable()
def stop(*_args):
    profiler.disable()
    profiler.dump_stats(outs.pop(0))
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
sys.argv = ["gputui", "--lang", "en"]
runpy.run_module("gputui", run_name="__main__", alter_sys=True)
"""

_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|"
                      rb"\x1b[=>78]|\x1bP[^\x1b]*\x1b\\")


def visible(raw: bytes) -> str:
    """What was written, without the escape sequences (cursor moves, colours)."""
    return _ESCAPES.sub(b"", raw).decode("utf-8", "replace")


class Term:
    """A program in a pseudo-terminal of its own; a thread reads everything it writes (a
    terminal that stops reading would stall it) and notes when an awaited text appears."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], size: tuple[int, int]):
        self.name = name
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the program, on the pseudo-terminal
            os.execve(cmd[0], cmd, env)
        self.resize(*size)
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._watch: tuple[int, str] | None = None  # (offset, text) awaited
        self._seen = threading.Event()
        self._seen_at = 0.0
        self._alive = True
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def resize(self, cols: int, rows: int) -> None:
        # the kernel sends SIGWINCH to the terminal's foreground process, as tmux does
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _read(self) -> None:
        while self._alive:
            ready, _w, _x = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                break
            now = time.perf_counter()
            if not chunk:
                break
            with self._lock:
                self._buffer += chunk
                if self._watch is not None and not self._seen.is_set():
                    offset, text = self._watch
                    if text in visible(bytes(self._buffer[offset:])):
                        self._seen_at = now
                        self._seen.set()
                if self._watch is None and len(self._buffer) > 1 << 22:
                    del self._buffer[: len(self._buffer) - (1 << 20)]

    def press(self, key: str, shows: str, timeout: float = 20.0) -> float:
        """Seconds from the key written to the terminal until `shows` is written back."""
        with self._lock:
            self._watch = (len(self._buffer), shows)
            self._seen.clear()
        start = time.perf_counter()
        os.write(self.fd, key.encode())
        if not self._seen.wait(timeout):
            raise RuntimeError(f"{self.name}: {shows!r} never appeared after {key!r}\n"
                               f"{visible(bytes(self._buffer[-3000:]))}")
        with self._lock:
            self._watch = None
        return self._seen_at - start

    def wait_for(self, shows: str, timeout: float = 60.0) -> None:
        with self._lock:
            self._watch = (0, shows)
            self._seen.clear()
            if shows in visible(bytes(self._buffer)):
                self._seen.set()
        if not self._seen.wait(timeout):
            raise RuntimeError(f"{self.name}: {shows!r} never appeared\n"
                               f"{visible(bytes(self._buffer[-3000:]))}")
        with self._lock:
            self._watch = None

    def cpu_seconds(self) -> float:
        """The process's CPU time so far, every thread (utime + stime)."""
        with open(f"/proc/{self.pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self._close()

    def _close(self) -> None:
        self._alive = False
        self._thread.join(1)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def idle_shares(terms: list[Term], seconds: float) -> dict[str, float]:
    """Each program's CPU over the same `seconds`, as a share of one core."""
    before = {t.name: t.cpu_seconds() for t in terms}
    start = time.perf_counter()
    time.sleep(seconds)
    took = time.perf_counter() - start
    return {t.name: (t.cpu_seconds() - before[t.name]) / took for t in terms}


def switch_round(term: Term, screens: list[tuple[str, str]], pause: float,
                 out: dict[str, list[float]] | None) -> None:
    for key, title in screens:
        took = term.press(key, f"· {title}")
        if out is not None:
            out.setdefault(title, []).append(took)
        time.sleep(pause)  # the screen settles, as between a renter's keys


def rent(env: dict[str, str], instances: int, gpus: int, release_after: str) -> None:
    for n in range(instances):
        subprocess.run([sys.executable, "-m", "gputui", "--lang", "en", "create", "--gpu", "4090",
                        "--count", str(gpus), "--name", f"bench-{n}", "--release-after",
                        release_after],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def release_all(env: dict[str, str], instances: int) -> None:
    for n in range(instances):
        subprocess.run([sys.executable, "-m", "gputui", "release", f"bench-{n}", "--yes"],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "gputui", "sandbox", "stop"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), max(values)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true",
                        help="settle 5 s, measure 5 s, 3 rounds: a smoke run")
    parser.add_argument("--settle", type=float, help="seconds after start (default 30)")
    parser.add_argument("--window", type=float, help="seconds of CPU measured (default 20)")
    parser.add_argument("--rounds", type=int, help="switch rounds after the warm-up (default 10)")
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--release-after", default="50m",
                        help="each instance's timer (default 50m: under an hour Home's "
                             "countdowns tick every second, as in a rental's last hour)")
    parser.add_argument("--profile", metavar="DIR", help="run the console under cProfile")
    parser.add_argument("--skip-switches", action="store_true")
    args = parser.parse_args()
    settle = args.settle if args.settle is not None else 5.0 if args.quick else 30.0
    window = args.window if args.window is not None else 5.0 if args.quick else 20.0
    rounds = args.rounds if args.rounds is not None else 3 if args.quick else 10

    home = tempfile.mkdtemp(prefix="gputui-bench-")
    env = dict(os.environ, GPUTUI_HOME=home, PYTHONPATH=str(REPO), TERM="xterm-256color",
               COLORTERM="truecolor", PYTHONPYCACHEPREFIX=str(Path(home) / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("TEXTUAL", None)
    console_cmd = [sys.executable, "-m", "gputui", "--lang", "en"]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        console_cmd = [sys.executable, "-c", PROFILED.format(outs=[
            str(Path(args.profile).resolve() / name)
            for name in ("home-idle.prof", "switches.prof", "monitor-idle.prof")])]
    print(f"renting {args.instances} sandbox instances × {args.gpus} GPUs …", flush=True)
    rent(env, args.instances, args.gpus, args.release_after)
    console = bare = None
    try:
        console = Term("console", console_cmd, env, (80, 24))
        bare = Term("bare", [sys.executable, "-c", BARE_APP], env, (80, 24))
        console.wait_for("bench-3" if args.instances >= 4 else "· Instances")
        bare.wait_for("· Alpha")
        print(f"settling {settle:.0f} s …", flush=True)
        time.sleep(settle)
        idle: dict[str, dict[str, float]] = {}
        if args.profile:
            os.kill(console.pid, signal.SIGUSR1)
        idle["Home 80×24"] = idle_shares([console, bare], window)
        if args.profile:
            os.kill(console.pid, signal.SIGUSR2)
        console.resize(120, 40)
        bare.resize(120, 40)
        time.sleep(max(3.0, settle / 3))
        idle["Home 120×40"] = idle_shares([console, bare], window)
        console.resize(80, 24)
        bare.resize(80, 24)
        time.sleep(2.0)

        switches: dict[str, dict[str, list[float]]] = {"console": {}, "bare": {}}
        if not args.skip_switches:
            switch_round(console, CONSOLE_SCREENS, 0.5, None)  # warm-up: first openings
            switch_round(bare, BARE_SCREENS, 0.5, None)
            if args.profile:
                os.kill(console.pid, signal.SIGUSR1)
            for _ in range(rounds):  # interleaved, so drift hits both alike
                switch_round(console, CONSOLE_SCREENS, 0.3, switches["console"])
                switch_round(bare, BARE_SCREENS, 0.3, switches["bare"])
            if args.profile:
                os.kill(console.pid, signal.SIGUSR2)

        console.press("m", "· Monitor")
        time.sleep(max(3.0, settle / 3))
        if args.profile:
            os.kill(console.pid, signal.SIGUSR1)
        idle["Monitor 80×24, 8 GPUs"] = idle_shares([console, bare], window)
        if args.profile:
            os.kill(console.pid, signal.SIGUSR2)
        console.press("h", "· Instances")
    finally:
        for term in (console, bare):
            if term is not None:
                term.kill()
        release_all(env, args.instances)

    print(f"\nconsole: {args.instances} sandbox instances × {args.gpus} GPUs, settled "
          f"{settle:.0f} s, CPU over {window:.0f} s (share of one core)")
    goals = {"Home 80×24": "< 1 %", "Home 120×40": "< 1 %", "Monitor 80×24, 8 GPUs": "< 5 %"}
    print(f"  {'what':<26} {'console':>8} {'bare app':>9} {'ratio':>7}  goal")
    for what, shares in idle.items():
        ratio = shares["console"] / shares["bare"] if shares["bare"] else float("inf")
        print(f"  {what:<26} {shares['console']:>8.2%} {shares['bare']:>9.2%} {ratio:>6.1f}×  "
              f"{goals[what]}")
    if switches["console"]:
        every_c = [v for vs in switches["console"].values() for v in vs]
        every_b = [v for vs in switches["bare"].values() for v in vs]
        (cm, cw), (bm, bw) = summary(every_c), summary(every_b)
        print(f"\nscreen switches, key to visible, 80×24, {rounds} rounds after a warm-up "
              f"(ms: median / worst)")
        print(f"  {'bare app, 4 table screens':<26} {bm * 1000:6.1f} / {bw * 1000:6.1f}")
        for title, values in switches["console"].items():
            med, worst = summary(values)
            print(f"  {title:<26} {med * 1000:6.1f} / {worst * 1000:6.1f}   "
                  f"({med / bm:.2f}× / {worst / bw:.2f}×)")
        print(f"  {'console, every screen':<26} {cm * 1000:6.1f} / {cw * 1000:6.1f}   "
              f"({cm / bm:.2f}× / {cw / bw:.2f}×; goal ≤ 1.3× / ≤ 2×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
