"""Jobs end to end, as a user and a script see them: separate `gputui` processes over the
sandbox, the queue running with no gputui process at all, and `gputui reap` finishing it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import timedelta
from pathlib import Path

from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str, timeout: float = 120, cwd: Path | None = None,
           ) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, cwd=cwd,
                          env=run_gputui_env(home), timeout=timeout, stdin=subprocess.DEVNULL)


def create(home: Path, name: str) -> str:
    out = gputui(home, "create", "--provider", "sandbox", "--gpu", "RTX 4090", "--count", "2",
                 "--name", name, "--release-after", "2h", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["id"]


def wait_for(path: Path, deadline_s: float = 120) -> None:
    """The queue finishes on its own: nothing of gputui is running while we wait."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists():
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never appeared")


def make_project(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text(
        "import os, sys, time\n"
        "name = sys.argv[1]\n"
        "while os.path.exists('hold'):  # the test lets the queue go when it is ready\n"
        "    time.sleep(0.05)\n"
        "print('training', name, 'on GPUs', os.environ.get('CUDA_VISIBLE_DEVICES', 'all'))\n"
        "if name == 'bad':\n"
        "    print('diverged', file=sys.stderr); sys.exit(4)\n"
        "os.makedirs('results', exist_ok=True)\n"
        "open(f'results/{name}.txt', 'w').write(f'metrics of {name}\\n')\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "cache").mkdir()
    (root / "cache" / "big.tmp").write_text("x" * 1000)
    (root / ".gputuiignore").write_text("cache/\n")


def test_push_queue_close_everything_then_reap_pulls_and_releases(gputui_home: Path,
                                                                     tmp_path: Path):
    iid = create(gputui_home, "exp")
    proj = tmp_path / "proj"
    make_project(proj)
    (proj / "hold").write_text("")  # the runs wait until when-done is set (a slow machine)
    push = gputui(gputui_home, "push", "exp", str(proj), "--json")
    assert push.returncode == 0, push.stderr
    summary = json.loads(push.stdout)
    assert summary["files"] == 3 and summary["ignored"] == 2 and summary["skipped"] == 0
    root = gputui_home / "sandbox" / "instances" / iid
    assert (root / "proj" / "src" / "train.py").exists() and not (root / "proj" / ".git").exists()
    # the console's Queue-a-run dialog offers the pushed folder as the working folder
    from gputui.config import Config
    from gputui.services.hub import Services
    from gputui.services.pushes import last_push
    from gputui.store import SessionStore

    assert last_push(Services(SessionStore(gputui_home / "state.db"), Config(),
                              state_dir=gputui_home), iid) == "proj"

    runs = tmp_path / "runs.txt"
    runs.write_text("# a sweep\npython3 src/train.py good\npython3 src/train.py bad\n\n"
                    "python3 src/train.py best\n")
    add = gputui(gputui_home, "jobs", "exp", "add", "--file", str(runs), "--cwd", "proj",
                 "--name", "sweep", "--gpus", "1")
    assert add.returncode == 0, add.stderr
    assert add.stdout.split() == ["1", "2", "3"]
    results = tmp_path / "home-results"
    wd = gputui(gputui_home, "jobs", "exp", "when-done", "release", "--pull", "proj/results",
                "--to", str(results))
    assert wd.returncode == 0, wd.stderr
    assert "released" in wd.stdout
    (root / "proj" / "hold").unlink()  # the runs start now, with no gputui process left

    # every gputui process has ended; the queue goes on by itself on the instance
    wait_for(root / ".gputui" / "jobs" / "queue_end.json")

    listed = gputui(gputui_home, "jobs", "exp", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["name"], r["status"], r["exit_code"]) for r in rows] == [
        ("sweep-1", "succeeded", 0), ("sweep-2", "failed", 4), ("sweep-3", "succeeded", 0)]
    for r in rows:
        assert r["seconds"] is not None and r["cost"] is not None and r["currency"] == "USD"
        assert set(r) >= {"id", "name", "command", "status", "exit_code", "started_at",
                          "ended_at", "seconds", "gpu_util_avg", "gpu_mem_max_mib", "cost", "log"}
    log = gputui(gputui_home, "jobs", "exp", "log", "2")
    assert log.stdout.splitlines() == ["training bad on GPUs 1", "diverged"]
    table = gputui(gputui_home, "jobs", "exp")
    assert "queue ended" in table.stdout and "2 succeeded" in table.stdout and "1 failed" in table.stdout

    reap = gputui(gputui_home, "reap", "--json")
    assert reap.returncode == 0, reap.stderr
    assert json.loads(reap.stdout)["released"] == ["exp"]
    assert (results / "good.txt").read_text() == "metrics of good\n"
    assert (results / "best.txt").read_text() == "metrics of best\n"
    assert not (results / "bad.txt").exists()
    assert not root.exists()  # released: the instance and its disk are gone
    [inst] = json.loads(gputui(gputui_home, "instances", "--all", "--json").stdout)
    assert inst["status"] == "released"
    ledger = json.loads(gputui(gputui_home, "costs", "--json").stdout)["rows"]
    assert [row["end_reason"] for row in ledger] == ["done"]
    costs = json.loads(gputui(gputui_home, "costs", "--runs", "--json").stdout)
    assert [(c["label"], c["status"], c["exit_code"]) for c in costs] == [
        ("sweep-1", "succeeded", 0), ("sweep-2", "failed", 4), ("sweep-3", "succeeded", 0)]
    for c, r in zip(costs, rows, strict=True):
        assert c["cost"] == r["cost"] and c["currency"] == "USD" and c["instance"] == "exp"
    text = gputui(gputui_home, "costs", "--runs")
    assert "sweep-2" in text.stdout and "failed" in text.stdout
    # nothing is released twice
    again = gputui(gputui_home, "reap", "--json")
    assert json.loads(again.stdout)["released"] == []


def test_powered_off_with_results_not_home_is_started_pulled_then_released(gputui_home: Path,
                                                                         tmp_path: Path):
    """The sandbox can start a stopped instance again (as AutoDL can): the results asked for
    are brought home first, then it is released. (Where the provider cannot start it, it is
    kept with an alarm: tests/services/test_jobs.py.)"""
    iid = create(gputui_home, "off")
    add = gputui(gputui_home, "jobs", "off", "add", "--",  # still running at when-done
                 "sleep 4 && mkdir -p out && echo done > out/r.txt")
    assert add.returncode == 0, add.stderr
    wd = gputui(gputui_home, "jobs", "off", "when-done", "release", "--pull", "out", "--to",
                str(tmp_path / "out"), "--grace", "0s")
    assert wd.returncode == 0, wd.stderr
    root = gputui_home / "sandbox" / "instances" / iid
    end = root / ".gputui" / "jobs" / "queue_end.json"
    wait_for(end)
    for _ in range(100):  # the runner powers the instance off at once (grace 0)
        if json.loads(end.read_text()).get("poweroff_at"):
            break
        time.sleep(0.1)
    reap = gputui(gputui_home, "reap", "--json")
    out = json.loads(reap.stdout)
    assert reap.returncode == 0, reap.stderr
    assert out["released"] == ["off"]
    assert (tmp_path / "out" / "r.txt").read_text() == "done\n"  # the result came home first
    [inst] = json.loads(gputui(gputui_home, "instances", "--json", "--all").stdout)
    assert inst["status"] == "released"


def test_when_done_after_the_queue_ended_is_done_at_once_results_first(gputui_home: Path,
                                                                       tmp_path: Path):
    """The queue ended before `when-done release --grace 0s --pull`: the command itself brings
    the results home and releases it, and says so (it used to power the instance off under
    its own link: "the queue runner failed: exit -1")."""
    iid = create(gputui_home, "late")
    add = gputui(gputui_home, "jobs", "late", "add", "--", "mkdir -p out && echo done > out/r.txt")
    assert add.returncode == 0, add.stderr
    wait_for(gputui_home / "sandbox" / "instances" / iid / ".gputui" / "jobs" / "queue_end.json")
    wd = gputui(gputui_home, "jobs", "late", "when-done", "release", "--pull", "out", "--to",
                str(tmp_path / "out"), "--grace", "0s")
    assert wd.returncode == 0, wd.stderr
    assert "done now: released" in wd.stdout
    assert (tmp_path / "out" / "r.txt").read_text() == "done\n"
    [inst] = json.loads(gputui(gputui_home, "instances", "--json", "--all").stdout)
    assert inst["status"] == "released"
    [row] = json.loads(gputui(gputui_home, "costs", "--json").stdout)["rows"]
    assert row["end_reason"] == "done"


def _clock(text: str) -> int:
    """Minutes since midnight of an HH:MM."""
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def test_results_that_never_appear_hold_the_release_and_say_the_ways_out(gputui_home: Path,
                                                                          tmp_path: Path):
    """A run that fails before it writes its results: the release is held (right), and every
    place says so — "held: results missing (PATH)" with `gputui release NAME` and `when-done
    --pull OTHER` — and the power-off shown is the one armed on the instance once the lease's
    timer took it back from the queue's end."""
    from gputui.models import utcnow
    from gputui.sandbox.shims.state import power_state

    iid = create(gputui_home, "nores")  # released in 2 h
    root = gputui_home / "sandbox" / "instances" / iid
    add = gputui(gputui_home, "jobs", "nores", "add", "--",
                 "while [ ! -e go ]; do sleep 0.2; done; echo crashed early; exit 3")
    assert add.returncode == 0, add.stderr
    wd = gputui(gputui_home, "jobs", "nores", "when-done", "release", "--pull", "results",
                "--to", str(tmp_path / "results"))  # the queue's end powers off in 10 min
    assert wd.returncode == 0, wd.stderr
    (root / "go").touch()
    end = root / ".gputui" / "jobs" / "queue_end.json"
    wait_for(end)
    for _ in range(100):
        if json.loads(end.read_text()).get("poweroff_at"):
            break
        time.sleep(0.1)
    queue_off = power_state(root).at  # `shutdown -h +10`, by the runner
    assert queue_off is not None and queue_off - utcnow() < timedelta(minutes=11)

    reap = gputui(gputui_home, "reap", "--json")
    assert reap.returncode == 1, reap.stderr
    report = json.loads(reap.stdout)
    assert report["released"] == []
    [held] = report["errors"]
    assert held.startswith("nores: held: results missing (results)"), held
    assert "`gputui release nores` releases it anyway" in held
    assert "`gputui jobs nores when-done release --pull OTHER` pulls another path" in held
    assert json.loads(gputui(gputui_home, "instances", "--json").stdout)[0]["status"] == "running"

    armed = power_state(root).at  # the lease's timer replaced the queue's 10 minutes
    assert armed is not None and armed - queue_off > timedelta(minutes=100)
    requested = power_state(root).requested_at
    again = gputui(gputui_home, "reap", "--json")  # still held; the pull is tried again...
    assert again.returncode == 1 and json.loads(again.stdout)["errors"] == [held]
    assert power_state(root).requested_at == requested  # ...but the host's timer is not re-set
    listed = gputui(gputui_home, "jobs", "nores")
    assert listed.returncode == 0, listed.stderr
    text = listed.stdout
    assert "held: results missing (results): " in text and "no such file" in text, text
    assert "`gputui release nores` releases it anyway" in text
    assert "when-done release --pull OTHER" in text
    shown = re.search(r"it powers off at (\d\d:\d\d), at its release timer", text)
    assert shown is not None, text
    assert abs(_clock(shown.group(1)) - _clock(f"{armed.astimezone():%H:%M}")) <= 1, (
        shown.group(1), armed)

    # the way out: another path (here the results were written elsewhere)
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "metrics.txt").write_text("0.93\n")
    fixed = gputui(gputui_home, "jobs", "nores", "when-done", "release", "--pull", "elsewhere",
                   "--to", str(tmp_path / "elsewhere"))
    assert fixed.returncode == 0, fixed.stderr
    assert "done now: released" in fixed.stdout
    assert (tmp_path / "elsewhere" / "metrics.txt").read_text() == "0.93\n"


def test_bad_input_is_one_line_exit_2_and_nothing_queued(gputui_home: Path, tmp_path: Path):
    iid = create(gputui_home, "bad")
    huge = tmp_path / "huge.txt"  # a line over 128 KiB, or with a NUL byte: refused at add
    huge.write_text("echo ok\n# next\necho " + "y" * 140_000 + "\n")
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"echo ok\necho a\x00b\n")
    for path, line, words in ((huge, 3, "140,005 bytes"), (nul, 2, "NUL byte")):
        out = gputui(gputui_home, "jobs", "bad", "add", "--file", str(path))
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == out.stderr.strip().splitlines()[0], out.stderr
        assert f"{path} line {line}:" in out.stderr and words in out.stderr, out.stderr
    cases = [
        ("push", "bad", str(tmp_path / "missing")),
        ("jobs", "bad", "when-done", "release", "--pull", "/etc", "--to", str(tmp_path / "x")),
        ("jobs", "bad", "when-done", "release", "--pull", "../up", "--to", str(tmp_path / "x")),
        ("jobs", "bad", "cancel", "42"),
        ("jobs", "bad", "log", "nope"),
        ("jobs", "bad", "add", "--gpus", "5", "--", "true"),
        ("jobs", "bad", "add", "--file", str(tmp_path / "none.txt")),
        ("jobs", "bad", "add"),
        ("jobs", "ghost", "add", "--", "true"),
        ("run", "bad"),
        # two arguments, together over what the instance takes for one command: refused
        # before anything is rented
        ("run", "--gpu", "4090", "--", "echo", "y" * 70_000, "z" * 70_000),
    ]
    for args in cases:
        out = gputui(gputui_home, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert "Traceback" not in out.stderr
    listed = gputui(gputui_home, "jobs", "bad", "--json")
    assert json.loads(listed.stdout) == []
    assert not (gputui_home / "jobs" / f"{iid}.json").exists()
    [inst] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert inst["status"] == "running"
    # powered off: there is no way to pull from it now
    assert gputui(gputui_home, "ssh", "bad", "--", "shutdown -h now").returncode == 0
    off = gputui(gputui_home, "jobs", "bad", "when-done", "release", "--pull", "out")
    assert off.returncode == 2 and "no way to pull" in off.stderr, off.stderr
    assert len(off.stderr.strip().splitlines()) == 1
    assert not (gputui_home / "jobs" / f"{iid}.json").exists()


def test_run_streams_output_pulls_and_exits_with_the_remote_code(gputui_home: Path,
                                                                  tmp_path: Path):
    create(gputui_home, "one")
    proj = tmp_path / "code"
    proj.mkdir()
    (proj / "job.sh").write_text("echo hello from $(basename $PWD)\nmkdir -p out\n"
                                 "echo 42 > out/answer\nexit 5\n")
    out = gputui(gputui_home, "run", "one", "--sync", str(proj), "--pull", "code/out", "--to",
                 str(tmp_path / "answer"), "--label", "answer", "--", "sh", "job.sh")
    assert out.returncode == 5, out.stderr
    assert out.stdout.splitlines() == ["hello from code"]
    assert (tmp_path / "answer" / "answer").read_text() == "42\n"
    assert "failed (exit 5)" in out.stderr
    [inst] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert inst["status"] == "running"  # --then keep (the default with a NAME)
    assert os.path.isdir(tmp_path / "answer")


def test_run_with_gpu_rents_runs_and_releases(gputui_home: Path, tmp_path: Path):
    out = gputui(gputui_home, "run", "--gpu", "4090", "--release-after", "1h", "--label", "probe",
                 "--", "nvidia-smi", "-L")
    assert out.returncode == 0, out.stderr
    assert "RTX 4090" in out.stdout
    [inst] = json.loads(gputui(gputui_home, "instances", "--all", "--json").stdout)
    assert inst["status"] == "released"  # rented for the run, released after it
    [cost] = json.loads(gputui(gputui_home, "costs", "--runs", "--json").stdout)
    assert cost["label"] == "probe" and cost["status"] == "succeeded"


def test_ctrl_c_asks_whether_to_stop_the_run_and_the_timer_stays(gputui_home: Path):
    import pty
    import select
    import signal

    create(gputui_home, "cc")
    master, slave = pty.openpty()
    proc = subprocess.Popen([*GPUTUI, "run", "cc", "--", "echo started; sleep 60"],
                            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=run_gputui_env(gputui_home), text=True)
    os.close(slave)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 90)
        assert ready and proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C does
        prompt = b""
        end = time.monotonic() + 60
        assert proc.stderr is not None
        err_fd = proc.stderr.fileno()
        while b"[y/N]" not in prompt and time.monotonic() < end:
            r, _, _ = select.select([err_fd], [], [], 1)
            if r:
                prompt += os.read(err_fd, 1024)
        assert b"stop job 1 on cc?" in prompt
        os.write(master, b"y\n")
        out, err = proc.communicate(timeout=60)
        err = prompt.decode() + err
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "stopping it" in err and "keeps its release timer" in err
    for _ in range(100):
        rows = json.loads(gputui(gputui_home, "jobs", "cc", "--json").stdout)
        if rows[0]["status"] == "cancelled":
            break
        time.sleep(0.2)
    assert rows[0]["status"] == "cancelled"
    [inst] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert inst["status"] == "running" and inst["release_at"] is not None


def test_results_through_links_come_home_or_the_release_is_held(gputui_home: Path,
                                                                tmp_path: Path):
    """The drill: a run writes ckpt/final.pt and links out2/final.pt -> ../ckpt/final.pt;
    `when-done release --pull out2 --to DIR` brings final.pt home before releasing. A link
    that leads nowhere holds the release, names the entry and why, and says the ways out;
    `gputui pull` copies links as files and names what did not come (exit 1)."""
    iid = create(gputui_home, "lnk")
    add = gputui(gputui_home, "jobs", "lnk", "add", "--",
                 "mkdir -p ckpt out2 && echo weights > ckpt/final.pt && "
                 "ln -s ../ckpt/final.pt out2/final.pt && ln -s ../ckpt/gone.pt out2/gone.pt")
    assert add.returncode == 0, add.stderr
    root = gputui_home / "sandbox" / "instances" / iid
    wait_for(root / ".gputui" / "jobs" / "queue_end.json")
    # plain pull: the link comes as the file, the dangling one is named, exit 1
    pulled = gputui(gputui_home, "pull", "lnk", "out2", str(tmp_path / "p"))
    assert pulled.returncode == 1, pulled.stderr
    assert (tmp_path / "p" / "final.pt").read_text() == "weights\n"
    assert "1 files (1 through a link)" in pulled.stdout and "1 did not come" in pulled.stdout
    assert "out2/gone.pt: did not come: a link to ../ckpt/gone.pt, which does not exist" \
        in pulled.stderr
    as_json = gputui(gputui_home, "pull", "lnk", "out2", str(tmp_path / "p"), "--json")
    assert as_json.returncode == 1
    summary = json.loads(as_json.stdout)
    assert summary["skipped"] == 1 and summary["skipped_links"] == 1
    assert [d["path"] for d in summary["not_copied"]] == ["out2/gone.pt"]
    # when-done release: held, and says which entry and why, and the ways out
    results = tmp_path / "results"
    wd = gputui(gputui_home, "jobs", "lnk", "when-done", "release", "--pull", "out2", "--to",
                str(results))
    assert wd.returncode == 0, wd.stderr
    assert "done now: kept" in wd.stdout
    assert "out2/gone.pt (a link to ../ckpt/gone.pt, which does not exist)" in wd.stderr
    assert "gputui release lnk" in wd.stderr and "released, results in" not in wd.stderr
    assert (results / "final.pt").read_text() == "weights\n"
    [inst] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert inst["status"] == "running" and root.exists()
    reap = gputui(gputui_home, "reap", "--json")  # kept again: an error to report, exit 1
    held = json.loads(reap.stdout)
    assert reap.returncode == 1 and held["released"] == []
    assert any("lnk: held: results missing (out2)" in e for e in held["errors"]), held
    # fixed on the instance: the next look pulls it and releases
    (root / "out2" / "gone.pt").unlink()
    reap = gputui(gputui_home, "reap", "--json")
    assert json.loads(reap.stdout)["released"] == ["lnk"], reap.stderr
    assert (results / "final.pt").read_text() == "weights\n" and not root.exists()


def test_a_progress_bar_in_the_log_reads_as_a_terminal_leaves_it(gputui_home: Path):
    """Issue 29.8: `jobs log` split a progress bar's `ABC\\rred` into two lines, and `--follow`
    showed `red` of `ABCDEF\\rred`: each line is what a terminal shows at its end."""
    create(gputui_home, "bar")
    script = r"printf 'ABC\rred\nABCDEF\rred\n 10%%|#  |\r 50%%|## |\r100%%|###|\nend\n'"
    add = gputui(gputui_home, "jobs", "bar", "add", "--name", "bar", "--", "sh", "-c", script)
    assert add.returncode == 0, add.stderr
    want = [b"red", b"redDEF", b"100%|###|", b"end"]

    def lines(*args: str) -> list[bytes]:
        done = subprocess.run([*GPUTUI, "jobs", "bar", "log", *args], capture_output=True,
                              env=run_gputui_env(gputui_home), timeout=120,
                              stdin=subprocess.DEVNULL)  # bytes: a stray \r would show
        assert done.returncode == 0, done.stderr
        assert b"\r" not in done.stdout
        return done.stdout.split(b"\n")[:-1]

    assert lines("1", "--follow") == want  # to its end
    assert lines("1") == want
    assert lines("1", "--lines", "2") == want[-2:]
