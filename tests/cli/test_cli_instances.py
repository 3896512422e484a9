"""Commands over the sandbox, as a script would use them."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from gputui.models import utcnow
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True,
                          env=run_gputui_env(home), timeout=timeout, stdin=subprocess.DEVNULL)


def test_the_command_create_names_for_more_time_works_as_printed(gputui_home: Path):
    """`create` ends with how to get more time (`gputui extend NAME 1h`): that command, run as
    printed, moves the release an hour; `--by 30m` (as a renter may say it) works too, and two
    different spans at once are refused with exit 2, nothing moved."""
    import re
    import shlex

    out = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "RTX 3090",
                 "--name", "hint", "--release-after", "90m")
    assert out.returncode == 0, out.stderr
    [command] = re.findall(r"`(gputui extend [^`]+)`", out.stdout + out.stderr)
    [before] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    ext = gputui(gputui_home, *shlex.split(command)[1:])
    assert ext.returncode == 0, ext.stderr
    [after] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    moved = datetime.fromisoformat(after["release_at"]) - datetime.fromisoformat(
        before["release_at"])
    assert moved == timedelta(hours=1)
    assert gputui(gputui_home, "extend", "hint", "--by", "30m").returncode == 0
    both = gputui(gputui_home, "extend", "hint", "2h", "--by", "30m")
    assert both.returncode == 2 and "once" in both.stderr and "Traceback" not in both.stderr
    [last] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert datetime.fromisoformat(last["release_at"]) - datetime.fromisoformat(
        before["release_at"]) == timedelta(minutes=90)


def test_create_ssh_extend_release(gputui_home: Path):
    out = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "RTX 3090",
                 "--count", "2", "--name", "ft", "--release-after", "90m", "--json")
    assert out.returncode == 0, out.stderr
    item = json.loads(out.stdout)
    assert item["name"] == "ft" and item["gpu_count"] == 2 and item["status"] == "running"
    release = datetime.fromisoformat(item["release_at"])
    assert abs((release - utcnow()) - timedelta(minutes=90)) < timedelta(minutes=1)

    # the instance outlives the command that created it
    run = gputui(gputui_home, "ssh", "ft", "--", "nvidia-smi", "-L")
    assert run.returncode == 0 and run.stdout.count("RTX 3090") == 2
    code = gputui(gputui_home, "ssh", "ft", "--", "exit", "7")
    assert code.returncode == 7

    ext = gputui(gputui_home, "extend", "ft", "30m")
    assert ext.returncode == 0 and "on-instance" in ext.stdout and "provider" in ext.stdout
    [listed] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert datetime.fromisoformat(listed["release_at"]) - release == timedelta(minutes=30)

    rel = gputui(gputui_home, "release", "ft", "--json")
    assert rel.returncode == 0
    entry = json.loads(rel.stdout)
    assert entry["end_reason"] == "manual" and entry["gpu_count"] == 2
    assert json.loads(gputui(gputui_home, "instances", "--json").stdout) == []
    assert gputui(gputui_home, "ssh", "ft", "--", "true").returncode == 1


def test_no_timer_needs_confirmation(gputui_home: Path):
    out = gputui(gputui_home, "create", "--gpu", "RTX 4090", "--no-timer")
    assert out.returncode == 2 and "--yes" in out.stderr
    assert json.loads(gputui(gputui_home, "instances", "--json").stdout) == []


def test_bad_input_is_one_line_with_exit_code(gputui_home: Path):
    cases = [
        (["create", "--gpu", "A100"], 2, "ambiguous"),
        (["create", "--gpu", "RTX 9999"], 2, "unknown GPU"),
        (["create", "--provider", "nope", "--gpu", "RTX 4090"], 2, "unknown or disabled provider"),
        (["create", "--gpu", "RTX 4090", "--disk", "0"], 2, "--disk"),
        (["catalog", "--min-vram", "abc"], 2, "--min-vram"),
        (["create", "--gpu", "RTX 4090", "--release-after", "soon"], 2, "--release-after"),
        (["create", "--gpu", "RTX 4090", "--count", "0"], 2, "--count"),
        (["create", "--gpu", "RTX 4090", "--release-at", "25:99"], 2, "--release-at"),
        (["add-ssh", "ssh -p notaport root@host", "--price", "1"], 2, "ssh line"),
        (["add-ssh", "ssh root@host", "--price", "free"], 2, "--price"),
        (["ssh", "nosuch", "--", "true"], 2, "no instance named"),
        (["extend", "nosuch"], 2, "no instance named"),
        (["doctor", "nosuch"], 2, "no instance named"),
        (["smi", "nosuch", "--json"], 2, "no instance named"),
        (["add-ssh", "ssh root@host", "--price", "-1"], 2, "--price"),
    ]
    for args, code, text in cases:
        out = gputui(gputui_home, *args)
        assert out.returncode == code, (args, out.stderr)
        assert text in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
        assert out.stderr.strip().count("\n") == 0, (args, out.stderr)


def test_names_are_unique_among_running_instances(gputui_home: Path):
    first = gputui(gputui_home, "create", "--gpu", "RTX 4090", "--name", "same")
    assert first.returncode == 0, first.stderr
    second = gputui(gputui_home, "create", "--gpu", "RTX 3090", "--name", "same")
    assert second.returncode == 2 and "running already" in second.stderr
    assert [i["name"] for i in json.loads(gputui(gputui_home, "instances", "--json").stdout)] == ["same"]
    assert gputui(gputui_home, "release", "same").returncode == 0
    assert gputui(gputui_home, "create", "--gpu", "RTX 3090", "--name", "same").returncode == 0


def test_output_into_a_closed_pipe_is_not_an_error(gputui_home: Path):
    import sys

    script = f"{sys.executable} -m gputui catalog | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env=run_gputui_env(gputui_home), timeout=60)
    assert out.stdout.strip() == "0" and "internal error" not in out.stderr


def test_reap_releases_overdue_instances_headless(gputui_home: Path):
    from gputui.store import SessionStore

    out = gputui(gputui_home, "create", "--gpu", "RTX 4090", "--name", "late", "--json")
    assert out.returncode == 0, out.stderr
    store = SessionStore(gputui_home / "state.db")
    iid = json.loads(out.stdout)["id"]
    store.update_lease_sync(iid, lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(seconds=5)}))
    reap = gputui(gputui_home, "reap", "--json")
    assert reap.returncode == 0 and json.loads(reap.stdout)["released"] == ["late"]
    again = gputui(gputui_home, "reap", "--json")
    assert json.loads(again.stdout)["released"] == []
    assert [e.end_reason for e in store.ledger_sync()] == ["timer"]


def test_timer_holds_with_no_gputui_running(gputui_home: Path):
    """create --release-after 3s, every gputui process exits, the deadline passes: the platform
    stopped billing at the deadline and the next `gputui instances` shows it released."""
    import time

    out = gputui(gputui_home, "create", "--gpu", "RTX 4090", "--name", "short",
                 "--release-after", "3s", "--json")
    assert out.returncode == 0, out.stderr
    item = json.loads(out.stdout)
    deadline = datetime.fromisoformat(item["release_at"])
    time.sleep(max(0.0, (deadline - utcnow()).total_seconds()) + 1.0)
    listed = json.loads(gputui(gputui_home, "instances", "--json", "--all").stdout)
    [short] = [i for i in listed if i["name"] == "short"]
    assert short["status"] == "released" and short["end_reason"] == "timer"
    assert datetime.fromisoformat(short["ended_at"]) == deadline
    from gputui.providers.sandbox import PlatformRecord

    record = json.loads((gputui_home / "sandbox" / "platform" / f"{item['id']}.json").read_text())
    assert datetime.fromisoformat(PlatformRecord(**record).terminated_at) == deadline


def test_a_name_made_for_you_is_the_consoles_and_can_be_typed_in_a_shell(gputui_home: Path):
    """No --name: the card's short name, as the console's New makes it (4090d, then 4090d-2) —
    never the card's whole name, whose "(China SKU)" made the suggested `gputui ssh
    rtx-4090-d-(china-sku)-95ed` a bash syntax error."""
    names = []
    for _ in range(2):
        made = gputui(gputui_home, "create", "--gpu", "4090 D", "--json")
        assert made.returncode == 0, made.stderr
        names.append(json.loads(made.stdout)["name"])
    assert names == ["4090d", "4090d-2"]
    said = gputui(gputui_home, "create", "--gpu", "A800")
    assert said.returncode == 0, said.stderr
    suggested = said.stdout.split("`")[1]  # the `gputui ssh NAME` it suggests
    assert suggested == "gputui ssh a800"
    check = subprocess.run(["bash", "-n", "-c", suggested], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
