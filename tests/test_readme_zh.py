"""README.zh-CN.md is kept in step with README.md: a section for each of its sections, every
command of its table, and both say how to choose the language."""

from __future__ import annotations

import re

from tests.conftest import REPO

EN = (REPO / "README.md").read_text(encoding="utf-8")
ZH = (REPO / "README.zh-CN.md").read_text(encoding="utf-8")
# Sections the Chinese README has on top of the English one's.
ZH_ONLY = {"中文界面", "参与翻译"}


def _headings(text: str) -> list[tuple[int, str]]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # not the comments in code blocks
    return [(len(m.group(1)), m.group(2).strip())
            for m in re.finditer(r"^(#{2,3}) (.+)$", text, re.M)]


def _commands(text: str) -> list[str]:
    """The first cell of every row of the commands table."""
    table = text.split("| `gputui` |", 1)[1].split("\n\n", 1)[0]
    return ["`gputui`"] + [line.split("|")[1].strip() for line in table.splitlines()[1:]
                           if line.startswith("|")]


def test_a_section_for_each_section():
    en = _headings(EN)
    zh = [h for h in _headings(ZH) if h[1] not in ZH_ONLY]
    assert [level for level, _title in zh] == [level for level, _title in en], (en, zh)


def test_every_command_is_in_the_chinese_table():
    en, zh = _commands(EN), _commands(ZH)
    assert len(zh) == len(en), (en, zh)
    for en_cell, zh_cell in zip(en, zh, strict=True):
        # the commands themselves (in backticks) are the same; only the separators are Chinese
        assert re.findall(r"`([^`]*)`", en_cell) == re.findall(r"`([^`]*)`", zh_cell)


def test_both_say_how_to_choose_the_language():
    for text in (EN, ZH):
        for words in ("--lang zh", 'language = "zh"', "LANG=zh_CN.UTF-8", "LC_ALL",
                      "LC_MESSAGES", "ctrl+p", "Language: 中文", "Language: English"):
            assert words in text, words


def _tables_by_section(text: str) -> list[list[int]]:
    """For each section, the number of rows of each of its tables (code blocks left out)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out: list[list[int]] = []
    for part in re.split(r"^#{2,3} .+$", text, flags=re.M)[1:]:
        rows = [len(block.splitlines()) for block in
                re.findall(r"(?:^\|.*\n?)+", part, flags=re.M)]
        out.append(rows)
    return out


def test_each_section_has_the_same_tables():
    """A table copied twice, or one left behind with old figures when the English was
    re-measured, shows as a section with a table more (the Chinese performance section had
    its previous table and paragraphs twice)."""
    zh_titles = [title for _level, title in _headings(ZH)]
    zh = [rows for rows, title in zip(_tables_by_section(ZH), zh_titles, strict=True)
          if title not in ZH_ONLY]
    en = _tables_by_section(EN)
    assert len(zh) == len(en)
    for n, (en_rows, zh_rows) in enumerate(zip(en, zh, strict=True)):
        assert zh_rows == en_rows, (_headings(EN)[n], en_rows, zh_rows)
