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
    from gputui.services.costs import export_rows, to_csv, totals

    store = open_store()
    refresh_quietly(args, store)
    instances, ledger = store.instances_sync(), store.ledger_sync()
    rows = export_rows(ledger, instances)
    if args.csv:
        sys.stdout.write(to_csv(rows))
        return 0
    if args.json:
        print_json(rows)
        return 0
    from gputui.models import utcnow

    t = totals(instances, ledger, utcnow())
    print(f"now {format_money(t.rate)}/h · live instances {format_money(t.accrued_live)} · "
          f"today {format_money(t.today)} · this month {format_money(t.month)}")
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
