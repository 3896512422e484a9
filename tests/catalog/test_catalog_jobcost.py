"""Job cost: billing granularity, minimum charges, instance sizes, packages and break-even."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gputui.catalog import (
    CatalogError,
    UnknownGpu,
    break_even_hours,
    granularity_costs,
    job_cost,
    job_costs,
    load_prices,
    package_break_evens,
)
from gputui.models import Granularity


def row(provider: str, gpu: str, tier: str = "on-demand", **match):
    rows = [
        r
        for r in load_prices()
        if r.provider == provider
        and r.gpu == gpu
        and r.tier == tier
        and all(getattr(r, k) == v for k, v in match.items())
    ]
    assert rows, (provider, gpu, tier)
    return rows[0]


def test_granularity_comparison_for_an_hour_and_a_second():
    costs = granularity_costs(Decimal("3.60"), Decimal(3601) / 3600)
    assert costs == {
        Granularity.SECOND: Decimal("3.60"),  # 3601 s × $0.001
        Granularity.MINUTE: Decimal("3.66"),  # 61 started minutes
        Granularity.HOUR: Decimal("7.20"),  # 2 started hours
    }


def test_granularity_comparison_applies_the_minimum():
    costs = granularity_costs(Decimal("3.60"), "0.001", minimum_seconds=60)  # 3.6 s
    assert costs[Granularity.SECOND] == Decimal("0.06")
    assert costs[Granularity.HOUR] == Decimal("3.60")
    assert granularity_costs(Decimal("3.60"), 0) == dict.fromkeys(Granularity, Decimal("0.00"))


def test_lambda_bills_started_minutes():
    c = job_cost(row("lambda", "h100_sxm", as_of="skypilot-catalog@0f40703"), 1, "0.01")  # 36 s
    assert c.billed_hours == Decimal("0.0167")
    assert c.cost == Decimal("0.07")  # one minute of $4.29/h
    assert isinstance(c.cost, Decimal)


def test_an_8_gpu_instance_bills_8_gpus_even_for_one():
    c = job_cost(row("aws", "a100_40gb_sxm"), 1, 2)
    assert c.billed_gpus == 8
    assert c.cost == Decimal("65.54")  # 2 h × $32.77
    assert any("8-GPU" in n for n in c.notes)


def test_daily_packages_are_bought_whole():
    block = row("aws", "a100_40gb_sxm", tier="capacity-block")
    assert job_cost(block, 8, 10).cost == Decimal("354.00")  # one day × $14.75/h
    c = job_cost(block, 8, 25)
    assert c.cost == Decimal("708.00") and c.billed_hours == 48
    assert any("2 whole daily" in n for n in c.notes)


def test_break_even_of_aws_capacity_blocks_against_on_demand():
    be = package_break_evens("H100 SXM")
    assert len(be) == 1 and be[0].provider == "aws"
    assert be[0].break_even_hours == Decimal("9.6")  # 24 h × 4.91625 / 12.29
    assert be[0].pays_off and "above 9.6 h" in be[0].statement
    assert break_even_hours(
        row("aws", "a100_40gb_sxm"), row("aws", "a100_40gb_sxm", tier="capacity-block")
    ) == Decimal("10.8")
    assert package_break_evens("RTX 4090") == []  # no packages for it in the reference data


def test_a_package_that_never_pays_off_says_so():
    rows = load_prices(
        [
            {
                "provider": "autodl",
                "gpu": "RTX 4090",
                "price_per_gpu_hour": "1",
                "currency": "CNY",
                "granularity": "second",
            },
            {
                "provider": "autodl",
                "gpu": "RTX 4090",
                "package": "weekly",
                "price_per_gpu_package": "200",
                "currency": "CNY",
            },
        ]
    )
    be = package_break_evens("rtx 4090", rows)
    assert len(be) == 1 and be[0].break_even_hours == 200 and not be[0].pays_off
    assert "never beats" in be[0].statement


def test_job_costs_list_every_provider_cheapest_first():
    costs = job_costs("RTX 4090", 1, 3)
    # per currency, USD first, cheapest first within each; ¥ rows after, never mixed in
    assert [c.row.currency for c in costs] == sorted((c.row.currency for c in costs),
                                                     key=lambda cur: cur != "USD")
    for cur in {c.row.currency for c in costs}:
        mine = [c.cost for c in costs if c.row.currency == cur]
        assert mine == sorted(mine)
    assert {c.row.currency for c in costs} == {"USD", "CNY"}
    assert costs[0].row.provider == "runpod" and costs[0].cost == Decimal("1.02")  # spot 0.34 × 3
    assert any("spot" in n for n in costs[0].notes)
    d = costs[0].as_dict()
    assert d["cost"] == "1.02" and d["as_of"] and d["by_granularity"]["hour"] == "1.02"


def test_spot_and_serverless_rows_are_included_with_their_billing():
    costs = job_costs("L40S", 1, Decimal("0.5"))
    tiers = {c.row.tier for c in costs}
    assert {"spot", "serverless-flex", "marketplace"} <= tiers
    serverless = next(c for c in costs if c.row.tier == "serverless-flex")
    assert serverless.cost == Decimal("0.95")  # 1800 s × $0.00053


@pytest.mark.parametrize("hours", [-1, "-0.5", "abc", float("nan"), True])
def test_bad_hours_are_refused(hours):
    with pytest.raises(CatalogError) as exc:
        job_costs("RTX 4090", 1, hours)
    assert "hours" in str(exc.value) and isinstance(exc.value, ValueError)


@pytest.mark.parametrize("count", [0, -2, 1.5])
def test_bad_gpu_counts_are_refused(count):
    with pytest.raises(CatalogError, match="GPU count"):
        job_costs("RTX 4090", count, 1)  # type: ignore[arg-type]


def test_unknown_gpu_is_refused_with_suggestions():
    with pytest.raises(UnknownGpu):
        job_costs("RTX 9090", 1, 1)


def test_zero_hours_cost_nothing():
    assert all(c.cost == 0 for c in job_costs("H100 SXM", 1, 0))
