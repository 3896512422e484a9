"""Drill (issue 15, item 10): a powered-off sandbox instance has no live processes, like a real
one — with no gputui process running at its power-off time."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from gputui.models import utcnow
from gputui.sandbox.platform import PlatformRecord
from gputui.sandbox.shims.state import schedule_poweroff
from tests.sandbox.test_sandbox_daemon import (
    create,
    gputui,
    gputui_processes,
    needs_ssh,
    openssh,
    port_of,
    wait_until,
)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


@needs_ssh
def test_a_nohup_job_dies_at_the_power_off_with_no_gputui_running(gputui_home: Path):
    item = create(gputui_home)
    started = openssh(gputui_home, port_of(item),
                      "nohup gpu-load --gpus 0 --mem 1G --util 50 --seconds 600 "
                      ">/dev/null 2>&1 & echo $!")
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split()[-1])
    assert _alive(pid)  # it outlived its ssh session, as a nohup'd job does
    root = gputui_home / "sandbox" / "instances" / item["id"]
    # `shutdown` on the instance, a few seconds ahead (the shim writes exactly this file)
    off_at = utcnow() + timedelta(seconds=2)
    schedule_poweroff(root, off_at, command="shutdown -h +0")
    assert gputui_processes(gputui_home) == []  # nobody is watching
    wait_until(lambda: not _alive(pid), timeout=30, what="the job to die at the power-off")
    assert utcnow() >= off_at
    # the platform's books close the running period at the power-off time, on their own
    record = gputui_home / "sandbox" / "platform" / f"{item['id']}.json"

    def ended() -> str | None:
        return PlatformRecord.from_json(json.loads(record.read_text())).periods[-1][1]

    wait_until(lambda: ended() is not None, timeout=30, what="the platform's books to close")
    assert datetime.fromisoformat(str(ended())) == off_at
    # and the machine answers no more
    assert openssh(gputui_home, port_of(item), "true").returncode != 0
    listed = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert listed[0]["status"] == "stopped"
