"""Arming a lease's layers 1 and 2: the power-off scheduled on the instance (and its idle
watchdog), and the provider's own scheduled termination. The lease clock (`leases.py`) and the
jobs queue (which re-arms a lease when it gives back a power-off it had taken) both arm through
here, so neither imports the other's module for it.
"""

from __future__ import annotations

import math
import shlex
from datetime import datetime, timedelta

from gputui.i18n import N_, Deferred, _
from gputui.models import Instance, InstanceStatus, Lease, LeaseState, as_utc, utcnow
from gputui.services.hub import ServiceError, Services

WATCHDOG_FILE = ".gputui-idle-watchdog.sh"
WATCHDOG_PID = ".gputui-idle-watchdog.pid"


def shutdown_minutes(release_at: datetime, now: datetime | None = None) -> int:
    """N of `shutdown -h +N`: whole minutes rounded up (never before the deadline)."""
    seconds = (as_utc(release_at) - as_utc(now or utcnow())).total_seconds()
    return max(1, math.ceil(seconds / 60))


def shutdown_command(release_at: datetime, now: datetime | None = None) -> str:
    """`shutdown -h +N`, N whole minutes rounded up (never before the deadline)."""
    return f"shutdown -h +{shutdown_minutes(release_at, now)}"


SCHEDULED_MARK = "gputui-poweroff-scheduled"  # printed once the host took the shutdown


def watchdog_script(util_pct: float, minutes: float, interval_s: int = 60) -> str:
    """A POSIX sh loop: power off once every GPU has stayed under `util_pct` for `minutes`."""
    util = shlex.quote(f"{util_pct:g}")
    need = max(1, math.ceil(minutes * 60 / interval_s))
    return (
        "#!/bin/sh\n"
        "# gputui idle release: powers off after the GPUs stay idle (started over SSH).\n"
        f"limit={util}; need={need}; idle=0\n"
        "while :; do\n"
        f"  sleep {interval_s}\n"
        "  busy=$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null"
        " | awk -v l=\"$limit\" '$1+0 >= l+0 {b=1} END {print b+0}')\n"
        "  if [ \"$busy\" = 0 ]; then idle=$((idle+1)); else idle=0; fi\n"
        "  if [ \"$idle\" -ge \"$need\" ]; then\n"
        "    date -u +%Y-%m-%dT%H:%M:%SZ > .gputui-idle-released\n"
        "    shutdown -h now; exit 0\n"
        "  fi\n"
        "done\n"
    )


def start_watchdog_command(util_pct: float, minutes: float, interval_s: int = 60,
                           *, keep_running: bool = False) -> str:
    """(Re)start the idle watchdog. `keep_running`: leave one that is alive as it is (its idle
    count goes on) and start it only if it is gone — how a crash or a reboot is repaired."""
    script = watchdog_script(util_pct, minutes, interval_s)
    start = (
        f"cat > {WATCHDOG_FILE} <<'GPUTUI_EOF'\n{script}GPUTUI_EOF\n"
        f"chmod 700 {WATCHDOG_FILE}\n"
        f"[ -f {WATCHDOG_PID} ] && kill \"$(cat {WATCHDOG_PID})\" 2>/dev/null\n"
        f"nohup sh ./{WATCHDOG_FILE} >/dev/null 2>&1 </dev/null &\n"
        f"echo $! > {WATCHDOG_PID}\n"
    )
    if not keep_running:
        return start
    return (f"if [ -f {WATCHDOG_PID} ] && kill -0 \"$(cat {WATCHDOG_PID})\" 2>/dev/null; then :; "
            f"else\n{start}fi\n")


class LeaseArmer:
    """Sets up the layers a lease names, for one session."""

    def __init__(self, services: Services, *, idle_interval_s: int = 60) -> None:
        self.services = services
        self.store = services.store
        self.idle_interval_s = idle_interval_s

    # -- arming ---------------------------------------------------------------------------------

    def _layers(self, inst: Instance, lease: Lease) -> tuple[bool, bool]:
        """Which layers this lease names for this instance: (on the instance, at the provider)."""
        caps = self.services.provider(inst.provider).capabilities
        wants_timer = lease.release_at is not None
        return caps.power_off_stops_billing and wants_timer, caps.scheduled_release and wants_timer

    def _missing(self, inst: Instance, lease: Lease) -> bool:
        """A layer the lease names is not armed for its current deadline (a crash in between,
        a host that was unreachable when it was armed)."""
        if lease.armed_for != lease.release_at:
            return True
        on_instance, at_provider = self._layers(inst, lease)
        return (on_instance and not lease.on_instance_armed) or (
            at_provider and not lease.provider_armed)

    async def arm(self, inst: Instance, *, verify: bool = False) -> Lease | None:
        """Set up layers 1 and 2 for the instance's lease. Failures are reported, not fatal:
        layer 3 still holds, and the lease says which layers are armed (so they are retried).

        `verify`: after a crash or a restart, re-establish every layer the lease names whatever
        the lease says (a reboot clears a scheduled shutdown), leaving a live idle watchdog as
        it is. Arming is idempotent: `shutdown -c` then `shutdown -h +N`."""
        lease = await self.store.get_lease(inst.id)
        if lease is None or lease.state != LeaseState.ACTIVE:
            return lease
        provider = self.services.provider(inst.provider)
        on_instance = False
        problems: list[Deferred] = []
        host_timer: tuple[datetime, datetime | None] | None = None
        fresh = await self.store.get_instance(inst.id) or inst
        # a stopped instance has nothing running to schedule a power-off on: its timer is set
        # when it starts (AutoDL's boot command; `start` arms the lease again)
        if provider.capabilities.power_off_stops_billing and \
                fresh.status != InstanceStatus.STOPPED:
            try:  # the provider makes the instance reachable first (its endpoint may be new)
                host_timer = await self._arm_on_instance(
                    inst, lease, keep_watchdog=verify,
                    keep_schedule=verify and not self._missing(inst, lease))
                on_instance = True
            except ServiceError as exc:
                problems.append(Deferred(N_("on-instance timer: {error}"), error=str(exc)))
        provider_armed = False
        if provider.capabilities.scheduled_release:
            try:
                provider_armed = await provider.schedule_release(inst, lease.release_at)
            except Exception as exc:  # the provider's own words, one line
                problems.append(Deferred(N_("provider schedule: {error}"), error=str(exc)))
        armed_for = lease.release_at

        def armed(le: Lease) -> Lease:
            update: dict[str, object] = {
                "on_instance_armed": on_instance and le.release_at is not None,
                "provider_armed": provider_armed and le.release_at is not None,
                "armed_for": armed_for,
            }
            if host_timer is not None:  # what the host's power-off timer is now
                update["host_timer_set_at"], update["host_poweroff_at"] = host_timer
            return le.model_copy(update=update)

        lease = await self.store.update_lease(inst.id, armed)
        for problem in problems:
            self.store.notify(Deferred(N_("{name}: {problem} (the console still releases it on "
                                          "time)"), name=inst.name, problem=problem),
                              "warning", instance_id=inst.id)
        return lease

    async def _arm_on_instance(self, inst: Instance, lease: Lease, *,
                               keep_watchdog: bool = False, keep_schedule: bool = False,
                               ) -> tuple[datetime, datetime | None] | None:
        """`keep_schedule`: the lease says this deadline was armed; check that the host still
        has a shutdown scheduled (`shutdown --show`) and schedule it again only if not (a
        reboot clears it), so a periodic `gputui reap` does not cancel and re-schedule — and
        wall-message the host's users — every time.

        Returns what the host's power-off timer became — (when it was set, when it fires; None:
        only cancelled) — or None where a schedule found there was left as it was."""
        set_at = utcnow()
        fires: datetime | None = None
        commands = ["shutdown -c >/dev/null 2>&1 || true"]
        if lease.release_at is not None:
            minutes = shutdown_minutes(lease.release_at, set_at)
            fires = set_at + timedelta(minutes=minutes)
            schedule = f"shutdown -h +{minutes} && echo {SCHEDULED_MARK}"  # a shell line
            commands.append(schedule)
            if keep_schedule:
                commands = ["if shutdown --show 2>&1 | grep -qi 'scheduled for'; then :; else",
                            *commands, "fi"]
        elif keep_schedule:
            commands = []
        if lease.idle_util_pct is not None and lease.idle_minutes:
            commands.append(start_watchdog_command(lease.idle_util_pct, lease.idle_minutes,
                                                   self.idle_interval_s,
                                                   keep_running=keep_watchdog))
        result = await self.services.run(inst, "\n".join(commands) or "true", timeout=30)
        if result.exit_status != 0:
            err = (result.stderr or result.stdout).strip().splitlines()
            raise ServiceError(err[-1] if err else _("exit {code}").format(
                code=result.exit_status))
        if SCHEDULED_MARK in (result.stdout or ""):
            return set_at, fires
        return None if keep_schedule else (set_at, None)
