#!/usr/bin/env python3
# ruff: noqa: UP017, UP021, UP031 -- runs on the instance's python3 (3.7 and up), not ours
"""gputui's queue runner: lives on the instance (~/.gputui/jobs/runner.py), standard library only.

Written there by gputui at first use and started detached from any SSH session (a new
session, no terminal), so the queue goes on when the link drops or the laptop sleeps.

    runner.py add            specs as JSON on stdin -> the new ids (starts the daemon)
    runner.py list           every run, the daemon, the queue's end, the when-done policy (JSON)
    runner.py cancel ID      a queued run is dropped; a running one is stopped (TERM, then KILL)
    runner.py retry ID       queue a finished run again (a new id)
    runner.py when-done      the policy as JSON on stdin
    runner.py follow ID [N]  the run's log from line N, until the run ends
    runner.py tail ID [N]    the run's last N lines
    runner.py records N B T  every run (as list), and each run's last N lines (at most B bytes a
                             run, T bytes in all, newest runs first): kept by gputui at the
                             queue's end and before a release
    runner.py ensure         start the daemon unless it runs
    runner.py daemon         the loop (one at a time, by a lock)

Each run has a folder runs/ID (GPUTUI_JOB_DIR): spec.json, state.json, log, exit_code.
Runs go in order; runs whose GPU sets (--gpus) do not overlap run side by side, each with its
CUDA_VISIBLE_DEVICES. A failed run is recorded and the queue goes on (after its retries).
GPU use is sampled with nvidia-smi while runs run, by the run's own processes (its session and
process group, and their descendants, matched against `--query-compute-apps`): its memory is
what its processes hold; its utilisation is its GPUs' while it has a process on them. When
nothing is queued or running the daemon records the queue's end, applies the when-done
power-off (if asked for), and exits.

On a Slurm allocation the runner lives on the cluster's login node instead, in the shared home,
with a `launch.json` beside it (written by gputui): each run is then a job step of the
allocation, started with `srun --jobid=JOB` (its argv), so Slurm binds its GPUs (`--gres`; the
count of `--gpus` is what is asked for, Slurm picks which and sets CUDA_VISIBLE_DEVICES), holds
it while the allocation's resources are taken, and its exit code is the step's. There the runner
never powers anything off and samples no GPUs (they are on the compute nodes).

No single run stops the queue: a run that cannot start (a command too long for the system, a
NUL byte, a broken record written by hand) fails with the reason in its log and exit code 126,
and the queue goes on.
"""

import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

VERSION = 1
BASE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(BASE, "runs")
LOCK = os.path.join(BASE, "lock")
DAEMON_LOCK = os.path.join(BASE, "daemon.lock")
WHEN_DONE = os.path.join(BASE, "when_done.json")
QUEUE_END = os.path.join(BASE, "queue_end.json")
LAUNCH = os.path.join(BASE, "launch.json")
SAMPLE_S = float(os.environ.get("GPUTUI_JOBS_SAMPLE_S", "2"))
KILL_GRACE_S = 5.0
FINAL = ("succeeded", "failed", "cancelled", "lost")
MAX_COMMAND_BYTES = 128 * 1024 - 1  # one argument of exec (MAX_ARG_STRLEN, with its NUL)
MAX_CWD_BYTES = 4095
CANNOT_START = 126  # the exit code of a run that could not be started (as sh's "cannot execute")
HIDDEN_MIB = 1024.0  # a GPU this full with no process listed: its processes are hidden from us
START_GRACE_S = 10.0
WRAPPER = (
    'echo "$$" > "$GPUTUI_JOB_DIR/pid"; '
    'cd "$1" 2>/dev/null || { echo "gputui: no folder $1 on the instance" >&2; rc=127; }; '
    '[ -z "$rc" ] && { /bin/sh -c "$2"; rc=$?; }; '
    'echo "$rc" > "$GPUTUI_JOB_DIR/exit_code.tmp" && '
    'mv "$GPUTUI_JOB_DIR/exit_code.tmp" "$GPUTUI_JOB_DIR/exit_code"; exit "$rc"'
)

# In a Slurm step the wrapper's own pid is a compute node's, not this host's: kept apart. A step
# on several nodes runs the wrapper once a node, all in the one shared folder: each task writes
# its own exit code (exit_code.task<N>), never racing another for one file.
STEP_WRAPPER = WRAPPER.replace('/pid"', '/step_pid"').replace(
    "exit_code.tmp", "exit_code.tmp.task${SLURM_PROCID:-0}").replace(
    '/exit_code"', '/exit_code.task${SLURM_PROCID:-0}"')


def now_iso():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError, RecursionError):
        return default


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class Locked:
    def __enter__(self):
        os.makedirs(RUNS, exist_ok=True)
        self.fh = open(LOCK, "a")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def run_dir(job_id):
    return os.path.join(RUNS, str(job_id))


def ids():
    try:
        names = os.listdir(RUNS)
    except OSError:
        return []
    return sorted(int(n) for n in names if n and all(c in "0123456789" for c in n))


def _int(value, default=None):
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    return default


def _nbytes(text):
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeError:
        return -1


def spec_problem(spec):
    """Why a run's record cannot be run (None: it can), in one line."""
    if not isinstance(spec, dict):
        return "its record (spec.json) is not readable"
    cmd = spec.get("command")
    if not isinstance(cmd, str) or not cmd.strip():
        return "its record has no command"
    if "\0" in cmd:
        return "the command has a NUL byte, which no shell command can hold"
    size = _nbytes(cmd)
    if size < 0:
        return "the command is not valid text"
    if size > MAX_COMMAND_BYTES:
        return ("the command is %d bytes, over the %d bytes the system takes for one command; "
                "put it in a script and run the script" % (size, MAX_COMMAND_BYTES))
    cwd = spec.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or "\0" in cwd
                            or not 0 <= _nbytes(cwd) <= MAX_CWD_BYTES):
        return "its folder (cwd) is not a path"
    name = spec.get("name")
    if name is not None and (not isinstance(name, str) or "\0" in name):
        return "its name is not text without NUL bytes"
    gpus = spec.get("gpus")
    if gpus is not None and (not isinstance(gpus, list) or not gpus or any(
            _int(g, -1) < 0 for g in gpus)):
        return "its GPU list is not a list of GPU indices"
    for key in ("retries", "attempt"):
        if spec.get(key) is not None and _int(spec.get(key), -1) < 0:
            return "its %s is not a whole number" % key
    return None


def load(job_id):
    """A run as its files say (None while `add` is still writing it). A record that cannot be
    read, or says what cannot be run, comes back with `broken` set to why."""
    d = run_dir(job_id)
    path = os.path.join(d, "spec.json")
    if not os.path.exists(path):
        return None
    spec = read_json(path)
    state = read_json(os.path.join(d, "state.json"), {})
    if not isinstance(state, dict):
        state = {}
    run = dict(spec) if isinstance(spec, dict) else {}
    run.update(state)
    broken = spec_problem(spec)
    if run.get("status") not in FINAL + ("queued", "running"):
        if run.get("status") is not None:
            broken = broken or "its state (state.json) is not readable"
        run["status"] = "queued"
    if broken:
        run["broken"] = broken
        for key in ("name", "command", "cwd"):  # shown as text, whatever the record held
            if not isinstance(run.get(key), str):
                run[key] = "" if run.get(key) is None else json.dumps(run.get(key))[:200]
        if not isinstance(run.get("gpus"), list) or any(_int(g, -1) < 0 for g in run["gpus"]):
            run["gpus"] = None
    run["retries"] = max(0, _int(run.get("retries"), 0))
    run["attempt"] = max(1, _int(run.get("attempt"), 1))
    for key in ("pid", "pid_start", "exit_code"):
        if run.get(key) is not None and _int(run.get(key)) is None:
            run[key] = None
    run["id"] = str(job_id)
    run["dir"] = d
    run["log"] = os.path.join(d, "log")
    return run


def save_state(job_id, **changes):
    path = os.path.join(run_dir(job_id), "state.json")
    state = read_json(path, {}) or {}
    state.update(changes)
    write_json(path, state)
    return state


def all_runs():
    out = []
    for i in ids():
        try:
            r = load(i)
        except Exception:  # noqa: BLE001 -- one record never hides the others
            r = None
        if r is not None:
            out.append(r)
    return out


def launch_settings():
    """How runs start as Slurm job steps (`launch.json`), or None: on this host."""
    data = read_json(LAUNCH)
    if isinstance(data, dict) and isinstance(data.get("argv"), list) and data["argv"] and all(
            isinstance(a, str) for a in data["argv"]):
        return data
    return None


def read_code(path):
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def step_argv(launch, run):
    """`srun --jobid=JOB ...` for one run: every GPU of the allocation (one task a node on
    every node), or, with --gpus, that many GPUs on one node; its share of the allocation's
    CPUs and memory, so runs on other GPUs start beside it."""
    nodes = max(1, _int(launch.get("nodes"), 1))
    per_node = max(1, _int(launch.get("gpus_per_node"), 1))
    gpus = run.get("gpus")
    if gpus is None:
        count = per_node
    else:
        nodes, count = 1, max(1, len(gpus))
    kind = launch.get("gres")
    gres = "gpu:%s:%d" % (kind, count) if isinstance(kind, str) and kind else "gpu:%d" % count
    cpus = max(1, _int(launch.get("cpus_per_gpu"), 1)) * count
    mem = max(64, _int(launch.get("mem_per_gpu_mb"), 1024)) * count
    name = launch.get("name") if isinstance(launch.get("name"), str) else "gputui-run-"
    return list(launch["argv"]) + [
        "--nodes=%d" % nodes, "--ntasks=%d" % nodes, "--ntasks-per-node=1", "--gres=" + gres,
        "--cpus-per-task=%d" % cpus, "--mem=%dM" % mem, "--job-name=%s%s" % (name, run["id"])]


def proc_start(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid, start=None):
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if start is not None and proc_start(int(pid)) not in (None, start):
        return False
    st = None
    try:
        with open("/proc/%d/stat" % int(pid)) as fh:
            st = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        pass
    return st != "Z"


def daemon_alive():
    try:
        fh = open(DAEMON_LOCK, "a")
    except OSError:
        return False
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return True
    fcntl.flock(fh, fcntl.LOCK_UN)
    fh.close()
    return False


def ensure():
    if daemon_alive():
        return False
    os.makedirs(RUNS, exist_ok=True)
    log = open(os.path.join(BASE, "daemon.log"), "a")
    subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "daemon"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, close_fds=True, cwd=BASE,
    )
    log.close()
    for _ in range(100):  # until it holds its lock
        if daemon_alive():
            break
        time.sleep(0.05)
    return True


# -- commands --------------------------------------------------------------------------------
def cmd_add():
    try:
        specs = json.load(sys.stdin)
    except ValueError:
        _say("cannot be queued: the runs sent are not JSON")
        return 3
    if not isinstance(specs, list):
        specs = [specs]
    for n, spec in enumerate(specs, 1):  # nothing is queued unless every run can be
        why = spec_problem(spec)
        if why is None and spec.get("retries") is not None and not 0 <= spec["retries"] <= 1000:
            why = "its retries are not 0-1000"
        if why:
            _say("run %d cannot be queued: %s" % (n, why))
            return 3
    new = []
    with Locked():
        known = ids()
        next_id = (known[-1] if known else 0) + 1
        for spec in specs:
            d = run_dir(next_id)
            os.makedirs(d)
            clean = {
                "name": (spec.get("name") or "")[:200] or "run %d" % next_id,
                "command": spec["command"],
                "cwd": spec.get("cwd") or "",
                "gpus": spec.get("gpus"),
                "retries": spec.get("retries") or 0,
                "queued_at": now_iso(),
            }
            write_json(os.path.join(d, "spec.json"), clean)
            write_json(os.path.join(d, "state.json"), {"status": "queued", "attempt": 1})
            open(os.path.join(d, "log"), "a").close()
            new.append(str(next_id))
            next_id += 1
        cancelled = reopen_queue()
    ensure()
    json.dump({"ids": new, "poweroff_cancelled": cancelled}, sys.stdout)
    return 0


def reopen_queue():
    """New work after the queue ended: forget the end, and a power-off it scheduled."""
    end = read_json(QUEUE_END)
    if end is None:
        return False
    os.remove(QUEUE_END)
    if end.get("poweroff_at") and launch_settings() is None:
        subprocess.call(["shutdown", "-c"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return True
    return False


def cmd_list():
    data = {
        "version": VERSION,
        "now": now_iso(),
        "daemon": daemon_alive(),
        "runs": all_runs(),
        "queue_end": read_json(QUEUE_END),
        "when_done": read_json(WHEN_DONE),
        "base": BASE,
    }
    json.dump(data, sys.stdout)
    return 0


def _say(line):
    """A one-line answer on stderr. English, always: this file runs on the instance without
    gputui's catalogs; gputui shows these lines in the user's language (`RUNNER_SAYS` in
    gputui/services/jobs.py lists each of them)."""
    sys.stderr.write(line + "\n")


def cmd_cancel(job_id):
    with Locked():
        run = load(job_id) if job_id.isdigit() else None
        if run is None:
            _say("no job %s" % job_id)
            return 4
        if run["status"] in FINAL:
            _say("job %s already %s" % (job_id, run["status"]))
            return 3
        if run["status"] == "queued":
            save_state(job_id, status="cancelled", ended_at=now_iso())
        else:
            open(os.path.join(run["dir"], "cancel"), "w").close()
    sys.stdout.write(json.dumps({"id": job_id, "was": run["status"]}) + "\n")
    return 0


def cmd_retry(job_id):
    run = load(job_id) if job_id.isdigit() else None
    if run is None:
        _say("no job %s" % job_id)
        return 4
    if run["status"] not in FINAL:
        _say("job %s is %s" % (job_id, run["status"]))
        return 3
    spec = {k: run.get(k) for k in ("name", "command", "cwd", "gpus", "retries")}
    sys.stdin = _Text(json.dumps([spec]))
    return cmd_add()


class _Text:
    def __init__(self, text):
        self.text = text

    def read(self, *a):
        t, self.text = self.text, ""
        return t


def cmd_when_done():
    policy = json.load(sys.stdin)
    with Locked():
        write_json(WHEN_DONE, policy)
        ended = read_json(QUEUE_END)
        if ended is not None and not any(r["status"] in ("queued", "running")
                                         for r in all_runs()):
            apply_when_done(ended, asked=True)
    json.dump({"queue_end": read_json(QUEUE_END)}, sys.stdout)
    return 0


def cmd_tail(job_id, n):
    run = load(job_id) if job_id.isdigit() else None
    if run is None:
        _say("no job %s" % job_id)
        return 4
    with open(run["log"], "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - 1024 * 1024))
        lines = fh.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for line in lines[-n:] if n > 0 else []:
        sys.stdout.buffer.write(line + b"\n")
    return 0


def _tail_bytes(path, n, limit):
    """The last `n` lines of a file, at most `limit` bytes of them, and whether more was cut."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - limit - 1))
            data = fh.read()
    except OSError:
        return [], False
    cut = len(data) > limit
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if cut and lines:
        lines = lines[1:]  # the first line, cut at `limit`: dropped whole
    if len(lines) > n:
        cut, lines = True, lines[-n:] if n > 0 else []
    return [line.decode("utf-8", "replace") for line in lines], cut


def cmd_records(n, per_run, total):
    runs = all_runs()
    tails = {}
    left = total
    for run in sorted(runs, key=lambda r: -int(r["id"])):
        if left <= 0:
            tails[run["id"]] = {"lines": [], "cut": True, "over_cap": True}
            continue
        lines, cut = _tail_bytes(run["log"], n, min(per_run, left))
        left -= sum(len(line.encode("utf-8", "replace")) + 1 for line in lines)
        tails[run["id"]] = {"lines": lines, "cut": cut}
    json.dump({"version": VERSION, "now": now_iso(), "runs": runs,
               "queue_end": read_json(QUEUE_END), "tails": tails}, sys.stdout)
    return 0


def cmd_follow(job_id, skip=0):
    run = load(job_id) if job_id.isdigit() else None
    if run is None:
        _say("no job %s" % job_id)
        return 4
    path = run["log"]
    line_no = 0
    pending = b""
    final = False
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(65536)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    line_no += 1
                    if line_no > skip:
                        sys.stdout.buffer.write(line + b"\n")
                sys.stdout.flush()
                continue
            if not final:
                final = (load(job_id) or {}).get("status") in FINAL
                if final:
                    continue  # read what was written before it ended
            else:
                if pending and line_no + 1 > skip:
                    sys.stdout.buffer.write(pending + b"\n")
                sys.stdout.flush()
                return 0
            time.sleep(0.3)


# -- the daemon ------------------------------------------------------------------------------
def gpu_set(run):
    g = run.get("gpus")
    return None if g is None else set(g)


def overlaps(a, b):
    if a is None or b is None:
        return True
    return bool(a & b)


def _csv(args):
    """nvidia-smi's CSV answer as rows of stripped fields (None: it could not be asked)."""
    try:
        proc = subprocess.run(
            ["nvidia-smi"] + args + ["--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=15,
            universal_newlines=True,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if proc.returncode != 0:
        return None
    return [[p.strip() for p in line.split(",")] for line in proc.stdout.splitlines()
            if line.strip()]


def _float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def sample():
    """(GPUs by uuid: (index, utilisation %, memory used MiB), compute processes: [(pid,
    memory MiB or None, gpu uuid)]), or None when nvidia-smi cannot say."""
    rows = _csv(["--query-gpu=index,uuid,utilization.gpu,memory.used"])
    if not rows:
        return None
    gpus = {}
    for parts in rows:
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        gpus[parts[1]] = (int(parts[0]), _float(parts[2]), _float(parts[3]))
    apps = _csv(["--query-compute-apps=pid,used_memory,gpu_uuid"])
    if not gpus or apps is None:
        return None
    procs = []
    for parts in apps:
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        procs.append((int(parts[0]), _float(parts[1]), parts[2]))
    return gpus, procs


def proc_table():
    """Every process here: pid -> (parent, process group, session)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def own_pids(leader, table):
    """The run's processes: its session and process group (the run was started as their
    leader) and every descendant of those, whatever group it moved to."""
    mine = set(pid for pid, (_pp, pgrp, sid) in table.items() if leader in (pgrp, sid))
    mine.add(leader)
    children = {}
    for pid, (ppid, _pg, _sid) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(mine)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in mine:
                mine.add(child)
                todo.append(child)
    return mine


class Daemon:
    def __init__(self):
        self.children = {}  # id -> Popen
        self.kill_at = {}  # id -> when to KILL after TERM
        self.last_sample = 0.0
        self.done = {}  # id -> final status: a finished run never changes, so is not re-read
        self.given_up = set()  # runs whose record could not even be marked failed
        self.launch = launch_settings()  # Slurm: each run a job step of the allocation

    def runs(self):
        """The runs not known to be finished (read from disk), and note those that are."""
        out = []
        for i in ids():
            key = str(i)
            if key in self.done:
                continue
            try:
                r = load(i)
            except Exception as exc:  # noqa: BLE001 -- one record never stops the queue
                r = None
                self.fail_record(key, "its record cannot be read (%s)" % _why(exc))
            if r is None:
                continue
            if r["status"] in FINAL:
                self.done[key] = r["status"]
            elif key in self.given_up:
                self.done[key] = "failed"
            else:
                out.append(r)
        return out

    def fail_record(self, job_id, why, started=False):
        """The run cannot be run (failed, exit 126), or once started cannot be followed (lost):
        the reason in its log and state; never retried."""
        d = run_dir(job_id)
        if started:
            line = "gputui: the runner lost track of this run: %s" % why
            changes = {"status": "lost", "exit_code": None, "error": "runner: %s" % why}
        else:
            line = "gputui: this run could not start: %s (exit %d)" % (why, CANNOT_START)
            changes = {"status": "failed", "exit_code": CANNOT_START,
                       "error": "could not start: %s" % why}
        try:
            with open(os.path.join(d, "log"), "ab") as log:
                log.write((line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
        try:
            save_state(job_id, ended_at=now_iso(), **changes)
        except Exception:  # noqa: BLE001 -- not even that: this daemon leaves it alone
            self.given_up.add(str(job_id))
        self.children.pop(str(job_id), None)
        self.kill_at.pop(str(job_id), None)

    def start(self, run):
        job_id = run["id"]
        d = run["dir"]
        if run.get("broken"):
            self.fail_record(job_id, run["broken"])
            return
        for name in _listdir(d):
            if name in ("exit_code", "exit_code.tmp", "pid") or name.startswith("exit_code."):
                try:
                    os.remove(os.path.join(d, name))
                except OSError:
                    pass
        env = dict(os.environ)
        env.update(GPUTUI_JOB_DIR=d, GPUTUI_JOB_ID=job_id, GPUTUI_JOB_NAME=run.get("name") or "",
                   PYTHONUNBUFFERED="1")
        argv = ["/bin/sh", "-c", WRAPPER, "gputui-run"]
        if self.launch is not None:
            argv = step_argv(self.launch, run) + ["/bin/sh", "-c", STEP_WRAPPER, "gputui-run"]
        elif run.get("gpus") is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in run["gpus"])
        cwd = run.get("cwd") or "."
        home = os.path.expanduser("~")
        cwd = cwd if cwd.startswith("/") else os.path.normpath(os.path.join(home, cwd))
        attempt = int(run.get("attempt") or 1)
        # recorded before it starts: a daemon that dies between the two finds its pid file
        # (or, with none, knows it never started) instead of starting it twice
        save_state(job_id, status="running", started_at=now_iso(), ended_at=None,
                   exit_code=None, pid=None, pid_start=None, attempt=attempt)
        try:
            with open(run["log"], "ab") as log:
                if attempt > 1:
                    log.write(("--- gputui: attempt %s ---\n" % attempt).encode())
                    log.flush()
                proc = subprocess.Popen(
                    argv + [cwd, run["command"]],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=home, start_new_session=True, close_fds=True,
                )
        except (OSError, ValueError, TypeError, UnicodeError) as exc:
            self.fail_record(job_id, _why(exc))
            return
        self.children[job_id] = proc
        save_state(job_id, pid=proc.pid, pid_start=proc_start(proc.pid))

    def finish(self, run, rc):
        job_id = run["id"]
        code_file = os.path.join(run["dir"], "exit_code")
        # A Slurm step's exit code is srun's (the highest of its tasks'); the file is read only
        # for a run this daemon did not start (an earlier daemon's).
        if self.launch is None or rc is None:
            codes = [read_code(code_file)]
            if self.launch is not None:  # a step's tasks: the highest, as srun's own
                codes = [read_code(os.path.join(run["dir"], name))
                         for name in _listdir(run["dir"]) if name.startswith("exit_code.task")]
            known = [c for c in codes if c is not None]
            if known:
                rc = max(known)
        cancelled = os.path.exists(os.path.join(run["dir"], "cancel"))
        attempt = int(run.get("attempt") or 1)
        if cancelled:
            save_state(job_id, status="cancelled", exit_code=rc, ended_at=now_iso())
        elif rc is None:
            save_state(job_id, status="lost", exit_code=None, ended_at=now_iso(),
                       error="the run's process went away without an exit code")
        elif rc == 0:
            save_state(job_id, status="succeeded", exit_code=0, ended_at=now_iso())
        elif attempt <= int(run.get("retries") or 0):
            save_state(job_id, status="queued", exit_code=rc, ended_at=now_iso(),
                       attempt=attempt + 1, failed_attempts=attempt)
        else:
            save_state(job_id, status="failed", exit_code=rc, ended_at=now_iso())
        self.children.pop(job_id, None)
        self.kill_at.pop(job_id, None)

    def adopt(self, run):
        """A run recorded running with no pid: the daemon that started it died before writing
        the pid down. Its wrapper wrote its own; with none after a while, it never started."""
        try:
            with open(os.path.join(run["dir"], "pid")) as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            started = run.get("started_at")
            try:
                age = (datetime.now(timezone.utc) - datetime.fromisoformat(started)).total_seconds()
            except (TypeError, ValueError):
                age = START_GRACE_S
            if age >= START_GRACE_S:
                self.finish(run, None)
            return
        save_state(run["id"], pid=pid, pid_start=proc_start(pid))

    def check(self, r):
        """One running run: ended? cancelled?"""
        proc = self.children.get(r["id"])
        if proc is not None:
            rc = proc.poll()
            if rc is not None:
                self.finish(r, rc if rc >= 0 else 128 - rc)
                return
        elif not r.get("pid"):
            self.adopt(r)
            return
        elif not alive(r.get("pid"), r.get("pid_start")):
            self.finish(r, None)  # from an earlier daemon: its exit code file says
            return
        if os.path.exists(os.path.join(r["dir"], "cancel")):
            self.stop(r)

    def step(self):
        with Locked():
            for r in [r for r in self.runs() if r["status"] == "running"]:
                try:
                    self.check(r)
                except Exception as exc:  # noqa: BLE001 -- one run never stops the queue
                    self.fail_record(r["id"], _why(exc), started=True)
            runs = self.runs()
            busy = [gpu_set(r) for r in runs if r["status"] == "running"]
            waiting = []
            for r in runs:
                if r["status"] != "queued":
                    continue
                mine = gpu_set(r)
                if any(overlaps(mine, b) for b in busy) or any(overlaps(mine, w) for w in waiting):
                    waiting.append(mine)
                    continue
                try:
                    self.start(r)
                except Exception as exc:  # noqa: BLE001 -- one run never stops the queue
                    self.fail_record(r["id"], _why(exc))
                    continue
                busy.append(mine)
            runs = self.runs()
        active = [r for r in runs if r["status"] == "running"]
        if active and self.launch is None and time.monotonic() - self.last_sample >= SAMPLE_S:
            self.last_sample = time.monotonic()
            self.sample(active)
        return bool(runs), runs

    def stop(self, run):
        pid = int(run.get("pid") or 0)
        if not pid:
            return
        job_id = run["id"]
        when = self.kill_at.get(job_id)
        try:
            if when is None:
                os.killpg(pid, signal.SIGTERM)
                self.kill_at[job_id] = time.monotonic() + KILL_GRACE_S
            elif time.monotonic() >= when:
                os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass

    def sample(self, active):
        """Each running run's own GPU use: the memory its processes hold (the most seen), and
        the utilisation of the GPUs it has a process on, while it has (the average). A run
        with no GPU process holds no memory and has no utilisation, whatever else runs on its
        GPUs. Where this machine cannot tell whose the processes are (nvidia-smi lists PIDs
        of another PID namespace, or lists none while memory is taken), nothing is recorded."""
        got = sample()
        if got is None:
            return
        gpus, apps = got
        table = proc_table() if apps else {}
        foreign = bool(apps) and not any(pid in table for pid, _m, _u in apps)
        by_index = dict((idx, mem) for idx, _util, mem in gpus.values())
        with Locked():
            for r in active:
                try:
                    self.sample_one(r, gpus, apps, table, foreign, by_index)
                except Exception:  # noqa: BLE001 -- a figure is never worth the queue
                    continue

    def sample_one(self, r, gpus, apps, table, foreign, by_index):
        leader = _int(r.get("pid"))
        if not leader or foreign:
            return
        mine = r.get("gpus")
        if not apps and any((by_index.get(g) or 0) >= HIDDEN_MIB
                            for g in (mine if mine is not None else by_index)):
            return  # memory in use and no process listed: whose it is cannot be told
        own = own_pids(leader, table) if apps else set()
        rows = [(mem, uuid) for pid, mem, uuid in apps if pid in own]
        state = read_json(os.path.join(r["dir"], "state.json"), {}) or {}
        if state.get("status") != "running" or _int(state.get("pid")) != leader:
            return
        changes = {}
        if all(mem is not None for mem, _u in rows):
            total = sum(mem for mem, _u in rows)
            changes["gpu_mem_max_mib"] = max(_float(state.get("gpu_mem_max_mib")) or 0.0, total)
        utils = [gpus[u][1] for u in set(u for _m, u in rows)
                 if u in gpus and gpus[u][1] is not None]
        if utils:
            n = (_int(state.get("util_n")) or 0) + 1
            total = (_float(state.get("util_sum")) or 0.0) + sum(utils) / len(utils)
            changes.update(util_n=n, util_sum=total, gpu_util_avg=round(total / n, 1))
        if changes:
            save_state(r["id"], **changes)

    def run(self):
        failures = 0
        while True:
            try:
                more, runs = self.step()
                failures = 0
            except Exception as exc:  # noqa: BLE001 -- logged; the loop goes on
                failures += 1
                line = "%s gputui runner: %s" % (now_iso(), _why(exc))  # into daemon.log
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
                if failures >= 60:
                    return 1  # the next look (`ensure`) starts a fresh one
                time.sleep(1.0)
                continue
            if not more:
                with Locked():
                    if self.runs():
                        continue
                    if self.done and read_json(QUEUE_END) is None:
                        counts = {}
                        for status in self.done.values():
                            counts[status] = counts.get(status, 0) + 1
                        end = {"ended_at": now_iso(), "counts": counts}
                        write_json(QUEUE_END, end)
                        apply_when_done(end)
                return 0
            time.sleep(0.5)


def _why(exc):
    """An exception as one line, its type named (`OSError: [Errno 7] Argument list too long`)."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


def apply_when_done(end, asked=False):
    """After the last run: power off after the grace period (or at the release timer, if that
    comes first), where that was asked for (release or stop on a provider whose billing stops
    at power-off). `asked`: set by `when-done` on a queue that has already ended — with no
    grace left nothing is powered off here: gputui, which asked and waits for this answer,
    finishes it now (results home, then release or stop by the provider), and a power-off
    now would cut its link (and the results' pull) short."""
    policy = read_json(WHEN_DONE) or {}
    if launch_settings() is not None:
        return  # a cluster's login node: the allocation is released by gputui (scancel)
    if policy.get("policy") not in ("release", "stop") or not policy.get("poweroff"):
        return
    if end.get("poweroff_at"):
        return
    grace = max(0.0, float(policy.get("grace_s", 600)))
    release_at = policy.get("release_at")
    if release_at:
        # never later than the instance's release timer (this shutdown replaces its own)
        try:
            left = (datetime.fromisoformat(release_at) - datetime.now(timezone.utc)).total_seconds()
            grace = max(0.0, min(grace, left))
        except ValueError:
            pass
    minutes = int(math.ceil(grace / 60))
    if minutes <= 0 and asked:
        return
    when = "now" if minutes <= 0 else "+%d" % minutes
    rc = subprocess.call(["shutdown", "-h", when], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    end["poweroff_at"] = now_iso() if rc == 0 else None
    end["poweroff_in_s"] = minutes * 60
    if rc != 0:
        end["poweroff_error"] = "shutdown exited %d" % rc
    write_json(QUEUE_END, end)


def cmd_daemon():
    os.makedirs(RUNS, exist_ok=True)
    fh = open(DAEMON_LOCK, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another daemon runs
    try:
        return Daemon().run()
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv):
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "add":
        return cmd_add()
    if cmd == "list":
        return cmd_list()
    if cmd == "cancel" and rest:
        return cmd_cancel(rest[0])
    if cmd == "retry" and rest:
        return cmd_retry(rest[0])
    if cmd == "when-done":
        return cmd_when_done()
    if cmd == "tail" and rest:
        return cmd_tail(rest[0], int(rest[1]) if len(rest) > 1 else 200)
    if cmd == "records" and len(rest) == 3 and all(a.isdigit() for a in rest):
        return cmd_records(int(rest[0]), int(rest[1]), int(rest[2]))
    if cmd == "follow" and rest:
        return cmd_follow(rest[0], int(rest[1]) if len(rest) > 1 else 0)
    if cmd == "ensure":
        sys.stdout.write(json.dumps({"started": ensure()}) + "\n")
        return 0
    if cmd == "daemon":
        return cmd_daemon()
    if cmd == "version":
        sys.stdout.write("%d\n" % VERSION)
        return 0
    _say("unknown command %s" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
