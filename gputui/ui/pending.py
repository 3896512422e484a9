"""Screens whose full content later work fills in: each says what it will hold."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui.ui.base import BaseScreen


class PendingScreen(BaseScreen):
    BODY = ""
    DEFAULT_CSS = """
    PendingScreen VerticalScroll { padding: 1 2; }
    PendingScreen .what { margin-bottom: 1; }
    """

    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.BODY, classes="what")


class CatalogScreen(PendingScreen):
    TITLE = "GPU catalog"
    BODY = (
        "[b]GPU catalog[/b]\n\nCompare cards by VRAM, memory bandwidth, BF16/FP8 compute, "
        "NVLink vs PCIe and price; check whether a model fits and what the job will cost."
    )
