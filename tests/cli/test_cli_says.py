"""Commands say what the renter needs to know: what a rental costs and when it ends, where the
results go, what a push leaves out (and what it would send), and that a run printed nothing."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta
from pathlib import Path

from tests.cli.test_jobs_cli import gputui

PRICE = re.compile(r"billing \$\d+\.\d\d/h")


def test_create_and_run_say_the_price_and_the_release_time(gputui_home: Path):
    out = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "RTX 4090",
                 "--name", "soon", "--release-after", "2h")
    assert out.returncode == 0, out.stderr
    line = out.stdout.splitlines()[-1]
    assert PRICE.search(line), line
    due = (datetime.now() + timedelta(hours=2))
    if due.date() == datetime.now().date():  # today: the time alone
        assert re.search(r"released at \d\d:\d\d \(in 1h 5\dm\)", line), line
    else:
        assert f"released at {due:%Y-%m-%d} " in line, line
    assert "`gputui extend soon 1h`" in line

    later = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "RTX 4090",
                   "--name", "later", "--release-after", "30h")
    assert later.returncode == 0, later.stderr
    when = datetime.now() + timedelta(hours=30)  # another day: the date too
    assert f"released at {when:%Y-%m-%d} {when:%H}:" in later.stdout, later.stdout
    # the JSON a script reads is unchanged: one object
    assert json.loads(gputui(gputui_home, "instances", "--json").stdout)

    run = gputui(gputui_home, "run", "--gpu", "4090", "--release-after", "1h", "--", "true")
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""  # the run's own output only
    assert PRICE.search(run.stderr) and "released at " in run.stderr, run.stderr


def test_when_done_names_the_absolute_destination(gputui_home: Path, tmp_path: Path):
    from tests.cli.test_jobs_cli import create

    create(gputui_home, "dest")
    out = gputui(gputui_home, "jobs", "dest", "when-done", "keep", "--pull", "results",
                 "--to", "got/here", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"results to {tmp_path / 'got' / 'here'}" in out.stdout, out.stdout


def test_push_names_what_it_ignored_and_dry_run_sends_nothing(gputui_home: Path,
                                                              tmp_path: Path):
    from tests.cli.test_jobs_cli import create

    iid = create(gputui_home, "proj")
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "train.py").write_text("print(1)\n")
    (proj / "notes.md").write_text("n\n")
    (proj / ".git").mkdir()
    (proj / ".git" / "HEAD").write_text("ref\n")
    (proj / "cache").mkdir()
    (proj / "cache" / "big.bin").write_text("x" * 100)
    (proj / "run.log").write_text("old\n")
    (proj / ".gputuiignore").write_text("cache/\n*.log\n")
    root = gputui_home / "sandbox" / "instances" / iid

    dry = gputui(gputui_home, "push", "proj", str(proj), "--dry-run", "--verbose")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert "would send src/train.py -> " in dry.stdout and "would send notes.md -> " in dry.stdout
    assert "would send .gputuiignore -> " in dry.stdout
    assert {line for line in lines if line.startswith("ignored ")} == {
        "ignored .git/", "ignored cache/", "ignored run.log"}
    assert "left out by .gputuiignore and the names never sent: .git, __pycache__" in dry.stdout
    assert re.search(r"dry run: 3 files, .* would move to .*proj; 0 unchanged, 3 ignored; "
                     r"nothing was sent", dry.stdout), dry.stdout
    assert not (root / "proj").exists()  # nothing moved
    as_json = json.loads(gputui(gputui_home, "push", "proj", str(proj), "--dry-run",
                                "--json").stdout)
    assert as_json["dry_run"] is True and as_json["files"] == 3
    assert sorted(as_json["ignored_paths"]) == [".git/", "cache/", "run.log"]
    assert not (root / "proj").exists()

    real = gputui(gputui_home, "push", "proj", str(proj), "--verbose")
    assert real.returncode == 0, real.stderr
    assert "ignored cache/" in real.stdout and "3 files" in real.stdout
    assert (root / "proj" / "src" / "train.py").exists()
    again = gputui(gputui_home, "push", "proj", str(proj), "--dry-run")
    assert "would send" not in again.stdout and "dry run: 0 files" in again.stdout
    assert "ignored " not in again.stdout  # named only with --verbose


def test_a_failed_run_with_no_output_says_so(gputui_home: Path):
    from tests.cli.test_jobs_cli import create

    create(gputui_home, "quiet")
    assert gputui(gputui_home, "jobs", "quiet", "add", "--", "exit 3").returncode == 0
    end = time.monotonic() + 60
    while time.monotonic() < end:
        runs = json.loads(gputui(gputui_home, "jobs", "quiet", "--json").stdout)
        if runs and runs[0]["status"] == "failed":
            break
        time.sleep(0.3)
    log = gputui(gputui_home, "jobs", "quiet", "log", "1")
    assert log.returncode == 0, log.stderr
    assert log.stdout == ""
    assert log.stderr.strip() == "job 1: no output; exit code 3"
