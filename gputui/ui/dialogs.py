"""Small dialogs: a yes/no question, the release timer, adding a host rented elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from gputui.format import format_remaining
from gputui.i18n import N_, _, shown


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; `y` or enter confirms, `n` or escape declines."""

    BINDINGS = [
        Binding("y", "answer(True)", N_("Yes")),
        Binding("n,escape", "answer(False)", N_("No")),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > VerticalScroll {
        width: 64; max-width: 100%; height: auto; border: thick $warning;
        background: $surface; padding: 1 2;
    }
    ConfirmScreen Horizontal { height: auto; margin-top: 1; }
    ConfirmScreen Button { margin-right: 2; }
    """

    def __init__(self, question: str, yes: str = N_("Yes"), no: str = N_("No")) -> None:
        """`yes` and `no` are the buttons' words, translated or marked with N_()."""
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.question, id="question")
            with Horizontal():
                yield Button(f"{_(self.yes)} (y)", variant="warning", id="yes")
                yield Button(f"{_(self.no)} (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class TimerDialog(ModalScreen[object]):
    """Set a new release time: `2h` / `90m` from now, a clock time `18:30`, or `none`.

    Dismisses with a datetime (UTC), the string "none" (confirmed), or None (cancelled).
    """

    BINDINGS = [Binding("escape", "dismiss(None)", N_("Cancel"))]
    DEFAULT_CSS = """
    TimerDialog { align: center middle; }
    TimerDialog > VerticalScroll {
        width: 64; max-width: 100%; height: auto; border: round $primary;
        background: $surface; padding: 1 2;
    }
    TimerDialog #timer-error { color: $error; height: auto; }
    """

    def __init__(self, name: str, current: datetime | None, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.inst_name, self.current, self.now = name, current, now
        self._none_pending = False
        self._tomorrow_pending: str | None = None

    def compose(self) -> ComposeResult:
        left = (format_remaining((self.current - self.now()).total_seconds())
                if self.current else _("no timer"))
        with VerticalScroll():
            yield Static(_("[b]Release timer for {name}[/b] (now: {left})\n"
                           "Type 2h or 90m from now, a clock time like 18:30, or none.")
                         .format(name=escape(self.inst_name), left=left))
            yield Input(placeholder="2h", id="timer-input")
            yield Static("", id="timer-error")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:

        text = event.value.strip().lower()
        error = self.query_one("#timer-error", Static)
        if text in ("none", "off", "no"):
            if not self._none_pending:
                self._none_pending = True
                error.update(_("No timer means it bills until you release it by hand. "
                               "Press enter again to confirm."))
                return
            self.dismiss("none")
            return
        self._none_pending = False
        now = self.now()
        try:
            at = parse_release(text, now)
        except ValueError as exc:
            error.update(escape(str(shown(exc))))
            return
        passed = passed_clock_time(text, at, now)
        if passed and self._tomorrow_pending != text:
            # 13:09 typed at 13:10 is a day of billing away: say which day before taking it
            self._tomorrow_pending = text
            error.update(_("{problem}. Press enter again to confirm.").format(problem=escape(passed)))
            return
        self.dismiss(at)


class AddHostDialog(ModalScreen[dict | None]):
    """Add an instance rented elsewhere: its ssh line as the platform gives it, and its price."""

    BINDINGS = [Binding("escape", "dismiss(None)", N_("Cancel"))]
    DEFAULT_CSS = """
    AddHostDialog { align: center middle; }
    AddHostDialog > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 100%; border: round $primary;
        background: $surface; padding: 0 1;
    }
    AddHostDialog Input, AddHostDialog Select { margin-bottom: 1; }
    AddHostDialog #host-error { color: $error; height: auto; }
    """

    def __init__(self, initial: dict | None = None, error: str | None = None) -> None:
        super().__init__()
        self.initial = initial or {}
        self.first_error = error

    def compose(self) -> ComposeResult:
        from textual.widgets import Select

        with VerticalScroll():
            yield Static(_("[b]Add an instance rented elsewhere[/b] (enter on the last field "
                           "adds it)"))
            yield Input(placeholder=_("ssh -p 2222 root@host  (as the platform gives it)"),
                        id="line", compact=True)
            yield Input(placeholder=_("price per hour for the whole instance, e.g. 2.50"),
                        id="price", compact=True)
            yield Select([(_("billed per second"), "second"), (_("billed per minute"), "minute"),
                          (_("billed per started hour"), "hour")], value="second", id="per",
                         allow_blank=False, compact=True)
            yield Input(placeholder=_("task label (optional)"), id="name", compact=True)
            yield Input(placeholder=_("GPU model (optional: detected with nvidia-smi -L)"),
                        id="gpu", compact=True)
            yield Static("", id="host-error")

    def on_mount(self) -> None:
        from textual.widgets import Select

        for key in ("line", "price", "name", "gpu"):
            value = self.initial.get(key)
            if value is not None:
                self.query_one(f"#{key}", Input).value = str(value)
        if self.initial.get("per"):
            self.query_one("#per", Select).value = self.initial["per"]
        if self.first_error:
            self.query_one("#host-error", Static).update(escape(self.first_error))
        self.query_one("#line", Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "gpu":
            self.focus_next()
            return
        from decimal import Decimal, InvalidOperation

        from textual.widgets import Select

        from gputui.services.hosts import parse_ssh_line

        error = self.query_one("#host-error", Static)
        try:
            endpoint = parse_ssh_line(self.query_one("#line", Input).value)
        except ValueError as exc:
            error.update(_("ssh line: {problem}").format(problem=escape(str(shown(exc)))))
            return
        typed = self.query_one("#price", Input).value.strip().lstrip("$")
        try:
            price = Decimal(typed)
            if not price.is_finite():
                raise InvalidOperation
        except InvalidOperation:
            error.update(Text(_("price: {typed} is not a number; give the hourly price for "
                                "the whole instance, e.g. 2.50").format(typed=repr(typed))
                              if typed else
                              _("price: give the hourly price for the whole instance, e.g. 2.50")))
            return
        if price <= 0:
            error.update(Text(_("price: {typed} is not a price; it must be more than 0 "
                                "(the hourly price, e.g. 2.50)").format(typed=typed)))
            return
        if price > 10_000:
            error.update(Text(_("price: {typed} an hour is too high to be right; at most 10,000")
                              .format(typed=typed)))
            return
        self.dismiss({
            "line": self.query_one("#line", Input).value, "endpoint": endpoint, "price": price,
            "per": self.query_one("#per", Select).value,
            "name": self.query_one("#name", Input).value.strip() or None,
            "gpu": self.query_one("#gpu", Input).value.strip() or None,
        })


class BudgetDialog(ModalScreen[dict | None]):
    """The budget caps: daily, monthly, per instance (blank: no cap), and whether reaching a
    cap releases. Dismisses with the parsed values, or None."""

    BINDINGS = [Binding("escape", "dismiss(None)", N_("Cancel"))]
    DEFAULT_CSS = """
    BudgetDialog { align: center middle; }
    BudgetDialog > VerticalScroll {
        width: 70; max-width: 100%; height: auto; max-height: 100%; border: round $primary;
        background: $surface; padding: 0 1;
    }
    BudgetDialog Horizontal { height: 1; margin-bottom: 1; }
    BudgetDialog Horizontal > Static { width: 22; }
    BudgetDialog Input { width: 1fr; }
    BudgetDialog #budget-error { color: $error; text-style: bold; height: auto; }
    """
    FIELDS = (("daily", N_("Per day")), ("monthly", N_("Per month")),
              ("per_instance", N_("Per instance")))

    def __init__(self, current: object, currency: str = "USD") -> None:
        super().__init__()
        self.current = current
        self.currency = currency

    def compose(self) -> ComposeResult:
        from gputui.ui.widgets import TickBox

        with VerticalScroll():
            yield Static(Text.assemble((_("Budget caps"), "bold"),
                                       _(" in {currency} (blank: no cap; enter saves to "
                                         "config.toml, esc cancels)").format(currency=self.currency),
                                       "\n"))
            for key, label in self.FIELDS:
                with Horizontal():
                    yield Static(_(label))
                    value = getattr(self.current, key, None)
                    yield Input("" if value is None else f"{value}", id=f"budget-{key}",
                                compact=True, placeholder=_("no cap"))
            yield TickBox(_("Release the instances when a cap is reached"), id="budget-release",
                          value=bool(getattr(self.current, "release_at_cap", False)),
                          compact=True)
            yield Static("", id="budget-error")

    def on_mount(self) -> None:
        self.query_one(f"#budget-{self.FIELDS[0][0]}", Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        from decimal import Decimal, InvalidOperation

        from textual.widgets import Checkbox

        values: dict[str, object] = {}
        for key, label in self.FIELDS:
            text = self.query_one(f"#budget-{key}", Input).value.strip().lstrip("$")
            if not text:
                values[key] = None
                continue
            try:
                amount = Decimal(text)
                if not amount.is_finite() or amount <= 0:
                    raise InvalidOperation
            except InvalidOperation:
                self.query_one("#budget-error", Static).update(Text(
                    _("{field}: {typed} is not a cap; give an amount above 0, e.g. 25, "
                      "or leave it blank for no cap").format(field=_(label), typed=repr(text))))
                self.query_one(f"#budget-{key}", Input).focus()
                return
            values[key] = amount
        values["release_at_cap"] = self.query_one("#budget-release", Checkbox).value
        self.dismiss(values)


def on_answer(act: Callable[[Any], object]) -> Callable[[Any], None]:
    """A dialog's callback: `act(answer)` when the dialog gave one (a True, a filled form);
    nothing when it was dismissed. A worker `act` starts runs on its own."""

    def callback(answer: Any) -> None:
        if answer:
            act(answer)

    return callback


def parse_release(text: str, now: datetime) -> datetime:
    """`2h`, `90m`, `1h30m` from now, or a local clock time `18:30` (tomorrow if past: callers
    ask first, see `passed_clock_time`)."""
    raw = text.strip()
    if ":" in raw and len(raw) <= 5:
        try:
            hh, mm = (int(x) for x in raw.split(":"))
            local = now.astimezone().replace(hour=hh, minute=mm, second=0, microsecond=0)
        except ValueError:
            raise ValueError(_("{typed} is not a clock time (try 18:30)").format(
                typed=repr(raw))) from None
        if local <= now:
            local += timedelta(days=1)
        from gputui.models import as_utc

        return as_utc(local)
    from gputui.config import parse_duration

    delta = parse_duration(raw)
    if delta < timedelta(minutes=1):
        raise ValueError(_("the timer must be at least 1 minute"))
    if delta > timedelta(days=366):
        raise ValueError(_("the timer must be under a year"))
    return now + delta


def passed_clock_time(text: str, at: datetime, now: datetime) -> str | None:
    """When `text` was a clock time that has already passed today, the sentence that says so and
    names the day it now means (`None` otherwise): 13:09 typed at 13:10 is a day of billing."""
    raw = text.strip()
    if ":" not in raw or at.astimezone().date() == now.astimezone().date():
        return None
    local = at.astimezone()
    return _("{clock} has passed today (it is {now}): that means tomorrow, {day} {time}, "
             "{left} from now").format(
        clock=raw, now=f"{now.astimezone():%H:%M}", day=_("{date:%a %d %b}").format(date=local),
        time=f"{local:%H:%M}", left=format_remaining((at - now).total_seconds()))
