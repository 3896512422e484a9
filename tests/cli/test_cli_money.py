"""Money from the command line reads as on the console: `$0.01`, never `0.01 USD` (issue 16)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from gputui.models import BillingRule, Instance, InstanceStatus, LedgerEntry
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env


def test_costs_lists_money_with_its_symbol(gputui_home: Path):
    store = SessionStore(gputui_home / "state.db")
    t0 = datetime.now(UTC) - timedelta(hours=2)
    ended = Instance(id="old", name="run-1", provider="ssh", gpu="RTX 4090",
                     billing=BillingRule(price_per_hour=Decimal("0.165")), created_at=t0,
                     status=InstanceStatus.RUNNING)
    ended.mark_running(t0)
    ended.mark_ended(t0 + timedelta(hours=1), "manual")
    store.put_instance_sync(ended)
    store.end_instance_sync("old", LedgerEntry.from_instance(ended, "manual", ended.ended_at), ended)
    out = subprocess.run([*GPUTUI, "costs"], env=run_gputui_env(gputui_home), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    import re

    assert not re.search(r"\d USD", out), out  # never "0.17 USD"
    line = next(row for row in out.splitlines() if "run-1" in row)
    assert line.rstrip().endswith("$0.17"), line  # $0.165 rounded once, halves up


def test_small_sums_never_read_zero():
    from gputui.format import format_small_money

    assert format_small_money(Decimal("0.0031")) == "<$0.01"
    assert format_small_money(Decimal("0.0031"), "CNY") == "<¥0.01"
    assert format_small_money(Decimal("-0.004")) == "-<$0.01"
    assert format_small_money(Decimal("0")) == "$0.00"
    assert format_small_money(Decimal("0.005")) == "$0.01"  # the one rounding rule still holds


def test_costs_runs_shows_sub_cent_costs_the_command_the_date_and_attempts(gputui_home: Path):
    """Every short run read $0.00 in `costs --runs`, with no command, date or attempt."""
    from gputui.i18n import cell_len

    store = SessionStore(gputui_home / "state.db")
    start = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    for job, (cost, attempt, retries, command) in enumerate([
            ("0.0031", 2, 2, "python train.py --lr 3e-4 --epochs 3 " + "--flag " * 20),
            ("1.25", 1, 0, "echo done")], 1):
        store.record_run_cost_sync("i1", str(job), {
            "instance_id": "i1", "instance": "sweep", "job_id": str(job), "label": f"run-{job}",
            "command": command, "status": "succeeded", "exit_code": 0, "gpu": "RTX 4090",
            "gpus": None, "gpu_count": 1, "started_at": start.isoformat(),
            "ended_at": (start + timedelta(seconds=11)).isoformat(), "seconds": 11.0,
            "rate_per_hour": "1", "cost": cost, "currency": "USD", "attempt": attempt,
            "retries": retries}, start.timestamp())
    store.close()
    env = {**run_gputui_env(gputui_home), "TZ": "UTC"}
    out = subprocess.run([*GPUTUI, "costs", "--runs"], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if "run-1" in line)
    assert lines[first].rstrip().endswith("<$0.01") and "11-29 12:00" in lines[first]
    assert "0m11s" in lines[first]
    assert lines[first + 1].startswith("  $ python train.py --lr 3e-4")
    assert lines[first + 1].endswith("(attempt 2 of 3)")
    second = next(i for i, line in enumerate(lines) if "run-2" in line)
    assert lines[second].rstrip().endswith("$1.25") and lines[second + 1] == "  $ echo done"
    assert all(cell_len(line) <= 80 for line in lines), [cell_len(line) for line in lines]
