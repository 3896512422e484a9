"""A sandbox instance's CPU, as a rented container's: its own processes' CPU time against the
cores it may use, not the whole machine's. The real host-vitals reader run through the
instance's bin/ (as the SSH server runs it) beside busy work outside the instance and then
inside it; and the accountant's arithmetic on made-up /proc entries, with every awk here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputui.sandbox.shims import state
from gputui.sandbox.shims.cgroup import ACCOUNTANT, USER_HZ, machine_cores
from gputui.services.telemetry.vitals import VitalsParser, vitals_command
from tests.services.test_vitals import _awks

BURN = [sys.executable, "-c", "while True: pass"]


@pytest.fixture
def inst(tmp_path: Path) -> Path:
    return state.create_instance_dir(
        tmp_path / "box", instance_id="test-cpu", gpu_name="NVIDIA GeForce RTX 4090",
        gpu_count=1, memory_total_mib=24564, power_limit_w=450.0, tdp_w=450.0)


def machine_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != state.ROOT_ENV}


def instance_env(inst: Path) -> dict[str, str]:
    """What the SSH server gives a session: the instance's bin/ first, its root named."""
    env = machine_env()
    env.update(PATH=f"{inst / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(inst))
    env[state.ROOT_ENV] = str(inst.resolve())
    return env


def burn(n: int, env: dict[str, str], cwd: Path) -> list[subprocess.Popen]:
    return [subprocess.Popen(BURN, env=env, cwd=cwd) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)


def readings(inst: Path, ticks: int = 5, ms: int = 400) -> list:
    """The real reader, as Home's stream runs it on the instance: `ticks` V lines."""
    out = subprocess.run(vitals_command(ms, ticks=ticks), shell=True, env=instance_env(inst),
                         cwd=inst, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    parser = VitalsParser()
    samples = [s for line in out.stdout.splitlines() if (s := parser.feed(line)) is not None]
    assert parser.skipped == 0 and len(samples) == ticks
    return samples[1:]  # the first has no rates


def cpu_seconds(procs: list[subprocess.Popen]) -> float:
    total = 0
    for p in procs:
        fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(") ", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / USER_HZ


def machine_busy_pct(seconds: float = 0.5) -> float:
    def read() -> list[int]:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]

    a = read()
    time.sleep(seconds)
    b = read()
    delta = [y - x for x, y in zip(a, b, strict=False)]
    return 100 * (sum(delta) - delta[3] - delta[4]) / max(1, sum(delta))


def test_an_idle_instance_on_a_busy_machine_reads_idle_and_its_own_work_reads_busy(inst: Path):
    cores = machine_cores()
    outside = burn(cores, machine_env(), inst.parent)
    try:
        assert machine_busy_pct() > 60  # the machine is busy...
        idle = readings(inst)
        # ...but not the instance: its CPU is its own processes' against the cores it may use
        assert all(s.cpu_limited and s.cpu_cores == cores for s in idle)
        assert max(s.cpu_pct for s in idle) < 30, [s.cpu_pct for s in idle]
    finally:
        stop(outside)
    inside = burn(cores, instance_env(inst), inst)
    try:
        # what the instance's work really used over the readings (the machine may be busy
        # with other things too: the burners get what they get), and what the reader says
        start, used0 = time.monotonic(), cpu_seconds(inside)
        busy = readings(inst)
        share = (cpu_seconds(inside) - used0) / (time.monotonic() - start) / cores * 100
        mean = sum(s.cpu_pct for s in busy) / len(busy)
        assert share > 30 and abs(mean - share) < 15, (share, [s.cpu_pct for s in busy])
    finally:
        stop(inside)
    # the time of the ended processes stays counted: the counter only grows
    stat = inst / ".sandbox" / "cgroup" / "cpu.stat"
    before = int(stat.read_text().split()[1])
    after = readings(inst, ticks=3)
    assert int(stat.read_text().split()[1]) >= before
    assert max(s.cpu_pct for s in after) < 30
    # any other awk is the machine's, untouched, even one reading another cgroup file
    others = [f for f in ("/proc/loadavg", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/pids.max")
              if os.access(f, os.R_OK)]
    for path in others:
        mine = subprocess.run(["awk", "{ print FILENAME \": \" $0 }", path],
                              env=instance_env(inst), cwd=inst, capture_output=True, text=True)
        machine = subprocess.run(["awk", "{ print FILENAME \": \" $0 }", path],
                                 capture_output=True, text=True)
        # the same file and lines read (/proc/loadavg's figures move between the two reads)
        assert mine.returncode == 0, mine.stderr
        assert [line.split(": ")[0] for line in mine.stdout.splitlines()] == \
            [line.split(": ")[0] for line in machine.stdout.splitlines()], path


# --------------------------------------------------------------------------------------------
# The accountant on made-up /proc entries
# --------------------------------------------------------------------------------------------


def proc(base: Path, pid: int, ppid: int, utime: int, stime: int = 0, cutime: int = 0,
         cstime: int = 0, start: int = 1000, comm: str = "python", cmdline: str = "python"):
    """A /proc/PID with the fields the accountant reads (stat fields 4, 14-17 and 22)."""
    d = base / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    fields = ["S", ppid, pid, pid, 0, -1, 4194304, 0, 0, 0, 0, utime, stime, cutime, cstime,
              20, 0, 1, 0, start, 1000000, 100]
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n")
    (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    (d / "environ").write_bytes(b"GPUTUI_SANDBOX_ROOT=/box\0")


def account(awk: str, cg: Path, base: Path) -> int:
    """One read: the accountant over every process under `base`; usage_usec."""
    lines = "".join(f"{d / 'environ'}\n" for d in sorted(base.iterdir()))
    subprocess.run([*awk.split(), "-v", f"state={cg / 'acct'}", "-v", f"stat={cg / 'cpu.stat'}",
                    "-v", "tag=1", "-v", f"hz={USER_HZ}", ACCOUNTANT], input=lines, text=True,
                   check=True, capture_output=True)
    for name in ("acct", "cpu.stat"):
        os.replace(cg / f"{name}.1.new", cg / name)
    stat = dict(line.split() for line in (cg / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"])


@pytest.mark.parametrize("awk", _awks())
def test_the_count_keeps_what_ended_processes_used_once(tmp_path: Path, awk: str):
    base, cg = tmp_path / "proc", tmp_path / "cgroup"
    cg.mkdir()
    tick = 1_000_000 // USER_HZ
    # a training run (its parent outside the instance: the SSH server) and its data worker,
    # whose name holds ") " as a process may name itself
    proc(base, 100, ppid=1, utime=10, stime=2)
    proc(base, 101, ppid=100, utime=50, comm="pt_data_worker) 0")
    assert account(awk, cg, base) == 62 * tick
    # the worker ends and the run waits for it: its time is now in the run's children's time,
    # counted once
    for f in (base / "101").iterdir():
        f.unlink()
    (base / "101").rmdir()
    proc(base, 100, ppid=1, utime=12, stime=2, cutime=50)
    assert account(awk, cg, base) == 64 * tick
    # a job started by the SSH server ends: its time stays counted
    proc(base, 102, ppid=1, utime=30, start=2000)
    assert account(awk, cg, base) == 94 * tick
    for f in (base / "102").iterdir():
        f.unlink()
    (base / "102").rmdir()
    assert account(awk, cg, base) == 94 * tick
    # the simulation's own nvidia-smi is no work of the renter's
    proc(base, 103, ppid=1, utime=500, start=3000,
         cmdline="python3 -S -m gputui.sandbox.shims.nvidia_smi --query-gpu=index -lms 1000")
    assert account(awk, cg, base) == 94 * tick
    # the run ends as well (its parent outside): all of it stays; a PID used again by a new
    # process starts from its own zero
    for f in (base / "100").iterdir():
        f.unlink()
    (base / "100").rmdir()
    proc(base, 100, ppid=1, utime=1, start=5000)
    assert account(awk, cg, base) == (12 + 2 + 50 + 30 + 1) * tick
    # a count never goes back, whatever /proc says
    proc(base, 100, ppid=1, utime=0, start=5000)
    assert account(awk, cg, base) == (12 + 2 + 50 + 30 + 1) * tick
    # counters past 2^31 µs (mawk's %d) print whole; the count goes on from what /proc says
    proc(base, 104, ppid=1, utime=3_000_000, start=6000)
    assert account(awk, cg, base) == (12 + 2 + 50 + 30 + 0 + 3_000_000) * tick
