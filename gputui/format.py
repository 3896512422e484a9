"""How figures read, one copy each: money (always with its currency), countdowns, short GPU
names, names cut to a width. Every screen and command formats through here, so the same value
reads the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from gputui.errors import BadInput
from gputui.i18n import N_, Deferred, _, current_language, shown
from gputui.sanitize import has_control

__all__ = ["CURRENCY_SYMBOLS", "check_label", "default_label", "end_reason_text", "fit_name",
           "format_gib", "format_money", "format_remaining", "local_clock", "round_money", "short_gpu",
           "status_text", "status_word", "end_reason_word", "stored_text", "sum_as_shown",
           "run_given_name", "run_name"]

CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "CNY": "¥", "GBP": "£"}


CENT = Decimal("0.01")
MIB = 1024 * 1024
GIB = 1024 * MIB


def round_money(value: Decimal | float | int) -> Decimal:
    """The one rounding rule for money shown: to the cent, halves up ($0.165 -> $0.17), done
    once on the exact Decimal (a float is read through its shortest repr, never its binary
    expansion)."""
    amount = value if isinstance(value, Decimal) else Decimal(str(value))
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def sum_as_shown(values: Iterable[Decimal | float | int]) -> Decimal:
    """A total that agrees with its column as a reader adds it: the sum of the rounded figures
    ($0.35 + $0.17 + $0.17 reads $0.69, not the $0.68 of the exact sum)."""
    return sum((round_money(v) for v in values), Decimal(0))


def format_money(value: Decimal | float | int, currency: str = "USD") -> str:
    """`$1,234.50`, `¥8.20`; a currency without a symbol reads `12.00 CHF`. Every amount of money
    on a screen or from a command goes through here."""
    symbol = CURRENCY_SYMBOLS.get(currency)
    rounded = round_money(value)
    sign = "-" if rounded < 0 else ""
    amount = f"{abs(rounded):,.2f}"
    return f"{sign}{symbol}{amount}" if symbol else f"{sign}{amount} {currency}"


def format_small_money(value: Decimal | float | int, currency: str = "USD") -> str:
    """`format_money`, but an amount that is not zero never reads as zero: a short run's
    $0.0031 reads `<$0.01` (and a refund `-<$0.01`)."""
    amount = value if isinstance(value, Decimal) else Decimal(str(value))
    if amount != 0 and round_money(amount) == 0:
        cent = format_money(Decimal("0.01"), currency)
        return f"-<{cent}" if amount < 0 else f"<{cent}"
    return format_money(amount, currency)


def format_gib(value: float | None, *, unit: str = "bytes", decimals: int = 1) -> str:
    """GPU memory, one unit everywhere: GiB (what nvidia-smi's MiB add up to, and what a card
    marketed as "24 GB" holds). `unit` is "bytes" or "mib"; unknown reads '?'."""
    if value is None:
        return "?"
    gib = value / 1024 if unit == "mib" else value / GIB
    return f"{gib:,.{decimals}f} GiB"


def format_remaining(seconds: float | None) -> str:
    """A countdown as people read it: 1h 05m, 4m 10s, overdue."""
    if seconds is None:
        return _("no timer")
    if seconds <= 0:
        return _("overdue")
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return _("{d}d {h:02d}h").format(d=d, h=h)
    if h:
        return _("{h}h {m:02d}m").format(h=h, m=m)
    return _("{m}m {s:02d}s").format(m=m, s=s)


def local_clock(at: datetime, now: datetime | None = None) -> str:
    """A moment in local time as a person reads it: `14:30` today, `2025-06-04 14:30` on any
    other day."""
    local = at.astimezone()
    today = (now or datetime.now(UTC)).astimezone().date()
    return f"{local:%H:%M}" if local.date() == today else f"{local:%Y-%m-%d %H:%M}"


def format_elapsed(seconds: float | None) -> str:
    """How long a run took or has run: 4m05s, 1h02m; "-" where unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (_("{h}h{m:02d}m").format(h=h, m=m) if h else
            _("{m}m{s:02d}s").format(m=m, s=s))


_VENDOR_WORDS = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ")


def short_gpu(name: str | None) -> str:
    """A card name for a narrow column, vendor words dropped:
    'NVIDIA GeForce RTX 4090 D (China SKU)' -> 'RTX 4090 D CN'; unknown -> '?'."""
    if not name:
        return "?"
    for word in _VENDOR_WORDS:
        name = name.replace(word, "")
    name = name.replace(" (China SKU)", " CN").replace(" Generation", "")
    return re.sub(r"\s*\(HGX [^)]*\)", "", name).strip()


#: the qualifiers in card names, as a Chinese renter reads them (国内特供版, 魔改)
_GPU_QUALIFIERS = (N_("China SKU"), N_("modified"))


def gpu_name(name: str) -> str:
    """A card's name in the reader's language: 'RTX 4090 D (China SKU)' -> 'RTX 4090 D
    （国内特供版）' in Chinese; the model words stay as the vendor writes them."""
    for word in _GPU_QUALIFIERS:
        if f" ({word})" in name:
            name = name.replace(f" ({word})", _(" ({qualifier})").format(qualifier=_(word)))
    return name


class GpuName(Deferred):
    """A card's name inside a `Deferred` message: English as a string, `gpu_name` when shown."""

    def __new__(cls, name: str, /, **_params: object) -> GpuName:
        return super().__new__(cls, name)  # type: ignore[return-value]

    def translated(self) -> str:
        return gpu_name(str(self))


def default_label(gpu: str) -> str:
    """A task label made from a card's name: its model number and the letter after it, lower
    case ('GeForce RTX 4090' -> '4090', 'RTX 4090 D (China SKU)' -> '4090d', 'H20 96GB (China
    SKU)' -> 'h20'); never a piece of a parenthesis."""
    words = re.sub(r"\([^)]*\)?", " ", short_gpu(gpu)).split()
    for i, word in enumerate(words):
        if any(ch.isdigit() for ch in word) and not word.upper().endswith("GB"):
            label = word
            if i + 1 < len(words) and len(words[i + 1]) == 1 and words[i + 1].isalpha():
                label += words[i + 1]
            return re.sub(r"[^a-z0-9-]", "", label.lower()) or "gpu"
    return re.sub(r"[^a-z0-9]+", "-", " ".join(words).lower()).strip("-") or "gpu"


def fit_name(name: str, width: int) -> str:
    """`name` in `width` cells, cut in the middle: generated names differ at the end
    ("rtx-4090-00d7", "rtx-4090-8c1e"), so the end is what must stay visible. Measured in
    cells: a Chinese character takes two."""
    from gputui.i18n import truncate_cells

    return truncate_cells(name, width, where="middle")


def check_label(text: str, field: str = "--name", limit: int = 64) -> str:
    """A user label as given, or BadInput naming the field (labels refuse on the way in
    what `gputui.sanitize` cleans on the way out): no control characters, not
    empty, at most `limit` characters."""
    if has_control(text):
        raise BadInput(_("{field}: control characters are not allowed in a name").format(
            field=field))
    stripped = text.strip()
    if not stripped:
        raise BadInput(_("{field}: a name cannot be empty").format(field=field))
    if len(stripped) > limit:
        raise BadInput(_("{field}: at most {limit} characters").format(field=field, limit=limit))
    return stripped


# Words stored and printed in JSON/CSV as they are, shown to people in their language.
_STATUS_WORDS = {
    "requested": N_("requested"), "booting": N_("booting"), "running": N_("running"),
    "stopped": N_("stopped"), "releasing": N_("releasing"), "released": N_("released"),
    "failed": N_("failed"),
    # runs (gputui jobs)
    "queued": N_("queued"), "succeeded": N_("succeeded"), "cancelled": N_("cancelled"),
    "lost": N_("lost"),
    "starting": N_("starting"),
    # what a live instance costs now (the Costs screen)
    "billing": N_("billing"), "storage only": N_("storage only"), "ended": N_("ended"),
}
_END_REASONS = {
    "timer": N_("timer"), "idle": N_("idle"), "budget": N_("budget cap"),
    "manual": N_("by hand"), "external": N_("elsewhere"), "failed": N_("failed"),
}


def status_text(status: object) -> str:
    """An instance status (`running`, `released`...) as a person reads it."""
    word = str(getattr(status, "value", status))
    return _(_STATUS_WORDS[word]) if word in _STATUS_WORDS else word


def status_word(status: object) -> Deferred:
    """A status as a `Deferred`: English where it is kept (a log), translated where shown."""
    word = str(getattr(status, "value", status))
    return Deferred(_STATUS_WORDS.get(word, word))


def end_reason_word(reason: object) -> Deferred:
    """An end reason as a `Deferred` (see `status_word`)."""
    word = str(reason or "")
    return Deferred(_END_REASONS.get(word, word))


def end_reason_text(reason: object) -> str:
    """Why a ledger entry ended (`timer`, `manual`...) as a person reads it."""
    word = str(reason or "")
    return _(_END_REASONS[word]) if word in _END_REASONS else word


# Text the store keeps in English (an instance's status detail, written by the services) that
# a person reads: each template is matched against the stored text and shown translated. A
# text that matches none (a provider's own words) is shown as it is.
STORED_TEXTS = (
    N_("launch outcome unknown: looking for it"),
    N_("releasing ({reason})"),
    N_("release failed, retrying: {error}"),
    N_("STILL BILLING — release failed: {error}"),
    N_("launched after all (found by its tag as {pid}); terminated by gputui"),
    N_("never created: {error}"),
    N_("stopped"),
    N_("stopped {gone} · wiped by now"),
    N_("stopped {gone} · wiped in {left}"),
    N_("still costs {price}/h (disk)"),
    N_("{n} d"), N_("{n} h"), N_("{n} min"),
)
_STORED_PATTERNS: list[tuple[str, re.Pattern[str]]] | None = None


def _stored_patterns() -> list[tuple[str, re.Pattern[str]]]:
    global _STORED_PATTERNS
    if _STORED_PATTERNS is None:
        out = []
        for template in STORED_TEXTS:
            parts = re.split(r"\{(\w+)\}", template)
            rx = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>(?:(?! · ).)+?)"
                         for i, p in enumerate(parts))
            out.append((template, re.compile(rx, re.S)))
        _STORED_PATTERNS = out
    return _STORED_PATTERNS


def stored_text(text: object) -> object:
    """English text the store, JSON or a log keeps, as a person reads it in the current
    language: a `Deferred` translates itself; a plain string (read back from the state file)
    is matched against `STORED_TEXTS`, also piece by piece where " · " joins several; a
    status or end reason word is translated as `status_text` does. Anything else is
    returned as it is (a provider's own words stay as the provider wrote them)."""
    if isinstance(text, Deferred):
        if text.template in STORED_TEXTS and text.params:
            return _(text.template).format(**{k: _stored_param(k, str(shown(v)))
                                              for k, v in text.params.items()})
        return text.translated()
    if not isinstance(text, str) or not text or current_language() == "en":
        return text
    # pieces joined by " · " (a template may hold one itself): the longest run that matches
    parts, out, i = text.split(" · "), [], 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            found = _stored_match(" · ".join(parts[i:j]))
            if found is not None:
                out.append(found)
                i = j
                break
        else:
            out.append(parts[i])
            i += 1
    return " · ".join(out)


def _stored_match(text: str) -> str | None:
    warn = text.startswith("⚠ ")
    body = text[2:] if warn else text
    mark = "⚠ " if warn else ""
    for template, rx in _stored_patterns():
        m = rx.fullmatch(body)
        if m is not None:
            params = {k: _stored_param(k, v) for k, v in m.groupdict().items()}
            return mark + _(template).format(**params)
    if body in _STATUS_WORDS:
        return mark + status_text(body)
    if body in _END_REASONS:
        return mark + end_reason_text(body)
    return None


def _stored_param(key: str, value: str) -> str:
    if key == "reason":
        return end_reason_text(value)
    if key in ("gone", "left"):
        return str(stored_text(value))
    return value



def run_given_name(job_id: object, name: str | None) -> str:
    """A queued run's own label, or "" when it was given none (the on-instance runner calls
    such a run "run N", in English: that is no label to repeat — "run run 1 failed")."""
    name = name or ""
    return "" if name == f"run {job_id}" else name


def run_name(job_id: object, name: str | None) -> str:
    """A queued run as a list shows it: its label, or "run N" in the interface's language."""
    return run_given_name(job_id, name) or _("run {n}").format(n=job_id)
