"""A newcomer's clone has no ../shared beside it, and `pip install '.[test]' && pytest` must pass
there: only tests/shared.py may reach ../shared (it skips, with the reason, where it is absent).
Everything else is tested on data the project makes itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HELPER = TESTS / "shared.py"
_SHARED_PATH = re.compile(r"(^|[/\\])shared[/\\](fixtures|reference)")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def reaches_shared(source: str) -> list[int]:
    """The lines of SOURCE whose string literals name the shared folder (docstrings aside)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    lines = {node.lineno for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and id(node) not in skip and _SHARED_PATH.search(node.value)}
    # "shared" alone, as a path part: PARENT / "shared", Path(..., "shared"), .joinpath("shared")
    for node in ast.walk(tree):
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and _called(node.func) in {"Path", "PurePath", "joinpath"}:
            parts = list(node.args)
        lines |= {p.lineno for p in parts if isinstance(p, ast.Constant) and p.value == "shared"}
    return sorted(lines)


def _called(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def test_no_test_opens_shared_but_through_the_helper():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path in (HELPER, Path(__file__).resolve()):
            continue
        for line in reaches_shared(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(TESTS.parent)}:{line}")
    assert not found, ("open ../shared through tests/shared.py (capture(), reference(), "
                       "shared_path()), or test on data the project makes:\n" + "\n".join(found))


def test_the_check_catches_each_way_of_naming_shared():
    assert reaches_shared('P = REPO.parent / "shared" / "fixtures"\n') == [1]
    assert reaches_shared('x = 1\nP = Path("../shared/fixtures/nvidia-smi/a.xml")\n') == [2]
    assert reaches_shared('P = ROOT / "shared/reference/gpu-specs.toml"\n') == [1]
    assert reaches_shared('F = Path(HOME, "shared", "fixtures")\n') == [1]
    assert reaches_shared('F = HOME.joinpath("shared")\n') == [1]
    assert reaches_shared('"""Compared with ../shared/fixtures."""\nx = 1\n') == []
    assert reaches_shared('s.update_instance_sync("shared", f)\n') == []


def test_the_helper_skips_with_the_reason_where_shared_is_absent(tmp_path: Path):
    import subprocess
    import sys

    probe = tmp_path / "test_probe.py"
    probe.write_text("from tests.shared import capture\n\n"
                     "def test_probe():\n    capture('netdata__rtx-pro-6000-driver-580.xml')\n",
                     encoding="utf-8")
    env = {"GPUTUI_TEST_SHARED": str(tmp_path / "no-such-folder"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(TESTS.parent)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          str(probe)], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 skipped" in out.stdout and "../shared not present" in out.stdout
