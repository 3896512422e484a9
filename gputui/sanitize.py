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
- `mask_secrets` / `clean_masked` / `log_text`: secrets (API keys, tokens) out of text that is
  shown, stored or logged. The text is cleaned *before* it is masked: an escape sequence or a
  zero-width character inside a key would otherwise hide it from the match and be stripped
  after, leaving the key whole. The whole text is masked before it is cut: a cut never
  leaves the start (or end) of a key behind.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

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

# what moves the cursor within a line or erases it, as a terminal reads it: a carriage return,
# a backspace, "erase in line" (ESC [ K, 0K, 1K, 2K); any other escape sequence takes no room
_LINE_EDIT_RE = re.compile(r"\r|\x08|\x1b\[([0-?]*)[ -/]*([@-~])")


def terminal_line(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """One line of a program's output as a terminal leaves it, then sanitised: a progress bar's
    carriage returns overwrite from the start of the line (`ABC\rred` -> `red`,
    `ABCDEF\rred` -> `redDEF`), backspaces step back, erase-in-line sequences erase. One
    character takes one column here (a wide character overwritten by halves is not drawn)."""
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
    if "\r" not in text and "\x08" not in text and "\x1b[" not in text:
        return sanitize(text, limit)
    cells: list[str] = []
    col = 0
    pos = 0

    def put(run: str) -> None:
        nonlocal col
        run = _ESCAPE_RE.sub("", run)  # an OSC (a window title...) takes no room either
        if col > len(cells):
            cells.extend(" " * (col - len(cells)))
        cells[col:col + len(run)] = run
        col += len(run)

    for m in _LINE_EDIT_RE.finditer(text):
        if m.start() > pos:
            put(text[pos:m.start()])
        pos = m.end()
        token = m.group(0)
        if token == "\r":
            col = 0
        elif token == "\x08":
            col = max(0, col - 1)
        elif m.group(2) == "K":  # erase in line: to the end (0), to the cursor (1), all (2)
            how = m.group(1) or "0"
            if how == "0":
                del cells[col:]
            elif how == "1":
                cells[:col + 1] = " " * min(col + 1, len(cells))
            elif how == "2":
                cells[:] = " " * len(cells)
        # any other sequence (colours...) takes no room
    if pos < len(text):
        put(text[pos:])
    return sanitize("".join(cells), limit)

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


MASK = "***"
LOG_CHARS = 200  # a logged message longer than this is cut, its size said


def _variants(secrets: Iterable[str | None]) -> list[str]:
    """Each secret as given and as cleaned (a key holding a character the cleaning drops),
    longest first; nothing shorter than 6 characters (it would mask ordinary words)."""
    found: set[str] = set()
    for secret in secrets:
        if not secret:
            continue
        for form in (secret, secret.strip(), sanitize(secret, len(secret) + 1)):
            if len(form) >= 6:
                found.add(form)
    return sorted(found, key=len, reverse=True)


def mask_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each secret replaced by `***`. Give it cleaned text (`clean_masked` does)."""
    for secret in _variants(secrets):
        text = text.replace(secret, MASK)
    return text


def clean_masked(value: object, secrets: Iterable[str | None], limit: int = MAX_TEXT_CHARS,
                 *, keep: str = "head", lines: bool = False) -> str:
    """`sanitize`, then mask the secrets, then cut to `limit` characters: the head (an ellipsis
    at the end) or, `keep="tail"`, the tail (command output: the end matters). `lines` keeps
    line breaks (each line cleaned on its own)."""
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
    bound = limit * 8 + 4096  # what cleaning could shrink to `limit`: no more is cleaned
    if len(text) > bound:
        text = text[-bound:] if keep == "tail" else text[:bound]
        if lines and keep == "tail" and "\n" in text:
            text = text.partition("\n")[2]  # the first line, cut: dropped whole
    if lines:
        text = "\n".join(sanitize(line, len(line) + 1) for line in text.splitlines())
    else:
        text = sanitize(text, len(text) + 1)
    text = mask_secrets(text, secrets)  # the whole text, before any cut can split a key
    if len(text) <= limit:
        return text
    if keep == "tail":
        return text[-limit:]
    return text[: max(0, limit - 1)].rstrip() + "\u2026"


def log_text(value: object, secrets: Iterable[str | None], limit: int = LOG_CHARS) -> str:
    """A message fit for a log: one line, cleaned, secrets masked, and at most `limit`
    characters of it, then `… (N bytes)` saying how long it was (a 200 kB command would take a
    terminal handler seconds to minutes to lay out)."""
    raw = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
    bound = limit * 8 + 4096
    text = clean_masked(raw[:bound], secrets, len(raw) + 1)
    if len(text) <= limit and len(raw) <= bound:
        return text
    return f"{text[:limit]}\u2026 ({len(raw.encode('utf-8', errors='replace'))} bytes)"
