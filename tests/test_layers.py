"""The layer rules, as CI checks them: import-linter's contracts (pyproject.toml) and no
print() below the commands."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# Everything below the commands and the console: these return values and raise; they never print.
QUIET = ["services", "providers", "remote", "nvidia", "catalog", "store.py", "models.py",
         "config.py", "format.py", "errors.py"]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    done = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout


def _prints(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print"]


def test_nothing_below_the_commands_prints():
    found: list[str] = []
    for name in QUIET:
        target = REPO / "gputui" / name
        for path in ([target] if target.is_file() else sorted(target.rglob("*.py"))):
            found += _prints(path)
    assert found == [], "print() below cli/ (return the text; a command prints it): " + ", ".join(found)


def test_the_check_finds_a_print(tmp_path: Path):
    """The walk above would see one (so its silence means something)."""
    sample = tmp_path / "noisy.py"
    sample.write_text("import sys\n\ndef f():\n    if sys:\n        print('x', file=sys.stderr)\n")
    assert _prints(sample, tmp_path) == ["noisy.py:5"]
