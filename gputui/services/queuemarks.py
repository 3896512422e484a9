"""Which instances have a jobs queue: `JobService.add` (in any process) leaves a mark in the
state folder (`queues/ID`, its time: when runs were last queued), and the queue watch
(services/queuewatch.py) looks only at those. Its own module, so that both can use it."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("gputui.queuewatch")

MARKS_DIR = "queues"


def _marks_dir(services: Any) -> Path:
    return Path(services.state_dir) / MARKS_DIR


def mark_queued(services: Any, instance_id: str) -> None:
    """Runs were queued on this instance (now): the watch looks at its queue from now on.
    Never raises (a mark that cannot be written: the Jobs screen still shows the queue)."""
    try:
        folder = _marks_dir(services)
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / instance_id
        path.touch(mode=0o600)
        os.utime(path)
    except OSError as exc:
        log.warning("queue mark for %s not written: %s", instance_id, type(exc).__name__)


def marks(services: Any) -> dict[str, float]:
    """Instance id -> when runs were last queued on it."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(_marks_dir(services)):
            with contextlib.suppress(OSError):
                out[entry.name] = entry.stat().st_mtime
    return out
