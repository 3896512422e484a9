"""What every nvidia-smi parser shares: the parse error, sanitising, reading values ([N/A], units, timestamps)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, tzinfo

from gputui.errors import BadInput
from gputui.sanitize import sanitize


class NvsmiParseError(BadInput, ValueError):
    """The text is not an nvidia-smi XML report at all (not XML, or another document)."""


# --------------------------------------------------------------------------------------------
# Sanitising
# --------------------------------------------------------------------------------------------

MAX_TEXT_CHARS = 256  # names, process names
MAX_LINE_CHARS = 65536  # one CSV line; the widest real one (241 fields) is about 4 KB
MAX_XML_CHARS = 32 * 1024 * 1024  # an 8-GPU `-q -x` report is well under 1 MB

def _text(value: str | None, limit: int = MAX_TEXT_CHARS) -> str | None:
    """A sanitised string, or None where nvidia-smi says it has no value."""
    raw = _clean(value)
    if raw is None:
        return None
    text = sanitize(raw, limit)
    return text or None


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------

_NA_WORDS = {
    "",
    "n/a",
    "na",
    "not supported",
    "unknown error",
    "err!",
    "-",
    "none",
    "not available",
    "insufficient permissions",
    "gpu is lost",
    "requested functionality has been deprecated",
}
_NUM_RE = re.compile(
    r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,3})?)\s*([A-Za-z%/]{0,8})\s*$"
)
_MEM_FACTORS = {
    "": 1.0,
    "mib": 1.0,
    "mb": 1.0,  # nvidia-smi's "MB" has always meant MiB
    "kib": 1 / 1024,
    "kb": 1 / 1024,
    "gib": 1024.0,
    "gb": 1024.0,
    "b": 1 / (1024 * 1024),
}


def _clean(value: str | None) -> str | None:
    """Strip a raw field; None for nvidia-smi's not-available spellings and bracketed messages."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return None
    if text.lower() in _NA_WORDS:
        return None
    return text


def _num(value: str | None) -> float | None:
    text = _clean(value)
    if text is None or len(text) > 64:
        return None
    m = _NUM_RE.match(text)
    if not m:
        return None
    try:
        number = float(m.group(1))
    except ValueError:  # pragma: no cover - the regex admits only floats
        return None
    if not math.isfinite(number):
        return None
    return number


def _unit(value: str | None) -> str:
    text = _clean(value)
    if text is None:
        return ""
    m = _NUM_RE.match(text)
    return m.group(2).lower() if m else ""


def _mib(value: str | None) -> float | None:
    number = _num(value)
    if number is None:
        return None
    factor = _MEM_FACTORS.get(_unit(value))
    if factor is None:
        return None
    return number * factor


def _watts(value: str | None) -> float | None:
    number = _num(value)
    if number is None:
        return None
    unit = _unit(value)
    if unit == "mw":
        return number / 1000
    if unit == "kw":
        return number * 1000
    return number


def _int(value: str | None) -> int | None:
    number = _num(value)
    if number is None or number != int(number) or abs(number) > 2**62:
        return None
    return int(number)


def _index(value: str | None) -> int | None:
    number = _int(value)
    if number is None or number < 0 or number > 1_000_000:
        return None
    return number


def _pcie_width(value: str | None) -> int | None:
    text = _clean(value)
    if text is None:
        return None
    return _int(text.lower().rstrip("x"))


_TIME_FORMATS = (
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%a %b %d %H:%M:%S %Y",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
)


def _timestamp(value: str | None, tz: tzinfo = UTC) -> datetime | None:
    text = _clean(value)
    if text is None or len(text) > 64:
        return None
    text = " ".join(text.split())
    for fmt in _TIME_FORMATS:
        try:
            parsed = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=tz)
        return parsed.astimezone(UTC)
    return None


def _lines(text: str | bytes) -> list[str]:
    """Lines split on "\n" only: `str.splitlines` would also split on \x1c-\x1e, \x85 and
    U+2028, which a hostile name can contain."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return [line.removesuffix("\r") for line in text.split("\n")]


def _version(value: str | None) -> str | None:
    text = _clean(value)
    if text is None:
        return None
    text = re.sub(r"\s*\[.*$", "", text)  # "610.57.04 [Deprecated; ...]"
    return _text(text, 32)
