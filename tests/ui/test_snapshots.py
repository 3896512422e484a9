"""Snapshots of the home screen in each theme, at 80×24, with fixed data and a frozen clock."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import BillingRule, Granularity, Instance, InstanceStatus, Lease
from gputui.store import SessionStore

FROZEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)



def app_with_data(home: Path, theme: str | None = None) -> GpuTuiApp:
    """Home with two sandbox instances (one with a timer, one without), the clock frozen."""
    store = SessionStore(home / "state.db")
    t0 = datetime(2026, 11, 29, 10, 15, tzinfo=UTC)
    rows = [
        ("a1", "qwen-lora", "GeForce RTX 4090", 1, "0.34", "2026-11-29T13:45:00+00:00"),
        ("a2", "llama70b-serve", "H100 SXM", 2, "5.38", None),
    ]
    for iid, name, gpu, count, price, release in rows:
        store.put_instance_sync(Instance(
            id=iid, name=name, provider="sandbox", gpu=gpu, gpu_count=count,
            billing=BillingRule(price_per_hour=Decimal(price), granularity=Granularity.MINUTE),
            status=InstanceStatus.RUNNING, created_at=t0, running_since=t0,
        ))
        store.put_lease_sync(Lease(
            instance_id=iid,
            release_at=datetime.fromisoformat(release) if release else None,
            no_timer_confirmed=release is None,
        ))
    app = GpuTuiApp(config=Config(), store=store, theme_name=theme, remember_theme=False,
                    background=False)
    app.now = lambda: FROZEN
    return app


@pytest.mark.parametrize("theme", ["gputui-dark", "gputui-light", "gputui-16"])
def test_home_snapshot(snap_compare, gputui_home: Path, utc_clock, theme: str):
    assert snap_compare(app_with_data(gputui_home, theme), terminal_size=(80, 24))


def test_empty_home_snapshot(snap_compare, gputui_home: Path, utc_clock):
    store = SessionStore(gputui_home / "state.db")
    app = GpuTuiApp(config=Config(), store=store, remember_theme=False, background=False)
    app.now = lambda: FROZEN
    assert snap_compare(app, terminal_size=(80, 24))
