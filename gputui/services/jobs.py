"""Jobs: a queue of runs on the instance, its results brought home, and a release when it is done.

The queue itself lives on the instance: a small runner (`jobs_runner.py`, standard library only)
written to `~/.gputui/jobs/runner.py` at first use and started detached from the SSH session, so
runs go on when the link drops or no gputui is running. This module is its client: it queues
runs, reads the queue, follows logs, cancels and retries over the instance's one link.

When the queue ends, the when-done policy (kept here, in `<state>/jobs/<instance id>.json`, and
on the instance for its power-off) is carried out by whichever gputui sees it first — the
console's clock, `gputui reap`, `gputui run`: results named by `--pull` come home first, then
the instance is released or stopped. No automatic release goes ahead while results that were
asked for are not home: the instance is kept and the alarm raised instead.

On a platform whose own scheduler runs the work (a Slurm allocation: `Provider.queue_host`),
the runner lives where that platform says (the cluster's login node, in the shared home, one
folder per allocation) and starts each run as the scheduler's job step; everything here is the
same.

Each finished run's cost (the instance's rate, times its share of the GPUs, over the run's time)
goes in the store's per-run costs, labelled with the run's name: a breakdown of the instance's
cost, never added to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Literal

from gputui.errors import BadInput, NotFound
from gputui.format import status_text, status_word
from gputui.i18n import N_, Deferred, _
from gputui.models import Instance, InstanceStatus, Lease, LeaseState, as_utc, utcnow
from gputui.services.hub import ServiceError, Services
from gputui.services.queueplace import RUNNER_DIR, RUNNER_FILE, queue_place  # noqa: F401
from gputui.store import LeaseChanged

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "lost")
FINAL = ("succeeded", "failed", "cancelled", "lost")
Policy = Literal["release", "stop", "keep"]
DEFAULT_GRACE_S = 600.0
CHECK_EVERY_S = 10.0  # the console's clock looks at a finished queue this often
ALARM_EVERY_S = 600.0
# One command is one argument of exec on the instance (`sh -c CMD`): Linux takes at most 128 KiB
# there, its closing NUL included (MAX_ARG_STRLEN). Longer, or with a NUL byte, it cannot run.
MAX_COMMAND_BYTES = 128 * 1024 - 1
MAX_CWD_BYTES = 4095

_RUNNER_SOURCE: str | None = None


def runner_source() -> str:
    global _RUNNER_SOURCE
    if _RUNNER_SOURCE is None:
        _RUNNER_SOURCE = (Path(__file__).with_name("jobs_runner.py")).read_text(encoding="utf-8")
    return _RUNNER_SOURCE


class JobError(ServiceError):
    """A jobs operation failed; one line."""


class UnknownJob(NotFound):
    """No such job on the instance."""


class LostAnswer(JobError):
    """The runner's answer never came (the link closed, the process was killed): what was
    asked may or may not have been done on the instance."""


@dataclass(frozen=True)
class JobSpec:
    command: str
    name: str | None = None
    cwd: str | None = None
    gpus: tuple[int, ...] | None = None
    retries: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"command": self.command, "name": self.name, "cwd": self.cwd,
                "gpus": list(self.gpus) if self.gpus is not None else None,
                "retries": self.retries}


def parse_gpus(text: str | None, gpu_count: int | None = None) -> tuple[int, ...] | None:
    """`0,1` -> (0, 1); None/'' -> None (every GPU). Bad input says so in one line."""
    if text is None or not text.strip():
        return None
    try:
        gpus = tuple(sorted({int(p) for p in text.split(",") if p.strip()}))
    except ValueError:
        raise BadInput(_("--gpus: {text} is not a list of GPU indices like 0,1").format(
            text=repr(text))) from None
    if not gpus or any(g < 0 for g in gpus):
        raise BadInput(_("--gpus: {text} is not a list of GPU indices like 0,1").format(
            text=repr(text)))
    if gpu_count is not None and gpus[-1] >= gpu_count:
        raise BadInput(_("--gpus: the instance has GPUs 0-{last}, not {gpu}").format(
            last=gpu_count - 1, gpu=gpus[-1]))
    return gpus


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def command_problem(command: str) -> str | None:
    """Why this command cannot be run on the instance (None: it can), in one line."""
    if not command.strip():
        return _("the command is empty")
    if "\x00" in command:
        return _("the command has a NUL byte, which no shell command can hold")
    try:
        size = _nbytes(command)
    except UnicodeError:
        return _("the command is not valid text")
    if size > MAX_COMMAND_BYTES:
        return _("the command is {size} bytes, over the {limit} bytes the instance takes for "
                 "one command; put it in a script and run the script").format(
            size=f"{size:,}", limit=f"{MAX_COMMAND_BYTES:,}")
    return None


def check_spec(spec: JobSpec, where: str = "") -> None:
    """Refuse a run the instance could not start (exit 2, one line), before anything is sent:
    every way in (`jobs add`, `run`, the console, MCP) queues through here."""
    prefix = f"{where}: " if where else ""
    why = command_problem(spec.command)
    if why is None and spec.name is not None and "\x00" in spec.name:
        why = _("the label has a NUL byte")
    if why is None and spec.cwd is not None and (
            "\x00" in spec.cwd or _nbytes(spec.cwd) > MAX_CWD_BYTES):
        why = _("the folder (cwd) is not a path: a NUL byte, or over {limit} bytes").format(
            limit=MAX_CWD_BYTES)
    if why is None and not 0 <= spec.retries <= 100:
        why = _("retries: 0 to 100")
    if why is not None:
        raise BadInput(prefix + why)


def read_runs_file(path: Path) -> list[str]:
    """One command a line; blank lines and `#` comments skipped. A line the instance could not
    run is refused, by its line number (as an editor counts lines: only newlines end them)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(_("--file: {path}: no such file").format(path=path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(_("--file: {path}: cannot read it ({error})").format(
            path=path, error=exc)) from None
    commands = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        why = command_problem(line)
        if why is not None:
            raise BadInput(_("--file: {path} line {line}: {problem}").format(
                path=path, line=number, problem=why))
        commands.append(line)
    if not commands:
        raise BadInput(_("--file: {path}: no commands in it").format(path=path))
    return commands


def _time(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        return as_utc(datetime.fromisoformat(str(text)))
    except ValueError:
        return None


@dataclass
class Job:
    id: str
    name: str
    command: str
    status: str
    cwd: str | None = None
    gpus: tuple[int, ...] | None = None
    retries: int = 0
    attempt: int = 1
    exit_code: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    gpu_util_avg: float | None = None
    gpu_mem_max_mib: float | None = None
    log: str = ""
    error: str | None = None
    cost: Decimal | None = None
    currency: str = "USD"

    def seconds(self, now: datetime | None = None) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.status != "running" else None
        end = end or as_utc(now or utcnow())
        return max(0.0, (end - self.started_at).total_seconds())

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        secs = self.seconds(now)
        return {
            "id": self.id, "name": self.name, "command": self.command, "status": self.status,
            "exit_code": self.exit_code,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at and self.final else None,
            "seconds": round(secs, 1) if secs is not None else None,
            "gpu_util_avg": self.gpu_util_avg, "gpu_mem_max_mib": self.gpu_mem_max_mib,
            "cost": str(self.cost) if self.cost is not None else None,
            "currency": self.currency, "log": self.log,
            "gpus": list(self.gpus) if self.gpus is not None else None,
            "attempt": self.attempt, "retries": self.retries, "cwd": self.cwd,
            "error": self.error,
        }


@dataclass
class QueueView:
    instance_id: str
    jobs: list[Job] = field(default_factory=list)
    daemon: bool = False
    ended_at: datetime | None = None
    poweroff_at: datetime | None = None
    poweroff_in_s: float | None = None
    remote_policy: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return any(j.status in ("queued", "running") for j in self.jobs)

    @property
    def finished(self) -> bool:
        return bool(self.jobs) and not self.active

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for j in self.jobs:
            out[j.status] = out.get(j.status, 0) + 1
        return out

    def get(self, job_id: str) -> Job:
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise UnknownJob(_("no job {job_id} on this instance (ids: {ids})").format(
            job_id=job_id, ids=", ".join(j.id for j in self.jobs) or _("none yet")))


def armed_poweroff(view: QueueView, lease: Lease | None) -> tuple[datetime | None, bool]:
    """When the instance powers off, as armed on it now, and whether that is the lease's timer:
    the queue's end scheduled a power-off there, but a lease armed since (a failed pull gives
    the power-off back to the release timer; an extend) replaced it — each `shutdown` replaces
    the last, so the later one is what the host keeps. (None: none armed.)"""
    from datetime import timedelta

    queue_set = view.poweroff_at
    queue_fires = (queue_set + timedelta(seconds=float(view.poweroff_in_s))
                   if queue_set is not None and view.poweroff_in_s is not None else None)
    lease_set = lease.host_timer_set_at if lease is not None else None
    if lease is not None and lease_set is not None and (queue_set is None or lease_set > queue_set):
        return (lease.host_poweroff_at if lease.state == LeaseState.ACTIVE else None), True
    return queue_fires, False


# -- the local when-done record --------------------------------------------------------------
@dataclass
class WhenDone:
    policy: Policy
    pulls: list[dict[str, str]] = field(default_factory=list)  # {"remote", "local"}
    grace_s: float = DEFAULT_GRACE_S
    set_at: str = ""
    pulled_at: str | None = None
    done_at: str | None = None
    outcome: str | None = None
    # the results asked for could not be pulled when they were due (why, and when): the
    # release or stop is held until they come home, the path is changed, or it is released
    held: str | None = None
    held_at: str | None = None

    @property
    def pending_pull(self) -> bool:
        return bool(self.pulls) and self.pulled_at is None


class UnreadableRecord(JobError):
    """A when-done record that cannot be read (cut short, edited by hand): its instance is held
    (no automatic release or stop) and every other instance goes on as usual."""


#: the when-done records' folder in the state folder: one `ID.json` per instance
WHEN_DONE_DIR = "jobs"


def _policy_path(services: Services, instance_id: str) -> Path:
    return services.state_dir / WHEN_DONE_DIR / f"{instance_id}.json"


def when_done_ids(services: Services) -> set[str]:
    """The instances that have a when-done record (readable or not), from one listing of the
    folder: the lease clock asks once a second for every instance at once, not a file each."""
    out: set[str] = set()
    with contextlib.suppress(OSError):  # no folder yet: no record
        for entry in os.scandir(services.state_dir / WHEN_DONE_DIR):
            name = entry.name  # (".ID.json.tmpPID": a record being written, not one yet)
            if name.endswith(".json") and not name.startswith("."):
                out.add(name.removesuffix(".json"))
    return out


def load_when_done(services: Services, instance_id: str) -> WhenDone | None:
    """The record (None: none set); UnreadableRecord when it cannot be read."""
    path = _policy_path(services, instance_id)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(_("not a JSON object"))
        given: dict[str, Any] = {k: data[k] for k in WhenDone.__dataclass_fields__ if k in data}
        rec = WhenDone(**given)
        if rec.policy not in ("release", "stop", "keep"):
            raise ValueError(_("policy {policy} is not release, stop or keep").format(
                policy=repr(rec.policy)))
        if not isinstance(rec.pulls, list) or not all(
                isinstance(p, dict) and isinstance(p.get("remote"), str)
                and isinstance(p.get("local"), str) for p in rec.pulls):
            raise ValueError(_("pulls is not a list of remote and local paths"))
        return rec
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise UnreadableRecord(_("{path}: unreadable when-done record: {error}").format(
            path=path, error=exc)) from None


def _bad_key(instance_id: str) -> str:
    return f"when-done {instance_id}"


def checked_when_done(services: Services, inst: Instance) -> WhenDone | None:
    """The record, for the clock (the console's, the daemon's, `gputui reap`). One that cannot
    be read is reported once (again only if it changes and still cannot be read), like an
    unreadable instance row, and UnreadableRecord raised: the caller holds that instance and
    goes on with the others."""
    try:
        rec = load_when_done(services, inst.id)
    except UnreadableRecord as exc:
        path = _policy_path(services, inst.id)
        try:
            st = path.stat()
            version: object = (st.st_mtime_ns, st.st_size)
        except OSError:
            version = None
        message = _("{problem}; {name} is held, not released or stopped automatically, until "
                    "the record is fixed or written anew with `gputui jobs {name} when-done "
                    "POLICY`").format(problem=str(exc), name=inst.name)
        services.store.report_unreadable(_bad_key(inst.id), message, version)
        raise
    if _bad_key(inst.id) in services.store.unreadable:
        services.store.readable_again(_bad_key(inst.id))
    return rec


def save_when_done(services: Services, instance_id: str, rec: WhenDone) -> None:
    from gputui.config import write_private

    write_private(_policy_path(services, instance_id),
                  json.dumps(rec.__dict__, indent=1).encode())


def check_pulls(pulls: list[tuple[str, str]]) -> None:
    """Paths to pull refuse control characters (an OSC 52 clipboard write, a window title):
    they are kept and shown later (`gputui jobs`, Home)."""
    from gputui.sanitize import has_control

    for remote, local in pulls:
        for option, text in (("--pull", remote), ("--to", str(local))):
            if has_control(text):
                raise BadInput(_("{field}: control characters are not allowed in a path").format(
                    field=option))


# A run's cost is kept to a millionth of the currency, not the cent: a run of a few seconds
# costs a fraction of a cent, and rounded to the cent where it is worked out it was recorded
# (and shown, after the release) as exactly $0.00. The cent rounding is the screen's
# (`format_small_money`: <$0.01), done once where the figure is shown.
RUN_COST_QUANTUM = Decimal("0.000001")


def run_cost(inst: Instance, job: Job) -> Decimal | None:
    """The instance's rate, times the run's share of its GPUs, over the run's time (to a
    millionth: see RUN_COST_QUANTUM)."""
    secs = job.seconds()
    if secs is None:
        return None
    share = Decimal(1)
    if job.gpus is not None and inst.gpu_count:
        share = min(Decimal(1), Decimal(len(job.gpus)) / Decimal(inst.gpu_count))
    exact = inst.billing.price_per_hour * share * Decimal(str(round(secs, 3))) / Decimal(3600)
    return exact.quantize(RUN_COST_QUANTUM, rounding=ROUND_HALF_UP)


def job_from_runner(r: dict[str, Any], inst: Instance, secrets: list[str]) -> Job:
    """A run as the runner on the instance reports it (`list`, `records`), cleaned and masked,
    costed at the instance's rate."""
    from gputui.sanitize import clean_masked

    status = str(r.get("status") or "queued")
    if status not in STATUSES:
        status = "lost"
    gpus = r.get("gpus")
    if not isinstance(gpus, list) or not all(_whole(g) is not None for g in gpus):
        gpus = None  # a record written by hand on the instance: shown, not trusted
    job = Job(
        id=str(r.get("id")), name=str(r.get("name") or ""),
        command=clean_masked(r.get("command") or "", secrets, 200_000, lines=True),
        status=status, cwd=str(r.get("cwd") or "") or None,
        gpus=tuple(int(g) for g in gpus) if gpus is not None else None,
        retries=_whole(r.get("retries")) or 0, attempt=_whole(r.get("attempt")) or 1,
        exit_code=_whole(r.get("exit_code")),
        started_at=_time(r.get("started_at")), ended_at=_time(r.get("ended_at")),
        gpu_util_avg=_num(r.get("gpu_util_avg")), gpu_mem_max_mib=_num(r.get("gpu_mem_max_mib")),
        log=str(r.get("log") or ""),
        error=str(r["error"]) if r.get("error") is not None else None,
        currency=inst.billing.currency,
    )
    job.cost = run_cost(inst, job)
    return job


# -- the service ------------------------------------------------------------------------------
_installed: dict[int, set[str]] = {}  # per links-pool id: instances whose runner is current
_last_check: dict[str, float] = {}
_last_alarm: dict[str, float] = {}
_recorded: set[tuple[str, str]] = set()  # run costs this process has written (written once)


class JobService:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = services.store

    # -- the runner ------------------------------------------------------------------------
    async def _link(self, inst: Instance) -> Any:
        if not inst.status.live:
            raise JobError(_("{name} is {status}: its queue cannot be reached").format(
                name=inst.name, status=status_text(inst.status)))
        return await self.services.link(inst)  # a stopped one: "start it first", exit 2

    async def _place(self, inst: Instance) -> tuple[Any, str, dict[str, Any] | None]:
        if not inst.status.live:
            raise JobError(_("{name} is {status}: its queue cannot be reached").format(
                name=inst.name, status=status_text(inst.status)))
        from gputui.providers.base import ProviderError

        try:
            return await queue_place(self.services, inst)
        except ProviderError as exc:
            raise JobError(str(exc)) from None

    async def _runner(self, inst: Instance, args: str, *, input: str | None = None,
                      timeout: float = 60.0) -> Any:
        from gputui.remote.ssh import SSHLayerError

        link, runner, launch = await self._place(inst)
        installed = _installed.setdefault(id(self.services.links), set())
        try:
            if inst.id not in installed:
                await self._install(link, runner, launch)
                installed.add(inst.id)
            return await link.run(
                'PY=$(command -v python3 || command -v python) || '
                '{ echo "no python3 on the instance" >&2; exit 127; }; '
                f'exec "$PY" "$HOME/{runner}" {args}', input=input, timeout=timeout)
        except SSHLayerError as exc:
            raise JobError(f"{inst.name}: {exc}") from None

    async def _install(self, link: Any, runner: str = RUNNER_FILE,
                       launch: dict[str, Any] | None = None) -> None:
        folder = runner.rpartition("/")[0]
        result = await link.run(
            f'mkdir -p "$HOME/{folder}" && chmod 700 "$HOME/{folder}" && '
            f'cat > "$HOME/{runner}.$$" && mv "$HOME/{runner}.$$" "$HOME/{runner}"',
            input=runner_source(), timeout=60)
        if result.exit_status == 0 and launch is not None:  # runs start as the scheduler's steps
            result = await link.run(
                f'cat > "$HOME/{folder}/launch.json.$$" && '
                f'mv "$HOME/{folder}/launch.json.$$" "$HOME/{folder}/launch.json"',
                input=json.dumps(launch), timeout=60)
        if result.exit_status != 0:
            raise JobError(_("cannot write the runner to the instance: {error}").format(
                error=_last(result)))

    async def _json(self, inst: Instance, args: str, *, input: str | None = None) -> Any:
        result = await self._runner(inst, args, input=input)
        if result.exit_status == 4:
            raise UnknownJob(f"{inst.name}: {_last(result)}")
        if result.exit_status == 3:
            raise BadInput(f"{inst.name}: {_last(result)}")
        if result.exit_status is None or result.exit_status < 0:  # the link went mid-answer
            raise LostAnswer(_("{name}: the link closed before the instance answered").format(
                name=inst.name))
        if result.exit_status != 0:
            raise JobError(_("{name}: the queue runner failed: {error}").format(
                name=inst.name, error=_last(result)))
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise JobError(_("{name}: the queue runner said something unreadable").format(
                name=inst.name)) from None

    # -- queue ------------------------------------------------------------------------------
    async def add(self, inst: Instance, specs: list[JobSpec]) -> list[str]:
        if not specs:
            raise BadInput(_("nothing to queue"))
        from gputui.services.pushes import resolve_cwd  # AutoDL: a relative cwd is on the data disk

        specs = [replace(sp, cwd=resolve_cwd(self.services, inst, sp.cwd)) for sp in specs]
        for n, spec in enumerate(specs, 1):
            check_spec(spec, _("run {n}").format(n=n) if len(specs) > 1 else "")
            parse_gpus(",".join(map(str, spec.gpus)) if spec.gpus else None, inst.gpu_count)
        out = await self._json(inst, "add", input=json.dumps([s.as_json() for s in specs]))
        from gputui.services.queuemarks import mark_queued  # watched from now on, by any process

        mark_queued(self.services, inst.id)
        try:  # (the runs are queued: a record that cannot be read is reported, not raised)
            rec = checked_when_done(self.services, inst)
        except UnreadableRecord:
            rec = None
        if rec is not None and (rec.pulled_at or rec.done_at or rec.held):
            # new results are coming (and a hold for the last queue's missing ones is over)
            rec.pulled_at = rec.done_at = rec.outcome = rec.held = rec.held_at = None
            save_when_done(self.services, inst.id, rec)
            self.store.emit(LeaseChanged(inst.id))
        if out.get("poweroff_cancelled"):
            # the runner cancelled the power-off it had scheduled: the lease's own comes back
            from gputui.services.arming import LeaseArmer

            await LeaseArmer(self.services).arm(inst)
        from gputui.services.run_keep import note_queue

        note_queue(self.services, inst)  # its runs are kept here when it ends or is released
        return [str(i) for i in out.get("ids", [])]

    async def view(self, inst: Instance) -> QueueView:
        data = await self._json(inst, "list")
        if not data.get("daemon") and any(
                r.get("status") in ("queued", "running") for r in data.get("runs", [])):
            # the runner is gone with work left (a reboot, a crash): start it again; runs that
            # died with it are recorded as lost (or by the exit code they left)
            await self._json(inst, "ensure")
            data = await self._json(inst, "list")
        view = QueueView(inst.id, daemon=bool(data.get("daemon")),
                         remote_policy=data.get("when_done"))
        end = data.get("queue_end") or None
        if end:
            view.ended_at = _time(end.get("ended_at"))
            view.poweroff_at = _time(end.get("poweroff_at"))
            view.poweroff_in_s = end.get("poweroff_in_s")
        from gputui.config import known_secrets

        secrets = known_secrets(self.services.config)  # a key typed into a command stays here
        view.jobs = [job_from_runner(r, inst, secrets) for r in data.get("runs", [])
                     if isinstance(r, dict)]
        await asyncio.to_thread(self._record_costs, inst, view)
        from gputui.services.run_keep import keep_at_queue_end, note_runs

        await asyncio.to_thread(note_runs, self.services, inst, view)  # they outlive it
        if view.finished:  # the queue's end: its runs and their last lines are kept here
            await keep_at_queue_end(self.services, inst, view)
        for observe in list(self.services.queue_observers):  # the console's toasts, Home's Queue
            observe(inst, view)
        return view

    def _record_costs(self, inst: Instance, view: QueueView) -> None:
        from gputui.config import known_secrets
        from gputui.sanitize import clean_masked

        secrets = known_secrets(self.services.config)
        for job in view.jobs:
            if not job.final or job.started_at is None or job.cost is None:
                continue
            if (inst.id, job.id) in _recorded:
                continue
            _recorded.add((inst.id, job.id))
            ended = job.ended_at or job.started_at
            if job.status in ("failed", "lost"):  # the renter's phone, if they asked
                from gputui.format import run_given_name
                from gputui.services.hub import notify_event
                from gputui.services.notify import run_failed

                notify_event(self.services, run_failed(inst, run_given_name(job.id, job.name)
                                                       or job.id, job.exit_code,
                                                       job.id, job.attempt))
            self.store.record_run_cost_sync(inst.id, job.id, {
                "instance_id": inst.id, "instance": inst.name, "job_id": job.id,
                "label": clean_masked(job.name, secrets, 256),
                # stored cleaned, then masked: a key in a command never reaches the database
                "command": clean_masked(job.command, secrets, 4096), "status": job.status,
                "exit_code": job.exit_code, "gpu": inst.gpu, "gpus": list(job.gpus) if job.gpus else None,
                "gpu_count": inst.gpu_count, "started_at": job.started_at.isoformat(),
                "ended_at": ended.isoformat(), "seconds": round(job.seconds() or 0, 1),
                "rate_per_hour": str(inst.billing.price_per_hour), "cost": str(job.cost),
                "currency": inst.billing.currency, "attempt": job.attempt,
                "retries": job.retries,
            }, ended.timestamp())

    async def cancel(self, inst: Instance, job_id: str) -> str:
        out = await self._json(inst, f"cancel {shlex.quote(_job_id(job_id))}")
        return str(out.get("was"))

    async def retry(self, inst: Instance, job_id: str) -> str:
        out = await self._json(inst, f"retry {shlex.quote(_job_id(job_id))}")
        return str(out.get("ids", ["?"])[0])

    async def log_tail(self, inst: Instance, job_id: str, lines: int = 200) -> list[str]:
        job_id = _job_id(job_id)
        result = await self._runner(inst, f"tail {job_id} {int(lines)}")
        if result.exit_status != 0:
            if result.exit_status == 4:
                raise UnknownJob(_("{name}: no job {job_id}").format(name=inst.name,
                                                                     job_id=job_id))
            raise JobError(_("{name}: cannot read the log of job {job_id}: {error}").format(
                name=inst.name, job_id=job_id, error=_last(result)))
        # lines end at \n only: a progress bar's \r is drawn over within its line (clean_line)
        got = result.stdout.split("\n")
        if got[-1] == "":
            got.pop()
        return [clean_line(line) for line in got]

    async def follow(self, inst: Instance, job_id: str, on_line: Callable[[str], None]) -> None:
        """Every line of the run's log until the run ends; a dropped link is waited out and the
        log continues where it was."""
        from gputui.remote.ssh import CommandFailed, LinkDown, SSHLayerError

        job_id = _job_id(job_id)
        seen = 0
        while True:
            link, runner, _launch = await self._place(inst)
            await self._runner(inst, "version")  # the runner is there
            cmd = ('PY=$(command -v python3 || command -v python); '
                   f'exec "$PY" "$HOME/{runner}" follow {job_id} {seen}')
            try:
                held = 0  # empty lines: the stream ends with one that is not in the log
                async with link.stream_lines(cmd, restart=False) as lines:
                    async for line in lines:
                        if not line:
                            held += 1
                            continue
                        for _n in range(held):
                            seen += 1
                            on_line("")
                        held = 0
                        seen += 1
                        on_line(clean_line(line))
                return
            except CommandFailed as exc:
                if exc.exit_status == 4:
                    raise UnknownJob(_("{name}: no job {job_id}").format(
                        name=inst.name, job_id=job_id)) from None
                raise JobError(f"{inst.name}: {exc}") from None
            except LinkDown:
                await asyncio.sleep(0.5)
                continue
            except SSHLayerError as exc:
                raise JobError(f"{inst.name}: {exc}") from None

    async def wait(self, inst: Instance, job_ids: list[str] | None = None, *,
                   every: float = 1.0, on_view: Callable[[QueueView], None] | None = None,
                   ) -> QueueView:
        """Until the given runs (default: the whole queue) have ended; a dropped link is waited
        out (the queue goes on without us)."""
        while True:
            try:
                view = await self.view(inst)
            except JobError:
                await asyncio.sleep(every)
                continue
            if on_view is not None:
                on_view(view)
            wanted = [j for j in view.jobs if job_ids is None or j.id in job_ids]
            if wanted and all(j.final for j in wanted) and (job_ids is not None or not view.active):
                return view
            await asyncio.sleep(every)

    # -- when done ----------------------------------------------------------------------------
    async def set_when_done(self, inst: Instance, policy: Policy, *,
                            pulls: list[tuple[str, str]] | None = None,
                            grace_s: float = DEFAULT_GRACE_S) -> WhenDone:
        from gputui.remote.transfer import remote_home, remote_relpath

        provider = self.services.provider(inst.provider)
        caps = provider.capabilities
        if policy == "stop" and not (caps.stop_start or caps.power_off_stops_billing):
            raise BadInput(_("{name}: {provider} cannot stop an instance and keep its disk; "
                             "choose release or keep").format(name=inst.name,
                                                             provider=inst.provider))
        pulls = list(pulls or [])
        check_pulls(pulls)
        if pulls:
            with contextlib.suppress(ServiceError):  # a power-off nobody has seen yet
                inst = await self.services.refresh(inst)
            if inst.ssh is None or inst.status != InstanceStatus.RUNNING:
                raise BadInput(_("{name}: no way to pull results from it ({why})").format(
                    name=inst.name, why=_("no SSH endpoint") if inst.ssh is None
                    else status_text(inst.status)))
            link = await self._link(inst)
            from gputui.remote.ssh import SSHLayerError

            try:
                home = await remote_home(link)
            except SSHLayerError as exc:
                raise JobError(f"{inst.name}: {exc}") from None
            for remote, _local in pulls:
                remote_relpath(remote, home, inside_home=True)  # outside the home: bad input
        elif policy == "release" and caps.power_off_stops_billing is False and inst.ssh is None:
            raise BadInput(_("{name}: no SSH endpoint, so no way to tell when the queue "
                             "ends").format(name=inst.name))
        rec = WhenDone(policy=policy, pulls=[{"remote": r, "local": str(loc)} for r, loc in pulls],
                       grace_s=grace_s, set_at=utcnow().isoformat())
        lease = await self.store.get_lease(inst.id)
        on_instance = {"policy": policy, "grace_s": grace_s,
                       "poweroff": bool(caps.power_off_stops_billing) and policy != "keep",
                       "release_at": (lease.release_at.isoformat()
                                      if lease and lease.release_at else None)}
        # Kept here before the instance is told: where the instance acts at once (an ended
        # queue, no grace) and its answer is lost, the results to bring home are still known.
        path = _policy_path(self.services, inst.id)
        try:
            before: bytes | None = path.read_bytes()
        except OSError:
            before = None
        save_when_done(self.services, inst.id, rec)
        try:
            await self._json(inst, "when-done", input=json.dumps(on_instance))
        except LostAnswer as exc:
            self.store.emit(LeaseChanged(inst.id))
            raise JobError(_("{error}; the when-done is kept here, as asked — `gputui jobs "
                             "{name}` shows whether the instance has it").format(
                error=str(exc), name=inst.name)) from None
        except Exception:  # the instance said no, or was never reached: nothing changed
            if before is None:
                path.unlink(missing_ok=True)
            else:
                from gputui.config import write_private

                write_private(path, before)
            raise
        self.store.emit(LeaseChanged(inst.id))  # Home shows it beside the timer
        return rec

    def when_done(self, inst: Instance) -> WhenDone | None:
        return load_when_done(self.services, inst.id)

    async def pull_results(self, inst: Instance, rec: WhenDone, *,
                           progress: Callable[[Any], None] | None = None) -> list[Any]:
        from gputui.remote.ssh import SSHLayerError
        from gputui.remote.transfer import TransferError, pull

        link = await self._link(inst)
        done = []
        for item in rec.pulls:
            try:
                done.append(await pull(link, item["remote"], Path(item["local"]),
                                       progress=progress, inside_home=True))
            except (TransferError, SSHLayerError) as exc:
                raise JobError(_("{name}: pulling {remote}: {error}").format(
                    name=inst.name, remote=item["remote"], error=exc)) from None
        missing = [(path, why) for summary in done for path, why in summary.not_copied]
        if missing:  # what was asked for is not all home: whoever releases must hold
            raise JobError(_not_home(inst.name, missing))
        return done

    async def finish(self, inst: Instance, *, force: bool = False) -> str | None:
        """Carry out the when-done policy if the queue has ended: pull, then release or stop.
        Returns what was done ("released", "stopped", "pulled", "kept") or None (not yet)."""
        now = time.monotonic()
        if not force and now - _last_check.get(inst.id, -1e9) < CHECK_EVERY_S:
            return None
        _last_check[inst.id] = now
        try:
            rec = checked_when_done(self.services, inst)
        except UnreadableRecord:
            return None  # reported; the instance is held (release_allowed says no)
        if rec is None or rec.done_at is not None:
            return None
        inst = await self.store.get_instance(inst.id) or inst
        if not inst.status.live:
            return None
        if inst.status == InstanceStatus.STOPPED:
            if rec.pending_pull:
                provider = self.services.provider(inst.provider)
                if not provider.capabilities.stop_start or rec.policy == "keep":
                    self._alarm(inst, Deferred(N_(
                        "{name} powered itself off after its queue; the results asked for "
                        "({pulls}) are not home yet, so it is kept — {provider} cannot start it "
                        "again from here: fetch them from its disk, then release it"),
                        name=inst.name, pulls=_pulls(rec), provider=inst.provider))
                    return "kept"
                try:  # power it on to bring the results home, then finish
                    inst = await self.services.start(inst)
                except (ServiceError, BadInput) as exc:
                    self._alarm(inst, Deferred(N_("{name}: could not start it to pull its "
                                                  "results ({error}); kept"),
                                               name=inst.name, error=str(exc)))
                    return "kept"
            outcome = await self._complete(inst, rec)
            return outcome
        if inst.status != InstanceStatus.RUNNING:
            return None
        try:
            view = await self.view(inst)
        except (JobError, BadInput):
            return None
        if not view.finished:
            return None
        return await self._complete(inst, rec, view)

    @contextlib.asynccontextmanager
    async def _claimed(self, inst: Instance) -> AsyncIterator[bool]:
        """The store's release claim, held while results come home and the instance goes: the
        console, the daemon and `gputui reap` never pull into the same files or release twice.
        (Long enough for a big pull; a claim whose process died lapses at once.)"""
        owner = self.services.claim_owner
        got = await self.store.claim_release(inst.id, owner, ttl_s=6 * 3600)
        try:
            yield got
        finally:
            if got:
                await self.store.drop_claim(inst.id, owner)

    async def _complete(self, inst: Instance, rec: WhenDone,
                        view: QueueView | None = None) -> str | None:
        async with self._claimed(inst) as mine:
            if not mine:
                return None  # another gputui process is finishing it
            fresh = await self.store.get_instance(inst.id)
            try:
                again = checked_when_done(self.services, inst)
            except UnreadableRecord:
                return None
            if fresh is None or not fresh.status.live or again is None or again.done_at:
                return None
            return await self._complete_claimed(fresh, again, view)

    async def _complete_claimed(self, inst: Instance, rec: WhenDone,
                                view: QueueView | None = None) -> str:
        if rec.pending_pull and inst.status == InstanceStatus.RUNNING and (
                view is None or view.poweroff_at is not None
                and not armed_poweroff(view, await self.store.get_lease(inst.id))[1]):
            # a long pull must not be cut by the queue-end power-off: the lease's own timer
            # replaces it again (re-arming cancels a pending shutdown and schedules the timer's;
            # the lease records what it armed, which `gputui jobs NAME` shows). Once: a hold,
            # retried every few seconds, does not re-arm (and wall-message the host) each time.
            from gputui.services.arming import LeaseArmer

            with contextlib.suppress(ServiceError):
                await LeaseArmer(self.services).arm(inst)
        if rec.pending_pull:
            try:
                await self.pull_results(inst, rec)
            except (JobError, BadInput) as exc:
                self._hold(inst, rec, str(exc))
                if rec.policy == "keep":
                    self._alarm(inst, Deferred(N_(
                        "{name}: its queue ended but the results could not be pulled ({error}); "
                        "`gputui jobs {name} when-done keep --pull OTHER` pulls another path"),
                        name=inst.name, error=str(exc)))
                else:
                    self._alarm(inst, Deferred(N_(
                        "{name}: held: results missing ({pulls}) — its queue ended but they "
                        "could not be pulled ({error}); it is kept, not {done}. "
                        "`gputui release {name}` releases it anyway; `gputui jobs {name} "
                        "when-done {policy} --pull OTHER` pulls another path"),
                        name=inst.name, pulls=_pulls(rec), error=str(exc),
                        done=_outcome(_POLICY_DONE.get(rec.policy, rec.policy)),
                        policy=rec.policy))
                return "kept"
            rec.pulled_at = utcnow().isoformat()
            rec.held = rec.held_at = None
            save_when_done(self.services, inst.id, rec)
        outcome = "pulled" if rec.pulls else "kept"
        if rec.policy == "release":
            await self.services.release(inst, "done")
            outcome = "released"
        elif rec.policy == "stop" and inst.status == InstanceStatus.RUNNING:
            await self._stop(inst)
            outcome = "stopped"
        elif rec.policy == "stop":
            outcome = "stopped"
        rec.done_at = utcnow().isoformat()
        rec.outcome = outcome
        save_when_done(self.services, inst.id, rec)
        self.store.emit(LeaseChanged(inst.id))
        self.store.notify(
            Deferred(N_("{name}: queue done — {outcome}, results in {where}"), name=inst.name,
                     outcome=_outcome(outcome), where=_locals(rec)) if rec.pulls else
            Deferred(N_("{name}: queue done — {outcome}"), name=inst.name,
                     outcome=_outcome(outcome)),
            "information", bell=True, instance_id=inst.id)
        from gputui.services.notify import notify_queue_end  # the renter's phone or chat

        notify_queue_end(self.services, inst, outcome, _locals(rec) if rec.pulls else None,
                         rec.set_at)
        return outcome

    async def _stop(self, inst: Instance) -> None:
        provider = self.services.provider(inst.provider)
        if provider.capabilities.stop_start:
            await self.services.stop(inst)
        else:
            result = await self.services.run(inst, "shutdown -h now", timeout=30)
            if result.exit_status != 0:
                raise JobError(_("{name}: power-off failed: {error}").format(
                    name=inst.name, error=_last(result)))
        with contextlib.suppress(ServiceError):
            await self.services.refresh(inst)

    async def results_safe(self, inst: Instance) -> bool:
        """Before an automatic release (timer, idle, budget): True when no result asked for is
        left on the instance — pulling it now if it can; False (kept, alarm) when it cannot, or
        when its when-done record cannot be read (reported once)."""
        try:
            rec = checked_when_done(self.services, inst)
        except UnreadableRecord:
            return False
        if rec is None or not rec.pending_pull:
            return True
        now = time.monotonic()
        if now - _last_check.get(f"safe:{inst.id}", -1e9) < CHECK_EVERY_S:
            return False
        _last_check[f"safe:{inst.id}"] = now
        if inst.status == InstanceStatus.RUNNING:
            async with self._claimed(inst) as mine:
                if not mine:
                    return False  # another process is pulling them now
                try:
                    await self.pull_results(inst, rec)
                    rec.pulled_at = utcnow().isoformat()
                    rec.held = rec.held_at = None
                    save_when_done(self.services, inst.id, rec)
                    return True
                except (JobError, BadInput, ServiceError) as exc:
                    why: str | Deferred = str(exc)
                    self._hold(inst, rec, why)
        else:
            why = Deferred(N_("it is {status}"), status=status_word(inst.status))
        self._alarm(inst, Deferred(N_(
            "{name}: due for release but the results asked for ({pulls}) are not home ({why}); "
            "kept — `gputui release {name}` releases it anyway; `gputui extend {name}` gives "
            "its queue more time; `gputui jobs {name} when-done {policy} --pull OTHER` pulls "
            "another path"), name=inst.name, pulls=_pulls(rec), why=why, policy=rec.policy))
        return False

    def _hold(self, inst: Instance, rec: WhenDone, why: str) -> None:
        """Record that the results asked for could not be pulled: Home and Jobs say "held:
        results missing (PATH)" until they come home, the path changes, or it is released."""
        if rec.held == why:
            return  # retried every few seconds: written (and redrawn) only when it changes
        rec.held, rec.held_at = why, utcnow().isoformat()
        save_when_done(self.services, inst.id, rec)
        self.store.emit(LeaseChanged(inst.id))

    def _alarm(self, inst: Instance, text: Deferred) -> None:
        now = time.monotonic()
        if now - _last_alarm.get(inst.id, -1e9) < ALARM_EVERY_S:
            return
        _last_alarm[inst.id] = now
        self.store.notify(text, "error", bell=True, instance_id=inst.id)


# -- hooks for the lease clock (leases.py) ------------------------------------------------------
async def on_tick(services: Services, inst: Instance) -> str | None:
    """The clock's look at an instance's queue: what its when-done policy did, if anything
    ("released", "stopped", "pulled", "kept" when results could not come home)."""
    if not _policy_path(services, inst.id).exists():
        return None
    try:
        return await JobService(services).finish(inst)
    except (JobError, BadInput) as exc:
        services.store.notify(Deferred(N_("{name}: when-done: {error}"), name=inst.name,
                                       error=str(exc)), "warning", instance_id=inst.id)
        return None


async def release_allowed(services: Services, inst: Instance) -> bool:
    """Whether an automatic release may go ahead (no unpulled results asked for)."""
    if not _policy_path(services, inst.id).exists():
        return True
    return await JobService(services).results_safe(inst)


def when_done_label(services: Services, instance_id: str, *, short: bool = False) -> str | None:
    """What Home and Jobs show beside the timer: "release when the queue ends" ("at queue end"
    when `short`); "held: results missing (PATH)" when the results asked for could
    not be pulled and the release waits for them; None when none is set, or it was carried
    out."""
    try:
        rec = load_when_done(services, instance_id)
    except UnreadableRecord:
        return _("held: when-done record unreadable")
    if rec is None or rec.done_at is not None or rec.policy == "keep" and not rec.pulls:
        return None
    if rec.held and rec.pending_pull:
        paths = _pulls(rec, cells=12 if short else 80)
        if rec.policy == "keep":
            return _("results missing ({paths})").format(paths=paths)
        return _("held: results missing ({paths})").format(paths=paths)
    if short:
        return _({"release": N_("at queue end"), "stop": N_("stop at end"),
                  "keep": N_("pull at end")}[rec.policy])
    if rec.pulls and rec.policy != "keep":
        return _({"release": N_("release when the queue ends (pull first)"),
                  "stop": N_("stop when the queue ends (pull first)")}[rec.policy])
    return _({"release": N_("release when the queue ends"), "stop": N_("stop when the queue ends"),
              "keep": N_("pull when the queue ends")}[rec.policy])


def held_now(services: Services, instance_id: str) -> bool:
    """The release (or stop) waits on this instance: the results asked for could not be
    pulled, or its when-done record cannot be read."""
    try:
        rec = load_when_done(services, instance_id)
    except UnreadableRecord:
        return True
    return (rec is not None and rec.done_at is None and rec.pending_pull and bool(rec.held)
            and rec.policy != "keep")


def held_reason(services: Services, inst: Instance) -> Deferred:
    """Why an instance due for release (or whose queue ended) is kept, and the ways out: one
    line for `gputui reap` and the clock's report."""
    try:
        rec = load_when_done(services, inst.id)
    except UnreadableRecord:
        return Deferred(N_("{name}: held: its when-done record cannot be read — `gputui jobs "
                           "{name} when-done POLICY` writes it anew; `gputui release {name}` "
                           "releases it anyway"), name=inst.name)
    if rec is not None and rec.pending_pull and rec.held:
        return Deferred(N_("{name}: held: results missing ({pulls}) — `gputui release {name}` "
                           "releases it anyway; `gputui jobs {name} when-done {policy} --pull "
                           "OTHER` pulls another path"), name=inst.name, pulls=_pulls(rec),
                        policy=rec.policy)
    if rec is not None and rec.pending_pull:
        return Deferred(N_("{name}: kept: the results asked for ({pulls}) are not home — "
                           "`gputui release {name}` releases it anyway"), name=inst.name,
                        pulls=_pulls(rec))
    return Deferred(N_("{name}: kept: the results its queue was to bring home are not home"),
                    name=inst.name)


def deadline_warning(services: Services, inst: Instance, mins: int) -> Deferred | None:
    """The warning before the release time where the release will wait for results that are
    not home (None: nothing waits, the usual warning)."""
    try:
        rec = load_when_done(services, inst.id)
    except UnreadableRecord:
        return Deferred(N_("{name} reaches its release time in {mins} min but is held: its "
                           "when-done record cannot be read, so it is kept, not released — "
                           "`gputui release {name}` releases it"), name=inst.name, mins=mins)
    if rec is None or not rec.pending_pull:
        return None
    if rec.held:
        return Deferred(N_("{name} reaches its release time in {mins} min but is held: results "
                           "missing ({pulls}), so it is kept, not released — `gputui release "
                           "{name}` releases it anyway; `gputui jobs {name} when-done {policy} "
                           "--pull OTHER` pulls another path"), name=inst.name, mins=mins,
                        pulls=_pulls(rec), policy=rec.policy)
    return Deferred(N_("{name} reaches its release time in {mins} min; the results asked for "
                       "({pulls}) are not home yet: they are pulled first, and it is kept if "
                       "they cannot be — on Home, e extends 1 h, E 30 min"), name=inst.name,
                    mins=mins, pulls=_pulls(rec))


# -- helpers ----------------------------------------------------------------------------------
def clean_line(line: str) -> str:
    """A log line fit for a terminal: as a terminal leaves it (a progress bar's carriage
    returns drawn over: `ABCDEF\rred` -> `redDEF`), no escapes."""
    from gputui.sanitize import terminal_line

    return terminal_line(line, limit=4000)


def _job_id(text: str) -> str:
    text = str(text).strip()
    if not text.isdigit():
        raise UnknownJob(_("{text} is not a job id (ids are numbers: 1, 2, ...)").format(
            text=repr(text)))
    return str(int(text))


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


# What the queue runner on the instance answers (in English: it has no catalogs), as a
# person reads it here.
RUNNER_SAYS = (
    (re.compile(r"no job (?P<job_id>\S+)"), N_("no job {job_id}")),
    (re.compile(r"job (?P<job_id>\S+) already (?P<status>\w+)"),
     N_("job {job_id} already {status}")),
    (re.compile(r"job (?P<job_id>\S+) is (?P<status>\w+)"), N_("job {job_id} is {status}")),
    (re.compile(r"unknown command (?P<command>.+)"), N_("unknown command {command}")),
    (re.compile(r"no python3 on the instance"), N_("no python3 on the instance")),
    (re.compile(r"run (?P<n>\d+) cannot be queued: (?P<why>.+)"),
     N_("run {n} cannot be queued: {why}")),
    (re.compile(r"cannot be queued: the runs sent are not JSON"),
     N_("cannot be queued: the runs sent are not JSON")),
)


def runner_said(line: str) -> str:
    """A line from the runner in the interface's language (other lines as they are)."""
    for rx, template in RUNNER_SAYS:
        m = rx.fullmatch(line)
        if m is not None:
            words = {k: status_text(v) if k == "status" else v
                     for k, v in m.groupdict().items()}
            return _(template).format(**words)
    return line


def _last(result: Any) -> str:
    from gputui.nvidia.nvsmi import sanitize

    lines = (result.stderr or result.stdout or "").strip().splitlines()
    return runner_said(sanitize(lines[-1], 300)) if lines else _("exit {code}").format(
        code=result.exit_status)


# What a queue's end did, shown in the interface's language (English in a log).
_OUTCOMES = {"released": N_("released"), "stopped": N_("stopped"), "pulled": N_("pulled"),
             "kept": N_("kept")}
_POLICY_DONE = {"release": "released", "stop": "stopped", "keep": "kept"}


def _outcome(word: str) -> Deferred:
    return Deferred(_OUTCOMES.get(word, word))


def _not_home(name: str, missing: list[tuple[str, str]], shown_max: int = 5) -> str:
    """One line: which entries of a pull did not come home and why, and the ways out."""
    from gputui.i18n import ngettext, shown

    entries = "; ".join(f"{path} ({shown(why)})" for path, why in missing[:shown_max])
    if len(missing) > shown_max:
        entries += " " + _("and {count} more").format(count=len(missing) - shown_max)
    return ngettext(
        "{count} entry asked for did not come home: {entries} — fix it on the instance (the "
        "pull is tried again), or `gputui release {name}` releases it anyway",
        "{count} entries asked for did not come home: {entries} — fix them on the instance "
        "(the pull is tried again), or `gputui release {name}` releases it anyway",
        len(missing)).format(name=name, count=len(missing), entries=entries)


def _pulls(rec: WhenDone, cells: int = 200) -> str:
    """The remote paths asked for, fit for a terminal (cut in the middle to `cells`)."""
    from gputui.i18n import truncate_cells
    from gputui.sanitize import sanitize

    return truncate_cells(sanitize(", ".join(p["remote"] for p in rec.pulls), 1000), cells,
                          where="middle")


def _locals(rec: WhenDone) -> str:
    return ", ".join(p["local"] for p in rec.pulls)


__all__ = ["FINAL", "MAX_COMMAND_BYTES", "Job", "JobError", "JobService", "JobSpec", "QueueView",
           "UnknownJob", "UnreadableRecord", "WhenDone", "armed_poweroff", "check_spec",
           "checked_when_done", "command_problem", "deadline_warning", "held_now", "held_reason",
           "on_tick", "parse_gpus", "read_runs_file", "release_allowed", "run_cost",
           "when_done_label"]
