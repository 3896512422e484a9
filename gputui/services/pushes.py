"""Where a project was last pushed on each instance, so that the console's Queue-a-run dialog
can offer that folder as the run's working folder (as `gputui run --sync` does)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gputui.models import utcnow

if TYPE_CHECKING:
    from pathlib import Path

    from gputui.services.hub import Services


def _path(services: Services, instance_id: str) -> Path:
    return services.state_dir / "pushes" / f"{instance_id}.json"


def home_relative(remote: str) -> str:
    """`~/proj/` -> `proj`; `~` -> `` (the home); an absolute path stays as it is."""
    text = remote.strip().rstrip("/")
    if text in ("~", ""):
        return ""
    return text[2:] if text.startswith("~/") else text


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
