"""Widgets shared by every screen: the top bar with the running cost meter."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from gputui.format import format_money

MIN_WIDTH, MIN_HEIGHT = 80, 24


class TopBar(Static):
    """Screen title on the left; what is billing now and the local clock on the right."""

    DEFAULT_CSS = """
    TopBar {
        dock: top;
        height: 1;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    """

    title: reactive[str] = reactive("gputui")
    rate: reactive[Decimal] = reactive(Decimal(0))
    accrued: reactive[Decimal] = reactive(Decimal(0))
    billing_count: reactive[int] = reactive(0)
    clock: reactive[str] = reactive("")
    size_note: reactive[str] = reactive("")
    keeper: reactive[str] = reactive("")  # "deadlines kept by the daemon" while one runs
    # ((currency, rate, accrued), ...): one figure per currency, never one sum across them
    by_currency: reactive[tuple[tuple[str, Decimal, Decimal], ...]] = reactive(())
    account: reactive[str] = reactive("")  # "¥312.40 · 38 h at ¥8.20/h" when one is configured

    def render(self) -> Text:
        left = Text.assemble(("gputui", "bold"), " · ", (self.title, "bold"))
        if self.size_note:
            left.append(f"  {self.size_note}", style="bold reverse")
        if not self.billing_count:
            meter = "nothing billing"
        elif len(self.by_currency) > 1 or (self.by_currency and self.by_currency[0][0] != "USD"):
            meter = f"{self.billing_count} live " + " · ".join(
                f"{format_money(r, c)}/h {format_money(a, c)}" for c, r, a in self.by_currency)
        else:
            meter = (f"{self.billing_count} live {format_money(self.rate)}/h · "
                     f"{format_money(self.accrued)} so far")
        account = f"{self.account} · " if self.account else ""
        right = Text(f"{account}{meter} · {self.clock}")
        width = self.size.width - 2 if self.size.width else 78
        if self.keeper:
            room = width - left.cell_len - right.cell_len - 1
            keeper = self.keeper if len(self.keeper) + 2 <= room else "daemon ✓"
            if len(keeper) + 2 <= room:
                left.append(f"  {keeper}", style="italic")
        pad = max(1, width - left.cell_len - right.cell_len)
        return Text.assemble(left, " " * pad, right)

    def tick(self, rate: Decimal, accrued: Decimal, count: int, now: datetime,
             by_currency: tuple[tuple[str, Decimal, Decimal], ...] = ()) -> None:
        self.rate, self.accrued, self.billing_count = rate, accrued, count
        self.by_currency = by_currency
        self.clock = now.astimezone().strftime("%H:%M:%S")


def size_note(width: int, height: int) -> str:
    if width >= MIN_WIDTH and height >= MIN_HEIGHT:
        return ""
    return f"⚠ {width}×{height}: needs 80×24"


def show(static: Static, content: Text | str) -> None:
    """Put `content` in `static` only if it differs from what is there, and ask for a new
    layout only when its height can have changed: a layout pass repaints the whole screen,
    which for a monitor redrawn several times a second is most of its cost."""
    text = Text(content) if isinstance(content, str) else content
    old: Text | None = getattr(static, "_gputui_shown", None)
    if old is not None and old == text:
        return
    width = static.content_region.width or static.app.size.width
    lines = len(text.wrap(static.app.console, max(1, width))) if text.plain else 0
    layout = old is None or lines != getattr(static, "_gputui_lines", -1)
    static._gputui_shown = text  # type: ignore[attr-defined]
    static._gputui_lines = lines  # type: ignore[attr-defined]
    static.update(text, layout=layout)
