"""`?`: every key binding, for the app and the screen underneath."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.keys import format_key
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.i18n import N_, _

_NAMES = {"escape": "esc", "enter": "enter", "space": "space", "tab": "tab"}


def key_label(binding: Binding) -> str:
    """How a binding's keys read: `[`, `?`, `ctrl+s`, `n / esc` (never `left_square_bracket` or
    `n,escape`)."""
    if binding.key_display:
        return binding.key_display
    labels = []
    for key in binding.key.split(","):
        key = key.strip()
        mods, _plus, base = key.rpartition("+")
        name = _NAMES.get(base) or format_key(base)
        if mods:
            name = f"{mods}+{name}"
        labels.append(name)
    return " / ".join(labels)


def describe_bindings(groups: list[tuple[str, list[Binding]]]) -> Text:
    """The keys as plain text (keys like `[` are not read as markup), with the group titles and
    the keys' descriptions (English, marked with N_()) in the language of now."""
    out = Text()
    for title, bindings in groups:
        shown = [b for b in bindings if b.description]
        if not shown:
            continue
        if out:
            out.append("\n\n")
        out.append(_(title), style="bold")
        seen: set[str] = set()
        for b in shown:
            line = f"{key_label(b):<10} {_(b.description)}"
            if line in seen:  # the same key bound twice (app and screen): list it once
                continue
            seen.add(line)
            out.append(f"\n  {line}")
    return out


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", N_("Close")),
        Binding("question_mark", "dismiss", N_("Close"), show=False),
        Binding("q", "dismiss", N_("Close"), show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 78; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    /* the screen's keys beside everyone's: all of them in view at 80×24 */
    HelpScreen Horizontal { height: auto; }
    HelpScreen Horizontal > Static { width: 1fr; height: auto; }
    HelpScreen #help-all { margin-left: 2; }
    """

    def __init__(self, groups: list[tuple[str, list[Binding]]]) -> None:
        super().__init__()
        self.groups = groups

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text.assemble((_("Keys"), "bold"), _("  (esc closes)")))
            with Horizontal():
                # the screen's own keys on the left, the keys that work everywhere on the right
                yield Static(describe_bindings(self.groups[:-1] or self.groups), id="help-text")
                if len(self.groups) > 1:
                    yield Static(describe_bindings(self.groups[-1:]), id="help-all")

    def text(self) -> str:
        """Everything the help says, as plain text (for tests and screen readers)."""
        return "\n".join(str(w.render()) for w in self.query("#help-text, #help-all"))
