"""Costs: the running meter, today's and this month's totals, budgets, the ledger and exports.

Money is Decimal throughout; times are UTC here and local only on screen. A ledger entry is
final (what the instance cost in all); spreading it over days pro-rates it by time, which is
exact for per-second billing and the closest honest split for coarser rules.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gputui.config import BudgetSettings
from gputui.i18n import N_, Deferred, _
from gputui.models import Instance, Lease, LedgerEntry, as_utc, money, utcnow

ZERO = Decimal(0)


@dataclass(frozen=True)
class InstanceCost:
    instance: Instance
    rate: Decimal  # per hour now (0 while stopped: only storage bills)
    compute: Decimal
    storage: Decimal
    projected: Decimal | None  # at its release time; None with no timer
    release_at: datetime | None

    @property
    def accrued(self) -> Decimal:
        return money(self.compute + self.storage)

    @property
    def billing_state(self) -> str:
        """"billing", "storage only", "stopped" or "ended" (English; `status_text` shows it)."""
        inst = self.instance
        if inst.status.billing_compute:
            return "billing"
        if inst.status.live:
            return "storage only" if self.instance.disk_gb and inst.billing.storage_per_gb_month else "stopped"
        return "ended"


def instance_cost(inst: Instance, lease: Lease | None, now: datetime) -> InstanceCost:
    release_at = lease.release_at if lease is not None and lease.state == "active" else None
    projected = None
    if release_at is not None and inst.status.live:
        projected = money(inst.compute_cost(max(release_at, now)) + inst.storage_cost(max(release_at, now)))
        if not inst.status.billing_compute:
            projected = money(inst.compute_cost(now) + inst.storage_cost(max(release_at, now)))
    rate = inst.billing.price_per_hour if inst.status.billing_compute else ZERO
    return InstanceCost(inst, rate, money(inst.compute_cost(now)), money(inst.storage_cost(now)),
                        projected, release_at)


def local_day_start(now: datetime) -> datetime:
    local = now.astimezone()
    return as_utc(local.replace(hour=0, minute=0, second=0, microsecond=0))


def local_month_start(now: datetime) -> datetime:
    local = now.astimezone()
    return as_utc(local.replace(day=1, hour=0, minute=0, second=0, microsecond=0))


def _accrued_between(inst: Instance, start: datetime, end: datetime) -> Decimal:
    """What a live instance accrued in [start, end] (cost at end minus cost at start). One that
    began in the period counts as its own figure reads (rounded to the cent, as Home and "live
    instances" show it), so that a day's total is never less than the figures it holds."""
    if end <= start:
        return ZERO
    if inst.created_at >= start:
        return inst.accrued(end)
    before = inst.compute_cost(start) + inst.storage_cost(start) if start > inst.created_at else ZERO
    return inst.compute_cost(end) + inst.storage_cost(end) - before


def _entry_between(entry: LedgerEntry, start: datetime, end: datetime) -> Decimal:
    """An ended instance's total, pro-rated by how much of its life fell in [start, end]."""
    life = (entry.ended_at - entry.started_at).total_seconds()
    if life <= 0:
        return entry.total if start <= entry.ended_at <= end else ZERO
    if start <= entry.started_at and entry.ended_at <= end:  # all of it: its figure as shown
        return money(entry.total)
    overlap = (min(end, entry.ended_at) - max(start, entry.started_at)).total_seconds()
    if overlap <= 0:
        return ZERO
    return entry.total * Decimal(str(overlap / life))


def spent_between(instances: Iterable[Instance], ledger: Iterable[LedgerEntry],
                  start: datetime, end: datetime, currency: str | None = None) -> Decimal:
    """Spend in [start, end]. With `currency`, only what was billed in it (figures in different
    currencies are never added together); without, the caller has one currency only."""
    ended_ids = set()
    total = ZERO
    for entry in ledger:
        ended_ids.add(entry.instance_id)
        if currency is None or entry.currency == currency:
            total += _entry_between(entry, start, end)
    for inst in instances:
        if inst.id not in ended_ids and inst.status.live and \
                (currency is None or inst.billing.currency == currency):
            total += _accrued_between(inst, start, end)
    return money(total)


def currencies(instances: Iterable[Instance], ledger: Iterable[LedgerEntry]) -> list[str]:
    """The currencies in use, USD first, then the others in name order."""
    found = {e.currency for e in ledger} | {i.billing.currency for i in instances}
    return sorted(found, key=lambda c: (c != "USD", c))


@dataclass
class Totals:
    today: Decimal
    month: Decimal
    rate: Decimal  # per hour now
    accrued_live: Decimal  # what the live instances have cost so far (the sum of their figures)
    currency: str = "USD"
    all_time: Decimal = ZERO  # the ledger plus what live instances have cost

    def as_dict(self) -> dict[str, str]:
        return {"currency": self.currency, "rate_per_hour": str(self.rate),
                "accrued_live": str(self.accrued_live), "today": str(self.today),
                "month": str(self.month), "all_time": str(self.all_time)}


def totals(instances: list[Instance], ledger: list[LedgerEntry], now: datetime,
           currency: str = "USD") -> Totals:
    """Totals in one currency: only what was billed in it."""
    live = [i for i in instances if i.status.live and i.billing.currency == currency]
    mine = [e for e in ledger if e.currency == currency]
    ended = {e.instance_id for e in ledger}
    # as the figures read (each rounded, then added: as Home's rows and the top bar add up),
    # and the same instances as today's and this month's (one with a ledger entry counts there)
    accrued = money(sum((i.accrued(now) for i in live if i.id not in ended), ZERO))
    return Totals(
        today=spent_between(live, mine, local_day_start(now), now),
        month=spent_between(live, mine, local_month_start(now), now),
        rate=sum((i.billing.price_per_hour for i in live if i.status.billing_compute), ZERO),
        accrued_live=accrued,
        currency=currency,
        all_time=money(sum((e.total for e in mine), ZERO) + sum(
            (i.accrued(now) for i in live if i.id not in ended), ZERO)),
    )


def totals_by_currency(instances: list[Instance], ledger: list[LedgerEntry],
                       now: datetime) -> dict[str, Totals]:
    """One `Totals` per currency in use (USD first); never one sum across currencies."""
    return {c: totals(instances, ledger, now, c) for c in currencies(instances, ledger)} or \
        {"USD": totals(instances, ledger, now, "USD")}


@dataclass(frozen=True)
class Combined:
    """Figures in several currencies shown as one, through the rate the user configured."""

    amount: Decimal
    currency: str
    rate: Decimal  # CNY per USD
    note: str  # says so: "at ¥7.10/$ (config)" (a Deferred: shown with `shown()`)


def convert(amount: Decimal, currency: str, to: str, cny_per_usd: Decimal) -> Decimal:
    if currency == to:
        return amount
    if (currency, to) == ("CNY", "USD"):
        return amount / cny_per_usd
    if (currency, to) == ("USD", "CNY"):
        return amount * cny_per_usd
    raise ValueError(_("no rate from {currency} to {to}").format(currency=currency, to=to))


def combine(amounts: dict[str, Decimal], to: str, cny_per_usd: Decimal | None,
            rate_note: str | None = None) -> Combined | None:
    """The amounts as one figure in `to`, only through the configured rate (None without one,
    or with a currency the rate does not cover)."""
    if cny_per_usd is None or cny_per_usd <= 0:
        return None
    try:
        total = sum((convert(v, c, to, cny_per_usd) for c, v in amounts.items()), ZERO)
    except ValueError:
        return None
    # English (JSON prints it); shown with `shown()`
    note = Deferred(N_("at ¥{rate}/$ ({source})"), rate=cny_per_usd,
                    source=rate_note or Deferred(N_("your config")))
    return Combined(money(total), to, cny_per_usd, note)


# -- budgets ---------------------------------------------------------------------------------


@dataclass
class BudgetAlert:
    scope: str  # "daily", "monthly", or "instance:<id>"
    level: int  # 80 or 100
    spent: Decimal
    cap: Decimal
    instance_id: str | None = None
    currency: str = "USD"
    instance_name: str | None = None

    @property
    def percent(self) -> int:
        """What has been spent, as a share of the cap (the level is only the threshold crossed:
        $0.13 of $0.10 is 130 %, as the Costs screen says, not "100 %")."""
        return int(self.spent / self.cap * 100) if self.cap > 0 else 0

    @property
    def text(self) -> Deferred:
        """The alert: English (a log keeps it), shown in the interface's language."""
        from gputui.format import format_money

        # "%" stays out of the messages (it would read as a printf format)
        figures = {"percent": f"{self.percent} %", "spent": format_money(self.spent, self.currency),
                   "cap": format_money(self.cap, self.currency)}
        if self.scope == "daily":
            return Deferred(N_("Budget: today's spend is {percent} of the daily cap ({spent} "
                               "of {cap})"), **figures)
        if self.scope == "monthly":
            return Deferred(N_("Budget: this month's spend is {percent} of the monthly cap "
                               "({spent} of {cap})"), **figures)
        name = self.instance_name or self.instance_id
        if name is None:
            return Deferred(N_("Budget: an instance has cost {percent} of its per-instance "
                               "cap ({spent} of {cap})"), **figures)
        return Deferred(N_("Budget: {name} has cost {percent} of its per-instance cap "
                           "({spent} of {cap})"), name=name, **figures)


@dataclass
class BudgetWatch:
    """Remembers which alerts were given (per day / month / instance), so each fires once."""

    given: set[tuple[str, str, int]] = field(default_factory=set)

    def check(self, budget: BudgetSettings, instances: list[Instance], ledger: list[LedgerEntry],
              now: datetime) -> list[BudgetAlert]:
        alerts: list[BudgetAlert] = []
        cur = budget.currency  # caps count only what is billed in their currency
        live = [i for i in instances if i.status.live]
        day_key = local_day_start(now).isoformat()
        month_key = local_month_start(now).isoformat()
        scopes: list[tuple[str, str, Decimal | None, Decimal, str | None]] = [
            ("daily", day_key, budget.daily,
             spent_between(live, ledger, local_day_start(now), now, cur), None),
            ("monthly", month_key, budget.monthly,
             spent_between(live, ledger, local_month_start(now), now, cur), None),
        ]
        names = {i.id: i.name for i in live}
        if budget.per_instance is not None:
            for inst in (i for i in live if i.billing.currency == cur):
                scopes.append((f"instance:{inst.id}", inst.id, budget.per_instance,
                               inst.accrued(now), inst.id))
        for scope, period, cap, spent, iid in scopes:
            if cap is None or cap <= 0:
                continue
            for level in (100, 80):
                if spent >= cap * level / 100:
                    key = (scope, period, level)
                    if key not in self.given:
                        self.given.add(key)
                        self.given.add((scope, period, 80))  # a jump to 100 % says it once
                        alerts.append(BudgetAlert(scope, level, money(spent), cap, iid, cur,
                                                  names.get(iid) if iid else None))
                    break
        return alerts


# -- ledger history and export ----------------------------------------------------------------


def group_ledger(ledger: list[LedgerEntry], by: str,
                 currency: str | None = None) -> list[tuple[str, Decimal, int]]:
    """Totals per `day`, `week`, `month` (local), `gpu` or `task`: (key, total, count), of the
    entries in `currency` (default: the ledger's first currency, USD first)."""
    cur = currency or (currencies([], ledger) or ["USD"])[0]
    ledger = [e for e in ledger if e.currency == cur]
    sums: dict[str, Decimal] = defaultdict(lambda: ZERO)
    counts: dict[str, int] = defaultdict(int)
    for e in ledger:
        local = e.ended_at.astimezone()
        key = {
            "day": local.strftime("%Y-%m-%d"),
            "week": f"{local.isocalendar().year}-W{local.isocalendar().week:02d}",
            "month": local.strftime("%Y-%m"),
            "gpu": e.gpu,
            "task": e.name,
        }[by]
        sums[key] += e.total
        counts[key] += 1
    rows = [(k, money(v), counts[k]) for k, v in sums.items()]
    if by in ("day", "week", "month"):
        return sorted(rows)
    return sorted(rows, key=lambda r: (-r[1], r[0]))


def daily_series(ledger: list[LedgerEntry], instances: list[Instance], now: datetime,
                 days: int = 14, currency: str | None = None) -> list[tuple[str, Decimal]]:
    """Spend per local day for the last `days` days, oldest first (for the chart), in one
    currency (default: the first in use, USD first)."""
    cur = currency or (currencies(instances, ledger) or ["USD"])[0]
    ledger = [e for e in ledger if e.currency == cur]
    instances = [i for i in instances if i.billing.currency == cur]
    out: list[tuple[str, Decimal]] = []
    today = local_day_start(now)
    for back in range(days - 1, -1, -1):
        start = today - timedelta(days=back)
        end = min(now, start + timedelta(days=1))
        out.append((start.astimezone().strftime("%m-%d"), spent_between(instances, ledger, start, end)))
    return out


EXPORT_FIELDS = [
    "instance_id", "name", "provider", "gpu", "gpu_count", "started_at", "ended_at",
    "duration_s", "compute_cost", "storage_cost", "total", "currency", "end_reason", "running",
]


def export_rows(ledger: list[LedgerEntry], instances: list[Instance], now: datetime | None = None) -> list[dict]:
    """Every ledger entry, then every instance still running with what it has `accrued` so far."""
    now = as_utc(now or utcnow())
    rows: list[dict] = []
    for e in ledger:
        rows.append({
            "instance_id": e.instance_id, "name": e.name, "provider": e.provider, "gpu": e.gpu,
            "gpu_count": e.gpu_count, "started_at": e.started_at.isoformat(),
            "ended_at": e.ended_at.isoformat(), "duration_s": round(e.running_seconds, 3),
            "compute_cost": str(e.compute_cost), "storage_cost": str(e.storage_cost),
            "total": str(money(e.total)), "currency": e.currency, "end_reason": e.end_reason,
            "running": False,
        })
    ended = {e.instance_id for e in ledger}
    for inst in instances:
        if not inst.status.live or inst.id in ended:
            continue
        compute, storage = money(inst.compute_cost(now)), money(inst.storage_cost(now))
        rows.append({
            "instance_id": inst.id, "name": inst.name, "provider": inst.provider, "gpu": inst.gpu,
            "gpu_count": inst.gpu_count, "started_at": inst.created_at.isoformat(),
            "ended_at": None, "duration_s": round(inst.running_seconds(now), 3),
            "compute_cost": str(compute), "storage_cost": str(storage),
            "total": str(money(compute + storage)), "currency": inst.billing.currency,
            "end_reason": None, "running": True, "accrued": str(money(compute + storage)),
        })
    return rows


_CSV_TEXT = ("instance_id", "name", "provider", "gpu", "currency", "end_reason")


def to_csv(rows: list[dict]) -> str:
    """The export as CSV. Text cells (labels, names from providers) go through `csv_cell`: a
    label like `=HYPERLINK(...)` stays text in a spreadsheet, never a formula."""
    from gputui.sanitize import csv_cell

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*EXPORT_FIELDS, "accrued"], extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else csv_cell(v) if k in _CSV_TEXT else v)
                         for k, v in row.items()})
    return buf.getvalue()


def run_rows(runs: list[dict], secrets: Iterable[str]) -> list[dict]:
    """Per-run costs as exported (`costs --runs --json`): text cleaned, then every secret
    masked — rows stored before commands were masked on the way in included."""
    from gputui.sanitize import clean_masked

    keys = list(secrets)
    out = []
    for run in runs:
        row = dict(run)
        for key, limit in (("command", 4096), ("label", 256), ("instance", 256)):
            if isinstance(row.get(key), str):
                row[key] = clean_masked(row[key], keys, limit)
        out.append(row)
    return out


__all__ = [
    "UTC", "BudgetAlert", "BudgetWatch", "Combined", "InstanceCost", "Totals", "combine",
    "convert", "currencies", "daily_series", "export_rows", "group_ledger", "instance_cost",
    "run_rows", "spent_between", "to_csv", "totals", "totals_by_currency",
]
