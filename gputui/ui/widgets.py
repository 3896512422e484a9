"""Widgets shared by every screen: the top bar with the running cost meter, the key footer."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.geometry import Region
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Checkbox, Footer, Static
from textual.widgets._footer import FooterKey

from gputui.format import format_money
from gputui.i18n import N_, _, cell_len, current_language

#: an instance's label in a table, at most (cut in the middle, where generated names differ):
#: a long one must not push the status and cost off an 80-column screen
LABEL_CELLS = 20

MIN_WIDTH, MIN_HEIGHT = 80, 24

#: Textual's own key descriptions that reach the footer (it translates every description)
TEXTUAL_KEYS = (N_("Dismiss menu"),)  # a Select's open list


class TickBox(Checkbox):
    """Every tick box of the console: X ticked, blank not. Textual's own keeps a dim X when
    unticked, which the 16-colour and dark themes show as plainly as a tick; this reads the
    same without colour, in every theme."""

    @property
    def BUTTON_INNER(self) -> str:  # type: ignore[override]  # noqa: N802 - Textual's name
        return "X" if self.value else " "


class TopBar(Widget):
    """Screen title on the left; what is billing now and the local clock on the right.

    Drawn line by line: the line before the clock is laid out and styled once, and kept until
    what it says changes; each second only the clock's eight cells are new (Textual's Static
    turns its whole text into content and strips again on every change: a tenth of the
    console's idle CPU on Home)."""

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
    # (repainted by `tick`: only its own cells where the rest of the line is unchanged)
    clock: reactive[str] = reactive("", repaint=False)
    size_note: reactive[str] = reactive("")
    keeper: reactive[str] = reactive("")  # "deadlines kept by the daemon" while one runs
    # ((currency, rate, accrued), ...): one figure per currency, never one sum across them
    by_currency: reactive[tuple[tuple[str, Decimal, Decimal], ...]] = reactive(())
    # (balance, currency) of the provider's wallet when one is configured
    wallet: reactive[tuple[Decimal, str] | None] = reactive(None)

    def _meters(self) -> list[str]:
        """The meter, longest first: with what each currency has cost so far, then its rate
        alone. Each names its figures (a bare "¥0.04" beside a balance reads as either)."""
        if not self.billing_count:
            return [_("nothing billing")]
        if len(self.by_currency) > 1 or (self.by_currency and self.by_currency[0][0] != "USD"):
            full = _("{count} live {figures}").format(count=self.billing_count, figures=" · ".join(
                _("{rate}/h, {accrued} so far").format(rate=format_money(r, c),
                                                      accrued=format_money(a, c))
                for c, r, a in self.by_currency))
            rates = _("{count} live {figures}").format(count=self.billing_count, figures=" · ".join(
                _("{rate}/h").format(rate=format_money(r, c)) for c, r, _a in self.by_currency))
            return [full, rates]
        full = _("{count} live {rate}/h · {accrued} so far").format(
            count=self.billing_count, rate=format_money(self.rate),
            accrued=format_money(self.accrued))
        return [full, _("{count} live {figures}").format(
            count=self.billing_count, figures=_("{rate}/h").format(rate=format_money(self.rate)))]

    def _accounts(self) -> list[str]:
        """The wallet, longest first: "balance ¥312.40 · ≈38 h" (at what bills now in its
        currency), the balance alone, or nothing."""
        if self.wallet is None:
            return [""]
        balance, currency = self.wallet
        head = _("balance {amount}").format(amount=format_money(balance, currency))
        rate = sum((r for c, r, _a in self.by_currency if c == currency), Decimal(0))
        if rate <= 0:
            return [head, ""]
        hours = max(Decimal(0), balance / rate)
        span = (_("{n} h").format(n=int(hours)) if hours >= 1
                else _("{n} min").format(n=int(hours * 60)))
        return [_("{balance} · ≈{span}").format(balance=head, span=span), head, ""]

    def _layout_key(self) -> tuple[object, ...]:
        return (self.title, self.size_note, self.size.width, self.rate, self.accrued,
                self.billing_count, self.by_currency, self.wallet, self.keeper,
                current_language(), len(self.clock))

    def _laid_out(self) -> tuple[Text, str, str]:
        # Each second only the clock changes (always HH:MM:SS, 8 cells): the rest of the line
        # is worked out again only when what it says changes.
        key = self._layout_key()
        cached = getattr(self, "_laid", None)
        if cached is None or cached[0] != key:
            cached = (key, self._lay_out())
            self._laid = cached
        return cached[1]

    def render(self) -> Text:
        """The line as text (what render_line draws, with the widget's colours)."""
        left, pad, right = self._laid_out()
        return Text.assemble(left, pad, right + self.clock)

    _base: Style | None = None
    _head: tuple[tuple[object, ...], list[Segment]] | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None
        self._head = None

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        base = self._base
        if base is None:
            base = self._base = self.rich_style
        if y:
            return Strip.blank(width, base)
        left, pad, right = self._laid_out()
        key = (self._laid[0], width)
        if self._head is None or self._head[0] != key:
            head = [Segment(seg.text, base + seg.style if seg.style else base)
                    for seg in left.render(self.app.console) if seg.text]
            head.append(Segment(pad + right, base))
            self._head = (key, head)
            self._clock_at = sum(seg.cell_length for seg in head)
        return Strip([*self._head[1], Segment(self.clock, base)]).adjust_cell_length(width, base)

    _clock_at = -1  # the cell the clock starts at, as last drawn

    def watch_clock(self, old: str, new: str) -> None:
        """A new second: only the clock's cells are repainted where the line has been drawn,
        the clock keeps its width and fits (the terminal is sent eight cells, not the whole
        line); otherwise the whole line. (Whatever else the line shows is a reactive that
        repaints the whole line when it changes, and a new size repaints it too: the clock's
        cells alone are never all that is asked for when more has changed.)"""
        if (self._head is not None and len(old) == len(new) and 0 <= self._clock_at
                and self._clock_at + len(new) <= self.content_region.width):
            self.refresh(Region(self._clock_at, 0, len(new), 1))
        else:
            self.refresh()

    def _lay_out(self) -> tuple[Text, str, str]:
        """The line laid out for a clock as wide as this one: (left, padding, the right part
        before the clock, which ends the line)."""
        clock = "0" * len(self.clock)
        # the title is the screen's TITLE (English, marked with N_): shown in the language of now
        left = Text.assemble(("gputui", "bold"), " · ", (_(self.title), "bold"))
        if self.size_note:
            left.append(f"  {self.size_note}", style="bold reverse")
        width = self.size.width or 78  # the content width: the padding is already off it
        # the longest whole reading that fits: what has been spent goes first, then the
        # wallet's runway, then its balance — never a figure cut in the middle
        accounts, meters = self._accounts(), self._meters()
        choices = [(a, m) for a in accounts[:-1] for m in dict.fromkeys(meters)]
        choices += [("", m) for m in dict.fromkeys(meters)]
        right = Text("")
        for account, meter in choices:
            right = Text(f"{account} · {meter} · {clock}" if account
                         else f"{meter} · {clock}")
            if left.cell_len + 1 + right.cell_len <= width:
                break
        if self.keeper:
            room = width - left.cell_len - right.cell_len - 1
            keeper = _(self.keeper)
            if cell_len(keeper) + 2 > room:
                keeper = _("daemon ✓")
            if cell_len(keeper) + 2 <= room:
                left.append(f"  {keeper}", style="italic")
        pad = max(1, width - left.cell_len - right.cell_len)
        return left, " " * pad, right.plain[:len(right.plain) - len(clock)]

    def tick(self, rate: Decimal, accrued: Decimal, count: int, now: datetime,
             by_currency: tuple[tuple[str, Decimal, Decimal], ...] = ()) -> None:
        self.rate, self.accrued, self.billing_count = rate, accrued, count
        self.by_currency = by_currency
        self.clock = now.astimezone().strftime("%H:%M:%S")


def size_note(width: int, height: int) -> str:
    if width >= MIN_WIDTH and height >= MIN_HEIGHT:
        return ""
    return _("⚠ {width}×{height}: needs 80×24").format(width=width, height=height)


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


def _key_cells(key: FooterKey) -> int:
    """The cells a compact footer key takes: "k Label" and a space after it."""
    return cell_len(key.key_display) + (1 + cell_len(key.description) if key.description else 0) + 1


class KeyFooter(Footer):
    """The footer, cut by whole keys: the screen's own keys first, then the other screens'
    (the key of the screen on view is left out); what does not fit in the width is dropped
    whole — never a key cut to "m Monito" — and `?` (always first) then reads "More keys"."""

    def compose(self) -> ComposeResult:
        keys = [w for w in super().compose() if isinstance(w, FooterKey)]
        mode = getattr(self.app, "current_mode", None)
        keys = [k for k in keys if k.action != f"app.goto('{mode}')" and k.action != f"goto('{mode}')"]
        for key in keys:  # the screens' descriptions are English, marked with N_()
            key.description = _(key.description)
        width = (self.size.width or self.app.size.width) - 1
        used, kept = 0, []
        for key in keys:
            need = _key_cells(key)
            if used + need > width:
                break
            kept.append(key)
            used += need
        if len(kept) < len(keys):
            for i, key in enumerate(kept):
                if key.key_display == "?":
                    more = FooterKey(key.key, "?", _("More keys"), key.action)
                    more.data_bind(compact=Footer.compact)
                    kept[i] = more
                    extra = cell_len(more.description) - cell_len(key.description)
                    while kept and used + extra > width:
                        used -= _key_cells(kept[-1])
                        kept.pop()
        self.styles.grid_size_columns = max(1, len(kept))
        yield from kept

    def on_resize(self) -> None:
        if getattr(self, "_laid_for", None) != self.size.width:
            self._laid_for = self.size.width
            self._shown_keys: tuple[tuple[str, str, bool], ...] | None = None
            self.call_after_refresh(self.recompose)

    def bindings_changed(self, screen: object) -> None:
        """Recompose only when the keys shown would change: focus moves inside a form change
        the active bindings many times without changing the footer (each recompose mounts
        every key again)."""
        try:
            active = self.screen.active_bindings
        except Exception:  # noqa: BLE001 - not attached yet
            super().bindings_changed(screen)  # type: ignore[arg-type]
            return
        keys = tuple((b.key, _(b.description), enabled) for _n, b, enabled, _t in active.values()
                     if b.show)
        if keys == getattr(self, "_shown_keys", None) and self.is_attached:
            return
        self._shown_keys = keys
        super().bindings_changed(screen)  # type: ignore[arg-type]


class Note(Static):
    """A line that takes no room while it has nothing to say (an error, a progress line)."""

    def __init__(self, content: str = "", **kw) -> None:
        super().__init__(content, **kw)
        self.display = bool(content)

    def update(self, content: object = "", *, layout: bool = True) -> None:  # type: ignore[override]
        super().update(content, layout=layout)  # type: ignore[arg-type]
        text = content.plain if isinstance(content, Text) else str(content)
        self.display = bool(text.strip())
