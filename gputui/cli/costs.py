"""What you have spent: the ledger and what is billing now."""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal

from gputui.cli.output import (
    end_reason_text,
    open_store,
    print_json,
    refresh_quietly,
    report_unreadable,
    status_text,
)
from gputui.i18n import _, cell_len, pad_cells, shown, truncate_cells


def cmd_costs(args: argparse.Namespace) -> int:
    from gputui.format import format_money
    from gputui.models import utcnow
    from gputui.services.costs import combine, export_rows, to_csv, totals_by_currency

    store = open_store()
    refresh_quietly(args, store)
    instances, ledger = store.instances_sync(), store.ledger_sync()
    if args.runs:
        return _runs(store, args)
    rows = export_rows(ledger, instances)
    report_unreadable(store)
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
        print(_("{currency}: billing {rate}/h now · spent on live instances {live} · spent "
                "today {today} · this month {month}").format(currency=cur, rate=format_money(t.rate, cur),
                                  live=format_money(t.accrued_live, cur),
                                  today=format_money(t.today, cur),
                                  month=format_money(t.month, cur)))
    if combined is not None:
        print(_("all time, combined: {total} {note}").format(
            total=format_money(combined.amount, combined.currency), note=shown(combined.note)))
    for row in rows:
        state = status_text("running") if row["running"] else end_reason_text(row["end_reason"])
        print(f"  {pad_cells(row['name'], 20)} {row['gpu_count']}× {pad_cells(row['gpu'], 22)} "
              f"{pad_cells(state, 8)} "
              f"{format_money(Decimal(row['total']), row['currency']):>10}")
    if store.run_costs_sync():
        print(_("runs (queued with `gputui jobs`; part of the costs above): gputui costs --runs"))
    return 0


def _runs(store, args: argparse.Namespace) -> int:
    """Each queued run's cost: its instance's rate (its share of the GPUs) over its time."""
    from gputui.config import known_secrets
    from gputui.format import format_elapsed, format_small_money, run_name
    from gputui.nvidia.nvsmi import sanitize
    from gputui.services.costs import run_rows

    runs = run_rows(store.run_costs_sync(), known_secrets(args.config))
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print(_("No runs yet: queue some with `gputui jobs NAME add -- CMD`."))
        return 0
    # two lines a run at 80 columns: the figures, then what ran (its command and attempt); a
    # column as wide as its heading in this language (退出码 is 6 cells: never cut to 退…)
    exit_w = max(4, cell_len(_("EXIT")))
    print(" ".join((pad_cells(_("INSTANCE"), 12), pad_cells(_("RUN"), 16),
                    pad_cells(_("STARTED"), 11), pad_cells(_("STATUS"), 9),
                    pad_cells(_("EXIT"), exit_w, ">"), pad_cells(_("TIME"), 8, ">"),
                    pad_cells(_("COST"), 9, ">"))))
    for r in runs:
        code = "-" if r.get("exit_code") is None else str(r["exit_code"])
        started = _local_time(r.get("started_at"))
        print(f"{pad_cells(truncate_cells(sanitize(r['instance'], 40), 12, where='middle'), 12)} "
              f"{pad_cells(truncate_cells(sanitize(run_name(r.get('job_id'), r['label']), 60), 16, where='middle'), 16)} "
              f"{pad_cells(started, 11)} "
              f"{pad_cells(truncate_cells(status_text(r['status']), 9), 9)} "
              f"{pad_cells(code, exit_w, '>')} "
              f"{pad_cells(format_elapsed(float(r.get('seconds') or 0)), 8, '>')} "
              f"{format_small_money(Decimal(r['cost']), r['currency']):>9}")
        attempt, retries = r.get("attempt"), r.get("retries")
        tries = (_(" (attempt {n} of {total})").format(n=attempt, total=retries + 1)
                 if isinstance(attempt, int) and isinstance(retries, int) and retries else "")
        print("  $ " + truncate_cells(sanitize(r.get("command") or "", 400), 72 - cell_len(tries))
              + tries)
    print(_("(each run's cost is part of its instance's cost, not added to it)"))
    return 0



def _local_time(iso: object) -> str:
    """`11-29 12:00` in this machine's time zone; `-` where the record has no time."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(iso)).astimezone().strftime("%m-%d %H:%M")
    except ValueError:
        return "-"


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("costs", help=_("what you have spent: the ledger, and what is billing now"))
    g = s.add_mutually_exclusive_group()
    g.add_argument("--csv", action="store_true",
                   help=_("export every entry (and running ones) as CSV"))
    g.add_argument("--json", action="store_true", help=_("the same as JSON"))
    s.add_argument("--runs", action="store_true",
                   help=_("each queued run's cost (gputui jobs), with its label"))
    s.set_defaults(handler=cmd_costs)
