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
        view = instance_view(fresh, services.store.get_lease_sync(inst.id))
        if args.json:
            print_json(view)
        else:
            print(_("{name}: {status} — the GPU charge has stopped; `gputui start {name}` powers "
                    "it on again").format(name=fresh.name,
                                          status=stored_text(view["state_detail"])
                                          or status_text(fresh.status)))
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
                print(f"{row['provider']}: {shown(row['error'])}", file=sys.stderr)
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
    s.set_defaults(handler=cmd_start)

    s = sub.add_parser("account", help=_("your balance at the provider (AutoDL's wallet)"))
    s.add_argument("--provider", help=_("one provider (default: every one with an account)"))
    s.add_argument("--json", action="store_true", help=_("print a JSON list"))
    s.set_defaults(handler=cmd_account)
