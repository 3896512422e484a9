"""Languages: English (the source text) and Simplified Chinese, through gettext catalogs.

Mark text for translation with `_()` where it is shown, `ngettext()` where a number decides the
form, and `N_()` where it is defined before a language is chosen (module constants, tables);
translate those with `_()` when they are shown. JSON and CSV never go through here: scripts
read English keys and values.

The catalog's source is `gputui/locale/zh_CN/LC_MESSAGES/gputui.po` (extracted with Babel, see
babel.cfg); the build compiles it to `gputui.mo`, which ships in the wheel. A source checkout
without the compiled file reads the `.po` through Babel (a test and build dependency) instead.

The language is chosen once, early, by `gputui.cli.main` (`--lang`, then `language` in
config.toml, then the locale), and can be switched later (`set_language`) without a restart:
everything translates at the moment it is shown.

Also here: the width helpers for double-width text (a Chinese character takes two terminal
cells): measure, cut and pad by cells, never by characters.
"""

from __future__ import annotations

import argparse
import gettext as _gettext
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

__all__ = [
    "DOMAIN", "Deferred", "shown", "LANGUAGES", "LOCALE_DIR", "N_", "_", "cell_len", "current_language",
    "language_from_env", "language_from_argv", "ngettext", "normalize_language",
    "pad_cells", "set_language", "truncate_cells", "wrap_cells",
]

Language = Literal["en", "zh"]
DOMAIN = "gputui"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
LANGUAGES: tuple[Language, ...] = ("en", "zh")
#: The gettext locale folder that holds each language's catalog (English is the source text).
CATALOG_LOCALE: dict[str, str] = {"zh": "zh_CN"}

_translations: _gettext.NullTranslations = _gettext.NullTranslations()
_language: Language = "en"


# ------------------------------------------------------------------------------------------
# Translating
# ------------------------------------------------------------------------------------------


def _(message: str) -> str:
    """`message` in the current language (itself where the catalog has no translation)."""
    if not message:  # gettext's "" is the catalog's header
        return message
    return _translations.gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The form for `n` (Chinese has one form; English two)."""
    return _translations.ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Mark `message` for extraction only; translate it with `_()` where it is shown."""
    return message


class Deferred(str):
    """Text that is English as a string (what JSON, logs and the store keep) and can show
    itself in the interface language later: `Deferred(N_("set to {value}"), value=v)`.
    Parameters that are themselves `Deferred` are translated with it."""

    template: str
    params: dict[str, object]

    def __new__(cls, template: str, /, **params: object) -> Deferred:
        obj = super().__new__(cls, template.format(**params) if params else template)
        obj.template, obj.params = template, params
        return obj

    def __reduce__(self):  # copies (dataclasses.asdict) keep the template
        return (_rebuild_deferred, (self.template, self.params))

    def translated(self) -> str:
        """The text in the current language."""
        if not self.params:
            return _(self.template)
        return _(self.template).format(**{k: shown(v) for k, v in self.params.items()})


def _rebuild_deferred(template: str, params: dict[str, object]) -> Deferred:
    return Deferred(template, **params)


def shown(text: object) -> object:
    """`text` for a person: a `Deferred` translated, one of gputui's errors as its one line in
    the interface language (`GputuiError.translated`), anything else as it is."""
    if isinstance(text, Deferred):
        return text.translated()
    translate = getattr(text, "translated", None) if isinstance(text, BaseException) else None
    return translate() if callable(translate) else text


def current_language() -> Language:
    return _language


def _load_catalog(locale: str) -> _gettext.NullTranslations | None:
    folder = LOCALE_DIR / locale / "LC_MESSAGES"
    mo, po = folder / f"{DOMAIN}.mo", folder / f"{DOMAIN}.po"
    # An installed copy has the .mo only. A source checkout has the .po, and a .mo only where
    # a build or an editable install compiled one; an edited .po is newer, and wins.
    if po.exists() and not (mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime):
        compiled = _compile_po(po, locale)
        if compiled is not None:
            return compiled
    try:
        with mo.open("rb") as fh:
            return _gettext.GNUTranslations(fh)
    except (OSError, ValueError, UnicodeError, struct.error):
        return None  # missing or corrupt: English


def _compile_po(po: Path, locale: str) -> _gettext.NullTranslations | None:
    """A .po compiled in memory, with Babel (a build and test dependency); None without it."""
    try:
        import io

        from babel.messages.mofile import write_mo
        from babel.messages.pofile import read_po
    except ImportError:
        return None
    with po.open("rb") as fh:
        catalog = read_po(fh, locale=locale)
    buf = io.BytesIO()
    write_mo(buf, catalog)
    buf.seek(0)
    return _gettext.GNUTranslations(buf)


def set_language(language: str | None) -> Language:
    """Use `language` ("zh" or "en"; None or anything else: English) from now on."""
    global _translations, _language
    lang = normalize_language(language) or "en"
    translations: _gettext.NullTranslations | None = None
    if lang != "en":
        translations = _load_catalog(CATALOG_LOCALE[lang])
    if translations is None:
        lang = "en"
        translations = _gettext.NullTranslations()
    _translations, _language = translations, lang
    # argparse builds "usage:", "options", its errors... through gettext at run time.
    argparse._ = _  # type: ignore[attr-defined]
    argparse.ngettext = ngettext  # type: ignore[attr-defined]
    return lang


# ------------------------------------------------------------------------------------------
# Choosing
# ------------------------------------------------------------------------------------------


def normalize_language(value: str | None) -> Language | None:
    """"zh", "zh_CN.UTF-8", "zh-Hans", "en_US"... as a language this program has, or None
    (unknown, "C", "POSIX", or Traditional Chinese, which has no catalog yet)."""
    if not value:
        return None
    text = value.strip().split(".")[0].split("@")[0].replace("-", "_").lower()
    if text in ("", "c", "posix"):
        return None
    if text == "zh" or text.startswith("zh_"):
        if text in ("zh_tw", "zh_hk", "zh_mo") or text.startswith("zh_hant"):
            return None
        return "zh"
    if text == "en" or text.startswith("en_"):
        return "en"
    return None


def language_from_env(environ: Mapping[str, str] | None = None) -> Language:
    """The locale's language, in gettext's order: LANGUAGE, LC_ALL, LC_MESSAGES, LANG; the
    first one that is set decides (LANGUAGE may list several: the first we have wins)."""
    env = os.environ if environ is None else environ
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = (env.get(var) or "").strip()
        if not value:
            continue
        for item in value.split(":") if var == "LANGUAGE" else [value]:
            lang = normalize_language(item)
            if lang is not None:
                return lang
        if var != "LANGUAGE":
            return "en"
    return "en"


def language_from_argv(argv: Sequence[str], options_with_value: Iterable[str] = ()) -> str | None:
    """The value of the global `--lang` in `argv` (before the command name), or None.

    Only the options before the first word that is not an option are looked at, so
    `gputui ssh box -- echo --lang zh` does not switch languages."""
    takes_value = set(options_with_value)
    it = iter(argv)
    for arg in it:
        if arg == "--lang":
            return next(it, None)
        if arg.startswith("--lang="):
            return arg.split("=", 1)[1]
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return None
        if arg in takes_value:
            next(it, None)
    return None


# ------------------------------------------------------------------------------------------
# Width: a CJK character takes two cells
# ------------------------------------------------------------------------------------------


def cell_len(text: str) -> int:
    """How many terminal cells `text` takes."""
    from rich.cells import cell_len as _cell_len

    return _cell_len(text)


def truncate_cells(text: str, width: int, ellipsis: str = "…",
                   where: Literal["end", "middle"] = "end") -> str:
    """`text` cut to at most `width` cells, with `ellipsis` where it was cut (at the end, or in
    the middle so that both ends stay visible: generated names differ at the end); never splits
    a double-width character (a cell left over is a space)."""
    from rich.cells import set_cell_size

    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return text
    room = width - cell_len(ellipsis)
    if room < 0:
        return set_cell_size(text, width)
    if not room:
        return ellipsis
    if where == "middle" and width >= 6:  # as gputui.format.fit_name cuts, by cells
        tail_cells = max(4, width // 3)
        tail, cells = "", 0
        for ch in reversed(text):
            if cells + cell_len(ch) > tail_cells:
                break
            tail, cells = ch + tail, cells + cell_len(ch)
        head = set_cell_size(text, room - cells).rstrip(" ")
        return head + ellipsis + tail
    return set_cell_size(text, room).rstrip(" ") + ellipsis


def pad_cells(text: str, width: int, align: Literal["<", ">"] = "<", ellipsis: str = "…") -> str:
    """`text` in exactly `width` cells: cut (with `ellipsis`) or padded with spaces."""
    cut = truncate_cells(text, width, ellipsis)
    gap = " " * max(0, width - cell_len(cut))
    return cut + gap if align == "<" else gap + cut


_NO_LINE_START = "，。、；：）」』》！？…,.;:)!?%"


def _tokens(text: str) -> list[str]:
    """Words for wrapping: a run of spaces, a run of single-width characters, or one
    double-width character (with the closing punctuation after it: a line never starts
    with "，")."""
    from rich.cells import get_character_cell_size

    tokens: list[str] = []
    for ch in text:
        wide = get_character_cell_size(ch) > 1
        if ch.isspace():
            if tokens and tokens[-1][-1:].isspace():
                tokens[-1] += ch
            else:
                tokens.append(ch)
        elif tokens and ch in _NO_LINE_START and not tokens[-1][-1:].isspace():
            tokens[-1] += ch
        elif (not wide and tokens and not tokens[-1][-1:].isspace()
              and get_character_cell_size(tokens[-1][-1]) == 1
              and tokens[-1][-1] not in _NO_LINE_START):
            tokens[-1] += ch
        else:
            tokens.append(ch)
    return tokens


def wrap_cells(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells (a word longer than that keeps its own line).
    Chinese has no spaces between words: a line may break between any two characters."""
    lines: list[str] = []
    line, gap = "", False
    for tok in _tokens(" ".join(text.split())):
        if tok.isspace():
            gap = bool(line)
            continue
        candidate = line + (" " if gap else "") + tok
        if not line or cell_len(candidate) <= width:
            line = candidate
        else:
            lines.append(line)
            line = tok
        gap = False
    if line:
        lines.append(line)
    return lines


# argparse's own text, marked here so extraction puts it in the catalog (Python 3.11-3.13).
_ARGPARSE_MESSAGES = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    N_("the following arguments are required: %s"),
    N_("unrecognized arguments: %s"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("invalid %(type)s value: %(value)r"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("not allowed with argument %s"),
    N_("one of the arguments %s is required"),
    N_("ignored explicit argument %r"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
)
_ARGPARSE_PLURALS = (ngettext("expected %s argument", "expected %s arguments", 1),)
