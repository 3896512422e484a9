"""The look at every instance's jobs queue, wherever the renter is in the console: a run that
fails and a queue that ends are said (a toast and the bell; the renter's phone where a queue
ends under `keep`, which no when-done carries out), and Home's Queue column reads from here.

Cheap by design:
- Only instances known to have a queue are looked at: `JobService.add` (any process: the
  console, `gputui jobs NAME add`, `gputui run`, MCP) leaves a mark in the state folder
  (services/queuemarks.py), and a when-done record says so too. Nothing is asked of an
  instance without.
- Every read of a queue feeds the watch (`observe`, through `JobService.view`): the Jobs
  screen's poll, the when-done clock's look, a release's look. The watch reads a queue itself
  only when nothing else has for `WATCH_EVERY_S`, in the background (never in the lease clock's
  way), and no more once the queue has ended — until a run is added again.
- Only a process that keeps a watch (the console, the daemon) says anything: a command that
  reads a queue (`gputui jobs NAME`) prints what it always printed.
- A queue that had already ended when this process first read it is no toast (nobody was
  looking), but if it ended within `LATE_END_S` under `keep` the phone hears of it once: the
  renter who queued, closed the console and started `gputui daemon` is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_, Deferred, _
from gputui.services.queuemarks import marks
from gputui.store import QueueChanged

if TYPE_CHECKING:
    from gputui.models import Instance
    from gputui.services.hub import Services
    from gputui.services.jobs import QueueView

log = logging.getLogger("gputui.queuewatch")

WATCH_EVERY_S = 10.0  # a queue nothing else read meanwhile is read this often
LATE_END_S = 3600.0  # a queue that ended this recently, told to nobody, is told to the phone
READ_TIMEOUT_S = 30.0  # one read of a queue (over SSH): an unreachable host is not waited on
FAILED = ("failed", "lost")


@dataclass(frozen=True)
class QueueSummary:
    """An instance's queue as Home shows it: `3/5 ✓2 ✗1` while it runs, `done` once ended."""

    total: int = 0
    finished: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    ended: bool = False

    @classmethod
    def of(cls, view: QueueView) -> QueueSummary:
        counts = view.counts()
        done = sum(n for status, n in counts.items() if status not in ("queued", "running"))
        return cls(total=len(view.jobs), finished=done, succeeded=counts.get("succeeded", 0),
                   failed=sum(counts.get(s, 0) for s in FAILED),
                   cancelled=counts.get("cancelled", 0), ended=view.finished)

    def cell(self) -> str:
        """The Queue cell: blank with no runs."""
        if not self.total:
            return ""
        failed = f" ✗{self.failed}" if self.failed else ""
        if self.ended:
            return _("done") + failed
        ok = f" ✓{self.succeeded}" if self.succeeded else ""
        return f"{self.finished}/{self.total}{ok}{failed}"


def queue_cell(services: Services, instance_id: str, *, held: bool = False) -> str:
    """Home's Queue cell for an instance: `held` when its release waits for results that are
    not home, else what the watch last saw (blank: no queue known)."""
    if held:
        return _("held")
    watch = services.find_attached(QueueWatch)
    summary = watch.summary(instance_id) if watch is not None else None
    return summary.cell() if summary is not None else ""


class QueueWatch:
    """The session's look at every queue (see the module's doc)."""

    def __init__(self, services: Services, *, every_s: float | None = None) -> None:
        self.services = services
        self.store = services.store
        self.every_s = WATCH_EVERY_S if every_s is None else every_s
        self.started = time.time()
        self._summary: dict[str, QueueSummary] = {}
        self._runs: dict[str, dict[str, str]] = {}  # instance -> run id -> "status:attempt"
        self._ended: dict[str, bool] = {}
        self._ended_mark: dict[str, float] = {}  # the mark's time when the end was seen
        self._seen_at: dict[str, float] = {}  # monotonic time of the last read
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        # every read of a queue in this process comes here (JobService.view)
        services.queue_observers.append(self._observe_safely)

    def summary(self, instance_id: str) -> QueueSummary | None:
        return self._summary.get(instance_id)

    # -- what was read ---------------------------------------------------------------------

    def observe(self, inst: Instance, view: QueueView) -> None:
        """A read of `inst`'s queue (by anyone in this process): say what changed since the
        last one. The first read of a queue that was there before this process started is
        only taken in (what happened while nobody watched is not news)."""
        self._seen_at[inst.id] = time.monotonic()
        summary = QueueSummary.of(view)
        mark = marks(self.services).get(inst.id)
        if self._ended.get(inst.id) and (mark or 0.0) > self._ended_mark.get(inst.id, 0.0):
            self._ended[inst.id] = False  # runs queued since it ended: a new end to tell
        before = self._runs.get(inst.id)
        if before is None:
            fresh = mark is not None and mark >= self.started  # queued while we watched
            before = {} if fresh else None
        now = {j.id: f"{j.status}:{j.attempt}" for j in view.jobs}
        if before is None and view.finished and not self._ended.get(inst.id):
            self._late_end(inst, view)
        if before is not None:
            for job in view.jobs:
                if job.status in FAILED and before.get(job.id) != now[job.id]:
                    self._say_failed(inst, job)
            was_ended = self._ended.get(inst.id, False)
            if view.finished and not was_ended:
                self._say_ended(inst, view, summary)
        self._runs[inst.id] = now
        if view.finished and not self._ended.get(inst.id):
            self._ended_mark[inst.id] = mark or 0.0
        self._ended[inst.id] = view.finished
        if self._summary.get(inst.id) != summary:
            self._summary[inst.id] = summary
            self.store.emit(QueueChanged(inst.id))

    def _observe_safely(self, inst: Instance, view: QueueView) -> None:
        try:
            self.observe(inst, view)
        except Exception as exc:  # noqa: BLE001 - what the console says never breaks a read
            log.warning("queue watch: %s", type(exc).__name__)

    def _say_failed(self, inst: Instance, job: Any) -> None:
        code = "-" if job.exit_code is None else str(job.exit_code)
        from gputui.format import run_given_name

        given = run_given_name(job.id, job.name)  # (an unlabelled run: "run 1", not "run 1 run 1")
        run = f"{job.id} {given}" if given else job.id
        self.store.notify(Deferred(N_("{name}: run {run} failed (exit code {code})"),
                                   name=inst.name, run=run, code=code),
                          "warning", bell=True, instance_id=inst.id)

    def _say_ended(self, inst: Instance, view: QueueView, summary: QueueSummary) -> None:
        from gputui.services.jobs import JobError, load_when_done

        try:
            rec = load_when_done(self.services, inst.id)
        except JobError:
            rec = None
        if rec is not None and rec.done_at is None and (rec.policy != "keep" or rec.pulls):
            return  # its when-done goes next, and says what it did (with the bell)
        tally = Deferred(N_("{succeeded} succeeded, {failed} failed, {cancelled} cancelled"),
                         succeeded=summary.succeeded, failed=summary.failed,
                         cancelled=summary.cancelled)
        self.store.notify(Deferred(N_("{name}: queue ended — {tally}; it keeps running and "
                                      "billing until you release it"),
                                   name=inst.name, tally=tally),
                          "warning" if summary.failed else "information", bell=True,
                          instance_id=inst.id)
        self._tell_phone(inst, view)

    def _late_end(self, inst: Instance, view: QueueView) -> None:
        """A queue that ended before this process first read it (queued, then the console
        closed, then `gputui daemon` started): no toast (nobody was looking), but the phone
        is told once if the end is recent and nothing told it (the claim in the state database
        keeps it once across processes and restarts)."""
        from gputui.services.jobs import JobError, load_when_done

        ends = [j.ended_at for j in view.jobs if j.ended_at is not None]
        end = view.ended_at or (max(ends) if ends else None)
        if end is None or (datetime.now(UTC) - end).total_seconds() > LATE_END_S:
            return
        try:
            rec = load_when_done(self.services, inst.id)
        except JobError:
            return
        if rec is not None and (rec.policy != "keep" or rec.pulls):
            return  # its when-done says what it did
        self._tell_phone(inst, view)

    def _tell_phone(self, inst: Instance, view: QueueView) -> None:
        """Under `keep` nothing else tells the renter's phone the queue ended: once across
        processes (the end's time is the key)."""
        from decimal import Decimal

        from gputui.services.notify import configured_urls, queue_ended

        if not configured_urls(self.services.config):
            return
        from gputui.services.hub import notify_event

        costs = [j.cost for j in view.jobs if j.cost is not None]
        starts = [j.started_at for j in view.jobs if j.started_at is not None]
        ends = [j.ended_at for j in view.jobs if j.ended_at is not None]
        seconds = (max(ends) - min(starts)).total_seconds() if starts and ends else None
        end = view.ended_at.isoformat() if view.ended_at else (max(ends).isoformat()
                                                               if ends else "")
        notify_event(self.services, queue_ended(
            inst, counts=view.counts(), seconds=seconds,
            cost=sum(costs, Decimal(0)) if costs else None, outcome="kept", results=None,
            discriminator=f"watch:{end}"))

    # -- reading what nobody read ------------------------------------------------------------

    def tick(self, instances: list[Instance], when_done: set[str]) -> None:
        """The lease clock's call (every second): read, in the background, each queue that
        runs and that nothing read for `every_s`. `when_done`: the instances with a when-done
        record (`jobs.when_done_ids`, listed once by the clock). Returns at once."""
        from gputui.models import InstanceStatus

        live = {i.id for i in instances}
        for gone in [i for i in self._summary if i not in live]:
            self._forget(gone)
        queued = marks(self.services)
        now = time.monotonic()
        for inst in instances:
            if inst.status != InstanceStatus.RUNNING:
                continue
            mark = queued.get(inst.id)
            if mark is None and inst.id not in when_done:
                continue
            if self._ended.get(inst.id) and (mark or 0.0) <= self._ended_mark.get(inst.id, 0.0):
                continue  # ended, and nothing queued since
            if now - self._seen_at.get(inst.id, -1e9) < self.every_s:
                continue
            task = self._tasks.get(inst.id)
            if task is not None and not task.done():
                continue
            self._seen_at[inst.id] = now  # (a read that fails is tried again after every_s)
            self._tasks[inst.id] = asyncio.get_running_loop().create_task(self._read(inst))

    async def _read(self, inst: Instance) -> None:
        from gputui.errors import GputuiError
        from gputui.services.jobs import JobService

        try:
            await asyncio.wait_for(JobService(self.services).view(inst), READ_TIMEOUT_S)
        except (GputuiError, TimeoutError) as exc:  # unreachable now: the next look tries again
            log.debug("queue of %s not read: %s", inst.id, type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - a look that failed never stops the clock
            log.warning("queue of %s not read: %s", inst.id, type(exc).__name__)

    def _forget(self, instance_id: str) -> None:
        for table in (self._summary, self._runs, self._ended, self._ended_mark, self._seen_at):
            table.pop(instance_id, None)  # type: ignore[attr-defined]

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.services.queue_observers.remove(self._observe_safely)
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()


def session_queue_watch(services: Services) -> QueueWatch:
    """The session's one watch (made by the console and the daemon; closed with the session)."""
    return services.attached(QueueWatch, QueueWatch)
