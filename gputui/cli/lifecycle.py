"""Power and money at the provider: stop and start an instance, and the account's balance."""

from __future__ import annotations

import argparse
import sys

from gputui.cli.output import CommandError, print_json, run_async
from gputui.format import status_text, stored_text
from gputui.i18n import _, shown


def cmd_stop(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services.views import instance_view

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(_("{name} is {status}").format(name=inst.name,
                                                             status=status_text(inst.status)), 2)
        fresh = await services.stop(inst)
        lease = services.store.get_lease_sync(inst.id)
        view = instance_view(fresh, lease)
        if args.json:
            print_json(view)
        else:
            from gputui.services.keeper import stop_notes

            print(_("{name}: {status} — the GPU charge has stopped; `gputui start {name}` powers "
                    "it on again").format(name=fresh.name,
                                          status=stored_text(view["state_detail"])
                                          or status_text(fresh.status)))
            for note in stop_notes(services, fresh, lease):  # the wipe date, the timer
                print(f"  {shown(note)}")
        return 0

    return run_async(args, body)


def cmd_start(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.format import format_money
        from gputui.services.views import instance_view

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(_("{name} is {status}").format(name=inst.name,
                                                             status=status_text(inst.status)), 2)
        progress = None if args.json else (lambda m: print(f"  {status_text(m)}",
                                                           file=sys.stderr))
        if args.wait:  # while its machine has no free GPU, try again (gputui/cli/waiting.py)
            from gputui.cli.waiting import start_wait

            fresh = await start_wait(services, args, inst)
        else:
            fresh = await services.start(inst, progress=progress)
        from gputui.services.leases import session_leases

        await session_leases(services).arm(fresh)
        view = instance_view(fresh, services.store.get_lease_sync(inst.id))
        if args.json:
            print_json(view)
        else:
            price = format_money(fresh.billing.price_per_hour, fresh.billing.currency)
            print(_("{name}: {status}, billing {price}/h").format(
                name=fresh.name, status=status_text(fresh.status), price=price))
        return 0

    return run_async(args, body)


def cmd_keep(args: argparse.Namespace) -> int:
    """`gputui keep NAME [--off]`: the keeper for a stopped instance the provider would wipe."""
    async def body(services) -> int:
        from gputui.format import format_money
        from gputui.services.keeper import KEEP_BEFORE, KEEP_MINUTES, cycle_cost, wipe_at
        from gputui.services.views import WIPE_AFTER_STOPPED_DAYS

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(_("{name} is {status}").format(name=inst.name,
                                                             status=status_text(inst.status)), 2)
        days = WIPE_AFTER_STOPPED_DAYS.get(inst.provider)
        if days is None:
            raise CommandError(_("{name}: {provider} does not wipe stopped instances; nothing to "
                                 "keep").format(name=inst.name, provider=inst.provider), 2)
        on = not args.off
        try:
            await services.store.update_lease(inst.id, lambda le: le.model_copy(
                update={"keep_stopped": on}))
        except KeyError:
            from gputui.models import Lease

            await services.store.put_lease(Lease(instance_id=inst.id, keep_stopped=on))
        if not on:
            print(_("{name}: the keeper is off — {provider} wipes it after {days} days shut "
                    "down").format(name=inst.name, provider=inst.provider, days=days))
            return 0
        at = wipe_at(services, inst)
        when = (_("about {date}").format(date=f"{(at - KEEP_BEFORE).astimezone():%Y-%m-%d %H:%M}")
                if at else _("{hours} h before the wipe").format(
                    hours=int(KEEP_BEFORE.total_seconds() // 3600)))
        print(_("{name}: kept — {when}, before {provider}'s {days}-day wipe, gputui powers it on "
                "and off again (about {minutes} min of running: about {cost} at {price}/h), which "
                "starts the {days} days again. gputui must be running then (the console, `gputui "
                "daemon`, or `gputui reap` from cron).").format(
                    name=inst.name, when=when, provider=inst.provider, days=days,
                    minutes=KEEP_MINUTES,
                    cost=format_money(cycle_cost(inst), inst.billing.currency),
                    price=format_money(inst.billing.price_per_hour, inst.billing.currency)))
        print("  " + _("If its machine has no free GPU, it tries again every 10 minutes and "
                       "notifies you: the API powers on with GPUs only (无卡模式 is in the AutoDL "
                       "console)."))
        return 0

    return run_async(args, body)


def cmd_account(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.errors import GputuiError
        from gputui.format import format_money
        from gputui.services.views import runway_line

        wanted = [args.provider] if args.provider else [
            n for n in services.providers if services.capabilities(n).account]
        if not wanted:
            raise CommandError(_("no provider with an account is configured (AutoDL: set "
                                 "AUTODL_TOKEN)"), 2)
        out, failed = [], 0
        live = services.store.instances_sync(live_only=True)
        for name in wanted:
            try:
                wallet = await services.account(name)
            except GputuiError as exc:
                if args.provider:
                    raise
                failed += 1
                out.append({"provider": name, "error": str(exc)})
                continue
            cur = wallet["currency"]
            row = {k: (str(v) if v is not None and k not in ("provider", "currency") else v)
                   for k, v in wallet.items()}
            if wallet.get("balance") is not None:
                row["runway"] = runway_line(wallet["balance"], cur, live)
            out.append(row)
        if args.json:
            print_json(out)
            return 1 if failed else 0
        for row in out:
            if "error" in row:
                said = str(shown(row["error"]))
                # the provider's errors name it already ("autodl: reading the wallet: …")
                named = said.startswith((f"{row['provider']}:", f"{row['provider']}："))
                print(said if named else f"{row['provider']}: {said}", file=sys.stderr)
                continue
            cur = row["currency"]

            def m(key: str, cur: str = cur, row: dict = row) -> str:
                return "?" if row.get(key) is None else format_money(row[key], cur)

            print(_("{provider}: balance {balance} · vouchers {vouchers} · lifetime spend "
                    "{spent}").format(provider=row["provider"], balance=m("balance"),
                                      vouchers=m("vouchers"), spent=m("lifetime_spend")))
            if row.get("runway"):
                print("  " + _("runway: {runway}").format(runway=shown(row["runway"])))
        return 1 if failed else 0

    return run_async(args, body)


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("stop", help=_("power an instance off (the GPU charge stops; its disk "
                                      "stays)"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("--json", action="store_true", help=_("print the instance as JSON"))
    s.set_defaults(handler=cmd_stop)

    s = sub.add_parser("start", help=_("power a stopped instance on again"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("--json", action="store_true", help=_("print the instance as JSON"))
    s.add_argument("--wait", metavar="DURATION", nargs="?", const="2h",
                   help=_("if its machine has no free GPU, keep trying this long (default 2h; "
                          "at least 20 s between tries)"))
    s.set_defaults(handler=cmd_start)

    s = sub.add_parser("keep", help=_("keep a stopped instance from the provider's wipe (AutoDL: "
                                      "15 days shut down) by powering it on and off"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("--off", action="store_true", help=_("turn the keeper off"))
    s.set_defaults(handler=cmd_keep)

    s = sub.add_parser("account", help=_("your balance at the provider (AutoDL's wallet)"))
    s.add_argument("--provider", help=_("one provider (default: every one with an account)"))
    s.add_argument("--json", action="store_true", help=_("print a JSON list"))
    s.set_defaults(handler=cmd_account)
