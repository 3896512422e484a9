"""What a release would end, said before it goes, and recorded after.

Releasing an instance kills whatever runs on it and wipes its disk. Before a release by hand
(`gputui release`, the console's `r`), `at_stake` reads what that would end: runs of its jobs
queue that are running or queued, and results a when-done policy was to bring home that are
not home yet. The caller asks the user (or refuses without `--yes`); when nothing is at stake
the release goes ahead as it always did. `release` then releases it and records each run it
killed as `cancelled`, with its cost up to the release, in the per-run costs
(`gputui costs --runs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime

from gputui.errors import GputuiError
from gputui.i18n import _, ngettext, truncate_cells
from gputui.models import Instance, InstanceStatus, LedgerEntry, utcnow
from gputui.sanitize import sanitize
from gputui.services.hub import Services
from gputui.services.jobs import (
    RUNNER_FILE,
    Job,
    JobService,
    QueueView,
    load_when_done,
    run_cost,
)

READ_TIMEOUT_S = 10.0  # reading the queue before a release: an unreachable host is not waited on
_HAS_RUNNER = 'test -f "$HOME/.gputui/jobs/runner.py"'  # (jobs.RUNNER_FILE)


@dataclass
class AtStake:
    """What releasing an instance now would end."""

    running: list[Job] = field(default_factory=list)
    queued: list[Job] = field(default_factory=list)
    pulls: list[str] = field(default_factory=list)  # remote paths not brought home yet
    unread: str | None = None  # why the queue could not be read (then: nothing known of it)

    @property
    def empty(self) -> bool:
        return not (self.running or self.queued or self.pulls)

    def describe(self) -> str:
        """One line: the runs running and queued, the results not home."""
        parts = []
        if self.running:
            runs = _(", ").join(run_label(j) for j in self.running[:3])
            if len(self.running) > 3:
                runs += _(", …")
            parts.append(ngettext("{n} run is running ({runs})", "{n} runs are running ({runs})",
                                  len(self.running)).format(n=len(self.running), runs=runs))
        if self.queued:
            parts.append(ngettext("{n} run is queued", "{n} runs are queued",
                                  len(self.queued)).format(n=len(self.queued)))
        if self.pulls:
            paths = _(", ").join(truncate_cells(sanitize(p, 200), 40, where="middle")
                                 for p in self.pulls[:3])
            parts.append(_("the results asked for ({paths}) are not home yet").format(
                paths=paths))
        return _("; ").join(parts)


def run_label(job: Job) -> str:
    """`2 train`: a run's id and label (as a person named it; cleaned, short)."""
    from gputui.format import run_given_name

    given = run_given_name(job.id, job.name)
    label = truncate_cells(sanitize(given, 200), 24, where="middle") if given else ""
    return f"{job.id} {label}".strip()


async def at_stake(services: Services, inst: Instance, *,
                   timeout: float = READ_TIMEOUT_S) -> AtStake:
    """What a release of `inst` now would end. The queue is read only on a running instance
    whose runner was ever installed (nothing is written to the instance); a queue that cannot
    be read in `timeout` seconds is reported in `unread`, not waited on."""
    stake = AtStake()
    with contextlib.suppress(GputuiError):  # an unreadable record: nothing known of it
        rec = load_when_done(services, inst.id)
        if rec is not None and rec.done_at is None and rec.pending_pull:
            stake.pulls = [str(p.get("remote", "")) for p in rec.pulls]
    if inst.status != InstanceStatus.RUNNING:
        return stake  # nothing runs on a stopped or booting instance
    try:
        view = await asyncio.wait_for(_read_queue(services, inst), timeout)
    except TimeoutError:
        stake.unread = _("no answer in {seconds} s").format(seconds=f"{timeout:g}")
        return stake
    except GputuiError as exc:  # unreachable, refused, a state that cannot be written...
        stake.unread = sanitize(str(exc), 200)
        return stake
    except Exception as exc:  # noqa: BLE001 - a look that failed never blocks a release
        stake.unread = sanitize(f"{type(exc).__name__}: {exc}", 200)
        return stake
    if view is not None:
        stake.running = [j for j in view.jobs if j.status == "running"]
        stake.queued = [j for j in view.jobs if j.status == "queued"]
    return stake


async def _read_queue(services: Services, inst: Instance) -> QueueView | None:
    from gputui.services.queueplace import queue_place

    link, runner, _launch = await queue_place(services, inst)  # (a Slurm cluster's login node)
    if runner == RUNNER_FILE:
        probe = await services.run(inst, _HAS_RUNNER, timeout=READ_TIMEOUT_S)
    else:
        probe = await link.run(f'test -f "$HOME/{runner}"', timeout=READ_TIMEOUT_S)
    if probe.exit_status != 0:
        return None  # jobs were never used on it
    return await JobService(services).view(inst)


async def release(services: Services, inst: Instance, stake: AtStake | None = None, *,
                  recheck: bool = False) -> tuple[LedgerEntry | None, list[Job]]:
    """Release `inst` by hand; the runs that were running (`stake`) are recorded as cancelled
    at the release, with their cost. `recheck`: the user took time to answer, so the queue is
    read again first — a run that ended meanwhile is recorded as it ended, not as cancelled.
    Returns the ledger entry (None: released already, or by another process) and the runs
    recorded as cancelled."""
    if recheck and stake is not None and stake.running:
        again = await at_stake(services, inst)
        if again.unread is None:
            stake = again
    entry = await services.release(inst, "manual")
    if entry is None or stake is None or not stake.running:
        return entry, []
    return entry, await asyncio.to_thread(record_cancelled, services, inst, stake.running,
                                          entry.ended_at)


def record_cancelled(services: Services, inst: Instance, runs: list[Job],
                     at: datetime | None = None) -> list[Job]:
    """Record runs a release killed: `cancelled`, ended at the release, costed to then."""
    ended = at or utcnow()
    killed = []
    for job in runs:
        done = dataclasses.replace(job, status="cancelled", ended_at=ended, exit_code=None)
        done.cost = run_cost(inst, done)
        killed.append(done)
    JobService(services)._record_costs(inst, QueueView(inst.id, jobs=killed))
    return killed
