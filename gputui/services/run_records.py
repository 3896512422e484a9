"""Run records after the instance is gone: its queue's runs, exit codes, times and costs, and
each run's last lines, as kept here (`run_keep.py`) — for `gputui jobs NAME` and the Jobs screen.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gputui.i18n import _
from gputui.models import Instance, as_utc, utcnow
from gputui.services.hub import Services
from gputui.services.run_keep import (
    KEEP_TIMEOUT_S,
    LINES,
    RUN_BYTES,
    TOTAL_BYTES,
    RunRecord,
    load_record,
    record_path,
)


def _time(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        return as_utc(datetime.fromisoformat(str(text)))
    except ValueError:
        return None


def recorded_cost(row: dict[str, Any]) -> Decimal:
    """A run's cost as recorded when it ended. Costs were once rounded to the cent there, so
    a run of a few seconds was kept as 0.00: such a row is costed again from its own rate,
    seconds and share of the GPUs (what the cent rounding threw away)."""
    cost = Decimal(str(row.get("cost")))
    if cost != 0:
        return cost
    with contextlib.suppress(ArithmeticError, TypeError, ValueError):
        rate = Decimal(str(row.get("rate_per_hour")))
        seconds = Decimal(str(row.get("seconds")))
        share = Decimal(1)
        gpus, count = row.get("gpus"), row.get("gpu_count")
        if isinstance(gpus, list) and isinstance(count, int) and count > 0:
            share = min(Decimal(1), Decimal(len(gpus)) / Decimal(count))
        if rate > 0 and seconds > 0:
            from gputui.services.jobs import RUN_COST_QUANTUM

            return (rate * share * seconds / 3600).quantize(RUN_COST_QUANTUM, ROUND_HALF_UP)
    return cost


def released_view(services: Services, inst: Instance) -> tuple[Any, RunRecord | None]:
    """The queue of an instance that is gone, as kept here: the record's runs, with what the
    per-run costs in the store say of each (exit code, time, cost) where the record did not
    see it end. A run still running or queued at the release ended with it: `cancelled` when
    the record was read at the release, `lost` (how it ended is not known) when it was not.
    (None for the record: nothing was kept, only the costs recorded, if any.)"""

    from gputui.config import known_secrets
    from gputui.services.jobs import FINAL, Job, QueueView, _whole, job_from_runner, run_cost

    rec = load_record(services, inst.id)
    view = QueueView(inst.id)
    secrets = known_secrets(services.config)
    jobs: dict[str, Job] = {}
    for r in rec.runs if rec is not None else []:
        job = job_from_runner(r, inst, secrets)
        job.cost = None  # costed below, once its end is known
        jobs[job.id] = job
    for row in services.store.run_costs_sync(inst.id):  # the costs recorded as runs ended
        job_id = str(row.get("job_id"))
        if job_id in jobs and jobs[job_id].final:
            continue
        if job_id not in jobs:
            jobs[job_id] = Job(id=job_id, name=str(row.get("label") or ""),
                                     command=str(row.get("command") or ""), status="lost",
                                     currency=str(row.get("currency") or inst.billing.currency))
        job = jobs[job_id]
        job.status = str(row.get("status") or "lost")
        job.exit_code = _whole(row.get("exit_code"))
        job.started_at = _time(row.get("started_at"))
        job.ended_at = _time(row.get("ended_at"))
        job.attempt = _whole(row.get("attempt")) or job.attempt
        with contextlib.suppress(ArithmeticError, TypeError, ValueError):
            job.cost = recorded_cost(row)
    at_release = rec is not None and rec.when == "release" and rec.logs_lost is None
    gone = inst.ended_at or utcnow()
    for job in jobs.values():
        if job.status not in FINAL:
            job.status = "cancelled" if at_release else "lost"
            job.exit_code = None
            job.ended_at = gone if job.started_at is not None else None
        if job.cost is None and job.started_at is not None and (
                job.ended_at is not None and (job.status != "lost" or at_release)):
            job.cost = run_cost(inst, job)
    view.jobs = sorted(jobs.values(), key=lambda j: int(j.id) if j.id.isdigit() else 0)
    view.ended_at = _time(rec.ended_at) if rec is not None else None
    return view, rec


def kept_tail(rec: RunRecord | None, job_id: str) -> tuple[list[str], bool, bool] | None:
    """A run's last lines as kept here: (lines, cut, over the instance's cap); None when none
    were kept for it."""
    if rec is None or rec.logs_lost is not None and job_id not in rec.tails:
        return None
    got = rec.tails.get(job_id)
    if not isinstance(got, dict) or not isinstance(got.get("lines"), list):
        return None
    return ([str(line) for line in got["lines"]], bool(got.get("cut")),
            bool(got.get("over_cap")))


def record_note(rec: RunRecord | None, inst: Instance) -> str:
    """One line under a released instance's runs: how much of each log was kept, and when —
    or that the logs could not be kept, and why."""
    from gputui.format import local_clock

    kept = _time(rec.kept_at) if rec is not None else None
    if rec is None or kept is None:
        if rec is not None and rec.logs_lost:
            return _("its logs could not be kept at the release ({why}); the runs are as their "
                     "costs were recorded").format(why=rec.logs_lost)
        return _("no logs were kept: it ended before gputui read its queue; the runs are as "
                 "their costs were recorded")
    if rec.logs_lost:
        return _("its logs could not be kept at the release ({why}); runs and logs as read at "
                 "{time}").format(why=rec.logs_lost, time=local_clock(kept))
    if rec.when == "release":
        return _("the last {lines} lines of each run's log were kept at the release "
                 "({time})").format(lines=LINES, time=local_clock(kept))
    return _("the last {lines} lines of each run's log were kept at the queue's end "
             "({time})").format(lines=LINES, time=local_clock(kept))


def no_output(job: Any) -> str:
    """What a run with an empty log says instead: `no output; exit code 3`."""
    from gputui.format import status_text

    if job.exit_code is not None:
        return _("no output; exit code {code}").format(code=job.exit_code)
    if job.status in ("queued", "running"):
        return _("no output yet ({status})").format(status=status_text(job.status))
    return _("no output; {status}").format(status=status_text(job.status))


def forget(services: Services, instance_id: str) -> None:
    """Drop a record (an instance deleted from the history)."""
    with contextlib.suppress(OSError):
        record_path(services, instance_id).unlink()


__all__ = ["KEEP_TIMEOUT_S", "LINES", "RUN_BYTES", "TOTAL_BYTES", "RunRecord", "kept_tail",
           "load_record", "no_output", "record_note", "record_path", "recorded_cost",
           "released_view"]
