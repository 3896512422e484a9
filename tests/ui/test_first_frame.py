"""The console draws its first frame before it opens the session (config.toml, the state
database, the services: pydantic and all), then fills in; a broken config.toml still ends
it with one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from textual.widgets import DataTable, Static

from gputui import cli
from gputui.app import GpuTuiApp
from gputui.models import BillingRule, Instance, InstanceStatus
from gputui.store import SessionStore
from tests.conftest import REPO, run_gputui_env
from tests.ui.waits import until

# What the console has loaded when its first frame has been drawn (a callback after the
# first refresh, queued before the App's own).
PROBE = """
import sys
from gputui.app import GpuTuiApp

class Probe(GpuTuiApp):
    def on_mount(self):
        self.call_after_refresh(self.probe)
        super().on_mount()

    def probe(self):
        assert self.screen.query_one("#topbar") is not None
        self.loaded_at_first_frame = sorted(
            m for m in ("pydantic", "gputui.config", "gputui.store", "gputui.models",
                        "gputui.services.hub") if m in sys.modules)

async def auto(pilot):
    app = pilot.app
    while not app.session_open:
        await pilot.pause()
    print("first frame:", ",".join(app.loaded_at_first_frame) or "-")
    print("session open:", "pydantic" in sys.modules)
    app.exit()

Probe(background=False).run(headless=True, size=(80, 24), auto_pilot=auto)
"""


def test_first_frame_does_not_wait_for_the_session(gputui_home: Path):
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=run_gputui_env(gputui_home),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "first frame: -\n" in out.stdout, out.stdout  # none of them yet
    assert "session open: True" in out.stdout


async def test_home_fills_in_once_the_session_is_open(gputui_home: Path):
    now = datetime.now(UTC)
    store = SessionStore(gputui_home / "state.db")
    store.put_instance_sync(Instance(
        id="i-1", name="qwen-lora", provider="ssh", gpu="NVIDIA GeForce RTX 4090", gpu_count=1,
        billing=BillingRule(price_per_hour=Decimal("0.35")), status=InstanceStatus.RUNNING,
        created_at=now, running_since=now))
    store.close()
    app = GpuTuiApp(remember_theme=False, background=False)  # as `gputui` starts it
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: app.session_open and table.row_count == 1, "the row")
        assert "qwen-lora" in str(table.get_row("i-1")[0])
        # the empty-state hint was never shown for a home that has an instance
        assert not app.screen.query_one("#hint", Static).display


async def test_home_says_it_is_empty_once_read(gputui_home: Path):
    app = GpuTuiApp(remember_theme=False, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        hint = app.screen.query_one("#hint", Static)
        await until(pilot, lambda: app.session_open and hint.display, "the empty-state hint")
        assert "No instances yet" in str(hint.render())


def test_a_broken_config_ends_the_console_with_one_line(gputui_home: Path, monkeypatch, capsys):
    gputui_home.mkdir(parents=True, exist_ok=True)
    (gputui_home / "config.toml").write_text('[lease]\ndefault = "forever"\n', encoding="utf-8")
    run = GpuTuiApp.run

    def headless(self, **kwargs):  # no terminal under pytest
        return run(self, headless=True, size=(80, 24))

    monkeypatch.setattr(GpuTuiApp, "run", headless)
    assert cli.main(["--lang", "en"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.toml" in err[0] and "lease" in err[0], err


def test_full_collections_wait_for_a_quiet_keyboard(gputui_home: Path, monkeypatch):
    """The console turns Python's own full garbage collections off and runs them from its 1 s
    tick once no key has come for a while (a 13-57 ms pass in the middle of a screen switch
    was what made the worst switches slow), and at least every minute."""
    import gc

    from gputui.app import GpuTuiApp

    thresholds = gc.get_threshold()
    full: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(1)

    app = GpuTuiApp(remember_theme=False, background=False)
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    gc.callbacks.append(count)
    try:
        app.collect_when_idle()
        assert gc.get_threshold()[2] >= 1_000_000  # Python's own full passes: off
        app._last_key = clock[0] - 0.2  # typing
        clock[0] += app.COLLECT_AT_MOST_EVERY + 1
        app._last_key = clock[0] - 0.2
        app._idle_collect()
        assert not full  # a key just came: not now
        clock[0] += 1.6  # quiet
        app._idle_collect()
        assert len(full) == 1
        clock[0] += app.COLLECT_AT_MOST_EVERY - 5
        app._idle_collect()
        assert len(full) == 1  # at most every COLLECT_AT_MOST_EVERY s
        clock[0] += 6
        app._idle_collect()
        assert len(full) == 2  # quiet, and that long since the last one
        for _ in range(61):  # a minute of typing still gets one
            clock[0] += 1
            app._last_key = clock[0]
            app._idle_collect()
        assert len(full) == 3
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
