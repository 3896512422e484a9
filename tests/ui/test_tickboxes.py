"""Issue 29.7: one look for an unticked box everywhere. New's "No timer" and the Budgets
dialog's "Release the instances when a cap is reached" read "▐X▌" with a dim X when unticked in
the dark and 16-colour themes — a tick to the eye — while Ollama's GPU boxes were blank."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from textual.widgets import Checkbox

import gputui.ui
from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.services.hub import Services
from gputui.store import SessionStore
from gputui.ui.create import CreateScreen
from gputui.ui.dialogs import BudgetDialog
from gputui.ui.ollama import GpuCheckbox
from gputui.ui.widgets import TickBox
from tests.ui.waits import shown, until


def box_text(box: Checkbox) -> str:
    """The box and its label as the screen shows them (without colour)."""
    return box.render().plain.rstrip()


@pytest.mark.parametrize("theme", ["gputui-dark", "gputui-16", "gputui-light"])
async def test_an_unticked_box_is_blank_on_new_and_budgets_as_on_ollama(gputui_home: Path,
                                                                       theme: str):
    store = SessionStore(gputui_home / "state.db")
    services = Services(store, Config(), state_dir=gputui_home, sandbox_boot_seconds=0)
    app = GpuTuiApp(config=Config(), store=store, services=services, theme_name=theme,
                    remember_theme=False, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        new = await shown(pilot, CreateScreen)
        box = new.query_one("#no-timer", Checkbox)
        assert box_text(box) == "▐ ▌ No timer"  # unticked: blank, as Ollama's GPU boxes
        box.value = True
        await until(pilot, lambda: box_text(box) == "▐X▌ No timer", "the tick")
        box.value = False
        await until(pilot, lambda: box_text(box) == "▐ ▌ No timer", "no tick")
        await pilot.press("escape")
        await pilot.press("c")
        await until(pilot, lambda: app.screen.TITLE == "Costs", "Costs")
        await pilot.press("B")
        dialog = await shown(pilot, BudgetDialog)
        release = dialog.query_one("#budget-release", Checkbox)
        assert box_text(release) == "▐ ▌ Release the instances when a cap is reached"
        release.value = True
        await until(pilot, lambda: box_text(release).startswith("▐X▌ "), "the tick")
    # Ollama's GPU boxes are the same kind
    assert issubclass(GpuCheckbox, TickBox) and GpuCheckbox("GPU 0", False).BUTTON_INNER == " "


def test_every_tick_box_of_the_console_is_one_kind():
    """A bare Textual Checkbox (dim X when unticked) anywhere in the console would bring the
    two looks back: every box is a TickBox."""
    bare = []
    for path in Path(gputui.ui.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                    "Checkbox", "RadioButton", "Switch"):
                bare.append(f"{path.name}:{node.lineno}")
    assert bare == []
