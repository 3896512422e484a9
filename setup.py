"""Build step beyond pyproject.toml: compile the message catalogs (.po -> .mo) into the wheel.

The .po sources live in the repository; the compiled .mo files are build output (not in git).
Babel is a build requirement ([build-system] requires in pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LOCALE = Path("gputui") / "locale"


class build_py_with_catalogs(build_py):  # noqa: N801 - setuptools' naming
    """build_py, then every gputui/locale/*/LC_MESSAGES/*.po compiled next to where it ships."""

    def run(self) -> None:
        super().run()
        for po in sorted(LOCALE.glob("*/LC_MESSAGES/*.po")):
            # An editable install reads package data from the source tree itself.
            root = Path(".") if getattr(self, "editable_mode", False) else Path(self.build_lib)
            self._compile(po, root / po.with_suffix(".mo"))

    def _compile(self, po: Path, mo: Path) -> None:
        from babel.messages.mofile import write_mo
        from babel.messages.pofile import read_po

        with po.open("rb") as fh:
            catalog = read_po(fh, locale=po.parent.parent.name)
        mo.parent.mkdir(parents=True, exist_ok=True)
        with mo.open("wb") as fh:
            write_mo(fh, catalog)
        self.announce(f"compiled {po} -> {mo}", level=2)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        mos = [str(Path(self.build_lib) / po.with_suffix(".mo"))
               for po in sorted(LOCALE.glob("*/LC_MESSAGES/*.po"))]
        return [*super().get_outputs(include_bytecode), *mos]


setup(cmdclass={"build_py": build_py_with_catalogs})
