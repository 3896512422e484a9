"""The one way tests read ``../shared`` (the real nvidia-smi captures and the sourced reference
data beside the repository), and the data that every other test uses instead.

``../shared`` is there in CI and in the developers' checkouts, and absent from a newcomer's
clone. Only the tests that compare gputui with the real captures or the reference data need it:
they ask this module, which skips them with the reason where it is absent. Screens and
translations are tested on data the project makes itself (``sandbox_xml``: the sandbox's own
``nvidia-smi -q -x``). ``tests/test_shared_access.py`` checks that no test opens ``../shared``
another way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# GPUTUI_TEST_SHARED points elsewhere (or at a missing folder, to try a newcomer's clone).
SHARED = Path(os.environ.get("GPUTUI_TEST_SHARED") or REPO.parent / "shared")
CAPTURES = SHARED / "fixtures" / "nvidia-smi"
REFERENCE = SHARED / "reference"


def have_shared() -> bool:
    return SHARED.is_dir()


def _missing(path: Path) -> str:
    return (f"../shared not present (a fresh clone): {path} is missing; "
            "the real captures and reference data live beside the repository")


def shared_path(*parts: str) -> Path:
    """A file or folder under ../shared, or the test is skipped, saying which is missing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(_missing(path))
    return path


def capture(name: str) -> Path:
    """One real nvidia-smi capture (``../shared/fixtures/nvidia-smi/NAME``), or a skip."""
    return shared_path("fixtures", "nvidia-smi", name)


def capture_text(name: str) -> str:
    return capture(name).read_text(encoding="utf-8")


def captures_dir() -> Path:
    """The folder of real captures, or a skip."""
    return shared_path("fixtures", "nvidia-smi")


def capture_names(pattern: str = "*") -> list[str]:
    """The capture names matching PATTERN, for parametrising at collection time: ``["(none)"]``
    where ../shared is absent, so the parametrised test runs once and skips through
    ``capture()``."""
    return sorted(p.name for p in CAPTURES.glob(pattern)) or ["(none)"]


def reference(name: str) -> Path:
    """A file of ``../shared/reference``, or a skip."""
    return shared_path("reference", name)


def sandbox_xml(tmp_path: Path, *, gpu_name: str = "NVIDIA GeForce RTX 4090", gpu_count: int = 1,
                memory_total_mib: int = 24564, power_limit_w: float = 450.0,
                tdp_w: float = 450.0, now: float = 1_795_953_600.0,
                load: tuple[int, float] | None = (10240, 85.0)) -> str:
    """``nvidia-smi -q -x`` as the sandbox's own nvidia-smi prints it at the fixed time NOW
    (2026-11-29 12:00 UTC), with GPU 0 running ``python train.py`` (pid 4242) holding LOAD
    (MiB, utilisation %) for ten minutes, or idle with ``load=None``: the data that screens and
    translations are tested on."""
    from gputui.sandbox.shims.nvidia_smi.common import Context
    from gputui.sandbox.shims.nvidia_smi.xml_report import render_xml
    from gputui.sandbox.shims.state.instance import create_instance_dir, load_instance

    root = create_instance_dir(tmp_path / "made-xml", instance_id="fixed", gpu_name=gpu_name,
                               gpu_count=gpu_count, memory_total_mib=memory_total_mib,
                               power_limit_w=power_limit_w, tdp_w=tdp_w)
    spec = load_instance(root)
    procs = []
    if load is not None:
        from gputui.sandbox.shims.state.processes import GpuUse, ProcRecord

        procs.append(ProcRecord(pid=4242, name="python train.py", kind="gpu-load",
                                started_at=now - 600, gpus={0: GpuUse(load[0], load[1])}))
    return "\n".join(render_xml(Context(spec, list(spec.gpus), now, procs))) + "\n"


def users() -> list[str]:
    """The test files that reach ../shared: those importing this module, directly or through
    another test module (tests/test_shared_access.py keeps every other test away from it). CI
    runs them again from a copy of the tree with no ../shared beside it."""
    import ast

    tests = Path(__file__).resolve().parent
    deps: dict[str, tuple[Path, set[str]]] = {}
    for path in tests.rglob("*.py"):
        name = ".".join(path.relative_to(tests.parent).with_suffix("").parts)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests"):
                found.add(node.module or "")
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("tests")}
        deps[name] = (path, found)
    reach = {"tests.shared"}
    grew = True
    while grew:
        grew = False
        for name, (_path, found) in deps.items():
            if name not in reach and found & reach:
                reach.add(name)
                grew = True
    files = {deps[n][0] for n in reach if deps[n][0].name.startswith("test_")}
    files.add(tests / "test_shared_access.py")
    return sorted(str(p.relative_to(tests.parent)) for p in files)


if __name__ == "__main__":
    print(" ".join(users()))
