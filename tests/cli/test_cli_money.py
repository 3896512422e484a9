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
