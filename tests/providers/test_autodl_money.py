"""Money in two currencies: totals per currency, budgets in either, a combined figure only
through the configured rate, and every figure labelled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gputui.config import BudgetSettings
from gputui.format import format_money
from gputui.models import BillingRule, Instance, InstanceStatus, LedgerEntry
from gputui.services.costs import BudgetWatch, combine, totals, totals_by_currency
from gputui.services.views import runway_line

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def running(iid: str, price: str, currency: str, hours: float) -> Instance:
    inst = Instance(id=iid, name=iid, provider="autodl" if currency == "CNY" else "lambda",
                    gpu="GeForce RTX 4090", billing=BillingRule(price_per_hour=Decimal(price),
                                                                currency=currency),
                    created_at=NOW - timedelta(hours=hours), status=InstanceStatus.RUNNING)
    inst.mark_running(inst.created_at)
    return inst


def ended(iid: str, price: str, currency: str, hours: float) -> tuple[Instance, LedgerEntry]:
    inst = running(iid, price, currency, hours + 1)
    inst.mark_ended(inst.created_at + timedelta(hours=hours), "manual")
    return inst, LedgerEntry.from_instance(inst, "manual", inst.ended_at)


def test_totals_are_per_currency_and_never_added():
    cny = running("cny", "8.20", "CNY", 2)
    usd = running("usd", "1.29", "USD", 2)
    old, entry = ended("old", "1.88", "CNY", 1)
    by = totals_by_currency([cny, usd, old], [entry], NOW)
    assert list(by) == ["USD", "CNY"]
    assert by["CNY"].rate == Decimal("8.20") and by["USD"].rate == Decimal("1.29")
    assert by["CNY"].accrued_live == Decimal("16.40")
    assert by["CNY"].all_time == Decimal("18.28")  # 16.40 live + 1.88 ledger
    assert by["USD"].all_time == Decimal("2.58")
    assert totals([cny, usd], [], NOW).rate == Decimal("1.29")  # dollars only, by default
    assert entry.currency == "CNY" and format_money(entry.total, entry.currency) == "¥1.88"


def test_combined_only_through_the_configured_rate():
    amounts = {"USD": Decimal("2.58"), "CNY": Decimal("18.28")}
    assert combine(amounts, "USD", None) is None
    both = combine(amounts, "USD", Decimal("7.10"), "bank, 2026-11-30")
    assert both is not None and both.amount == Decimal("5.15")  # 2.58 + 18.28 / 7.10
    assert both.note == "at ¥7.10/$ (bank, 2026-11-30)"


def test_a_budget_in_yuan_counts_only_yuan():
    cny = running("cny", "10.00", "CNY", 9)  # ¥90 today
    usd = running("usd", "50.00", "USD", 9)  # $450 today: not in a ¥ budget
    alerts = BudgetWatch().check(BudgetSettings(currency="CNY", daily=Decimal("100")),
                                 [cny, usd], [], NOW)
    [alert] = alerts
    assert alert.level == 80 and "¥90.00 of ¥100.00" in alert.text
    usd_alerts = BudgetWatch().check(BudgetSettings(daily=Decimal("100")), [cny, usd], [], NOW)
    assert [a.level for a in usd_alerts] == [100] and "$450.00 of $100.00" in usd_alerts[0].text


def test_runway_says_how_long_the_wallet_lasts():
    cny = running("cny", "8.20", "CNY", 1)
    usd = running("usd", "3.00", "USD", 1)
    assert runway_line(Decimal("312.40"), "CNY", [cny, usd]) == "¥312.40 · 38 h at ¥8.20/h"
    assert runway_line(Decimal("3"), "CNY", [cny]) == "¥3.00 · 21 min at ¥8.20/h"
    assert runway_line(Decimal("3"), "CNY", [usd]) == "¥3.00 · no instance billing"
