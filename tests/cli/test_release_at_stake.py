"""`gputui release` over the sandbox when a release would end something: a running run of the
jobs queue, or results a when-done policy was to bring home. It says so (and asks on a
terminal); scripts and `--json` get exit 2 without `--yes`; a run it kills is recorded as
`cancelled` with its cost in `gputui costs --runs`. With nothing at stake it releases as always.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True,
                          env=run_gputui_env(home), timeout=timeout, stdin=subprocess.DEVNULL)


def create(home: Path, name: str, *gpu: str) -> None:
    out = gputui(home, "create", "--provider", "sandbox", *(gpu or ("--gpu", "RTX 4090")),
                 "--name", name, "--release-after", "2h")
    assert out.returncode == 0, out.stderr


def status(home: Path, name: str) -> str:
    listed = json.loads(gputui(home, "instances", "--all", "--json").stdout)
    return next(i["status"] for i in listed if i["name"] == name)


def on_a_terminal(home: Path, args: list[str], answer: bytes,
                  meanwhile: Callable[[], None] | None = None) -> tuple[int, str]:
    """Run `gputui ARGS` with a terminal for stdin; answer its question (after `meanwhile`)."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen([*GPUTUI, *args], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=run_gputui_env(home))
    os.close(slave)
    try:
        assert proc.stderr is not None
        said = b""
        end = time.monotonic() + 90
        while b"[y/N]" not in said and time.monotonic() < end and proc.poll() is None:
            ready, _, _ = select.select([proc.stderr.fileno()], [], [], 1)
            if ready:
                said += os.read(proc.stderr.fileno(), 4096)
        if meanwhile is not None:
            meanwhile()
        os.write(master, answer)
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, (said + err).decode() + out.decode()


def test_a_running_run_is_named_refused_without_yes_and_recorded_cancelled(gputui_home: Path):
    create(gputui_home, "busy", "--gpu", "A100 80GB SXM4", "--count", "8")  # $22.32/h
    added = gputui(gputui_home, "jobs", "busy", "add", "--name", "train", "--", "sleep 600")
    assert added.returncode == 0, added.stderr
    for _try in range(300):
        [run] = json.loads(gputui(gputui_home, "jobs", "busy", "--json").stdout)
        if run["status"] == "running":
            break
        time.sleep(0.2)
    assert run["status"] == "running"

    for args in (["release", "busy", "--json"], ["release", "busy"]):  # a script: no terminal
        out = gputui(gputui_home, *args)
        assert out.returncode == 2 and out.stdout == "", out.stderr
        [line] = out.stderr.strip().splitlines()
        assert line == ("gputui: busy: 1 run is running (1 train) — a release ends them: add "
                        "--yes to release it anyway"), line
    assert status(gputui_home, "busy") == "running"

    code, said = on_a_terminal(gputui_home, ["release", "busy"], b"n\n")
    assert "busy: 1 run is running (1 train) — a release ends them. Release it anyway? " \
           "[y/N]" in said
    assert code == 1 and "busy is kept: nothing was changed" in said
    assert status(gputui_home, "busy") == "running"
    assert json.loads(gputui(gputui_home, "costs", "--runs", "--json").stdout) == []

    time.sleep(1.0)  # the run has run a while: its cost is not nothing
    gone = gputui(gputui_home, "release", "busy", "--yes", "--json")
    assert gone.returncode == 0, gone.stderr
    entry = json.loads(gone.stdout)
    assert entry["end_reason"] == "manual" and entry["cancelled_runs"] == ["1"]
    assert status(gputui_home, "busy") == "released"
    [row] = json.loads(gputui(gputui_home, "costs", "--runs", "--json").stdout)
    assert row["instance"] == "busy" and row["job_id"] == "1" and row["label"] == "train"
    assert row["status"] == "cancelled" and row["exit_code"] is None
    assert row["seconds"] > 1 and row["currency"] == "USD" and row["rate_per_hour"] == "22.32"
    assert Decimal(row["cost"]) > 0  # its rate over the time it ran, to the release
    assert abs(Decimal(row["cost"]) - Decimal("22.32") * Decimal(str(row["seconds"])) / 3600) \
        <= Decimal("0.01")
    table = gputui(gputui_home, "costs", "--runs")
    assert "cancelled" in table.stdout and "train" in table.stdout


def test_a_yes_on_the_terminal_releases_and_says_what_was_cancelled(gputui_home: Path):
    create(gputui_home, "asked")
    assert gputui(gputui_home, "jobs", "asked", "add", "--name", "eval", "--",
                  "sleep 600").returncode == 0
    for _try in range(300):
        [run] = json.loads(gputui(gputui_home, "jobs", "asked", "--json").stdout)
        if run["status"] == "running":
            break
        time.sleep(0.2)
    code, said = on_a_terminal(gputui_home, ["release", "asked"], b"y\n")
    assert code == 0, said
    assert "released asked:" in said and "run 1 eval: cancelled by the release" in said
    [row] = json.loads(gputui(gputui_home, "costs", "--runs", "--json").stdout)
    assert row["status"] == "cancelled" and row["label"] == "eval"


def test_a_run_that_ends_while_the_question_waits_is_recorded_as_it_ended(gputui_home: Path):
    create(gputui_home, "slow")
    assert gputui(gputui_home, "jobs", "slow", "add", "--name", "short", "--",
                  "while [ ! -f go ]; do sleep 0.1; done").returncode == 0
    for _try in range(300):
        [run] = json.loads(gputui(gputui_home, "jobs", "slow", "--json").stdout)
        if run["status"] == "running":
            break
        time.sleep(0.2)

    def ended() -> None:  # the user thinks; meanwhile the run ends on its own
        assert gputui(gputui_home, "ssh", "slow", "--", "touch go").returncode == 0
        for _try in range(300):
            [run] = json.loads(gputui(gputui_home, "jobs", "slow", "--json").stdout)
            if run["status"] == "succeeded":
                return
            time.sleep(0.2)
        raise AssertionError("the run never ended")

    code, said = on_a_terminal(gputui_home, ["release", "slow"], b"y\n", meanwhile=ended)
    assert "1 run is running (1 short)" in said
    assert code == 0 and "released slow:" in said and "cancelled" not in said, said
    [row] = json.loads(gputui(gputui_home, "costs", "--runs", "--json").stdout)
    assert row["status"] == "succeeded" and row["exit_code"] == 0


def test_results_not_home_are_named_and_nothing_at_stake_releases_as_before(gputui_home: Path,
                                                                           tmp_path: Path):
    create(gputui_home, "waiting")
    wd = gputui(gputui_home, "jobs", "waiting", "when-done", "keep", "--pull", "out",
                "--to", str(tmp_path / "out"))
    assert wd.returncode == 0, wd.stderr
    out = gputui(gputui_home, "release", "waiting")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("gputui: waiting: the results asked for (out) are not home "
                                  "yet — a release ends them: add --yes to release it anyway")
    assert status(gputui_home, "waiting") == "running"
    assert gputui(gputui_home, "release", "waiting", "--yes").returncode == 0
    assert status(gputui_home, "waiting") == "released"

    create(gputui_home, "idle")  # jobs never used: no question, no note, as always
    plain = gputui(gputui_home, "release", "idle")
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert plain.stdout.startswith("released idle: ")
