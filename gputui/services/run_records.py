"""Run records that outlive the instance: a queue's runs and each run's last log lines, kept here.

The queue and its logs live on the instance (`jobs_runner.py`), and a release wipes them. So
they are copied here, into `<state>/jobs/records/<instance id>.json` (owner-only), twice:

- when the queue ends (whoever reads the finished queue first: the Jobs screen, `gputui jobs`,
  the clock finishing a when-done policy, `gputui run`);
- just before a release, by whichever process releases it (by hand, timer, idle, budget,
  when-done, daemon, reap): bounded to `KEEP_TIMEOUT_S`; if the instance does not answer in
  time the release goes ahead and the record says the logs could not be kept, and why.

Each run keeps at most `LINES` lines and `RUN_BYTES` bytes of its log, the instance at most
`TOTAL_BYTES` (newest runs first). Every text is cleaned of control characters and every
secret gputui holds is masked before it is written. `gputui jobs NAME` and the Jobs screen
read a released instance's record (with the per-run costs in the store) instead of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gputui.i18n import N_, Deferred, _
from gputui.models import Instance, InstanceStatus, as_utc, utcnow
from gputui.services.hub import Services

LINES = 200
RUN_BYTES = 64 * 1024
TOTAL_BYTES = 1024 * 1024
KEEP_TIMEOUT_S = 10.0  # before a release: never longer than this, whatever the instance does

_log = logging.getLogger("gputui.jobs")
_kept_ends: dict[str, tuple] = {}  # this process: the queue end last kept, per instance
_tried: dict[str, float] = {}  # this process: when keeping a queue's end last failed
RETRY_S = 60.0


@dataclass
class RunRecord:
    instance_id: str
    instance: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)
    tails: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> lines, cut, over_cap
    kept_at: str | None = None  # when the runs and logs were last read from the instance
    when: str | None = None  # "queue-end" or "release": what that read was for
    ended_at: str | None = None  # the queue's end, as the runner recorded it
    logs_lost: str | None = None  # why the logs could not be kept at the release (None: kept)
    end: list[list[str]] = field(default_factory=list)  # the queue end kept: [id, status, attempt]

    def as_json(self) -> bytes:
        return json.dumps(self.__dict__, indent=1).encode()


def record_path(services: Services, instance_id: str) -> Path:
    return services.state_dir / "jobs" / "records" / f"{instance_id}.json"


def load_record(services: Services, instance_id: str) -> RunRecord | None:
    """The record kept for this instance (None: none, or it cannot be read — it is only a
    copy; what cannot be read is not shown)."""
    try:
        data = json.loads(record_path(services, instance_id).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("instance_id") != instance_id:
            return None
        rec = RunRecord(**{k: data[k] for k in RunRecord.__dataclass_fields__ if k in data})
        if not isinstance(rec.runs, list) or not isinstance(rec.tails, dict):
            return None
        rec.runs = [r for r in rec.runs if isinstance(r, dict)]
        return rec
    except (OSError, ValueError, TypeError):
        return None


def _save(services: Services, rec: RunRecord) -> None:
    from gputui.config import write_private

    write_private(record_path(services, rec.instance_id), rec.as_json())


def note_queue(services: Services, inst: Instance) -> None:
    """Runs were queued on `inst`: from now on its runs are kept here at the queue's end and
    before a release (a record with no runs yet says so to every gputui process)."""
    if record_path(services, inst.id).exists():
        return
    with contextlib.suppress(OSError):
        _save(services, RunRecord(instance_id=inst.id, instance=inst.name))


def _end_key(jobs: list[Any]) -> list[list[str]]:
    return [[str(j.id), str(j.status), str(j.attempt)] for j in jobs]


async def keep_at_queue_end(services: Services, inst: Instance, view: Any) -> None:
    """The queue has ended: keep its runs and their last lines here, once for each end."""
    key = _end_key(view.jobs)
    if _kept_ends.get(inst.id) == tuple(map(tuple, key)):
        return
    import time

    if time.monotonic() - _tried.get(inst.id, -1e9) < RETRY_S:
        return  # it failed a moment ago: the next look tries again, not every poll
    old = await asyncio.to_thread(load_record, services, inst.id)
    if old is not None and old.end == key:
        _kept_ends[inst.id] = tuple(map(tuple, key))
        return
    if await keep(services, inst, "queue-end"):
        _kept_ends[inst.id] = tuple(map(tuple, key))
        _tried.pop(inst.id, None)
    else:
        _tried[inst.id] = time.monotonic()


async def keep_before_release(services: Services, inst: Instance) -> None:
    """Before `inst` is released: its runs and their last lines, read in at most
    `KEEP_TIMEOUT_S`. Never raises, never waits longer: the release goes ahead either way."""
    try:
        if inst.status != InstanceStatus.RUNNING or inst.ssh is None:
            if record_path(services, inst.id).exists():
                from gputui.format import status_word

                await _not_kept(services, inst, Deferred(N_("it was {status}"),
                                                         status=status_word(inst.status)))
            return
        if not record_path(services, inst.id).exists():
            return  # no runs were ever queued on it from here
        await keep(services, inst, "release")
    except Exception as exc:  # noqa: BLE001 - nothing here may stop a release
        _log.warning("%s: run records not kept: %s", inst.id, type(exc).__name__)


async def keep(services: Services, inst: Instance, when: str, *,
               timeout: float | None = None) -> bool:
    """Read the runs and their last lines from `inst` and keep them. False (and, before a
    release, the reason in the record) when they could not be read in `timeout` seconds."""
    from gputui.errors import GputuiError
    from gputui.sanitize import sanitize

    timeout = KEEP_TIMEOUT_S if timeout is None else timeout
    why: str | Deferred
    try:
        data = await asyncio.wait_for(_fetch(services, inst), timeout)
    except TimeoutError:
        why = Deferred(N_("no answer in {seconds} s"), seconds=f"{timeout:g}")
    except GputuiError as exc:
        why = sanitize(str(exc), 300)
    except Exception as exc:  # noqa: BLE001 - a copy that failed is said, never raised
        why = sanitize(f"{type(exc).__name__}: {exc}", 300)
    else:
        try:
            await asyncio.to_thread(_keep_data, services, inst, when, data)
            return True
        except OSError as exc:
            why = sanitize(str(exc), 300)
    if when == "release":
        await _not_kept(services, inst, why)
    return False


async def _fetch(services: Services, inst: Instance) -> dict[str, Any]:
    from gputui.services.jobs import JobService

    data = await JobService(services)._json(
        inst, f"records {LINES} {RUN_BYTES} {TOTAL_BYTES}")
    if not isinstance(data, dict):
        raise ValueError(_("the queue runner said something unreadable"))
    return data


def _rows(jobs: list[Any], secrets: list[str]) -> list[dict[str, Any]]:
    from gputui.sanitize import clean_masked

    runs = []
    for job in jobs:
        row = job.as_dict()
        row["name"] = clean_masked(job.name, secrets, 256)
        row["command"] = clean_masked(job.command, secrets, 4096)
        row["error"] = clean_masked(job.error, secrets, 600) if job.error else None
        row["cwd"] = clean_masked(job.cwd, secrets, 600) if job.cwd else None
        row.pop("log", None)  # its path on the instance: gone with it
        row.pop("seconds", None)
        runs.append(row)
    return runs


_seen: dict[str, tuple] = {}  # this process: the runs last written, per instance


def note_runs(services: Services, inst: Instance, view: Any) -> None:
    """The queue as just read: its runs (not their logs) go in the record when they changed,
    so that a release that cannot read the instance still lists every run it knew."""
    from gputui.config import known_secrets

    key = tuple((j.id, j.status, j.attempt, j.exit_code) for j in view.jobs)
    if _seen.get(inst.id) == key:
        return
    rec = load_record(services, inst.id) or RunRecord(instance_id=inst.id, instance=inst.name)
    rec.runs = _rows(view.jobs, known_secrets(services.config))
    try:
        _save(services, rec)
    except OSError:
        return
    _seen[inst.id] = key


def _keep_data(services: Services, inst: Instance, when: str, data: dict[str, Any]) -> None:
    from gputui.config import known_secrets
    from gputui.sanitize import clean_masked
    from gputui.services.jobs import clean_line, job_from_runner

    secrets = known_secrets(services.config)
    jobs = [job_from_runner(r, inst, secrets) for r in data.get("runs") or []
            if isinstance(r, dict)]
    runs = _rows(jobs, secrets)
    tails: dict[str, dict[str, Any]] = {}
    raw = data.get("tails") if isinstance(data.get("tails"), dict) else {}
    for job in jobs:
        got = raw.get(job.id) if isinstance(raw.get(job.id), dict) else {}
        lines = got.get("lines") if isinstance(got.get("lines"), list) else []
        kept = [clean_masked(clean_line(str(line)), secrets, 4000) for line in lines[-LINES:]]
        size, cut = 0, bool(got.get("cut"))
        for i in range(len(kept) - 1, -1, -1):  # the runner's bound, kept here too
            size += len(kept[i].encode()) + 1
            if size > RUN_BYTES:
                kept, cut = kept[i + 1:], True
                break
        tails[job.id] = {"lines": kept, "cut": cut, "over_cap": bool(got.get("over_cap"))}
    end = data.get("queue_end") if isinstance(data.get("queue_end"), dict) else {}
    finished = bool(jobs) and all(j.final for j in jobs)
    rec = RunRecord(instance_id=inst.id, instance=inst.name, runs=runs, tails=tails,
                    kept_at=utcnow().isoformat(), when=when,
                    ended_at=str(end.get("ended_at")) if end.get("ended_at") else None,
                    end=_end_key(jobs) if finished else [])
    _save(services, rec)


async def _not_kept(services: Services, inst: Instance, why: str | Deferred) -> None:
    """The release goes ahead without the logs: the record (the runs as last read) says why."""
    def write() -> None:
        rec = load_record(services, inst.id) or RunRecord(instance_id=inst.id,
                                                          instance=inst.name)
        rec.logs_lost = str(why)
        rec.when = "release"
        _save(services, rec)

    with contextlib.suppress(OSError):
        await asyncio.to_thread(write)


def _time(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        return as_utc(datetime.fromisoformat(str(text)))
    except ValueError:
        return None


def released_view(services: Services, inst: Instance) -> tuple[Any, RunRecord | None]:
    """The queue of an instance that is gone, as kept here: the record's runs, with what the
    per-run costs in the store say of each (exit code, time, cost) where the record did not
    see it end. A run still running or queued at the release ended with it: `cancelled` when
    the record was read at the release, `lost` (how it ended is not known) when it was not.
    (None for the record: nothing was kept, only the costs recorded, if any.)"""
    from decimal import Decimal

    from gputui.services.jobs import FINAL, Job, QueueView, _num, _whole, run_cost

    rec = load_record(services, inst.id)
    view = QueueView(inst.id)
    jobs: dict[str, Job] = {}
    for r in rec.runs if rec is not None else []:
        gpus = r.get("gpus")
        job = Job(id=str(r.get("id")), name=str(r.get("name") or ""),
                  command=str(r.get("command") or ""), status=str(r.get("status") or "lost"),
                  cwd=r.get("cwd") if isinstance(r.get("cwd"), str) else None,
                  gpus=tuple(int(g) for g in gpus) if isinstance(gpus, list) and all(
                      _whole(g) is not None for g in gpus) else None,
                  retries=_whole(r.get("retries")) or 0, attempt=_whole(r.get("attempt")) or 1,
                  exit_code=_whole(r.get("exit_code")), started_at=_time(r.get("started_at")),
                  ended_at=_time(r.get("ended_at")), gpu_util_avg=_num(r.get("gpu_util_avg")),
                  gpu_mem_max_mib=_num(r.get("gpu_mem_max_mib")),
                  error=r.get("error") if isinstance(r.get("error"), str) else None,
                  currency=inst.billing.currency)
        jobs[job.id] = job
    for row in services.store.run_costs_sync(inst.id):  # the costs recorded as runs ended
        job_id = str(row.get("job_id"))
        job = jobs.get(job_id)
        if job is not None and job.final:
            continue
        if job is None:
            job = jobs[job_id] = Job(id=job_id, name=str(row.get("label") or ""),
                                     command=str(row.get("command") or ""), status="lost",
                                     currency=str(row.get("currency") or inst.billing.currency))
        job.status = str(row.get("status") or "lost")
        job.exit_code = _whole(row.get("exit_code"))
        job.started_at = _time(row.get("started_at"))
        job.ended_at = _time(row.get("ended_at"))
        job.attempt = _whole(row.get("attempt")) or job.attempt
        with contextlib.suppress(ArithmeticError, TypeError, ValueError):
            job.cost = Decimal(str(row.get("cost")))
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


__all__ = ["KEEP_TIMEOUT_S", "LINES", "RUN_BYTES", "TOTAL_BYTES", "RunRecord", "keep",
           "keep_at_queue_end", "keep_before_release", "kept_tail", "load_record",
           "no_output", "note_queue", "record_note", "record_path", "released_view"]
