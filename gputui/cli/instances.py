"""Instances: list, create, extend, release, reap, ssh, add a host rented elsewhere."""

from __future__ import annotations

import argparse
import json
import sys

from gputui.cli.output import (
    EXIT_BAD_INPUT,
    CommandError,
    open_store,
    print_json,
    refresh_quietly,
    rent_terms,
    report_unreadable,
    run_async,
    status_text,
)
from gputui.errors import GputuiError, exit_code, one_line, os_reason
from gputui.format import default_label
from gputui.i18n import _, pad_cells, shown


def cmd_instances(args: argparse.Namespace) -> int:
    from gputui.format import format_money, format_remaining
    from gputui.services.views import instance_view

    store = open_store()
    refresh_quietly(args, store)
    items = store.instances_sync(live_only=not args.all)
    leases = {lease.instance_id: lease for lease in store.leases_sync()}
    views = [instance_view(i, leases.get(i.id)) for i in items]
    report_unreadable(store)
    if args.json:
        print_json(views)
        return 0
    if not views:
        print(_("No instances. Create one with `gputui create --provider sandbox --gpu 4090`"
                " or open the console with `gputui`."))
        return 0
    print(" ".join((pad_cells(_("NAME"), 16), pad_cells(_("PROVIDER"), 9),
                    pad_cells(_("GPU"), 22), pad_cells(_("STATUS"), 9),
                    pad_cells(_("RELEASE IN"), 10), pad_cells(_("COST"), 9, ">"))))
    for inst, v in zip(items, views, strict=True):
        lease = leases.get(inst.id)
        left = format_remaining(lease.remaining()) if lease and inst.status.live else "-"
        gpu = f"{v['gpu_count']}× {v['gpu']}"
        print(" ".join((pad_cells(v["name"], 16), pad_cells(v["provider"], 9), pad_cells(gpu, 22),
                        pad_cells(status_text(v["status"]), 9), pad_cells(left, 10),
                        pad_cells(format_money(inst.accrued(), v["currency"]), 9, ">"))))
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    import asyncio

    from pydantic import ValidationError

    from gputui.providers.base import CreateRequest
    from gputui.services.views import instance_view

    if args.name is not None:
        from gputui.format import check_label

        args.name = check_label(args.name, "--name")

    async def body(services) -> int:
        offer = await services.find_offer(args.provider, args.gpu,
                                          region=getattr(args, "cluster", None))
        from gputui.services.images import resolve_image  # a readable name, or an id

        args.image = await resolve_image(services, args.provider, args.image)
        try:
            request = CreateRequest(offer_id=offer.offer_id, gpu_count=offer.gpu_count if args.count is None else args.count,
                                    name=args.name or services.free_name(
                                        default_label(offer.gpu)),
                                    disk_gb=args.disk, image=args.image,
                                    nodes=getattr(args, "nodes", None) or 1)
        except ValidationError as exc:
            err = exc.errors()[0]
            flag = {"gpu_count": "--count", "disk_gb": "--disk", "name": "--name",
                    "nodes": "--nodes"}.get(
                str(err["loc"][0]), f"--{err['loc'][0]}")
            raise CommandError(_("{flag}: {problem}").format(flag=flag, problem=err["msg"].lower()),
                               EXIT_BAD_INPUT) from None
        lease = _lease_from_args(args, services)
        steps: list[str] = []

        def progress(step: str) -> None:
            steps.append(step)
            if not args.json:
                print(f"  {status_text(step)}", file=sys.stderr)

        try:
            if args.wait:  # retry while the provider says the card is sold out (cli/waiting.py)
                from gputui.cli.waiting import create_wait

                inst = await create_wait(services, args, offer, request, lease)
            else:
                inst = await services.create(args.provider, offer, request, lease=lease,
                                             progress=progress)
            inst = await _arm_lease(services, inst)
        except (asyncio.CancelledError, KeyboardInterrupt):
            if steps:  # recorded, so asked of the provider: it may exist, and bill
                print("gputui: " + _(
                    "interrupted: {name} may exist at {provider} and bill — run `gputui "
                    "instances` (it is reconciled then) or `gputui release {name}`").format(
                    name=request.name, provider=args.provider), file=sys.stderr)
            raise
        view = instance_view(inst, services.store.get_lease_sync(inst.id))
        if args.json:
            print_json(view)
        else:
            print(_("{name}: {count}× {gpu} on {provider}, {status} — ssh with "
                    "`gputui ssh {name}`").format(name=inst.name, count=inst.gpu_count,
                                                  gpu=inst.gpu, provider=args.provider,
                                                  status=status_text(view["status"])))
            print(rent_terms(inst, services.store.get_lease_sync(inst.id)))
        return 0

    return run_async(args, body)


def cmd_extend(args: argparse.Namespace) -> int:
    from gputui.config import check_release_at, lease_span
    from gputui.format import format_remaining
    from gputui.models import InstanceStatus

    if args.by is not None and args.by_option is not None and args.by != args.by_option:
        raise CommandError(_("extend: say how much longer once ({by} or --by {option})").format(
            by=args.by, option=args.by_option), EXIT_BAD_INPUT)
    by = args.by or args.by_option or "1h"

    async def body(services) -> int:
        from gputui.services.leases import session_leases

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(_not_live(inst))
        leases = session_leases(services)
        if args.to:
            lease = await leases.extend(inst, to=check_release_at(_parse_clock(args.to, "--to"),
                                                                  "--to"))
        else:
            lease = await leases.extend(inst, by=lease_span(by, "extend"))
        layers = [_("console")] + ([_("on-instance")] if lease.on_instance_armed else []) + (
            [_("provider")] if lease.provider_armed else [])
        at = lease.release_at.astimezone() if lease.release_at else None
        print(_("{name}: release at {time} (in {left}; layers: {layers})").format(
            name=inst.name, time=f"{at:%Y-%m-%d %H:%M}" if at else _("no time"),
            left=format_remaining(lease.remaining()), layers=_(", ").join(layers)))
        now = services.store.get_instance_sync(inst.id) or inst
        if now.status == InstanceStatus.STOPPED and \
                services.capabilities(inst.provider).power_off_stops_billing:
            print(_("{name} is stopped: its on-instance timer is set when it starts "
                    "(`gputui start {name}`)").format(name=inst.name))
        return 0

    return run_async(args, body)


def cmd_reap(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services.leases import session_leases

        services.actor = "reap"  # notifications say who released it
        result = await session_leases(services).reap()
        if args.json:
            print_json({"released": result.released, "errors": result.errors,
                        "unreadable": list(services.store.unreadable.values())})
        else:
            for name in result.released:
                print(_("released {name}").format(name=name))
            for err in result.errors:
                print(_("error: {problem}").format(problem=shown(err)), file=sys.stderr)
        return 1 if result.errors else 0

    try:
        return run_async(args, body)
    except GputuiError as exc:
        if not args.json:
            raise
        # a script reading `reap --json` (cron, a systemd timer) always gets JSON
        print_json({"released": [], "errors": [one_line(exc)], "unreadable": []})
        return exit_code(exc)


def cmd_ssh(args: argparse.Namespace) -> int:
    command_args = list(args.remote)
    if command_args and command_args[0] == "--":
        command_args = command_args[1:]

    async def body(services) -> int:
        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(_not_live(inst))
        link = await services.link(inst, accept_new_host_key=args.accept_new_host_key)
        from gputui.remote.ssh import SSHLayerError

        try:
            if command_args:
                result = await link.run(services.remote_command(inst, " ".join(command_args)),
                                        timeout=None)
                sys.stdout.write(result.stdout)
                sys.stderr.write(result.stderr)
                return result.exit_status if result.exit_status is not None else 255
            from gputui.remote.interactive import interactive_shell

            return await interactive_shell(link)
        except SSHLayerError as exc:
            raise CommandError(f"{inst.name}: {one_line(exc)}") from None

    return run_async(args, body)


def cmd_add_ssh(args: argparse.Namespace) -> int:
    from decimal import Decimal, InvalidOperation

    from gputui.format import check_label

    if args.name is not None:
        args.name = check_label(args.name, "--name")

    from gputui.models import Granularity
    from gputui.remote.sshline import parse_ssh_line
    from gputui.services.views import instance_view

    try:
        endpoint = parse_ssh_line(args.line)
    except ValueError as exc:
        raise CommandError(_("ssh line: {problem}").format(problem=exc), EXIT_BAD_INPUT) from None
    try:
        price = Decimal(args.price)
        if not price.is_finite() or price < 0 or price > 10_000:
            raise InvalidOperation
    except InvalidOperation:
        raise CommandError(_("--price: {value} is not an hourly price").format(
            value=repr(args.price)), EXIT_BAD_INPUT) from None
    if args.password_file:
        import os

        try:
            mode = os.stat(args.password_file).st_mode
        except OSError as exc:
            raise CommandError(f"--password-file: {shown(os_reason(exc))}: {args.password_file}",
                               EXIT_BAD_INPUT) from None
        if mode & 0o077:
            raise CommandError(_("--password-file: others can read {file}; run chmod 600 "
                                 "{file}").format(file=args.password_file), EXIT_BAD_INPUT)
        endpoint = endpoint.model_copy(update={"password_file": args.password_file})

    async def body(services) -> int:
        from gputui.services.hosts import add_ssh_host

        lease = _lease_from_args(args, services)
        inst = await add_ssh_host(
            services, endpoint, name=args.name, gpu=args.gpu, price=price,
            per=Granularity(args.per), accept_new_host_key=args.accept_new_host_key,
            password=_read_password(args), lease=lease,
        )
        if args.json:
            print_json(instance_view(inst, services.store.get_lease_sync(inst.id)))
        else:
            from gputui.format import format_remaining

            stored = services.store.get_lease_sync(inst.id)
            timer = (_("no release timer (confirmed)")
                     if stored is None or stored.release_at is None
                     else _("released in {left}").format(left=format_remaining(stored.remaining()))
                     + ("" if stored.on_instance_armed else _(" (by gputui; the on-host timer "
                                                              "is not armed)")))
            print(_("added {name}: {count}× {gpu} at {price}/h (billed per {per}), {timer}").format(
                name=inst.name, count=inst.gpu_count, gpu=inst.gpu,
                price=inst.billing.price_per_hour,
                per=_granularity(inst.billing.granularity.value), timer=timer))
        return 0

    return run_async(args, body)


def cmd_release(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services import at_release

        inst = services.store.find_instance_sync(args.name)
        stake = await at_release.at_stake(services, inst) if inst.status.live else None
        if stake is not None and stake.unread:
            print("gputui: " + _("{name}: its jobs queue could not be read ({why}); runs on "
                                 "it, if any, end with it").format(name=inst.name,
                                                                   why=stake.unread),
                  file=sys.stderr)
        asked = False
        if stake is not None and not stake.empty and not args.yes:
            what = stake.describe()
            if args.json or not sys.stdin.isatty():
                raise CommandError(_("{name}: {what} — a release ends them: add --yes to "
                                     "release it anyway").format(name=inst.name, what=what),
                                   EXIT_BAD_INPUT)
            if not await _ask(_("{name}: {what} — a release ends them. Release it anyway? "
                                "[y/N] ").format(name=inst.name, what=what)):
                print(_("{name} is kept: nothing was changed").format(name=inst.name),
                      file=sys.stderr)
                return 1
            asked = True
        entry, cancelled = await at_release.release(services, inst, stake, recheck=asked)
        if entry is None:
            now = services.store.get_instance_sync(inst.id) or inst
            if now.status.live:  # claimed by the daemon or a console: it finishes the release
                raise CommandError(_("{name}: another gputui process (the daemon or a console) "
                                     "is releasing it now").format(name=inst.name))
            print(_("{name} was already {status}").format(name=inst.name,
                                                          status=status_text(now.status)))
            return 0
        if args.json:
            print_json({**json.loads(entry.model_dump_json()),
                        "cancelled_runs": [job.id for job in cancelled]})
        else:
            from gputui.format import format_money, format_small_money

            print(_("released {name}: {amount} in all").format(
                name=inst.name,
                amount=format_money(entry.compute_cost + entry.storage_cost, entry.currency)))
            for job in cancelled:
                print(_("run {run}: cancelled by the release, {cost} (in `gputui costs "
                        "--runs`)").format(run=at_release.run_label(job),
                                           cost=format_small_money(job.cost or 0,
                                                                   job.currency)))
        return 0

    return run_async(args, body)


async def _ask(question: str) -> bool:
    """A yes/no question on the terminal; anything but y/yes (or no answer) is no."""
    import asyncio

    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        answer = await asyncio.to_thread(sys.stdin.readline)
    except (OSError, KeyboardInterrupt):
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _not_live(inst) -> str:
    return _("{name} is {status}").format(name=inst.name, status=status_text(inst.status))


def _granularity(per: str) -> str:
    words = {"second": _("second"), "minute": _("minute"), "hour": _("hour")}
    return words.get(per, per)


def _lease_from_args(args: argparse.Namespace, services):  # -> Lease
    from gputui.config import check_release_at, lease_span
    from gputui.models import Lease, utcnow

    release_at = None
    if args.no_timer:
        if not args.yes:
            raise CommandError(_("--no-timer bills until you release it by hand: add --yes to "
                                 "confirm"),
                               EXIT_BAD_INPUT)
    elif args.release_at:
        release_at = check_release_at(_parse_clock(args.release_at), "--release-at")
    elif args.release_after:
        release_at = utcnow() + lease_span(args.release_after, "--release-after")
    else:  # checked when config.toml was read; named as it is there
        release_at = utcnow() + lease_span(services.config.lease.default_release,
                                           "config.toml lease.default_release")
    idle_util = idle_minutes = None
    if args.idle:
        idle_util, idle_minutes = _parse_idle(args.idle)
    return Lease(instance_id="pending", release_at=release_at, no_timer_confirmed=args.no_timer,
                 idle_util_pct=idle_util, idle_minutes=idle_minutes)


def _parse_idle(text: str) -> tuple[float, float]:
    """`30m@5%`: power off once every GPU stays under 5 % utilisation for 30 minutes."""
    from gputui.config import MAX_IDLE, parse_duration

    try:
        span, _sep, pct = text.partition("@")
        minutes = parse_duration(span).total_seconds() / 60
        util = float(pct.strip().rstrip("%"))
    except ValueError:
        raise CommandError(_("--idle: {value} is not DURATION@PCT% (e.g. 30m@5%)").format(
            value=repr(text)),
                           EXIT_BAD_INPUT) from None
    if not (0 < util <= 100) or not (0 < minutes <= MAX_IDLE.total_seconds() / 60):
        raise CommandError(_("--idle: the utilisation must be 1-100 %, over at most 24 h"),
                           EXIT_BAD_INPUT)
    return util, minutes


def _parse_clock(text: str, field: str = "--release-at"):  # -> datetime (UTC)
    """`18:30` (today, or tomorrow if past) or an ISO-8601 time, in local time unless it says."""
    from datetime import datetime, timedelta

    from gputui.models import as_utc

    now = datetime.now().astimezone()
    try:
        if len(text) <= 5 and ":" in text:
            hh, mm = (int(x) for x in text.split(":"))
            at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
            if at <= now:
                at += timedelta(days=1)
        else:
            at = datetime.fromisoformat(text)
            if at.tzinfo is None:
                at = at.astimezone()
        if at <= now:
            raise CommandError(_("{field}: {value} is in the past").format(
                field=field, value=repr(text)), EXIT_BAD_INPUT)
        return as_utc(at)
    except (ValueError, OverflowError):  # OverflowError: a time at the end of the calendar
        raise CommandError(_("{field}: {value} is not a time (try 18:30)").format(
            field=field, value=repr(text)), EXIT_BAD_INPUT) from None


async def _arm_lease(services, inst):
    from gputui.services.leases import session_leases

    await session_leases(services).arm(inst)
    return inst


def _read_password(args: argparse.Namespace) -> str | None:
    if not args.ask_password:
        return None
    import getpass

    return getpass.getpass(_("SSH password (not stored): "))



def _timer_flags(s: argparse.ArgumentParser) -> None:
    """The release timer, the same on every command that makes an instance."""
    t = s.add_mutually_exclusive_group()
    t.add_argument("--release-after", metavar="DURATION",
                   help=_("auto-release after this long: 2h, 90m (default from config: 2h)"))
    t.add_argument("--release-at", metavar="TIME", help=_("auto-release at a clock time: 18:30"))
    t.add_argument("--no-timer", action="store_true", help=_("no auto-release (needs --yes)"))
    s.add_argument("--yes", action="store_true", help=_("confirm --no-timer"))
    s.add_argument("--idle", metavar="SPAN@PCT%",
                   help=_("idle release: power off when every GPU stays under PCT %% for SPAN, e.g. 30m@5%%"))


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("instances", help=_("list instances"))
    s.add_argument("--json", action="store_true", help=_("print a JSON list"))
    s.add_argument("--all", action="store_true", help=_("include released instances"))
    s.set_defaults(handler=cmd_instances)

    s = sub.add_parser("create", help=_("rent an instance"))
    s.add_argument("--provider", default="sandbox", help=_("provider (default: sandbox)"))
    s.add_argument("--gpu", required=True, help=_("GPU model, matched loosely (e.g. 4090, 'H100 SXM')"))
    s.add_argument("--count", type=int, help=_("number of GPUs (default: the offer's size, often 1)"))
    s.add_argument("--name", help=_("task label (default: from the GPU)"))
    s.add_argument("--disk", type=float, default=50, help=_("disk in GB (default 50)"))
    s.add_argument("--image", help=_("image, where the provider has images: its id or its "
                                     "readable name (`gputui images`)"))
    s.add_argument("--cluster", help=_("slurm: which [providers.slurm.NAME] cluster"))
    s.add_argument("--nodes", type=int, help=_("slurm: nodes to allocate (the GPUs are split "
                                               "evenly among them; default 1)"))
    s.add_argument("--json", action="store_true", help=_("print the instance as JSON"))
    s.add_argument("--wait", metavar="DURATION",
                   help=_("if the card is sold out, keep trying this long (e.g. 2h; at least "
                          "20 s between tries)"))
    _timer_flags(s)
    s.set_defaults(handler=cmd_create)

    s = sub.add_parser("extend", help=_("move an instance's release time"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("by", nargs="?", help=_("how much longer: 1h, 30m (default 1h)"))
    # (`--by 1h` as well: how a renter says it too)
    s.add_argument("--by", dest="by_option", metavar="SPAN", help=argparse.SUPPRESS)
    s.add_argument("--to", metavar="TIME", help=_("a new release time instead: 18:30"))
    s.set_defaults(handler=cmd_extend)

    s = sub.add_parser("reap", help=_("release overdue instances (for cron / a systemd timer)"))
    s.add_argument("--json", action="store_true", help=_("print what was released as JSON"))
    s.set_defaults(handler=cmd_reap)

    s = sub.add_parser("ssh", help=_("a shell (or one command) on an instance"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("remote", nargs=argparse.REMAINDER, help=_("-- CMD: run one command and exit with its code"))
    s.add_argument("--accept-new-host-key", action="store_true", help=_("trust an unknown host key"))
    s.set_defaults(handler=cmd_ssh)

    s = sub.add_parser("add-ssh", help=_("add an instance rented elsewhere by its ssh line"))
    s.add_argument("line", help=_("as the platform gives it: 'ssh -p PORT root@HOST'"))
    s.add_argument("--gpu", help=_("GPU model (default: detected with nvidia-smi -L)"))
    s.add_argument("--price", required=True, help=_("price per hour for the whole instance"))
    s.add_argument("--per", choices=["second", "minute", "hour"], default="second",
                   help=_("billing granularity (default second)"))
    s.add_argument("--name", help=_("task label (default: the host)"))
    s.add_argument("--accept-new-host-key", action="store_true", help=_("trust an unknown host key"))
    s.add_argument("--ask-password", action="store_true", help=_("prompt for a password (not stored)"))
    s.add_argument("--password-file", help=_("a 0600 file holding the password"))
    s.add_argument("--json", action="store_true", help=_("print the instance as JSON"))
    _timer_flags(s)
    s.set_defaults(handler=cmd_add_ssh)

    s = sub.add_parser("release", help=_("release an instance now (stops the billing)"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("--json", action="store_true", help=_("print the ledger entry as JSON"))
    s.add_argument("--yes", action="store_true",
                   help=_("release even if runs are running or results are not home (they "
                          "end with it)"))
    s.set_defaults(handler=cmd_release)
