"""The one sanitiser for text that came from outside: remote stdout/stderr, API error bodies,
user labels, file contents.

- `sanitize` (alias `clean`): safe to put on a terminal or in a notification — no escape
  sequences (CSI, OSC such as `ESC ] 52` clipboard writes or window titles, DCS...), no control
  or format characters (bidi overrides included), no line breaks, bounded length.
- `csv_cell`: safe for a spreadsheet cell — sanitised, and a value that a spreadsheet would
  read as a formula (leading `=`, `+`, `-`, `@`, tab or CR) is prefixed with `'`, as OWASP's
  "CSV injection" advice says.
- `check_label`: labels refuse control characters on the way in (`--name`, the console's
  forms); the message names the field.
"""

from __future__ import annotations

import re
import unicodedata

MAX_TEXT_CHARS = 256

_ESCAPE_RE = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]?               # CSI ... final byte
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?     # OSC ... BEL or ST
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?          # DCS, SOS, PM, APC ... ST
    | \x1b[ -/]*[0-~]?                       # other escape sequences
    | \x9b[0-?]*[ -/]*[@-~]?                 # 8-bit CSI
    | [\x90\x98\x9d\x9e\x9f][^\x9c\x07]*[\x9c\x07]?  # 8-bit DCS/SOS/OSC/PM/APC
    """,
    re.VERBOSE,
)
_SPACES = "\t\n\r\x0b\x0c"


def sanitize(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """Text safe to show on a terminal: no escape sequences, no control or format characters
    (bidi overrides included), no line breaks, at most `limit` characters (an ellipsis marks a
    cut)."""
    if isinstance(value, bytes):
        text = value.decode("utf-8", errors="replace")
    else:
        text = str(value)
    if len(text) > limit * 8:
        text = text[: limit * 8]
    if not (text.isprintable() and "\x1b" not in text):
        text = _ESCAPE_RE.sub("", text)
        out = []
        for ch in text:
            if ch.isprintable():
                out.append(ch)
            elif ch in _SPACES or unicodedata.category(ch) == "Zs":
                out.append(" ")
            # everything else (Cc, Cf, Cs, Co, Cn, Zl, Zp) is dropped
        text = "".join(out)
    text = text.strip()
    if len(text) > limit:
        text = text[: max(0, limit - 1)].rstrip() + "\u2026"
    return text


clean = sanitize

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object, limit: int = 4096) -> str:
    """A value for a CSV cell: sanitised, and never read as a formula by a spreadsheet."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # our own numbers (a negative amount stays a number)
    raw = str(value)
    text = sanitize(raw, limit)
    if raw.startswith(_FORMULA_START) or text.startswith(_FORMULA_START):
        text = "'" + text
    return text


def has_control(text: str) -> bool:
    """Whether `text` holds a control or format character (escape, BEL, bidi override...)."""
    return any(not ch.isprintable() and ch != " " for ch in text)
