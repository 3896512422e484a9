"""The session (`Services`) is the one owner of the console's long-lived services (issue 14)."""

from __future__ import annotations

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.services.hub import Services
from gputui.services.leases import session_leases
from gputui.services.telemetry import session_telemetry
from tests.ui.waits import until


async def test_the_console_asks_the_session_for_its_telemetry_and_leases(
        services: Services) -> None:
    app = GpuTuiApp(config=Config(), store=services.store, services=services,
                    remember_theme=False)
    app.freeze_heap = False  # many apps in one test process: never freeze the heap
    async with app.run_test(size=(80, 24)) as pilot:
        # made at mount, on the App's loop, by the session
        await until(pilot, lambda: "telemetry" in app.__dict__, "the console's telemetry")
        telemetry = app.telemetry
        assert telemetry is session_telemetry(services)  # made once: asking again gets it
        assert app.leases is session_leases(services)
        assert not telemetry._closed
    # quitting the console closed the session, and the session closed the streams it owns
    assert telemetry._closed
