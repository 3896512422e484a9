"""Run records outlive the instance: after a release, `gputui jobs NAME` still lists the queue's
runs (exit codes, times, cost) and `gputui jobs NAME log ID` prints each run's last lines, from
the copy kept here when the queue ended or before the release — masked, bounded, and never in
the way of the release itself."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.cli.test_jobs_cli import create, gputui

SECRET = "sk-live-ABCDEF123456"


def _queue_and_wait(home: Path, name: str, *commands: str, deadline_s: float = 90) -> None:
    for command in commands:
        out = gputui(home, "jobs", name, "add", "--", command)
        assert out.returncode == 0, out.stderr
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        runs = json.loads(gputui(home, "jobs", name, "--json").stdout)
        if runs and all(r["status"] in ("succeeded", "failed", "cancelled", "lost")
                        for r in runs):
            return
        time.sleep(0.5)
    raise AssertionError("the queue never ended")


def _records(home: Path) -> str:
    folder = home / "jobs" / "records"
    return "".join(p.read_text() for p in folder.glob("*.json")) if folder.exists() else ""


def test_runs_and_their_last_lines_are_read_the_morning_after_release(gputui_home: Path):
    create(gputui_home, "night")
    _queue_and_wait(
        gputui_home, "night",
        "for i in $(seq 1 500); do echo step $i; done; echo done training",
        "exit 3",  # fails with no output
        f"echo using key {SECRET}; printf 'boom\\033]0;title\\007\\n'; exit 7",
        deadline_s=120)
    listed = gputui(gputui_home, "jobs", "night")  # the queue's end: kept here
    assert listed.returncode == 0, listed.stderr
    rel = gputui(gputui_home, "release", "night", "--yes")
    assert rel.returncode == 0, rel.stderr

    after = gputui(gputui_home, "jobs", "night")
    assert after.returncode == 0, after.stderr
    text = after.stdout
    assert "night was released at" in text
    rows = {line.split()[0]: line for line in text.splitlines()
            if line.strip()[:1].isdigit()}
    assert set(rows) == {"1", "2", "3"}
    assert "succeeded" in rows["1"] and " 0 " in rows["1"]
    assert "failed" in rows["2"] and " 3 " in rows["2"]
    assert "failed" in rows["3"] and " 7 " in rows["3"]
    assert all("$" in rows[k] for k in rows)  # each run's cost
    assert "1 succeeded, 2 failed" in text
    assert "the last 200 lines of each run's log were kept at the release" in text

    zh = gputui(gputui_home, "--lang", "zh", "jobs", "night")
    assert "night 已于" in zh.stdout and "释放时" in zh.stdout and "最后 200 行" in zh.stdout
    zh_log = gputui(gputui_home, "--lang", "zh", "jobs", "night", "log", "2")
    assert "任务 2：没有输出；退出码 3" in zh_log.stderr

    data = json.loads(gputui(gputui_home, "jobs", "night", "--json").stdout)
    assert [r["exit_code"] for r in data] == [0, 3, 7]
    assert all(r["cost"] is not None and r["seconds"] is not None for r in data)

    log1 = gputui(gputui_home, "jobs", "night", "log", "1")
    assert log1.returncode == 0, log1.stderr
    lines = log1.stdout.splitlines()
    assert lines[-1] == "done training" and len(lines) == 200 and lines[0] == "step 302"
    assert "the last lines only" in log1.stderr
    few = gputui(gputui_home, "jobs", "night", "log", "1", "--lines", "3")
    assert few.stdout.splitlines() == ["step 499", "step 500", "done training"]

    log2 = gputui(gputui_home, "jobs", "night", "log", "2")
    assert log2.returncode == 0 and log2.stdout == ""
    assert "job 2: no output; exit code 3" in log2.stderr

    log3 = gputui(gputui_home, "jobs", "night", "log", "3")
    assert log3.stdout.splitlines()[-1] == "boom"  # the title escape is gone
    assert "\x1b" not in log3.stdout and "\x07" not in log3.stdout
    missing = gputui(gputui_home, "jobs", "night", "log", "9")
    assert missing.returncode == 2 and "no job 9" in missing.stderr
    assert "Traceback" not in missing.stderr
    # the copy is the owner's alone
    [path] = (gputui_home / "jobs" / "records").glob("*.json")
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_secrets_in_a_log_are_masked_in_the_copy_kept(gputui_home: Path):
    env = {"LAMBDA_API_KEY": SECRET}
    os.environ.update(env)
    try:
        create(gputui_home, "keyed")
        _queue_and_wait(gputui_home, "keyed", f"echo token={SECRET}; exit 1")
        assert gputui(gputui_home, "release", "keyed", "--yes").returncode == 0
        kept = _records(gputui_home)
        assert kept and SECRET not in kept
        log = gputui(gputui_home, "jobs", "keyed", "log", "1")
        assert log.returncode == 0, log.stderr
        assert SECRET not in log.stdout and "token=" in log.stdout
    finally:
        for key in env:
            os.environ.pop(key, None)


def test_a_run_killed_by_the_release_reads_cancelled_with_its_cost(gputui_home: Path):
    create(gputui_home, "busy")
    out = gputui(gputui_home, "jobs", "busy", "add", "--", "echo started; sleep 600")
    assert out.returncode == 0, out.stderr
    end = time.monotonic() + 60
    while time.monotonic() < end:
        log = gputui(gputui_home, "jobs", "busy", "log", "1")
        if "started" in log.stdout:
            break
        time.sleep(0.3)
    rel = gputui(gputui_home, "release", "busy", "--yes")
    assert rel.returncode == 0, rel.stderr
    after = gputui(gputui_home, "jobs", "busy")
    row = next(line for line in after.stdout.splitlines() if line.strip().startswith("1 "))
    assert "cancelled" in row and "$" in row
    assert gputui(gputui_home, "jobs", "busy", "log", "1").stdout.splitlines() == ["started"]
