"""Run records that outlive the instance (kept here): a queue's runs and each run's last lines.

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
read a released instance's record (with the per-run costs in the store) instead of the queue
(`run_records.py`). This module depends on neither the jobs service nor the hub (the hub calls
it before a release): it reads the runner on the instance directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_, Deferred, _
from gputui.models import Instance, InstanceStatus, utcnow

if TYPE_CHECKING:
    from gputui.services.hub import Services

LINES = 200
RUN_BYTES = 64 * 1024
TOTAL_BYTES = 1024 * 1024
KEEP_TIMEOUT_S = 10.0  # before a release: never longer than this, whatever the instance does
FINAL = ("succeeded", "failed", "cancelled", "lost")  # (jobs.FINAL)

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
    return [[str(j.id), str(j.status), str(j.attempt or 1)] for j in jobs]


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
    """What the runner on the instance holds: every run, and each one's last lines."""
    from gputui.errors import GputuiError
    from gputui.services.queueplace import queue_place

    link, runner, _launch = await queue_place(services, inst)  # (a Slurm cluster's login node)
    result = await link.run(
        f'test -f "$HOME/{runner}" || exit 5; '
        'PY=$(command -v python3 || command -v python) || exit 127; '
        f'exec "$PY" "$HOME/{runner}" records {LINES} {RUN_BYTES} {TOTAL_BYTES}',
        timeout=KEEP_TIMEOUT_S)
    if result.exit_status == 5:
        raise GputuiError(_("no queue runner on it"))
    if result.exit_status != 0:
        from gputui.sanitize import sanitize

        said = (result.stderr or "").strip().splitlines()
        raise GputuiError(_("the queue runner failed: {error}").format(
            error=sanitize(said[-1], 300) if said else _("exit {code}").format(
                code=result.exit_status)))
    data = json.loads(result.stdout)
    if not isinstance(data, dict):
        raise ValueError(_("the queue runner said something unreadable"))
    return data


_TEXT = {"name": 256, "command": 4096, "cwd": 600, "error": 600}
_KEEP = ("id", "status", "exit_code", "started_at", "ended_at", "gpu_util_avg", "gpu_mem_max_mib",
         "cost", "currency", "gpus", "attempt", "retries")


def _rows(runs: list[dict[str, Any]], secrets: list[str]) -> list[dict[str, Any]]:
    """Runs as the runner reports them (or `Job.as_dict`), cleaned and masked, and only what
    is shown: no paths on the instance, no process ids."""
    from gputui.sanitize import clean_masked

    out = []
    for run in runs:
        row = {k: run.get(k) for k in _KEEP if isinstance(run.get(k), (str, int, float, list))}
        row["id"] = str(run.get("id"))
        for key, limit in _TEXT.items():
            value = run.get(key)
            row[key] = clean_masked(value, secrets, limit) if value else None
        out.append(row)
    return out


_seen: dict[str, tuple] = {}  # this process: the runs last written, per instance


def note_runs(services: Services, inst: Instance, view: Any) -> None:
    """The queue as just read: its runs (not their logs) go in the record when they changed,
    so that a release that cannot read the instance still lists every run it knew."""
    from gputui.config import known_secrets

    key = tuple((j.id, j.status, j.attempt, j.exit_code) for j in view.jobs)
    if _seen.get(inst.id) == key:
        return
    rec = load_record(services, inst.id) or RunRecord(instance_id=inst.id, instance=inst.name)
    rec.runs = _rows([j.as_dict() for j in view.jobs], known_secrets(services.config))
    try:
        _save(services, rec)
    except OSError:
        return
    _seen[inst.id] = key


def _keep_data(services: Services, inst: Instance, when: str, data: dict[str, Any]) -> None:
    from gputui.config import known_secrets
    from gputui.sanitize import clean_masked, terminal_line

    secrets = known_secrets(services.config)
    runs = _rows([r for r in data.get("runs") or [] if isinstance(r, dict)], secrets)
    tails: dict[str, dict[str, Any]] = {}
    raw: dict[str, Any] = data["tails"] if isinstance(data.get("tails"), dict) else {}
    for run in runs:
        got: dict[str, Any] = raw[run["id"]] if isinstance(raw.get(run["id"]), dict) else {}
        lines: list[Any] = got["lines"] if isinstance(got.get("lines"), list) else []
        # as a terminal leaves each line (a progress bar's \r drawn over), no escapes, masked
        kept = [clean_masked(terminal_line(str(line), limit=4000), secrets, 4000)
                for line in lines[-LINES:]]
        size, cut = 0, bool(got.get("cut"))
        for i in range(len(kept) - 1, -1, -1):  # the runner's bound, kept here too
            size += len(kept[i].encode()) + 1
            if size > RUN_BYTES:
                kept, cut = kept[i + 1:], True
                break
        tails[run["id"]] = {"lines": kept, "cut": cut, "over_cap": bool(got.get("over_cap"))}
    end: dict[str, Any] = data["queue_end"] if isinstance(data.get("queue_end"), dict) else {}
    finished = bool(runs) and all(r.get("status") in FINAL for r in runs)
    rec = RunRecord(instance_id=inst.id, instance=inst.name, runs=runs, tails=tails,
                    kept_at=utcnow().isoformat(), when=when,
                    ended_at=str(end.get("ended_at")) if end.get("ended_at") else None,
                    end=[[r["id"], str(r.get("status")), str(r.get("attempt") or 1)]
                         for r in runs] if finished else [])
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


__all__ = ["FINAL", "KEEP_TIMEOUT_S", "LINES", "RUN_BYTES", "TOTAL_BYTES", "RunRecord", "keep",
           "keep_at_queue_end", "keep_before_release", "load_record", "note_queue", "note_runs",
           "record_path"]
