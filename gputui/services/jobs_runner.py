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
    runner.py ensure         start the daemon unless it runs
    runner.py daemon         the loop (one at a time, by a lock)

Each run has a folder runs/ID (GPUTUI_JOB_DIR): spec.json, state.json, log, exit_code.
Runs go in order; runs whose GPU sets (--gpus) do not overlap run side by side, each with its
CUDA_VISIBLE_DEVICES. A failed run is recorded and the queue goes on (after its retries).
GPU use is sampled with nvidia-smi while runs run. When nothing is queued or running the daemon
records the queue's end, applies the when-done power-off (if asked for), and exits.
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
SAMPLE_S = float(os.environ.get("GPUTUI_JOBS_SAMPLE_S", "2"))
KILL_GRACE_S = 5.0
FINAL = ("succeeded", "failed", "cancelled", "lost")
WRAPPER = (
    'cd "$1" 2>/dev/null || { echo "gputui: no folder $1 on the instance" >&2; rc=127; }; '
    '[ -z "$rc" ] && { /bin/sh -c "$2"; rc=$?; }; '
    'echo "$rc" > "$GPUTUI_JOB_DIR/exit_code.tmp" && '
    'mv "$GPUTUI_JOB_DIR/exit_code.tmp" "$GPUTUI_JOB_DIR/exit_code"; exit "$rc"'
)


def now_iso():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
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
    return sorted(int(n) for n in names if n.isdigit())


def load(job_id):
    d = run_dir(job_id)
    spec = read_json(os.path.join(d, "spec.json"))
    if spec is None:
        return None
    state = read_json(os.path.join(d, "state.json"), {}) or {}
    run = dict(spec)
    run.update(state)
    run.setdefault("status", "queued")
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
        r = load(i)
        if r is not None:
            out.append(r)
    return out


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
    specs = json.load(sys.stdin)
    new = []
    with Locked():
        known = ids()
        next_id = (known[-1] if known else 0) + 1
        for spec in specs:
            d = run_dir(next_id)
            os.makedirs(d)
            clean = {
                "name": str(spec.get("name") or "")[:200] or "run %d" % next_id,
                "command": str(spec["command"]),
                "cwd": spec.get("cwd") or "",
                "gpus": [int(g) for g in spec["gpus"]] if spec.get("gpus") is not None else None,
                "retries": max(0, int(spec.get("retries") or 0)),
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
    if end.get("poweroff_at"):
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
        runs = all_runs()
        ended = read_json(QUEUE_END)
    if ended is not None and not any(r["status"] in ("queued", "running") for r in runs):
        apply_when_done(ended)
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


def sample():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
             "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=15,
            universal_newlines=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    gpus = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            idx = int(parts[0])
        except ValueError:
            continue
        util = mem = None
        try:
            util = float(parts[1])
        except ValueError:
            pass
        try:
            mem = float(parts[2])
        except ValueError:
            pass
        gpus[idx] = (util, mem)
    return gpus


class Daemon:
    def __init__(self):
        self.children = {}  # id -> Popen
        self.kill_at = {}  # id -> when to KILL after TERM
        self.last_sample = 0.0
        self.done = {}  # id -> final status: a finished run never changes, so is not re-read

    def runs(self):
        """The runs not known to be finished (read from disk), and note those that are."""
        out = []
        for i in ids():
            key = str(i)
            if key in self.done:
                continue
            r = load(i)
            if r is None:
                continue
            if r["status"] in FINAL:
                self.done[key] = r["status"]
            else:
                out.append(r)
        return out

    def start(self, run):
        job_id = run["id"]
        d = run["dir"]
        for name in ("exit_code", "exit_code.tmp"):
            try:
                os.remove(os.path.join(d, name))
            except OSError:
                pass
        env = dict(os.environ)
        env.update(GPUTUI_JOB_DIR=d, GPUTUI_JOB_ID=job_id, GPUTUI_JOB_NAME=run.get("name", ""),
                   PYTHONUNBUFFERED="1")
        if run.get("gpus") is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in run["gpus"])
        cwd = run.get("cwd") or "."
        home = os.path.expanduser("~")
        cwd = cwd if cwd.startswith("/") else os.path.normpath(os.path.join(home, cwd))
        log = open(run["log"], "ab")
        if int(run.get("attempt") or 1) > 1:
            log.write(("--- gputui: attempt %s ---\n" % run["attempt"]).encode())
            log.flush()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", WRAPPER, "gputui-run", cwd, run["command"]],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=home, start_new_session=True, close_fds=True,
        )
        log.close()
        self.children[job_id] = proc
        save_state(job_id, status="running", started_at=now_iso(), ended_at=None,
                   exit_code=None, pid=proc.pid, pid_start=proc_start(proc.pid),
                   attempt=int(run.get("attempt") or 1))

    def finish(self, run, rc):
        job_id = run["id"]
        code_file = os.path.join(run["dir"], "exit_code")
        try:
            with open(code_file) as fh:
                rc = int(fh.read().strip())
        except (OSError, ValueError):
            pass
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

    def step(self):
        with Locked():
            for r in [r for r in self.runs() if r["status"] == "running"]:
                proc = self.children.get(r["id"])
                if proc is not None:
                    rc = proc.poll()
                    if rc is not None:
                        self.finish(r, rc if rc >= 0 else 128 - rc)
                        continue
                elif not alive(r.get("pid"), r.get("pid_start")):
                    self.finish(r, None)  # from an earlier daemon: its exit code file says
                    continue
                if os.path.exists(os.path.join(r["dir"], "cancel")):
                    self.stop(r)
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
                self.start(r)
                busy.append(mine)
            runs = self.runs()
        active = [r for r in runs if r["status"] == "running"]
        if active and time.monotonic() - self.last_sample >= SAMPLE_S:
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
        gpus = sample()
        if not gpus:
            return
        with Locked():
            for r in active:
                mine = r.get("gpus")
                idx = [g for g in (mine if mine is not None else sorted(gpus)) if g in gpus]
                utils = [gpus[g][0] for g in idx if gpus[g][0] is not None]
                mems = [gpus[g][1] for g in idx if gpus[g][1] is not None]
                state = read_json(os.path.join(r["dir"], "state.json"), {}) or {}
                if state.get("status") != "running":
                    continue
                changes = {}
                if utils:
                    n = int(state.get("util_n") or 0) + 1
                    total = float(state.get("util_sum") or 0) + sum(utils) / len(utils)
                    changes.update(util_n=n, util_sum=total, gpu_util_avg=round(total / n, 1))
                if mems:
                    changes["gpu_mem_max_mib"] = max(float(state.get("gpu_mem_max_mib") or 0),
                                                     sum(mems))
                if changes:
                    save_state(r["id"], **changes)

    def run(self):
        while True:
            more, runs = self.step()
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


def apply_when_done(end):
    """After the last run: power off after the grace period (or at the release timer, if that
    comes first), where that was asked for (release or stop on a provider whose billing stops
    at power-off)."""
    policy = read_json(WHEN_DONE) or {}
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
