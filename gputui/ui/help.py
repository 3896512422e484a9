"""`?`: every key binding, for the app and the screen underneath."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def _key_label(binding: Binding) -> str:
    return binding.key_display or binding.key.replace("question_mark", "?")


def describe_bindings(groups: list[tuple[str, list[Binding]]]) -> str:
    lines: list[str] = []
    for title, bindings in groups:
        shown = [b for b in bindings if b.description]
        if not shown:
            continue
        lines.append(f"[b]{title}[/b]")
        for b in shown:
            lines.append(f"  {_key_label(b):<10} {b.description}")
        lines.append("")
    return "\n".join(lines).rstrip()


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 72; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, groups: list[tuple[str, list[Binding]]]) -> None:
        super().__init__()
        self.groups = groups

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("[b]Keys[/b]  (esc closes)\n")
            yield Static(describe_bindings(self.groups), id="help-text")
