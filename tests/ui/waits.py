"""Waiting in Pilot tests: for a condition, never for a fixed time (the machine may be slow)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


async def until(pilot: Any, condition: Callable[[], object], what: str = "the condition",
                timeout: float = 30.0) -> None:
    """Let the app run until `condition()` is true (an exception counts as not yet: a screen
    being composed has no widgets yet); fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as exc:  # noqa: BLE001 - not ready yet
            last = exc
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last: {last!r})" if last else ""))


def on_screen(widget: Any, height: int = 24) -> bool:
    """Whether `widget` is displayed with some of it inside the terminal's rows."""
    region = widget.region
    return bool(widget.display) and region.height > 0 and region.y < height and region.bottom > 0


async def shown(pilot: Any, cls: type, timeout: float = 30.0) -> Any:
    """Wait until the screen on top is a `cls` whose widgets are composed and mounted (a
    screen is on the stack a moment before its children exist), and return it."""
    app = pilot.app

    def ready() -> bool:
        screen = app.screen
        return isinstance(screen, cls) and screen.is_mounted and bool(screen.children) \
            and all(child.is_mounted for child in screen.walk_children())

    await until(pilot, ready, f"a composed {cls.__name__}", timeout)
    return app.screen


async def question(pilot: Any, timeout: float = 30.0) -> str:
    """Wait for a ConfirmScreen's question and return its text."""
    from textual.widgets import Static

    from gputui.ui.dialogs import ConfirmScreen

    screen = await shown(pilot, ConfirmScreen, timeout)
    return str(screen.query_one("#question", Static).render())
