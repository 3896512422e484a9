"""Where a project was last pushed on each instance, so that the console's Queue-a-run dialog
can offer that folder as the run's working folder (as `gputui run --sync` does)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gputui.models import utcnow

if TYPE_CHECKING:
    from pathlib import Path

    from gputui.models import Instance
    from gputui.services.hub import Services


def _path(services: Services, instance_id: str) -> Path:
    return services.state_dir / "pushes" / f"{instance_id}.json"


def home_relative(remote: str) -> str:
    """`~/proj/` -> `proj`; `~` -> `` (the home); an absolute path stays as it is."""
    text = remote.strip().rstrip("/")
    if text in ("~", ""):
        return ""
    return text[2:] if text.startswith("~/") else text


def data_folder(services: Services, instance: Instance) -> str | None:
    """The instance's data disk as `~/...` (AutoDL: `~/autodl-tmp`, i.e. /root/autodl-tmp), or
    None where the provider has none (the home is used)."""
    try:
        provider = services.providers.get(instance.provider)
    except Exception:  # a provider that cannot be made now: its default stands
        provider = None
    folder = getattr(provider, "data_folder", None)
    return folder if isinstance(folder, str) and folder else None


def default_remote(services: Services, instance: Instance, name: str) -> str:
    """Where `push LOCAL` puts LOCAL by default: on the data disk where the provider has one
    (AutoDL: `~/autodl-tmp/<name>`, not the 30 GB system disk), else `~/<name>`."""
    folder = data_folder(services, instance)
    return f"{folder}/{name}" if folder else f"~/{name}"


def resolve_cwd(services: Services, instance: Instance, cwd: str | None) -> str | None:
    """A run's folder: a relative one is on the data disk where the provider has one
    (`proj` → `autodl-tmp/proj`); absolute and `~/...` (the home) stay as written, and one
    already on the data disk (a pushed folder the console offers) is not moved twice."""
    folder = data_folder(services, instance)
    if cwd is None or folder is None or cwd.startswith("/"):
        return cwd
    if cwd == "~" or cwd.startswith("~/"):
        return home_relative(cwd)
    base = home_relative(folder)
    rel = cwd.strip().rstrip("/")
    while rel.startswith("./"):
        rel = rel[2:]
    if rel in ("", "."):
        return base
    if rel == base or rel.startswith(base + "/"):
        return rel
    return f"{base}/{rel}"


def record_push(services: Services, instance_id: str, remote_folder: str) -> None:
    """Remember REMOTE_FOLDER (a folder that a push filled) as the instance's project."""
    from gputui.config import write_private

    data = {"folder": home_relative(remote_folder), "at": utcnow().isoformat()}
    write_private(_path(services, instance_id), json.dumps(data).encode())


def last_push(services: Services, instance_id: str) -> str | None:
    """The folder (relative to the home, or absolute) last pushed to; None if none or unreadable."""
    try:
        data = json.loads(_path(services, instance_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    folder = data.get("folder") if isinstance(data, dict) else None
    return folder if isinstance(folder, str) and folder else None
