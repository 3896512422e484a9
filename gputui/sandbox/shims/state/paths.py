"""Where an instance keeps its state, the shim table, and atomic JSON files."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
STATE_DIR = ".sandbox"
ROOT_ENV = "GPUTUI_SANDBOX_ROOT"  # set by the bin/ wrappers: which instance a shim belongs to
PACKAGE = __name__.rsplit(".", 2)[0]  # gputui.sandbox.shims (this is gputui.sandbox.shims.state.paths)

# Shim command name -> module of this package that implements it (run as `python -m`).
# install_shims()/create_instance_dir() write one bin/ wrapper per entry, so adding a shim is:
# add a module here (with a main()), then add one entry, e.g. SHIMS["ollama"] = "ollama".
# Existing instances pick it up the next time install_shims(root) runs on them.
SHIMS: dict[str, str] = {
    "nvidia-smi": "nvidia_smi",
    "gpu-load": "gpu_load",
    "shutdown": "shutdown",
    "poweroff": "poweroff",
    "ollama": "ollama_shim",  # `ollama serve` runs ollama_server (the simulated Ollama API)
    "df": "df",  # the rented disk's size, not the host's
}
# Modules known to import nothing outside the stdlib: their wrappers run `python -S` (no
# site-packages, no .pth files), which starts noticeably faster. A shim that needs
# third-party packages simply stays out of this set.
SITE_FREE: set[str] = {"nvidia_smi", "gpu_load", "shutdown", "poweroff", "ollama_shim", "df"}


class SandboxStateError(Exception):
    """The instance folder is missing, unreadable or from a newer format."""


# --------------------------------------------------------------------------- paths


def state_dir(root: Path) -> Path:
    return Path(root) / STATE_DIR


def instance_file(root: Path) -> Path:
    return state_dir(root) / "instance.json"


def power_file(root: Path) -> Path:
    return state_dir(root) / "power.json"


def procs_dir(root: Path) -> Path:
    return state_dir(root) / "procs"


def root_from_env() -> Path:
    """The instance a shim runs for: $GPUTUI_SANDBOX_ROOT (set by its wrapper), else cwd."""
    value = os.environ.get(ROOT_ENV)
    return Path(value) if value else Path.cwd()


def _write_json(path: Path, data: Any) -> None:
    """Atomic write: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat()


def _parse_iso(value: str) -> datetime:
    dt = datetime.fromisoformat(value)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _as_utc(now: datetime | float | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if isinstance(now, int | float):
        return datetime.fromtimestamp(now, UTC)
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
