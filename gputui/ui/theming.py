"""Themes: TOML files (the project's `themes/` and the user's own) loaded into Textual themes.

A broken theme file gives a warning and is skipped; it never stops the console.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from textual.theme import Theme

from gputui.i18n import _

DEFAULT_THEME = "gputui-dark"
_FIELDS = {
    "primary", "secondary", "warning", "error", "success", "accent", "foreground",
    "background", "surface", "panel", "boost", "dark", "luminosity_spread", "text_alpha",
    "ansi",
}


@dataclass
class ThemeSet:
    themes: dict[str, Theme] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def builtin_theme_dirs() -> list[Path]:
    """Installed: gputui/themes inside the package. From a checkout: the repo's themes/."""
    dirs: list[Path] = []
    try:
        installed = Path(str(resources.files("gputui") / "themes"))
        if installed.is_dir():
            dirs.append(installed)
    except (ModuleNotFoundError, TypeError):
        pass
    checkout = Path(__file__).resolve().parents[2] / "themes"
    if checkout.is_dir() and checkout not in dirs:
        dirs.append(checkout)
    return dirs


def theme_from_toml(path: Path) -> Theme:
    """Raise ValueError with a one-line reason when the file is not a usable theme."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(_("{path}: cannot read: {problem}").format(path=path, problem=exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(_("{path}: not valid TOML: {problem}").format(
            path=path, problem=exc)) from None
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(_("{path}: key '{key}': {problem}").format(
            path=path, key="name", problem=_("missing")))
    if "primary" not in data:
        raise ValueError(_("{path}: key '{key}': {problem}").format(
            path=path, key="primary", problem=_("missing")))
    unknown = set(data) - _FIELDS - {"name", "variables"}
    if unknown:
        raise ValueError(_("{path}: key '{key}': {problem}").format(
            path=path, key=sorted(unknown)[0], problem=_("unknown key")))
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError(_("{path}: key '{key}': {problem}").format(
            path=path, key="variables", problem=_("must be a table")))
    kwargs = {k: v for k, v in data.items() if k in _FIELDS}
    from textual.color import Color, ColorParseError

    for key, value in [*kwargs.items(), *variables.items()]:
        if key in {"dark", "ansi", "luminosity_spread", "text_alpha"} or key.endswith("text-style"):
            continue
        try:
            Color.parse(str(value))
        except ColorParseError:
            raise ValueError(_("{path}: key '{key}': {problem}").format(
                path=path, key=key,
                problem=_("{value} is not a colour").format(value=repr(value)))) from None
    try:
        return Theme(name=name, variables={str(k): str(v) for k, v in variables.items()}, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def load_themes(extra_dirs: list[Path] | None = None) -> ThemeSet:
    out = ThemeSet()
    for folder in [*builtin_theme_dirs(), *(extra_dirs or [])]:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                theme = theme_from_toml(path)
            except ValueError as exc:
                out.warnings.append(_("theme skipped: {problem}").format(problem=exc))
                continue
            out.themes[theme.name] = theme
    return out
