from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gputui.models import BillingRule, Granularity, Instance, InstanceStatus, LedgerEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def rule(**kw) -> BillingRule:
    return BillingRule(price_per_hour=Decimal(kw.pop("price", "3.60")), **kw)


def test_per_minute_rounds_up_started_minutes():
    r = rule(granularity=Granularity.MINUTE)
    assert r.billed_seconds(61) == 120
    assert r.compute_cost(61) == Decimal("0.12")


def test_per_started_hour_charges_two_hours_for_an_hour_and_a_second():
    r = rule(granularity=Granularity.HOUR)
    assert r.billed_seconds(3601) == 7200
    assert r.billed_seconds(3600) == 3600  # exactly on the boundary: one hour


def test_minimum_charge_applies_to_short_runs():
    r = rule(granularity=Granularity.SECOND, minimum_seconds=60)
    assert r.compute_cost(5) == Decimal("0.06")
    assert r.compute_cost(0) == 0


def test_storage_accrues_while_stopped_but_compute_does_not():
    inst = Instance(
        id="i1", name="t", provider="sandbox", gpu="RTX 4090", disk_gb=100,
        billing=rule(price="1.00", storage_per_gb_month=Decimal("0.10")),
        created_at=T0, running_since=T0, status=InstanceStatus.RUNNING,
    )
    inst.mark_stopped(T0 + timedelta(hours=1))
    later = T0 + timedelta(hours=10)
    assert inst.running_seconds(later) == 3600
    assert inst.compute_cost(later) == Decimal("1.00")
    # 100 GB × $0.10/GB-month × 10 h / 730 h
    assert inst.storage_cost(later).quantize(Decimal("0.0001")) == Decimal("0.1370")


def test_ledger_entry_from_instance_is_rounded_to_cents():
    inst = Instance(
        id="i2", name="lora", provider="sandbox", gpu="A100", gpu_count=2,
        billing=rule(price="2.345"), created_at=T0, running_since=T0,
        status=InstanceStatus.RUNNING,
    )
    entry = LedgerEntry.from_instance(inst, "timer", T0 + timedelta(minutes=30))
    assert entry.compute_cost == Decimal("1.17")  # 2.345 × 0.5 h = 1.1725
    assert entry.running_seconds == 1800
    assert entry.end_reason == "timer"
