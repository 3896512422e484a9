"""Power state: a scheduled or past power-off, and enforcing it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from .paths import (
    SandboxStateError,
    _as_utc,
    _iso,
    _parse_iso,
    _read_json,
    _write_json,
    power_file,
)
from .processes import (
    kill_processes,
)

# --------------------------------------------------------------------------- power


@dataclass(frozen=True)
class PowerState:
    """``status``: "running" (at is None), "scheduled" (at = the power-off time, in the
    future) or "off" (at = when it went off)."""

    status: Literal["running", "scheduled", "off"]
    at: datetime | None = None
    command: str | None = None  # what asked for it, e.g. "shutdown -h +30"
    requested_at: datetime | None = None

    @property
    def is_off(self) -> bool:
        return self.status == "off"

    @property
    def scheduled_at(self) -> datetime | None:
        return self.at if self.status == "scheduled" else None

    @property
    def off_since(self) -> datetime | None:
        return self.at if self.status == "off" else None


def power_state(root: Path, now: datetime | float | None = None) -> PowerState:
    """Worked out from timestamps alone: a power-off time that has passed is "off since"
    that time, whether or not anything was running then."""
    try:
        data = _read_json(power_file(root))
    except FileNotFoundError:
        return PowerState("running")
    except (OSError, ValueError) as exc:
        raise SandboxStateError(f"cannot read {power_file(root)}: {exc}") from None
    at_text = data.get("poweroff_at") if isinstance(data, dict) else None
    if not at_text:
        return PowerState("running")
    try:
        at = _parse_iso(at_text)
        requested = _parse_iso(data["requested_at"]) if data.get("requested_at") else None
    except (TypeError, ValueError) as exc:
        raise SandboxStateError(f"{power_file(root)} is malformed: {exc}") from None
    status: Literal["scheduled", "off"] = "off" if at <= _as_utc(now) else "scheduled"
    return PowerState(status, at, data.get("command"), requested)


def schedule_poweroff(
    root: Path, at: datetime, *, command: str | None = None, now: datetime | None = None
) -> PowerState:
    """Schedule (or move) the power-off to ``at``; ``at`` <= now powers off at once (the
    caller, or the next enforce_power(), then kills the instance's GPU processes).
    Refused (SandboxStateError) when the instance is already off."""
    current = power_state(root, now)
    if current.is_off:
        raise SandboxStateError(f"instance is already powered off (since {current.at})")
    requested = _as_utc(now)
    _write_json(
        power_file(root),
        {"poweroff_at": _iso(_as_utc(at)), "requested_at": _iso(requested), "command": command},
    )
    return power_state(root, now)


def cancel_poweroff(root: Path, now: datetime | None = None) -> bool:
    """Cancel a pending power-off. Returns False when none was pending (also when the
    instance is already off: that cannot be cancelled, use power_on)."""
    current = power_state(root, now)
    if current.status != "scheduled":
        return False
    with contextlib.suppress(FileNotFoundError):
        power_file(root).unlink()
    return True


def power_on(root: Path) -> None:
    """Start a stopped instance again (the provider's start): forget any power-off."""
    with contextlib.suppress(FileNotFoundError):
        power_file(root).unlink()


def enforce_power(root: Path, now: datetime | None = None, *, grace_s: float = 2.0) -> PowerState:
    """Apply the power state: when the instance is off, kill its registered GPU processes
    (SIGTERM, then SIGKILL after ``grace_s``) and drop their records. Cheap when running.
    The SSH server calls this on each connection/command; the shims call it on start."""
    state = power_state(root, now)
    if state.is_off:
        kill_processes(root, grace_s=grace_s)
    return state
