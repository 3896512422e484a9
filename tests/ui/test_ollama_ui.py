"""The Ollama screen, driven by keyboard only at 80×24 with Pilot, against a sandbox instance
over real SSH."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, DataTable, ProgressBar, Static

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import Instance
from gputui.providers.base import CreateRequest
from gputui.sandbox.shims import state
from gputui.services.hub import ServiceError, Services
from gputui.store import SessionStore
from gputui.ui.dialogs import ConfirmScreen
from gputui.ui.ollama import (
    OllamaScreen,
    env_line,
    fmt_until,
    installed_rows,
    running_rows,
    server_line,
)
from tests.ui.waits import question, shown, until


class OllamaApp(GpuTuiApp):
    MODES = {**GpuTuiApp.MODES, "ollama": OllamaScreen}


@pytest.fixture
async def services(gputui_home: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Services]:
    monkeypatch.setitem(state.SHIMS, "ollama", "ollama_shim")
    monkeypatch.setenv("GPUTUI_SANDBOX_OLLAMA_TIME_SCALE", "0.2")
    for name in ("OLLAMA_HOST", "CUDA_VISIBLE_DEVICES", "OLLAMA_KEEP_ALIVE"):
        monkeypatch.delenv(name, raising=False)
    store = SessionStore(gputui_home / "state.db")
    hub = Services(store, Config(), state_dir=gputui_home, sandbox_boot_seconds=0,
                   link_options={"connect_timeout": 5.0})
    yield hub
    for inst in store.instances_sync(live_only=True):
        try:
            await hub.release(inst, "manual")
        except ServiceError:
            pass
    await hub.close()


async def rent(hub: Services, count: int) -> Instance:
    offer = await hub.find_offer("sandbox", "RTX 4090")
    return await hub.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id,
                                                            gpu_count=count, name=hub.free_name("llm")))


async def settle(app: GpuTuiApp, pilot: Pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def tab_to(app: GpuTuiApp, pilot: Pilot, widget_id: str, *, back: bool = False) -> None:
    for _ in range(12):
        if app.focused is not None and app.focused.id == widget_id:
            return
        await pilot.press("shift+tab" if back else "tab")
    raise AssertionError(f"tab never reached #{widget_id} (focused: {app.focused})")


def text(screen: OllamaScreen, wid: str) -> str:
    return str(screen.query_one(wid, Static).render())


async def test_keyboard_only_at_80x24(services: Services):
    inst = await rent(services, 2)
    app = OllamaApp(config=Config(), store=services.store, services=services, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("o")
        screen = await shown(pilot, OllamaScreen)
        await settle(app, pilot)
        assert screen.instance is not None
        assert screen.instance.id == inst.id
        assert "stopped" in text(screen, "#server")
        # s starts the server
        await pilot.press("s")
        await settle(app, pilot)
        assert "running" in text(screen, "#server") and "v0.6.5" in text(screen, "#server")
        boxes = list(screen.query("#gpus Checkbox").results(Checkbox))
        assert [b.value for b in boxes] == [True, True]  # CUDA_VISIBLE_DEVICES unset: all
        assert "RTX 4090" in str(boxes[1].label) and "free" in str(boxes[1].label)
        # untick GPU 0, apply: asked first (a restart unloads the running models)
        await tab_to(app, pilot, "gpu-0")
        await pilot.press("space")
        assert str(boxes[0].render()).startswith("▐ ▌")  # unticked reads without colour
        assert str(boxes[1].render()).startswith("▐X▌")
        await pilot.press("a")
        assert "nothing is lost" in await question(pilot)
        await pilot.press("y")
        await until(pilot, lambda: screen.ollama_status is not None
                    and screen.ollama_status.selected == [1])
        await settle(app, pilot)
        assert "CUDA_VISIBLE_DEVICES=GPU-" in text(screen, "#env")
        # p: type a model, enter pulls it (a live bar while it runs)
        await pilot.press("p")
        assert app.focused is not None and app.focused.id == "model"
        await pilot.press(*"qwen2.5:0.5b", "enter")
        await until(pilot, lambda: "qwen2.5:0.5b" in screen.rows("#installed"))
        await settle(app, pilot)
        assert screen.rows("#installed")["qwen2.5:0.5b"]["size"] == "379 MiB"
        assert not screen.query_one("#progress", ProgressBar).display
        # l loads the model under the cursor; placement is checked against the selection
        await tab_to(app, pilot, "installed")
        await pilot.press("l")
        await until(pilot, lambda: "qwen2.5:0.5b" in screen.rows("#running"))
        await settle(app, pilot)
        assert "as selected (GPUs 1)" in text(screen, "#message")
        assert screen.rows("#running")["qwen2.5:0.5b"]["share"] == "100% GPU"
        # a refresh updates rows in place: same keys, cursor kept
        installed = screen.query_one("#installed", DataTable)
        keys_before = list(installed.rows)
        await pilot.press("r")
        await settle(app, pilot)
        assert list(installed.rows) == keys_before and installed.cursor_row == 0
        # everything the screen needs is on the 80×24 screen
        for wid in ("#server", "#gpus", "#installed", "#running", "#pullrow", "#message"):
            region = screen.query_one(wid).region
            assert region.height > 0 and region.bottom <= 23, wid
        # u unloads, d deletes (asked first; n keeps it)
        await tab_to(app, pilot, "running")
        await pilot.press("u")
        await until(pilot, lambda: not screen.rows("#running"))
        await settle(app, pilot)
        await tab_to(app, pilot, "installed", back=True)
        await pilot.press("d")
        await shown(pilot, ConfirmScreen)
        await pilot.press("n")
        await settle(app, pilot)
        assert "qwen2.5:0.5b" in screen.rows("#installed")
        await pilot.press("d")
        await shown(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: not screen.rows("#installed"))
        await settle(app, pilot)


async def test_pull_cancel_and_a_load_that_would_not_fit(services: Services,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPUTUI_SANDBOX_OLLAMA_TIME_SCALE", "3")
    inst = await rent(services, 1)
    # another job holds most of the only GPU
    await services.run(inst, "gpu-load --gpus 0 --mem 22G --seconds 120 > /dev/null 2>&1 &")
    app = OllamaApp(config=Config(), store=services.store, services=services, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("o")
        screen = await shown(pilot, OllamaScreen)
        await settle(app, pilot)
        await pilot.press("s")
        await settle(app, pilot)
        assert "running" in text(screen, "#server")
        # a pull that would not fit the free memory asks first; x cancels it while it runs
        await pilot.press("p", *"qwen2.5:7b", "enter")
        assert "needs about" in await question(pilot)
        await pilot.press("y")
        bar = screen.query_one("#progress", ProgressBar)
        await until(pilot, lambda: bar.display and (bar.progress or 0) > 0)
        await pilot.press("x")
        await until(pilot, lambda: "cancelled" in text(screen, "#message"))
        await settle(app, pilot)
        assert not bar.display and "qwen2.5:7b" not in screen.rows("#installed")
        # a small model fits the pull check but, with the GPU nearly full, not the load
        await pilot.press("p", *"qwen2.5:3b", "enter")
        await shown(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: "qwen2.5:3b" in screen.rows("#installed"), timeout=20)
        await settle(app, pilot)
        await tab_to(app, pilot, "installed")
        await pilot.press("l")
        asked = await question(pilot)
        assert "qwen2.5:3b needs about" in asked and "Load qwen2.5:3b anyway?" in asked
        await pilot.press("n")
        await settle(app, pilot)
        assert "Would not fit" in text(screen, "#message") and not screen.rows("#running")


def test_rendering_helpers():
    from gputui.remote.ollama_client import InstalledModel, RunningModel

    now = datetime.now(UTC)
    rows = installed_rows([InstalledModel("qwen2.5:7b", 4_683_087_332, "d",
                                          now - timedelta(minutes=5), "qwen2", "7.6B",
                                          "Q4_K_M")], now.timestamp())
    assert rows == {"qwen2.5:7b": {"name": "qwen2.5:7b", "size": "4.4 GiB", "quant": "Q4_K_M",
                                   "family": "qwen2", "modified": "5m ago"}}
    run = running_rows([RunningModel("m", 10_000, 4_000, expires_at=now + timedelta(minutes=4))],
                       now.timestamp())
    assert run["m"]["share"] == "60%/40% CPU/GPU" and run["m"]["until"].startswith("3m") or \
        run["m"]["until"].startswith("4m")
    assert fmt_until(now + timedelta(days=365 * 200), now.timestamp()) == "forever"
    assert server_line(None) == "Server: …" and env_line(None) == ""
