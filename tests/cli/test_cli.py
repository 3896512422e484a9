"""The command line: help, version, instances (plain and JSON), exit codes."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from gputui import __version__
from gputui.models import BillingRule, Instance, InstanceStatus, Lease, utcnow
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True,
                          env=run_gputui_env(home), timeout=60)


def test_help_and_version(gputui_home: Path):
    out = gputui(gputui_home, "--help")
    assert out.returncode == 0 and "instances" in out.stdout and "config" in out.stdout
    ver = gputui(gputui_home, "--version")
    assert ver.stdout.strip() == f"gputui {__version__}"


def test_instances_json_empty_then_listed(gputui_home: Path):
    out = gputui(gputui_home, "instances", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == []
    store = SessionStore(gputui_home / "state.db")
    start = utcnow() - timedelta(hours=1)
    store.put_instance_sync(Instance(
        id="abc", name="train", provider="sandbox", gpu="GeForce RTX 4090", gpu_count=2,
        billing=BillingRule(price_per_hour=Decimal("0.80")), status=InstanceStatus.RUNNING,
        created_at=start, running_since=start,
    ))
    release = datetime(2030, 1, 1, tzinfo=UTC)
    store.put_lease_sync(Lease(instance_id="abc", release_at=release))
    out = gputui(gputui_home, "instances", "--json")
    [item] = json.loads(out.stdout)
    assert item["name"] == "train" and item["provider"] == "sandbox"
    assert item["gpu"] == "GeForce RTX 4090" and item["gpu_count"] == 2
    assert item["status"] == "running"
    assert datetime.fromisoformat(item["release_at"]) == release
    assert 0.79 <= item["cost"] <= 0.82  # one hour at $0.80/h
    plain = gputui(gputui_home, "instances")
    assert "train" in plain.stdout and "2× GeForce RTX 4090" in plain.stdout


def test_unknown_command_is_a_usage_error(gputui_home: Path):
    out = gputui(gputui_home, "frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_corrupt_state_is_one_line_and_untouched(gputui_home: Path):
    gputui_home.mkdir(parents=True)
    state = gputui_home / "state.db"
    state.write_bytes(b"garbage" * 50)
    out = gputui(gputui_home, "instances", "--json")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "left untouched" in out.stderr
    assert state.read_bytes() == b"garbage" * 50
