"""Jobs and files: push, pull, a queue of runs on the instance, and `run` for the whole round."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Literal

from gputui.cli.output import EXIT_BAD_INPUT, EXIT_ERROR, CommandError, print_json, run_async
from gputui.errors import BadInput, one_line
from gputui.format import run_name, status_text
from gputui.i18n import N_, _, cell_len, ngettext, pad_cells, shown, truncate_cells

POLICIES = ("release", "stop", "keep")


# -- helpers ------------------------------------------------------------------------------------
def _live(services: Any, name: str) -> Any:
    inst = services.store.find_instance_sync(name)
    if not inst.status.live:
        raise CommandError(_("{name} is {status}").format(name=inst.name,
                                                          status=status_text(inst.status)))
    return inst


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class _Bar:
    """A progress bar on stderr (only on a terminal)."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.started = time.monotonic()
        self.drawn = False

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        total = max(1, p.bytes_total)
        frac = min(1.0, p.bytes_done / total) if p.bytes_total else 1.0
        width = 24
        filled = int(frac * width)
        rate = p.bytes_done / max(1e-6, time.monotonic() - self.started)
        line = (f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {frac * 100:3.0f}% "
                f"{_human_bytes(p.bytes_done)}/{_human_bytes(p.bytes_total)} "
                + _("{done}/{total} files {rate}/s").format(
                    done=p.files_done, total=p.files_total, rate=_human_bytes(rate)))
        sys.stderr.write(line[:200].ljust(80))
        sys.stderr.flush()
        self.drawn = True

    def done(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


#: the transfer's direction as the platform says it (AutoDL's guides: 上传, 取回)
DIRECTIONS = {"push": N_("push"), "pull": N_("pull")}


def _summary_line(s: Any) -> str:
    def via(n: int) -> str:
        return " " + ngettext("({count} through a link)", "({count} through links)",
                              n).format(count=n) if n else ""

    extra = _(", {count} resumed").format(count=s.resumed) if s.resumed else ""
    if getattr(s, "not_copied", None):
        extra += _(", {count} did not come").format(count=len(s.not_copied))
    return _("{direction} {source} -> {target}: {files} files{files_via}, {size}, {skipped} "
             "unchanged{skipped_via}, {ignored} ignored{extra} in {seconds} s").format(
        direction=_(DIRECTIONS.get(s.direction, s.direction)), source=s.source, target=s.target, files=s.files,
        files_via=via(getattr(s, "links", 0)), size=_human_bytes(s.bytes), skipped=s.skipped,
        skipped_via=via(getattr(s, "skipped_links", 0)), ignored=s.ignored, extra=extra,
        seconds=f"{s.seconds:.1f}")


async def _transfer(services: Any, args: argparse.Namespace, direction: str) -> int:
    from gputui.nvidia.nvsmi import sanitize
    from gputui.remote.ssh import SSHLayerError
    from gputui.remote.transfer import pull, push

    inst = _live(services, args.name)
    local: Path | None = args.local_path
    link = await services.link(inst)
    bar = _Bar(f"{_(DIRECTIONS[direction])} {inst.name}", not args.json)
    args.dry_run = getattr(args, "dry_run", False)
    try:
        if direction == "push":
            assert local is not None
            from gputui.services.pushes import default_remote

            # AutoDL: on the data disk (~/autodl-tmp/<name>), not the 30 GB system disk
            remote = args.remote or default_remote(services, inst, local.name)
            summary = await push(link, local, remote, checksum=args.checksum,
                                 progress=None if args.dry_run else bar, dry_run=args.dry_run)
            if args.local_is_dir and not args.dry_run:
                from gputui.services.pushes import record_push

                record_push(services, inst.id, remote)
        else:
            summary = await pull(link, args.remote, local, checksum=args.checksum,
                                 progress=bar)
    except SSHLayerError as exc:
        raise CommandError(f"{inst.name}: {one_line(exc)}") from None
    finally:
        bar.done()
    if args.json:
        print_json(summary.as_dict())
    elif getattr(summary, "dry_run", False):
        for source, dest in zip(summary.sources, summary.paths, strict=False):
            print(sanitize(_("would send {source} -> {dest}").format(source=source, dest=dest),
                           800))
        if getattr(args, "verbose", False):
            _print_ignored(summary)
        print(sanitize(_("dry run: {files} files, {size} would move to {target}; {skipped} "
                         "unchanged, {ignored} ignored; nothing was sent").format(
            files=summary.files, size=_human_bytes(summary.bytes), target=summary.target,
            skipped=summary.skipped, ignored=summary.ignored), 400))
    else:
        if getattr(args, "verbose", False):
            _print_ignored(summary)
        print(sanitize(_summary_line(summary), 400))
    missing = getattr(summary, "not_copied", [])
    for path, why in missing:  # what was asked for and did not come: one line each, and exit 1
        print("gputui: " + sanitize(_("{path}: did not come: {why}").format(
            path=path, why=shown(why)), 600), file=sys.stderr)
    if missing:
        print("gputui: " + ngettext(
            "{count} entry did not come home; the rest did — fix it on {name} and pull again "
            "(only what changed moves)",
            "{count} entries did not come home; the rest did — fix them on {name} and pull "
            "again (only what changed moves)", len(missing)).format(
                count=len(missing), name=inst.name), file=sys.stderr)
        return EXIT_ERROR
    return 0


def _print_ignored(summary: Any) -> None:
    """What the ignore rules (.gputuiignore, .gitignore, the fixed names) left out."""
    from gputui.nvidia.nvsmi import sanitize

    for path in summary.ignored_paths:
        print(sanitize(_("ignored {path}").format(path=path), 800))
    if summary.ignored_paths:
        from gputui.remote.transfer import ALWAYS_IGNORED

        never = ", ".join(ALWAYS_IGNORED)
        print(_("(left out by {file} and the names never sent: {names})").format(
            file=summary.ignore_file, names=never) if summary.ignore_file else
            _("(left out: the names never sent: {names})").format(names=never))


def cmd_push(args: argparse.Namespace) -> int:
    args.local_path = Path(os.path.expanduser(args.local)).resolve()
    if not args.local_path.exists():
        raise CommandError(_("{path}: no such file or folder").format(path=args.local),
                           EXIT_BAD_INPUT)
    args.local_is_dir = args.local_path.is_dir()
    return run_async(args, lambda services: _transfer(services, args, "push"))


def cmd_pull(args: argparse.Namespace) -> int:
    args.local_path = Path(os.path.expanduser(args.local)).resolve() if args.local else None
    return run_async(args, lambda services: _transfer(services, args, "pull"))


def _command(args: argparse.Namespace, options: argparse.ArgumentParser) -> list[str]:
    """The command after `--`; options written between NAME and `--` are parsed here (argparse
    hands everything after the first positional to the command)."""
    rest = list(args.argv or [])
    if "--" in rest:
        i = rest.index("--")
        opts, command = rest[:i], rest[i + 1:]
    elif rest and rest[0].startswith("-"):
        raise CommandError(_("{arg}: put options before the command, and the command after "
                             "--").format(arg=rest[0]),
                           EXIT_BAD_INPUT)
    else:
        opts, command = [], rest
    if opts:
        options.parse_args(opts, namespace=args)
    return command


# -- the queue --------------------------------------------------------------------------------
def print_table(view: Any, inst: Any, lease: Any = None) -> None:
    from gputui.format import format_elapsed, format_small_money
    from gputui.nvidia.nvsmi import sanitize

    if not view.jobs:
        print(_("{name}: no runs queued. Queue one with `gputui jobs {name} add -- "
                "CMD`.").format(name=inst.name))
        return
    exit_w = max(4, cell_len(_("EXIT")))  # headers whole in every language
    print(" ".join((pad_cells(_("ID"), 4, ">"), pad_cells(_("NAME"), 18),
                    pad_cells(_("STATUS"), 9), pad_cells(_("EXIT"), exit_w, ">"),
                    pad_cells(_("TIME"), 8, ">"), pad_cells("GPU%", 5, ">"),
                    pad_cells(_("MEM MiB"), 8, ">"), pad_cells(_("COST"), 9, ">"))))
    for j in view.jobs:
        util = f"{j.gpu_util_avg:.0f}" if j.gpu_util_avg is not None else "-"
        mem = f"{j.gpu_mem_max_mib:.0f}" if j.gpu_mem_max_mib is not None else "-"
        cost = format_small_money(j.cost, j.currency) if j.cost is not None else "-"
        code = str(j.exit_code) if j.exit_code is not None else "-"
        name = pad_cells(truncate_cells(sanitize(run_name(j.id, j.name), 60), 18, where="middle"),
                         18)
        print(f"{j.id:>4} {name} {pad_cells(status_text(j.status), 9)} "
              f"{pad_cells(code, exit_w, '>')} {pad_cells(format_elapsed(j.seconds()), 8, '>')} "
              f"{util:>5} {mem:>8} {cost:>9}")
    if any(j.gpu_util_avg is not None or j.gpu_mem_max_mib for j in view.jobs):
        print(_("GPU%: its GPUs' use while the run had a process on them; MEM MiB: the most "
                "GPU memory the run's own processes held"))
    if view.finished:
        print(summary_text(view, inst, lease))


def summary_text(view: Any, inst: Any, lease: Any = None) -> str:
    from decimal import Decimal

    from gputui.format import format_small_money, sum_as_shown

    counts = view.counts()
    parts = [f"{n} {status_text(status)}" for status, n in counts.items()]
    costs = [j.cost for j in view.jobs if j.cost is not None]
    # the column's figures added as read ($0.35 + $0.17 = $0.52); runs of a fraction of a
    # cent each add up exactly, and a total under a cent reads <$0.01, never $0.00
    total = sum_as_shown(costs) or sum(costs, Decimal(0))
    ended = (_("queue ended at {time}").format(time=f"{view.ended_at.astimezone():%H:%M}")
             if view.ended_at else _("queue ended"))
    text = _("{ended}: {counts}; the runs cost {total} (part of {name}'s cost)").format(
        ended=ended, counts=_(", ").join(parts), total=format_small_money(total, inst.billing.currency),
        name=inst.name)
    if view.poweroff_at is not None:  # the queue's end scheduled a power-off...
        from gputui.services.jobs import armed_poweroff

        off, by_lease = armed_poweroff(view, lease)  # ...or the lease's timer replaced it since
        if off is not None and by_lease:
            text += _("; it powers off at {time}, at its release timer").format(
                time=f"{off.astimezone():%H:%M}")
        elif off is not None:
            text += _("; it powers off at {time} unless gputui finishes first").format(
                time=f"{off.astimezone():%H:%M}")
    return text


def cmd_jobs(args: argparse.Namespace) -> int:
    action = args.action or "list"
    return run_async(args, lambda services: _JOB_ACTIONS[action](services, args))


def _any(services: Any, name: str) -> Any:
    """An instance by name or id, live or gone: the latest of several gone by one name."""
    from gputui.errors import NotFound

    try:
        return services.store.find_instance_sync(name)
    except NotFound:
        gone = [i for i in services.store.instances_sync() if i.name == name
                and not i.status.live]
        if len(gone) < 2 or any(i.name == name and i.status.live
                                for i in services.store.instances_sync()):
            raise
        return max(gone, key=lambda i: i.ended_at or i.created_at)


def _released(services: Any, name: str) -> tuple[Any, Any, Any] | None:
    """(instance, its runs as kept here, the record) for an instance that is gone; None for a
    live one. An instance gone with no runs kept is one line, exit 1."""
    from gputui.services.run_records import released_view

    inst = _any(services, name)
    if inst.status.live:
        return None
    view, rec = released_view(services, inst)
    if not view.jobs:
        raise CommandError(_("{name} is {status}, and no runs of it were kept here").format(
            name=inst.name, status=status_text(inst.status)))
    return inst, view, rec


def _gone_line(inst: Any) -> str:
    from gputui.format import local_clock

    if inst.ended_at is None:
        return _("{name} is {status}; its runs as kept here:").format(
            name=inst.name, status=status_text(inst.status))
    return _("{name} was {status} at {time}; its runs as kept here:").format(
        name=inst.name, status=status_text(inst.status), time=local_clock(inst.ended_at))


async def _list(services: Any, args: argparse.Namespace) -> int:
    from gputui.services.jobs import JobService

    gone = _released(services, args.name)
    if gone is not None:
        from gputui.services.run_records import record_note

        inst, view, rec = gone
        if args.json:
            print_json([j.as_dict() for j in view.jobs])
            return 0
        print(_gone_line(inst))
        print_table(view, inst)
        print(record_note(rec, inst))
        print(_("  `gputui jobs {name} log ID` prints a run's last lines").format(
            name=inst.id if _ambiguous(services, inst) else inst.name))
        return 0
    inst = _live(services, args.name)
    jobs = JobService(services)
    view = await jobs.view(inst)
    if args.json:
        print_json([j.as_dict() for j in view.jobs])
    else:
        print_table(view, inst, services.store.get_lease_sync(inst.id))
        _print_when_done(services, inst)
    return 0


def _print_when_done(services: Any, inst: Any) -> None:
    """The when-done policy under the table; a hold (results missing, a record that cannot be
    read) with its ways out."""
    from gputui.nvidia.nvsmi import sanitize
    from gputui.services.jobs import UnreadableRecord, load_when_done, when_done_label

    try:
        rec = load_when_done(services, inst.id)
    except UnreadableRecord as exc:
        print(_("when done: {label} — {problem}").format(
            label=when_done_label(services, inst.id), problem=one_line(exc)))
        print(_("  `gputui jobs {name} when-done POLICY` writes it anew; `gputui release {name}` "
                "releases it").format(name=inst.name))
        return
    if rec is None or rec.done_at is not None:
        return
    pulls = sanitize(", ".join(f"{p['remote']} -> {p['local']}" for p in rec.pulls), 400)
    print(_("when done: {policy}").format(policy=_policy(rec.policy))
          + (_(" (pull {pulls} first)").format(pulls=pulls) if pulls else ""))
    if rec.held and rec.pending_pull:
        print(f"{when_done_label(services, inst.id)}: {sanitize(rec.held, 400)}")
        if rec.policy == "keep":
            print(_("  `gputui jobs {name} when-done keep --pull OTHER` pulls another "
                    "path").format(name=inst.name))
        else:
            print(_("  `gputui release {name}` releases it anyway; `gputui jobs {name} when-done "
                    "{policy} --pull OTHER` pulls another path").format(name=inst.name,
                                                                        policy=rec.policy))


def _specs_from_args(args: argparse.Namespace, inst: Any) -> list[Any]:
    from gputui.services.jobs import JobSpec, parse_gpus, read_runs_file

    gpus = parse_gpus(args.gpus, inst.gpu_count)
    if args.retries < 0 or args.retries > 100:
        raise CommandError(_("--retries: 0 to 100"), EXIT_BAD_INPUT)
    if args.name_label is not None:
        from gputui.format import check_label

        args.name_label = check_label(args.name_label, "--name")
    command = _command(args, args.options_parser)
    if args.file and command:
        raise CommandError(_("add: give a command or --file, not both"), EXIT_BAD_INPUT)
    if args.file:
        lines = read_runs_file(Path(os.path.expanduser(args.file)))
        base = args.name_label
        return [JobSpec(command=line, name=f"{base}-{i}" if base else None, cwd=args.cwd,
                        gpus=gpus, retries=args.retries) for i, line in enumerate(lines, 1)]
    if not command:
        raise CommandError(_("add: no command (gputui jobs NAME add -- CMD ...)"), EXIT_BAD_INPUT)
    from gputui.services.hub import quote_args

    text = command[0] if len(command) == 1 else quote_args(command)
    return [JobSpec(command=text, name=args.name_label, cwd=args.cwd, gpus=gpus,
                    retries=args.retries)]


async def _add(services: Any, args: argparse.Namespace) -> int:
    from gputui.services.jobs import JobService

    inst = _live(services, args.name)
    specs = _specs_from_args(args, inst)
    ids = await JobService(services).add(inst, specs)
    if args.json:
        print_json({"ids": ids})
    else:
        for job_id in ids:
            print(job_id)
    return 0


def _ambiguous(services: Any, inst: Any) -> bool:
    return sum(i.name == inst.name for i in services.store.instances_sync()) > 1


async def _log(services: Any, args: argparse.Namespace) -> int:
    from gputui.services.jobs import JobService, UnknownJob, _job_id
    from gputui.services.run_records import TOTAL_BYTES, kept_tail, no_output

    gone = _released(services, args.name)
    if gone is not None:  # the copy kept here when its queue ended or it was released
        inst, view, rec = gone
        job = view.get(_job_id(args.job))
        kept = kept_tail(rec, job.id)
        if kept is None:
            raise CommandError(_("{name}: no log of job {job_id} was kept here").format(
                name=inst.name, job_id=job.id))
        lines, cut, over_cap = kept
        for line in lines[-args.lines:] if args.lines > 0 else []:
            print(line)
        if not lines:
            print(_("job {job_id}: {what}").format(job_id=job.id, what=no_output(job))
                  if not over_cap else
                  _("job {job_id}: its log was not kept: the instance's logs were over the "
                    "{size} kept").format(job_id=job.id, size=_human_bytes(TOTAL_BYTES)),
                  file=sys.stderr)
        elif cut:
            print(_("(the last lines only: the log was longer)"), file=sys.stderr)
        return 0
    inst = _live(services, args.name)
    jobs = JobService(services)
    if args.follow:
        await jobs.follow(inst, args.job, lambda line: print(line, flush=True))
        return 0
    lines = await jobs.log_tail(inst, args.job, args.lines)
    for line in lines:
        print(line)
    if not lines:  # a run that printed nothing says so, and how it ended
        try:
            job = (await jobs.view(inst)).get(_job_id(args.job))
        except UnknownJob:
            return 0
        print(_("job {job_id}: {what}").format(job_id=job.id, what=no_output(job)),
              file=sys.stderr)
    return 0


def _policy(policy: str) -> str:
    return {"release": _("release"), "stop": _("stop"), "keep": _("keep")}.get(policy, policy)


async def _cancel(services: Any, args: argparse.Namespace) -> int:
    from gputui.services.jobs import JobService

    inst = _live(services, args.name)
    was = await JobService(services).cancel(inst, args.job)
    print(_("job {job_id}: cancelled").format(job_id=args.job)
          + (_(" (stopping it)") if was == "running" else ""))
    return 0


async def _retry(services: Any, args: argparse.Namespace) -> int:
    from gputui.services.jobs import JobService

    inst = _live(services, args.name)
    new = await JobService(services).retry(inst, args.job)
    print(new)
    return 0


def _pulls(args: argparse.Namespace) -> list[tuple[str, str]]:
    if args.to and not args.pull:
        raise CommandError(_("--to needs --pull REMOTE"), EXIT_BAD_INPUT)
    if not args.pull:
        return []
    from gputui.services.jobs import check_pulls

    check_pulls([(args.pull, args.to or "")])  # no control characters: refused before anything
    local = args.to or os.path.join(".", os.path.basename(args.pull.rstrip("/")) or "results")
    return [(args.pull, os.path.abspath(os.path.expanduser(local)))]


async def _when_done(services: Any, args: argparse.Namespace) -> int:
    from gputui.config import parse_duration
    from gputui.sanitize import sanitize
    from gputui.services.jobs import JobService

    inst = _live(services, args.name)
    pulls = _pulls(args)
    try:
        grace = parse_duration(args.grace).total_seconds()
    except ValueError as exc:
        raise CommandError(f"--grace: {exc}", EXIT_BAD_INPUT) from None
    jobs = JobService(services)
    rec = await jobs.set_when_done(inst, args.policy, pulls=pulls, grace_s=grace)
    outcome = await jobs.finish(inst, force=True)  # the queue may have ended already
    if args.json:
        print_json({"policy": rec.policy, "pulls": rec.pulls, "grace_s": rec.grace_s,
                    "outcome": outcome})
    else:
        what = {"release": _("released"), "stop": _("stopped"), "keep": _("kept")}[rec.policy]
        pull = _("; {paths} pulled first").format(paths=", ".join(
            _("{remote} to {local}").format(remote=sanitize(p["remote"], 300),
                                            local=sanitize(p["local"], 600))
            for p in rec.pulls)) if rec.pulls else ""
        print(_("{name}: when its queue ends it is {what}").format(name=inst.name, what=what)
              + pull + (_(" — done now: {outcome}").format(outcome=outcome) if outcome else ""))
    return 0


_JOB_ACTIONS = {"list": _list, "add": _add, "log": _log, "cancel": _cancel, "retry": _retry,
                "when-done": _when_done}


# -- run: the whole round -----------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    if args.gpu and args.name is not None:  # `run --gpu X -- CMD`: argparse took CMD's first word
        command, args.name = [args.name, *(args.argv or [])], None
    else:
        command = _command(args, args.options_parser)
    if not command:
        raise CommandError(_("run: no command (gputui run NAME -- CMD ...)"), EXIT_BAD_INPUT)
    if (args.name is None) == (args.gpu is None):
        raise CommandError(_("run: give an instance NAME or --gpu GPU to rent one"), EXIT_BAD_INPUT)
    if args.label is not None:
        from gputui.format import check_label

        args.label = check_label(args.label, "--label")
    _pulls(args)  # a bad --pull or --to is refused before anything is rented or sent
    args.sync_path = Path(os.path.expanduser(args.sync)).resolve() if args.sync else None
    if args.sync_path is not None and not args.sync_path.is_dir():
        raise CommandError(_("--sync: {path}: no such folder").format(path=args.sync),
                           EXIT_BAD_INPUT)
    return run_async(args, lambda services: _run(services, args, command))


async def _rent(services: Any, args: argparse.Namespace) -> Any:
    from datetime import timedelta

    from gputui.config import parse_duration
    from gputui.models import Lease, utcnow
    from gputui.providers.base import CreateRequest
    from gputui.services.leases import session_leases

    text = args.release_after or services.config.lease.default_release
    try:
        delta = parse_duration(text)
    except ValueError as exc:
        raise CommandError(f"--release-after: {exc}", EXIT_BAD_INPUT) from None
    if delta < timedelta(seconds=60) or delta.days > 366:
        raise CommandError(_("--release-after: between a minute and a year"), EXIT_BAD_INPUT)
    offer = await services.find_offer(args.provider, args.gpu)
    name = services.free_name(args.instance_name or "run")
    request = CreateRequest(offer_id=offer.offer_id, gpu_count=offer.gpu_count, name=name)
    lease = Lease(instance_id="pending", release_at=utcnow() + delta)
    inst = await services.create(args.provider, offer, request, lease=lease,
                                 progress=lambda m: print(f"  {name}: {m}", file=sys.stderr))
    await session_leases(services).arm(inst)
    from gputui.cli.output import rent_terms

    print(rent_terms(inst, services.store.get_lease_sync(inst.id)), file=sys.stderr)
    return inst


async def _run(services: Any, args: argparse.Namespace, command: list[str]) -> int:
    import asyncio  # here, not at the top: every command's start would pay for it

    from gputui.nvidia.nvsmi import sanitize
    from gputui.remote.ssh import SSHLayerError
    from gputui.remote.transfer import push
    from gputui.services.hub import quote_args
    from gputui.services.jobs import JobService, JobSpec, check_spec, parse_gpus

    text = command[0] if len(command) == 1 else quote_args(command)
    check_spec(JobSpec(command=text, name=args.label, cwd=args.cwd))  # before renting anything
    inst = await _rent(services, args) if args.gpu else _live(services, args.name)
    then: Literal["release", "stop", "keep"] = args.then or ("release" if args.gpu else "keep")
    pulls = _pulls(args)
    gpus = parse_gpus(args.gpus, inst.gpu_count)
    jobs = JobService(services)
    cwd = args.cwd
    if args.sync_path is not None:
        local = args.sync_path
        link = await services.link(inst)
        bar = _Bar(f"sync {inst.name}", True)
        try:
            from gputui.services.pushes import default_remote

            target = default_remote(services, inst, local.name)
            summary = await push(link, local, target, progress=bar)
        except SSHLayerError as exc:
            raise CommandError(f"{inst.name}: {one_line(exc)}") from None
        finally:
            bar.done()
        print(sanitize(_summary_line(summary), 400), file=sys.stderr)
        from gputui.services.pushes import home_relative, record_push

        cwd = cwd or home_relative(target)
        record_push(services, inst.id, target)  # (a folder: checked above)
    if then != "keep" or pulls:
        # recorded first: if this command is stopped, the console or `gputui reap` finishes it
        await jobs.set_when_done(inst, then, pulls=pulls)
    [job_id] = await jobs.add(inst, [JobSpec(command=text, name=args.label, cwd=cwd, gpus=gpus)])
    print(_("{name}: job {job_id} queued").format(name=inst.name, job_id=job_id), file=sys.stderr)
    follow = asyncio.ensure_future(
        jobs.follow(inst, job_id, lambda line: print(line, flush=True)))
    try:
        await follow
    except (KeyboardInterrupt, asyncio.CancelledError):
        follow.cancel()
        return await _interrupted(services, jobs, inst, job_id)
    view = await jobs.wait(inst, [job_id])
    job = view.get(job_id)
    from gputui.format import format_elapsed, format_small_money

    cost = format_small_money(job.cost, job.currency) if job.cost is not None else "-"
    print(_("{name}: job {job_id} {status} (exit {code}) in {time}, {cost}").format(
        name=inst.name, job_id=job_id, status=status_text(job.status), code=job.exit_code,
        time=format_elapsed(job.seconds()), cost=cost), file=sys.stderr)
    if then != "keep" or pulls:
        outcome = await jobs.finish(inst, force=True)
        if outcome:
            print(f"{inst.name}: {outcome}", file=sys.stderr)
        elif view.active:
            what = {"release": _("released"), "stop": _("stopped")}.get(then, then)
            print(_("{name}: other runs are still queued; it is {what} when they end").format(
                name=inst.name, what=what), file=sys.stderr)
    if job.exit_code is None:
        return 1
    return int(job.exit_code)


async def _interrupted(services: Any, jobs: Any, inst: Any, job_id: str) -> int:
    import asyncio

    answer = ""
    if sys.stdin.isatty():
        sys.stderr.write("\n" + _("stop job {job_id} on {name}? [y/N] ").format(job_id=job_id,
                                                                               name=inst.name))
        sys.stderr.flush()
        try:
            answer = await asyncio.to_thread(sys.stdin.readline)
        except (OSError, KeyboardInterrupt):
            answer = ""
    if answer.strip().lower() in ("y", "yes"):
        await jobs.cancel(inst, job_id)
        print(_("job {job_id}: stopping it").format(job_id=job_id), file=sys.stderr)
    else:
        print(_("job {job_id} goes on; follow it with `gputui jobs {name} log {job_id} "
                "--follow`").format(job_id=job_id, name=inst.name), file=sys.stderr)
    lease = services.store.get_lease_sync(inst.id)
    if lease is not None and lease.release_at is not None:
        print(_("{name} keeps its release timer ({time})").format(
            name=inst.name, time=f"{lease.release_at.astimezone():%H:%M}"),
              file=sys.stderr)
    return 130


# -- the parser ---------------------------------------------------------------------------------
def _options_parser(prog: str) -> argparse.ArgumentParser:
    from gputui.cli import _Parser

    return _Parser(prog=prog, add_help=False)


def _add_options(a: argparse.ArgumentParser) -> argparse.ArgumentParser:
    a.add_argument("--name", dest="name_label", help=_("a label for the run"))
    a.add_argument("--cwd", help=_("folder on the instance (default: its home)"))
    a.add_argument("--gpus", help=_("GPU indices, e.g. 0,1 (default: all; runs on other GPUs "
                   "run side by side)"))
    a.add_argument("--retries", type=int, default=0, help=_("rerun a failed run this many times"))
    a.add_argument("--file", help=_("queue one run per line of this file (a sweep)"))
    a.add_argument("--json", action="store_true", help=_("print the ids as JSON"))
    return a


def _run_options(s: argparse.ArgumentParser) -> argparse.ArgumentParser:
    s.add_argument("--sync", metavar="DIR", help=_("push this folder first; the run starts in it"))
    s.add_argument("--pull", metavar="REMOTE", help=_("bring this home afterwards"))
    s.add_argument("--to", metavar="LOCAL", help=_("where to (default: ./<name of REMOTE>)"))
    s.add_argument("--then", choices=POLICIES,
                   help=_("afterwards (default: keep; release for an instance rented with --gpu)"))
    s.add_argument("--gpus", help=_("GPU indices for the run, e.g. 0,1"))
    s.add_argument("--cwd", help=_("folder on the instance to run in"))
    s.add_argument("--label", help=_("a label for the run (in the ledger)"))
    s.add_argument("--gpu", help=_("rent a new instance with this GPU for the run"))
    s.add_argument("--provider", default="sandbox", help=_("with --gpu: provider (default sandbox)"))
    s.add_argument("--release-after", metavar="DURATION", help=_("with --gpu: its release timer"))
    s.add_argument("--instance-name", help=_("with --gpu: the new instance's name"))
    return s


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("push", help=_("send files to an instance (only what changed)"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("local", help=_("a file or folder here"))
    s.add_argument("remote", nargs="?", help=_("where on the instance (default: ~/<name of "
                                               "LOCAL>; on AutoDL the data disk, "
                                               "/root/autodl-tmp/<name of LOCAL>)"))
    s.add_argument("--checksum", action="store_true", help=_("compare SHA-256, not size and time"))
    s.add_argument("--json", action="store_true", help=_("print a JSON summary"))
    s.add_argument("--verbose", "-v", action="store_true",
                   help=_("also name each file or folder the ignore rules left out"))
    s.add_argument("--dry-run", action="store_true",
                   help=_("list what would be sent, and send nothing"))
    s.set_defaults(handler=cmd_push)

    s = sub.add_parser("pull", help=_("bring files home from an instance (only what changed)"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("remote", help=_("a file or folder on the instance (relative to its home)"))
    s.add_argument("local", nargs="?", help=_("where here (default: ./<name of REMOTE>)"))
    s.add_argument("--checksum", action="store_true", help=_("compare SHA-256, not size and time"))
    s.add_argument("--json", action="store_true", help=_("print a JSON summary"))
    s.set_defaults(handler=cmd_pull)

    s = sub.add_parser("jobs", help=_("a queue of runs on an instance: add, list, log, cancel"))
    s.add_argument("name", metavar="NAME", help=_("instance name or id"))
    s.add_argument("--json", action="store_true", help=_("print the runs as JSON"))
    s.set_defaults(handler=cmd_jobs, action=None)
    acts = s.add_subparsers(dest="action", metavar="ACTION")
    a = acts.add_parser("add", help=_("queue a run (prints its id)"))
    _add_options(a)
    a.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD", help=_("the command"))
    a.set_defaults(options_parser=_add_options(_options_parser("gputui jobs NAME add")))
    a = acts.add_parser("log", help=_("a run's log"))
    a.add_argument("job", help=_("job id"))
    a.add_argument("--follow", "-f", action="store_true", help=_("keep printing until it ends"))
    a.add_argument("--lines", type=int, default=200, help=_("how many last lines (default 200)"))
    a = acts.add_parser("cancel", help=_("drop a queued run, or stop a running one"))
    a.add_argument("job", help=_("job id"))
    a = acts.add_parser("retry", help=_("queue a finished run again"))
    a.add_argument("job", help=_("job id"))
    a = acts.add_parser("when-done", help=_("what happens when the queue ends"))
    a.add_argument("policy", choices=POLICIES)
    a.add_argument("--pull", metavar="REMOTE", help=_("bring this home first (inside the home)"))
    a.add_argument("--to", metavar="LOCAL", help=_("where to (default: ./<name of REMOTE>)"))
    a.add_argument("--grace", default="10m",
                   help=_("with no gputui running, power off this long after the end (default 10m)"))
    a.add_argument("--json", action="store_true", help=_("print the policy as JSON"))

    s = sub.add_parser("run", help=_("sync, run a command with its output, pull, then release"))
    s.add_argument("name", nargs="?", help=_("instance name or id (or --gpu to rent one)"))
    _run_options(s)
    s.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD", help=_("the command"))
    s.set_defaults(handler=cmd_run, options_parser=_run_options(_options_parser("gputui run")))


__all__ = ["BadInput", "register"]
