"""SVG snapshots of every screen at 80×24 in the default theme, with fixed data and a frozen
clock (Home in each theme: test_snapshots.py; the catalog's cards, compare and fit views:
test_catalog_ui.py; Costs: test_costs_ui.py)."""

from __future__ import annotations

import functools
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import BillingRule, Instance, InstanceStatus, ProcessSample
from gputui.services.hub import Services
from gputui.store import SessionStore
from tests.shared import sandbox_xml
from tests.ui.waits import until

FROZEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SIZE = (80, 24)



def plain_app(home: Path) -> GpuTuiApp:
    store = SessionStore(home / "state.db")
    services = Services(store, Config(), state_dir=home, sandbox_boot_seconds=0)
    app = GpuTuiApp(config=Config(), store=store, services=services, remember_theme=False,
                    background=False)
    app.now = lambda: FROZEN
    return app


def test_new_snapshot(snap_compare, gputui_home: Path, utc_clock):
    async def choose(pilot) -> None:
        from textual.widgets import Select

        from gputui.ui.create import CreateScreen

        app = pilot.app
        await until(pilot, lambda: isinstance(app.screen, CreateScreen) and app.screen.offers,
                    "the offers")
        screen = app.screen
        offer = next(o for o in screen.offers if o.gpu == "GeForce RTX 4090")
        screen.query_one("#offer", Select).value = offer.offer_id
        await until(pilot, lambda: "projected cost" in str(screen.query_one("#summary").render()),
                    "the summary")

    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _after_press(pilot, "n", choose))


async def _after_press(pilot, key: str, then) -> None:
    await pilot.press(key)
    await then(pilot)


def test_catalog_cost_tab_snapshot(snap_compare, gputui_home: Path, utc_clock):
    async def cost_tab(pilot) -> None:
        await pilot.press("g")
        await until(pilot, lambda: pilot.app.screen.TITLE == "GPU catalog", "the catalog")
        await pilot.press("4")
        await pilot.pause()

    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE, run_before=cost_tab)


def test_ollama_snapshot_without_an_instance(snap_compare, gputui_home: Path, utc_clock):
    async def ollama(pilot) -> None:
        await pilot.press("o")
        await until(pilot, lambda: pilot.app.screen.TITLE == "Ollama", "Ollama")
        await pilot.pause()

    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE, run_before=ollama)


def test_help_snapshot(snap_compare, gputui_home: Path, utc_clock):
    async def help_on_monitor(pilot) -> None:
        from gputui.ui.help import HelpScreen

        await pilot.press("m")
        await until(pilot, lambda: pilot.app.screen.TITLE == "Monitor", "Monitor")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), "help")
        await pilot.pause()

    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE, run_before=help_on_monitor)


def _monitor_app(home: Path) -> GpuTuiApp:
    from gputui.services.telemetry import TelemetryService
    from gputui.ui.monitor import MonitorScreen

    store = SessionStore(home / "state.db")
    services = Services(store, Config(), state_dir=home, sandbox_boot_seconds=0)
    store.put_instance_sync(Instance(
        id="fixed", name="qwen-lora", provider="ssh", gpu="NVIDIA GeForce RTX 4090", gpu_count=1,
        billing=BillingRule(price_per_hour=Decimal("0.35")), status=InstanceStatus.RUNNING,
        created_at=FROZEN, running_since=FROZEN))
    telemetry = TelemetryService(services, store, interval=1.0, clock=lambda: 0.0)

    class Monitored(GpuTuiApp):
        MODES = {**GpuTuiApp.MODES, "monitor": MonitorScreen}

        async def on_unmount(self) -> None:
            await telemetry.close()
            await super().on_unmount()

    app = Monitored(config=Config(), store=store, services=services, remember_theme=False,
                    background=False)
    app.telemetry = telemetry  # type: ignore[misc]
    app.now = lambda: FROZEN
    return app


@functools.cache
def _fixed_xml() -> str:
    """One busy RTX 4090 as the sandbox's own nvidia-smi reports it at a fixed time."""
    with tempfile.TemporaryDirectory() as folder:
        return sandbox_xml(Path(folder))


async def _monitor(pilot, detail: bool) -> None:
    from gputui.nvidia.nvsmi import parse_xml, xml_samples

    app = pilot.app
    xml = _fixed_xml()
    procs = [ProcessSample(pid=4242, gpu_index=0, used_memory_mib=10240, name="python train.py",
                           user="root")]
    app.telemetry.ingest("fixed", xml_samples(xml), processes=procs, inventory=parse_xml(xml))
    await pilot.press("m")
    await until(pilot, lambda: app.screen.TITLE == "Monitor"
                and "fixed/0" in app.screen.query_one("#gpus").rows, "the GPU row")
    if detail:
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.detail.panels, "the GPU panel")
    await pilot.pause(0.3)


def test_monitor_overview_snapshot(snap_compare, gputui_home: Path, utc_clock):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _monitor(pilot, detail=False))


def test_monitor_detail_snapshot(snap_compare, gputui_home: Path, utc_clock):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _monitor(pilot, detail=True))


def test_jobs_snapshot_without_an_instance(snap_compare, gputui_home: Path, utc_clock):
    async def jobs(pilot) -> None:
        from gputui.app import SCREENS, screen_class

        cls = screen_class(next(spec for mode, _k, _l, spec, _w in SCREENS if mode == "jobs"))
        await pilot.press("j")
        await until(pilot, lambda: isinstance(pilot.app.screen, cls), "Jobs")
        await pilot.pause()

    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE, run_before=jobs)
