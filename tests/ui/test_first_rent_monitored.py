"""Issue 16, item 1: the first instance rented from the console is monitored.

The store publishes `InstanceChanged` on the worker thread that wrote the instance; the App
must take it on its own loop (where the telemetry service was made at mount), not drop it."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import Select

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.services.hub import Services
from gputui.store import SessionStore
from gputui.ui.create import CreateScreen
from gputui.ui.livetable import LiveTable
from tests.conftest import FAST_LINKS
from tests.services.test_telemetry_support import wait_for


async def test_first_instance_rented_from_an_empty_console_shows_samples(gputui_home: Path):
    store = SessionStore(gputui_home / "state.db")
    services = Services(store, Config(), state_dir=gputui_home, sandbox_boot_seconds=0,
                        link_options=dict(FAST_LINKS))
    app = GpuTuiApp(config=Config(), store=store, services=services)  # background on
    async with app.run_test(size=(80, 24)) as pilot:
        assert store.instances_sync(live_only=True) == []  # started with no instance
        await pilot.press("n")
        screen = await wait_for(lambda: isinstance(app.screen, CreateScreen)
                                and app.screen.offers and app.screen, timeout=30,
                                what="the New form")
        offer = next(o for o in screen.offers if o.gpu == "GeForce RTX 4090")
        screen.query_one("#offer", Select).value = offer.offer_id
        await pilot.pause()
        await pilot.press("ctrl+s")
        await wait_for(lambda: app.current_mode == "home" and store.instances_sync(live_only=True),
                       timeout=60, what="the instance rented")
        [inst] = store.instances_sync(live_only=True)
        await pilot.press("m")
        table = await wait_for(lambda: app.screen.query("#gpus") and
                               app.screen.query_one("#gpus", LiveTable), what="the monitor")

        def live_row() -> bool:
            if inst.id not in table.rows:
                return False
            return [str(c) for c in table.get_row(inst.id)][-1] == "live"

        await wait_for(live_row, timeout=60, what="samples from the first instance")
        row = [str(c) for c in table.get_row(inst.id)]
        assert "waiting for the first sample" not in " ".join(row)
        assert any(re.fullmatch(r"\d+/450W", cell) for cell in row), row  # a power reading
