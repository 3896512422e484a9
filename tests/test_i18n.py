"""Languages: choosing one, the catalogs being complete and compiled, text marked for
translation, and the cell-width helpers for double-width text."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest

from gputui import i18n
from gputui.i18n import (
    _,
    cell_len,
    language_from_argv,
    language_from_env,
    ngettext,
    normalize_language,
    pad_cells,
    set_language,
    truncate_cells,
    wrap_cells,
)
from tests.conftest import REPO

POT = REPO / "gputui" / "locale" / "gputui.pot"
ZH_PO = REPO / "gputui" / "locale" / "zh_CN" / "LC_MESSAGES" / "gputui.po"


@pytest.fixture(autouse=True)
def english_afterwards():
    yield
    set_language("en")


# ------------------------------------------------------------------------------------------
# Choosing the language
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("zh", "zh"), ("zh_CN.UTF-8", "zh"), ("zh_CN.utf8@pinyin", "zh"), ("zh-Hans", "zh"),
    ("zh_SG", "zh"), ("ZH_cn", "zh"), ("en", "en"), ("en_US.UTF-8", "en"),
    ("C", None), ("POSIX", None), ("C.UTF-8", None), ("", None), (None, None), ("fr_FR", None),
    ("zh_TW.UTF-8", None), ("zh_HK", None), ("zh-Hant-TW", None),  # no Traditional catalog
])
def test_normalize_language(value, expected):
    assert normalize_language(value) == expected


@pytest.mark.parametrize(("env", "expected"), [
    ({}, "en"),
    ({"LANG": "zh_CN.UTF-8"}, "zh"),
    ({"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
    ({"LC_ALL": "en_US.UTF-8", "LC_MESSAGES": "zh_CN.UTF-8"}, "en"),  # LC_ALL overrides
    ({"LC_ALL": "zh_CN.UTF-8", "LANG": "C"}, "zh"),
    ({"LC_ALL": "", "LANG": "zh_CN.UTF-8"}, "zh"),  # empty is unset
    ({"LANGUAGE": "fr:zh_CN:en", "LANG": "en_US.UTF-8"}, "zh"),  # first we have
    ({"LANGUAGE": "en_US:zh_CN", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"LANG": "C.UTF-8"}, "en"),
    ({"LANG": "zh_TW.UTF-8"}, "en"),
])
def test_language_from_env_follows_gettexts_order(env, expected):
    assert language_from_env(env) == expected


@pytest.mark.parametrize(("argv", "expected"), [
    (["--lang", "zh", "instances"], "zh"),
    (["--lang=zh"], "zh"),
    (["--theme", "nord", "--lang", "en", "costs"], "en"),
    (["--theme", "--lang"], None),  # "--lang" is the theme's value here
    (["instances", "--lang", "zh"], None),  # after the command: not the global option
    (["ssh", "box", "--", "echo", "--lang", "zh"], None),
    (["--", "--lang", "zh"], None),
    ([], None),
])
def test_lang_option_is_read_before_the_command_only(argv, expected):
    assert language_from_argv(argv, ("--theme",)) == expected


def test_set_language_translates_and_switches_back():
    assert set_language("zh") == "zh"
    assert i18n.current_language() == "zh"
    assert _("list instances") == "列出实例"
    assert _("") == ""  # never the catalog header
    assert _("a text nobody marked") == "a text nobody marked"
    assert set_language("en") == "en"
    assert _("list instances") == "list instances"
    assert set_language("fr") == "en"


def test_plural_forms():
    assert ngettext("expected %s argument", "expected %s arguments", 1) == "expected %s argument"
    assert ngettext("expected %s argument", "expected %s arguments", 3) == "expected %s arguments"
    set_language("zh")
    # Chinese has one form for every count (Plural-Forms: nplurals=1).
    one = ngettext(" (and {n} more problem)", " (and {n} more problems)", 1)
    many = ngettext(" (and {n} more problem)", " (and {n} more problems)", 5)
    assert one == many == "（另有 {n} 处问题）"


def test_argparse_text_is_translated_too():
    import argparse

    set_language("zh")
    parser = argparse.ArgumentParser(prog="x")
    help_text = parser.format_help()
    assert help_text.startswith("用法：") and "显示此帮助信息并退出" in help_text


def test_compiled_mo_is_used_when_present_and_fresh(tmp_path: Path, monkeypatch):
    """The .mo the build writes is what an installed copy reads (no Babel at run time)."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    folder = tmp_path / "zh_CN" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    with ZH_PO.open("rb") as fh:
        catalog = read_po(fh, locale="zh_CN")
    catalog.get("list instances").string = "列出全部实例"  # so we can tell which was read
    with (folder / "gputui.mo").open("wb") as fh:
        write_mo(fh, catalog)
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)
    set_language("zh")
    assert _("list instances") == "列出全部实例"


# ------------------------------------------------------------------------------------------
# The catalogs
# ------------------------------------------------------------------------------------------


def _extract() -> list:
    """Run Babel's extraction over gputui/ as babel.cfg configures it (what `pybabel extract`
    writes to gputui.pot)."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import extract_from_dir
    from babel.messages.frontend import parse_mapping_cfg

    with (REPO / "babel.cfg").open(encoding="utf-8") as fh:
        method_map, options_map = parse_mapping_cfg(fh)
    catalog = Catalog()
    for filename, lineno, message, comments, context in extract_from_dir(
        str(REPO / "gputui"), method_map, options_map
    ):
        catalog.add(message, None, [(filename, lineno)], auto_comments=comments, context=context)
    return [m for m in catalog if m.id]


def _read(path: Path):
    from babel.messages.pofile import read_po

    with path.open("rb") as fh:
        return read_po(fh)


def test_pot_is_up_to_date_with_the_code():
    extracted = {m.id for m in _extract()}
    template = {m.id for m in _read(POT) if m.id}
    assert extracted, "extraction found nothing: check babel.cfg"
    assert not extracted - template, (
        "messages in gputui/ but not in gputui.pot (run the pybabel commands in babel.cfg): "
        f"{sorted(map(str, extracted - template))[:10]}")
    assert not template - extracted, (
        f"gputui.pot has messages the code no longer has: {sorted(map(str, template - extracted))[:10]}")


def test_chinese_catalog_translates_every_extracted_message():
    catalog = _read(ZH_PO)
    assert catalog.plural_forms == "nplurals=1; plural=0;"
    missing = []
    for message in _extract():
        entry = catalog.get(message.id)
        strings = entry.string if entry is not None else None
        if isinstance(strings, tuple | list):
            ok = bool(strings) and all(strings)
        else:
            ok = bool(strings)
        if not ok or entry.fuzzy:
            missing.append(message.id)
    assert not missing, f"untranslated in {ZH_PO.name} ({len(missing)}): {missing[:10]}"


_PLACEHOLDER = re.compile(r"\{[a-z_]*\}|%\([a-z_]+\)[rsd]|%[rsd]|%%")


def test_translations_keep_every_placeholder():
    """A translation that drops {name} or %(value)r would crash or lose the value."""
    catalog = _read(ZH_PO)
    bad = []
    for m in catalog:
        if not m.id:
            continue
        ids = m.id if isinstance(m.id, tuple) else (m.id,)
        strings = m.string if isinstance(m.string, tuple | list) else (m.string,)
        want = sorted(set(_PLACEHOLDER.findall(ids[-1])))
        for s in strings:
            if sorted(set(_PLACEHOLDER.findall(s))) != want:
                bad.append((ids[0], s))
    assert not bad, bad[:5]


def test_compiles_without_babel_warnings():
    """What the build does (setup.py): every entry compiles, and checks pass."""
    from babel.messages.mofile import write_mo

    catalog = _read(ZH_PO)
    problems = [(m.id, [str(e) for e in errs]) for m, errs in catalog.check()]
    assert not problems, problems[:5]
    buf = io.BytesIO()
    write_mo(buf, catalog)
    assert len(buf.getvalue()) > 1000


# ------------------------------------------------------------------------------------------
# Text marked for translation
# ------------------------------------------------------------------------------------------

# Every module of gputui/ but the simulated cloud (gputui/sandbox/ plays remote programs, whose
# output is English as the real ones' is). NOT_YET: modules whose text is still to be marked;
# each group is one piece of work, and a file leaves the list when its text is marked.
NOT_YET: set[str] = set()  # (every module is marked)
SCOPED = sorted(p for p in (REPO / "gputui").rglob("*.py")
                if "sandbox" not in p.relative_to(REPO / "gputui").parts[:1]
                and p.relative_to(REPO / "gputui").as_posix() not in NOT_YET)

_MARKERS = {"_", "N_", "ngettext"}
# Where a literal reaches a person: the first argument of these calls...
_SHOWN_CALLS = {"print", "CommandError", "ConfigError", "BadInput", "NotFound", "GputuiError",
                "UnknownInstance", "getpass", "exit", "error", "write",
                # the console: widgets, toasts, bindings, table columns, rich text
                "notify", "Static", "Label", "Button", "Binding", "add_column", "update",
                "Option", "Text", "append", "Deferred", "warn", "set_title", "Markdown",
                "Content", "ValueError", "RuntimeError"}
# ...and these keywords of any call (argparse's help, a Diagnosis, a widget's title).
_SHOWN_KWARGS = {"help", "description", "epilog", "problem", "fix", "placeholder", "title",
                 "tooltip", "label", "sub_title", "border_title", "border_subtitle", "message",
                 "reason", "detail", "hint", "text"}
# Words that are names, not prose: they read the same in every language.
_TECHNICAL = re.compile(
    r"^(gputui|nvidia-smi|ssh|json|csv|usd|cny|gb|gib|mib|h|s|ms|gpu|gpus|vram|cuda|nvlink|"
    r"ollama|enter|escape|space|tab|ctrl|shift|backspace|up|down|left|right|pgup|pgdn)$", re.I)


def _words(node: ast.expr) -> list[str]:
    """The words a person would read in a literal (placeholders, flags and `code` left out)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = " ".join(v.value for v in node.values
                        if isinstance(v, ast.Constant) and isinstance(v.value, str))
    elif isinstance(node, ast.BinOp):
        return _words(node.left) + _words(node.right)
    else:
        return []
    text = re.sub(r"`[^`]*`|\{[^}]*\}|--?[\w-]+|\S+/\S+|%\(\w+\)\w", " ", text)
    return [w for w in re.findall(r"[A-Za-z][A-Za-z'-]+", text) if not _TECHNICAL.match(w)]


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _unmarked(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _name(node.func) in _MARKERS:
            continue
        shown: list[ast.expr] = []
        if _name(node.func) == "Binding":  # Binding(key, action, description): the key is no text
            shown += node.args[2:3]
        elif _name(node.func) in _SHOWN_CALLS:
            shown += node.args[:1]
        shown += [kw.value for kw in node.keywords if kw.arg in _SHOWN_KWARGS]
        for value in shown:
            words = _words(value)
            if words:
                found.append(f"{path.relative_to(REPO)}:{value.lineno}: {' '.join(words[:6])}")
    return found


def test_user_visible_text_is_marked_for_translation():
    """A literal printed, raised as an error, given as --help text, a diagnosis, a toast, a
    widget's text, a key's label or a column's header must go through _() / N_() / ngettext()
    (see SCOPED and NOT_YET above)."""
    found = [line for path in SCOPED for line in _unmarked(path)]
    assert not found, "wrap in _() (see gputui/i18n.py):\n" + "\n".join(found)


def test_not_yet_lists_only_files_that_exist():
    missing = sorted(n for n in NOT_YET if not (REPO / "gputui" / n).exists())
    assert not missing, missing


def test_the_marking_check_catches_an_unmarked_string(tmp_path: Path):
    sample = tmp_path / "gputui" / "cli" / "sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text(
        'from gputui.i18n import _\n'
        'def f(p, sub):\n'
        '    print(f"wrote {p} just now")\n'
        '    print(_("wrote {p}").format(p=p))\n'
        '    print(f"gputui: {p}")\n'
        '    sub.add_parser("x", help="list things")\n'
        '    raise CommandError("--flag: {p} is wrong")\n'
        '    raise CommandError(f"--flag: {p}")\n',
        encoding="utf-8",
    )
    import tests.test_i18n as me

    original = me.REPO
    me.REPO = tmp_path
    try:
        found = _unmarked(sample)
    finally:
        me.REPO = original
    assert [line.split(":")[1] for line in found] == ["3", "6", "7"]


# ------------------------------------------------------------------------------------------
# Double-width text
# ------------------------------------------------------------------------------------------


def test_cell_len_counts_double_width():
    assert cell_len("abc") == 3 and cell_len("实例") == 4 and cell_len("GPU 型号") == 8


@pytest.mark.parametrize("width", range(0, 14))
def test_truncate_cells_never_exceeds_width_or_splits_a_character(width):
    text = "训练任务qwen-lora长名字"
    cut = truncate_cells(text, width)
    assert cell_len(cut) <= width
    if cell_len(text) <= width:
        assert cut == text
    elif width:
        assert cut.endswith("…")
        assert text.startswith(cut[:-1].rstrip())  # whole characters from the start


@pytest.mark.parametrize("width", range(0, 16))
def test_truncate_cells_in_the_middle_keeps_both_ends(width):
    text = "训练任务-rtx-4090-00d7"
    cut = truncate_cells(text, width, where="middle")
    assert cell_len(cut) <= width
    if width >= 10:
        assert cut.startswith("训练") and cut.endswith("00d7") and "…" in cut
    from gputui.format import fit_name

    ascii_name = "rtx-4090-long-task-name-00d7"
    if width >= 6:  # the same cut as fit_name for single-width text
        assert truncate_cells(ascii_name, width, where="middle") == fit_name(ascii_name, width)


def test_pad_cells_aligns_mixed_text():
    rows = [pad_cells(s, 8) + "|" for s in ("名称", "NAME", "运行中的实例很长", "ab")]
    assert {cell_len(r) for r in rows} == {9}
    assert pad_cells("费用", 6, ">") == "  费用"
    assert pad_cells("运行中的实例", 7) == "运行中…"
    assert pad_cells("运行中的实例", 8) == "运行中… "  # half a wide char does not fit: a space


def test_wrap_cells_breaks_chinese_between_characters_and_english_at_spaces():
    text = "面向租用 GPU 的键盘操作控制台：选卡、带自动释放定时器租用、监控 GPU。"
    lines = wrap_cells(text, 20)
    assert all(cell_len(line) <= 20 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert not any(line.startswith(("，", "。", "、", "：")) for line in lines)
    assert wrap_cells("a keyboard driven console", 10) == ["a keyboard", "driven", "console"]


@pytest.mark.parametrize("with_home", [True, False])
def test_the_early_config_read_finds_the_config_file(tmp_path: Path, monkeypatch, with_home):
    """`gputui.cli` reads `language` before pydantic is loaded; it must look where
    `gputui.config.config_path()` looks, with GPUTUI_HOME set or not."""
    from gputui.cli import _configured_language, choose_language
    from gputui.config import config_path

    if with_home:
        monkeypatch.setenv("GPUTUI_HOME", str(tmp_path / "home"))
    else:
        monkeypatch.delenv("GPUTUI_HOME", raising=False)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = config_path()
    assert str(path).startswith(str(tmp_path))
    assert _configured_language() is None  # no file yet
    path.parent.mkdir(parents=True)
    path.write_text('language = "zh"\n[ui]\ntheme = "gputui-16"\n', encoding="utf-8")
    assert _configured_language() == "zh"
    assert choose_language(["instances"]) == "zh"
    assert choose_language(["--lang", "en", "instances"]) == "en"
    path.write_text("language = [\n", encoding="utf-8")  # broken: the locale decides
    assert _configured_language() is None and choose_language([]) == "en"
