"""What a job of N GPUs × H hours costs: on each provider's own billing rule, under per-second,
per-minute and per-started-hour billing, and where a provider sells daily/weekly/monthly packages,
the break-even against its hourly price. Money is Decimal, rounded to the cent at the end."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal

from pydantic import BaseModel, ConfigDict, SkipValidation

from gputui.i18n import N_, Deferred, _, shown
from gputui.models import Granularity, money

from .errors import CatalogError
from .match import match_card
from .prices import PACKAGE_HOURS, PriceRow, load_prices, quote
from .specs import GpuSpec

# a package's name where a sentence says it ("the daily package")
PACKAGE_NAMES = {"daily": N_("daily"), "weekly": N_("weekly"), "monthly": N_("monthly")}


def _hours(hours: float | int | Decimal | str) -> Decimal:
    if isinstance(hours, bool):
        raise CatalogError(_("hours must be a number (got {value})").format(value=repr(hours)))
    try:
        h = Decimal(str(hours).strip())
    except Exception:
        raise CatalogError(_("hours must be a number (got {value})").format(
            value=repr(hours))) from None
    if not h.is_finite():
        raise CatalogError(_("hours must be a finite number (got {value})").format(
            value=repr(hours)))
    if h < 0:
        raise CatalogError(_("hours must be ≥ 0 (got {value})").format(value=hours))
    from gputui.config import MAX_JOB_HOURS

    if h > MAX_JOB_HOURS:
        raise CatalogError(_("hours must be at most {limit} (got {value})").format(
            limit=MAX_JOB_HOURS, value=hours))
    return h


def _gpu_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise CatalogError(_("GPU count must be a whole number ≥ 1 (got {value})").format(
            value=repr(count)))
    return count


def granularity_costs(
    price_per_hour: Decimal, hours: float | int | Decimal | str, minimum_seconds: int = 0
) -> dict[Granularity, Decimal]:
    """The cost of `hours` of running time at `price_per_hour` (the whole instance) if billed per
    second, per minute and per started hour, with the same minimum charge. Rounded to the cent."""
    h = _hours(hours)
    seconds = h * 3600
    out = {}
    for g in Granularity:
        step = g.seconds
        billed = 0 if seconds == 0 else max(math.ceil(seconds / step) * step, minimum_seconds)
        out[g] = money(price_per_hour * Decimal(billed) / Decimal(3600))
    return out


class JobCost(BaseModel):
    """The cost of one job on one price row."""

    model_config = ConfigDict(frozen=True)

    row: PriceRow
    count: int  # GPUs wanted
    billed_gpus: int  # GPUs paid for
    hours: Decimal  # running time asked for
    billed_hours: Decimal  # running time paid for (granularity, minimum, whole packages)
    price_per_hour: Decimal  # the instance
    cost: Decimal  # rounded to the cent
    by_granularity: dict[
        Granularity, Decimal
    ]  # the same rate billed per second/minute/started hour
    notes: SkipValidation[tuple[str, ...]] = ()  # English strings (JSON); Deferred: shown()

    @property
    def provider(self) -> str:
        return self.row.provider

    def as_dict(self) -> dict[str, object]:
        return {
            "provider": self.row.provider,
            "tier": self.row.tier,
            "package": self.row.package,
            "gpu": self.row.gpu,
            "count": self.count,
            "billed_gpus": self.billed_gpus,
            "gpu_counts": list(self.row.gpu_counts),  # the instance sizes the row is sold in
            "hours": str(self.hours),
            "billed_hours": str(self.billed_hours),
            "price_per_hour": str(self.price_per_hour),
            "currency": self.row.currency,
            "billing": self.row.granularity.value,
            "cost": str(self.cost),
            "by_granularity": {g.value: str(c) for g, c in self.by_granularity.items()},
            "as_of": self.row.as_of,
            "source": self.row.source,
            "notes": list(self.notes),
        }


def job_cost(row: PriceRow, count: int, hours: float | int | Decimal | str) -> JobCost:
    """`count` GPUs for `hours` on `row`: billed under its own rule (granularity, minimum charge,
    whole packages for daily/weekly/monthly rows, instance size)."""
    count = _gpu_count(count)
    h = _hours(hours)
    q = quote(row, count)
    notes = [q.note] if q.note else []
    seconds = h * 3600
    if row.package in PACKAGE_HOURS:
        period = PACKAGE_HOURS[row.package] * 3600
        units = 0 if seconds == 0 else math.ceil(seconds / period)
        billed_seconds = Decimal(units * period)
        if units:
            notes.append(Deferred(N_("bought as {units} whole {package} package(s)"),
                                  units=units, package=Deferred(PACKAGE_NAMES[row.package])))
    else:
        billed_seconds = Decimal(row.billing_rule(q.billed_gpus).billed_seconds(float(seconds)))
    if row.is_spot:
        notes.append(Deferred(N_("spot/interruptible: the provider may stop it at any time")))
    if row.note:
        notes.append(row.note)
    cost = money(q.per_hour * billed_seconds / Decimal(3600))
    return JobCost(
        row=row,
        count=count,
        billed_gpus=q.billed_gpus,
        hours=h,
        billed_hours=(billed_seconds / Decimal(3600)).quantize(
            Decimal("0.0001"), rounding=ROUND_HALF_UP
        ),
        price_per_hour=q.per_hour,
        cost=cost,
        by_granularity=granularity_costs(q.per_hour, h, row.minimum_seconds),
        notes=tuple(notes),
    )


def job_costs(
    gpu: str,
    count: int,
    hours: float | int | Decimal | str,
    rows: Iterable[PriceRow] | None = None,
    specs: Mapping[str, GpuSpec] | None = None,
    currency: str | None = None,
) -> list[JobCost]:
    """`count` × `gpu` (any name the catalog matches) for `hours` on every priced row, cheapest
    first. Raises `UnknownGpu`/`AmbiguousGpu`/`CatalogError` on bad input."""
    count = _gpu_count(count)
    h = _hours(hours)
    spec = match_card(gpu, specs)
    rows = load_prices() if rows is None else list(rows)
    costs = [
        job_cost(r, count, h)
        for r in rows
        if r.gpu == spec.key and (currency is None or r.currency == currency)
    ]
    # per currency (USD first), cheapest first within each: ¥ and $ are never compared
    return sorted(costs, key=lambda c: (c.row.currency != "USD", c.row.currency, c.cost,
                                        c.row.provider, c.row.tier))


class BreakEven(BaseModel):
    """Where a provider's package beats its hourly price."""

    model_config = ConfigDict(frozen=True)

    provider: str
    gpu: str
    hourly: PriceRow
    package: PriceRow
    period_hours: int
    package_cost: Decimal  # one package, per GPU
    break_even_hours: Decimal  # hours of use per period above which the package is cheaper
    pays_off: bool  # False when even round-the-clock use is cheaper hourly

    @property
    def statement(self) -> str:
        """English as a string (JSON); `shown()` gives it in the interface language."""
        params = {"provider": self.provider, "tier": self.package.tier,
                  "package": Deferred(PACKAGE_NAMES.get(self.package.package,
                                                        self.package.package)),
                  "hourly": self.hourly.tier, "hours": self.break_even_hours,
                  "period": self.period_hours}
        if not self.pays_off:
            return Deferred(N_("{provider} {tier}: the {package} package never beats {hourly} "
                               "hourly ({hours} h needed of {period} h)"), **params)
        return Deferred(N_("{provider} {tier}: the {package} package is cheaper than {hourly} "
                           "hourly above {hours} h of use per {period} h"), **params)


def break_even_hours(hourly: PriceRow, package: PriceRow) -> Decimal:
    """Hours of use per package period above which `package` costs less than paying `hourly`."""
    if package.package not in PACKAGE_HOURS:
        raise CatalogError(_("{row} is not a daily/weekly/monthly package").format(
            row=shown(package.label)))
    if hourly.price_per_gpu_hour <= 0:
        raise CatalogError(_("{row} has no hourly price to compare").format(
            row=shown(hourly.label)))
    per_package = package.price_per_gpu_hour * PACKAGE_HOURS[package.package]
    return (per_package / hourly.price_per_gpu_hour).quantize(
        Decimal("0.1"), rounding=ROUND_HALF_UP
    )


def package_break_evens(
    gpu: str, rows: Iterable[PriceRow] | None = None, specs: Mapping[str, GpuSpec] | None = None
) -> list[BreakEven]:
    """For each provider that sells `gpu` both by the hour and in packages: the break-even of
    each package against the provider's cheapest hourly (non-spot) price, same currency."""
    spec = match_card(gpu, specs)
    rows = [r for r in (load_prices() if rows is None else rows) if r.gpu == spec.key]
    out = []
    for pkg in (r for r in rows if r.package in PACKAGE_HOURS):
        hourly = [
            r
            for r in rows
            if r.provider == pkg.provider
            and r.currency == pkg.currency
            and r.package == "hourly"
            and not r.is_spot
        ]
        if not hourly:
            continue
        best = min(hourly, key=lambda r: r.price_per_gpu_hour)
        period = PACKAGE_HOURS[pkg.package]
        be = break_even_hours(best, pkg)
        out.append(
            BreakEven(
                provider=pkg.provider,
                gpu=spec.key,
                hourly=best,
                package=pkg,
                period_hours=period,
                package_cost=money(pkg.price_per_gpu_hour * period),
                break_even_hours=be,
                pays_off=be < period,
            )
        )
    return out
