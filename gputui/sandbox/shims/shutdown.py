"""`shutdown` for a sandbox instance, after systemd's:

    shutdown [-h|-P|-H] [TIME] [WALL...]     TIME: now | +MINUTES | HH:MM (default +1)
    shutdown -c                              cancel a pending power-off
    shutdown --show                          show a pending power-off
    shutdown -r now                          reboot: the instance's GPU processes end

A scheduled power-off is stored as an absolute UTC time in .sandbox/power.json and takes
effect at that time whether or not anything runs then (state.power_state works it out).
As systemd does, the confirmation goes to stderr:
"Shutdown scheduled for Mon 2026-01-05 10:30:00 UTC, use 'shutdown -c' to cancel."
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .state import (
    SandboxStateError,
    cancel_poweroff,
    enforce_power,
    kill_processes,
    root_from_env,
    schedule_poweroff,
)

USAGE = """shutdown [OPTIONS...] [TIME] [WALL...]

Shut down the system.

     --help      Show this help
  -H --halt      Halt the machine
  -P --poweroff  Power-off the machine (the default)
  -r --reboot    Reboot the machine
  -h             Equivalent to --poweroff, overridden by --halt
  -k             Don't halt/power-off/reboot, just send warnings
     --no-wall   Don't send wall message before halt/power-off/reboot
  -c             Cancel a pending shutdown
     --show      Show pending shutdown
"""


class ShutdownError(Exception):
    pass


def format_when(at: datetime) -> str:
    """systemd's timestamp style, in local time: 'Mon 2026-01-05 10:30:00 UTC'."""
    local = at.astimezone()
    return local.strftime("%a %Y-%m-%d %H:%M:%S ") + (local.tzname() or "UTC")


def parse_time(spec: str, now: datetime) -> datetime:
    """now | +M (minutes) | HH:MM (local; tomorrow if already past today)."""
    if spec == "now":
        return now
    m = re.fullmatch(r"\+?(\d+)", spec)
    if m and (spec.startswith("+") or spec.isdigit()):
        return now + timedelta(minutes=int(m.group(1)))
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", spec)
    if m and int(m.group(1)) < 24 and int(m.group(2)) < 60:
        local_now = now.astimezone()
        at = local_now.replace(
            hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0
        )
        if at <= local_now:
            at += timedelta(days=1)
        return at.astimezone(UTC)
    raise ShutdownError(f"Failed to parse time specification: {spec}")


def run(
    argv: list[str], root: Path, now: datetime | None = None, command_name: str = "shutdown"
) -> int:
    now = now or datetime.now(UTC)
    action = "poweroff"
    cancel = show = warn_only = False
    positional: list[str] = []
    for arg in argv:
        if positional:  # everything after TIME is the wall message
            positional.append(arg)
        elif arg == "--help":
            sys.stdout.write(USAGE)
            return 0
        elif arg in ("-H", "--halt", "-P", "--poweroff", "-h"):
            pass  # halt / power-off: the same thing for a rented box
        elif arg in ("-r", "--reboot"):
            action = "reboot"
        elif arg == "-k":
            warn_only = True
        elif arg == "--no-wall":
            pass
        elif arg == "-c":
            cancel = True
        elif arg == "--show":
            show = True
        elif arg.startswith("-") and arg != "-":
            raise ShutdownError(f"{command_name}: invalid option -- '{arg.lstrip('-')}'")
        else:
            positional.append(arg)

    state = enforce_power(root, now)
    if state.is_off:
        raise ShutdownError("this sandbox instance is powered off")
    if cancel:
        cancel_poweroff(root, now)
        return 0
    if show:
        if state.scheduled_at is not None:
            sys.stderr.write(
                f"Shutdown scheduled for {format_when(state.scheduled_at)}, "
                "use 'shutdown -c' to cancel.\n"
            )
        else:
            sys.stderr.write("No scheduled shutdown.\n")
        return 0

    at = parse_time(positional[0] if positional else "+1", now)
    if warn_only:
        return 0
    if action == "reboot":
        if at > now:
            raise ShutdownError("scheduled reboots are not simulated; use 'shutdown -r now'")
        kill_processes(root)  # a reboot ends every process; the instance keeps running
        return 0
    command = " ".join([command_name, *argv]).strip()
    schedule_poweroff(root, at, command=command, now=now)
    if at <= now:
        enforce_power(root, now)  # off now: its GPU processes die with it
        return 0
    sys.stderr.write(f"Shutdown scheduled for {format_when(at)}, use 'shutdown -c' to cancel.\n")
    return 0


def main(argv: list[str] | None = None, command_name: str = "shutdown") -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv, root_from_env(), command_name=command_name)
    except (ShutdownError, SandboxStateError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
