"""What you have spent: the ledger and what is billing now."""

from __future__ import annotations

import argparse
import sys

from gputui.cli.output import (
    open_store,
    print_json,
    refresh_quietly,
)


def cmd_costs(args: argparse.Namespace) -> int:
    from gputui.format import format_money
    from gputui.models import utcnow
    from gputui.services.costs import combine, export_rows, to_csv, totals_by_currency

    store = open_store()
    refresh_quietly(args, store)
    instances, ledger = store.instances_sync(), store.ledger_sync()
    rows = export_rows(ledger, instances)
    if args.csv:
        sys.stdout.write(to_csv(rows))
        return 0
    by_cur = totals_by_currency(instances, ledger, utcnow())
    money_cfg = args.config.money
    combined = combine({c: t.all_time for c, t in by_cur.items()}, "USD",
                       money_cfg.cny_per_usd, money_cfg.rate_note) if len(by_cur) > 1 else None
    if args.json:
        print_json({
            "rows": rows,
            "totals": {c: t.as_dict() for c, t in by_cur.items()},  # per currency, never summed
            "combined": None if combined is None else {
                "all_time": str(combined.amount), "currency": combined.currency,
                "cny_per_usd": str(combined.rate), "note": combined.note},
        })
        return 0
    for t in by_cur.values():
        cur = t.currency
        print(f"{cur}: now {format_money(t.rate, cur)}/h · live instances "
              f"{format_money(t.accrued_live, cur)} · today {format_money(t.today, cur)} · "
              f"this month {format_money(t.month, cur)}")
    if combined is not None:
        print(f"all time, combined: {format_money(combined.amount, combined.currency)} "
              f"{combined.note}")
    for row in rows:
        state = "running" if row["running"] else row["end_reason"]
        print(f"  {row['name'][:20]:<20} {row['gpu_count']}× {row['gpu'][:22]:<22} "
              f"{state:<8} {row['total']:>10} {row['currency']}")
    return 0



def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("costs", help="what you have spent: the ledger, and what is billing now")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--csv", action="store_true", help="export every entry (and running ones) as CSV")
    g.add_argument("--json", action="store_true", help="the same as JSON")
    s.set_defaults(handler=cmd_costs)
