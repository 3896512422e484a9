"""Reference prices (data/prices.toml) and the user's overrides, as `PriceRow`s.

Reference prices are dated figures from public sources, never live quotes: every row carries
`as_of` and `source`. A user's config can override a row (same provider, tier, card, instance
sizes and package) or add new ones, with the same fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SkipValidation,
    ValidationError,
    field_validator,
    model_validator,
)

from gputui.i18n import N_, Deferred, _
from gputui.models import BillingRule, Granularity, Offer, PackageKind

from .errors import AmbiguousGpu, CatalogError, UnknownGpu
from .match import match_card
from .specs import GpuSpec, _load_toml, load_specs

PACKAGE_HOURS: dict[str, int] = {"daily": 24, "weekly": 7 * 24, "monthly": 730}


class PriceRow(BaseModel):
    """One price: a provider's tier for one card, per GPU-hour."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1)
    tier: str = Field(default="on-demand", min_length=1)
    gpu: str = Field(min_length=1)  # card key of gpus.toml
    price_per_gpu_hour: Decimal = Field(ge=0)
    price_max_per_gpu_hour: Decimal | None = Field(default=None, ge=0)
    gpu_counts: tuple[int, ...] = (1,)
    currency: str = Field(default="USD", min_length=3, max_length=3)
    # A row that does not say is billed per started hour: the dearest reading, never an underestimate.
    granularity: Granularity = Granularity.HOUR
    minimum_seconds: int = Field(default=0, ge=0)
    storage_per_gb_month: Decimal | None = Field(default=None, ge=0)
    package: PackageKind = "hourly"
    region: str | None = None
    as_of: str = Field(min_length=1)
    source: str = Field(min_length=1)
    note: str | None = None
    billing_note: str | None = None
    # how far to trust a dated figure: strong (the seller's own page), medium, weak (inferred)
    strength: Literal["strong", "medium", "weak"] | None = None
    user: bool = False  # from the user's config, not the reference data

    @field_validator(
        "price_per_gpu_hour", "price_max_per_gpu_hour", "storage_per_gb_month", mode="before"
    )
    @classmethod
    def _money(cls, v: Any) -> Any:
        return None if v is None else _decimal(v)

    @field_validator("gpu_counts", mode="before")
    @classmethod
    def _counts(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list | tuple) or not v:
            raise ValueError(_("must be a non-empty list of GPU counts, e.g. [1] or [1, 2, 4, 8]"))
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in v):
            raise ValueError(_("every GPU count must be a whole number ≥ 1"))
        return tuple(sorted(set(v)))

    @field_validator("currency")
    @classmethod
    def _upper(cls, v: str) -> str:
        return v.upper()

    @model_validator(mode="after")
    def _range(self) -> PriceRow:
        if (
            self.price_max_per_gpu_hour is not None
            and self.price_max_per_gpu_hour < self.price_per_gpu_hour
        ):
            raise ValueError(_("price_max_per_gpu_hour is below price_per_gpu_hour"))
        return self

    @property
    def simulated(self) -> bool:
        """The sandbox's list prices: shown beside the others, never taken as the lowest."""
        return self.tier.lower() == "simulated"

    @property
    def is_spot(self) -> bool:
        return (
            self.package == "spot"
            or "spot" in self.tier.lower()
            or "interruptible" in self.tier.lower()
        )

    @property
    def caveat(self) -> str:
        """What keeps this per-GPU price from being one a renter simply pays: 'spot' (it can be
        taken away), '8× only' (sold only as bigger instances), both, or ''."""
        sizes = "/".join(str(c) for c in self.gpu_counts)
        if 1 in self.gpu_counts:
            return Deferred(N_("spot")) if self.is_spot else ""
        if self.is_spot:
            return Deferred(N_("spot, {sizes}× only"), sizes=sizes)
        return Deferred(N_("{sizes}× only"), sizes=sizes)

    @property
    def caveat_rank(self) -> int:
        """0: one GPU on demand; 1: on demand in bigger instances only; 2: spot; 3: both."""
        return (2 if self.is_spot else 0) + (0 if 1 in self.gpu_counts else 1)

    @property
    def label(self) -> str:
        """Who sells it, and in what sizes where a single GPU is not one of them: a per-GPU
        price quoted for 8-GPU nodes is not a price anyone pays for one GPU."""
        if 1 in self.gpu_counts:  # (a converted row's tier is a Deferred: keep it one)
            return Deferred("{provider} {tier}", provider=self.provider, tier=self.tier)
        return Deferred(N_("{provider} {tier} ({sizes}× only)"), provider=self.provider,
                        tier=self.tier, sizes="/".join(str(c) for c in self.gpu_counts))

    def billing_rule(self, gpus: int = 1) -> BillingRule:
        """The billing rule of an instance of `gpus` GPUs at this row's per-GPU price."""
        return BillingRule(
            price_per_hour=self.price_per_gpu_hour * gpus,
            currency=self.currency,
            granularity=self.granularity,
            minimum_seconds=self.minimum_seconds,
            storage_per_gb_month=self.storage_per_gb_month or Decimal("0"),
            package=self.package,
        )

    def identity(self) -> tuple[str, str, str, tuple[int, ...], str]:
        """Rows with the same identity are the same offer: an override replaces the reference."""
        return (
            self.provider.casefold(),
            self.tier.casefold(),
            self.gpu,
            self.gpu_counts,
            self.package,
        )


def _decimal(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise ValueError(_("must be a number"))
    if isinstance(v, Decimal):
        return v
    if isinstance(v, int | float | str):
        try:
            d = Decimal(str(v).strip())
        except InvalidOperation:
            raise ValueError(_("must be a decimal number (got {value})").format(
                value=repr(v))) from None
        if not d.is_finite():
            raise ValueError(_("must be a finite number (got {value})").format(value=repr(v)))
        return d
    raise ValueError(_("must be a decimal number (got {value})").format(value=repr(v)))


def _package_price(fields: dict[str, Any]) -> dict[str, Any]:
    """A daily/weekly/monthly package may be priced as `price_per_gpu_package` (per GPU, per
    package); it becomes the package's effective hourly rate."""
    if "price_per_gpu_package" not in fields:
        return fields
    fields = dict(fields)
    pkg_price = fields.pop("price_per_gpu_package")
    hours = PACKAGE_HOURS.get(str(fields.get("package", "")))
    if hours is None:
        raise CatalogError(
            _("field 'price_per_gpu_package': needs package = daily, weekly or monthly")
        )
    try:
        per_package = _decimal(pkg_price)
    except ValueError as exc:
        raise CatalogError(_("field 'price_per_gpu_package': {problem}").format(
            problem=exc)) from None
    if per_package < 0:
        raise CatalogError(_("field 'price_per_gpu_package': must be ≥ 0"))
    fields.setdefault("price_per_gpu_hour", per_package / hours)
    return fields


def _first_error(exc: ValidationError) -> tuple[str, str]:
    errors = exc.errors()
    # An unknown field is usually the cause of a "missing" one (a typo): name it first.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    field = ".".join(str(p) for p in err["loc"]) or "row"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = _("unknown field")
    return field, msg


@cache
def _reference_rows() -> tuple[PriceRow, ...]:
    raw = _load_toml("prices.toml")
    providers: dict[str, dict[str, Any]] = raw.get("providers", {})
    specs = load_specs()
    rows = []
    for i, entry in enumerate(raw.get("price", []), start=1):
        data = {**providers.get(str(entry.get("provider", "")), {}), **entry}
        try:
            row = PriceRow(**_package_price(data))
        except CatalogError as exc:
            raise CatalogError(_("prices.toml row {i}: {problem}").format(
                i=i, problem=exc)) from None
        except ValidationError as exc:
            field, msg = _first_error(exc)
            raise CatalogError(_("prices.toml row {i}: field {field}: {problem}").format(
                i=i, field=repr(field), problem=msg)) from exc
        if row.gpu not in specs:
            raise CatalogError(
                _("prices.toml row {i}: field 'gpu': {gpu} is not a card of gpus.toml").format(
                    i=i, gpu=repr(row.gpu))
            )
        rows.append(row)
    return tuple(rows)


def parse_override(
    data: Mapping[str, Any], index: int = 1, specs: Mapping[str, GpuSpec] | None = None
) -> PriceRow:
    """One user price row from config (a dict of PriceRow fields; `gpu` may be any card name).

    Raises `CatalogError` with a one-line message naming the row and the field.
    """
    specs = load_specs() if specs is None else specs
    if not isinstance(data, Mapping):
        raise CatalogError(
            _("price override {index}: must be a table of fields, not {kind}").format(
                index=index, kind=type(data).__name__)
        )
    where = _("price override {index}").format(index=index)
    if data.get("provider") and data.get("gpu"):
        where += f" ({data['provider']} {data['gpu']})"
    fields = dict(data)
    gpu = fields.get("gpu")
    if not isinstance(gpu, str) or not gpu.strip():
        raise CatalogError(_("{where}: field 'gpu': missing (a card name such as 'RTX "
                             "4090')").format(where=where))
    try:
        fields["gpu"] = match_card(gpu, specs).key
    except (UnknownGpu, AmbiguousGpu) as exc:
        raise CatalogError(_("{where}: field 'gpu': {problem}").format(
            where=where, problem=exc)) from None
    fields.setdefault("as_of", "user config")
    fields.setdefault("source", "config.toml")
    fields["user"] = True
    try:
        fields = _package_price(fields)
    except CatalogError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    try:
        return PriceRow(**fields)
    except ValidationError as exc:
        field, msg = _first_error(exc)
        raise CatalogError(_("{where}: field {field}: {problem}").format(
            where=where, field=repr(field), problem=msg)) from None
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{where}: {exc}") from None


def load_prices(overrides: list[dict[str, Any]] | None = None) -> list[PriceRow]:
    """Reference rows, with the user's rows applied: a user row replaces every reference row with
    the same provider, tier, card, instance sizes and package (a later user row replaces an
    earlier one); any other user row is added at the end."""
    rows = list(_reference_rows())
    if not overrides:
        return rows
    specs = load_specs()
    for n, data in enumerate(overrides, start=1):
        row = parse_override(data, n, specs)
        same = [i for i, r in enumerate(rows) if r.identity() == row.identity()]
        if not same:
            rows.append(row)
            continue
        rows[same[0]] = row
        for i in reversed(same[1:]):
            del rows[i]
    return rows


# --- looking prices up ----------------------------------------------------------------------


class Quote(BaseModel):
    """What `count` GPUs of one card cost per hour from one price row."""

    model_config = ConfigDict(frozen=True)

    row: PriceRow
    count: int  # GPUs wanted
    billed_gpus: int  # GPUs paid for (an 8-GPU node bills 8)
    per_hour: Decimal  # the instance, per hour
    note: SkipValidation[str | None] = None  # English (JSON); a Deferred: shown()

    @property
    def as_shown(self) -> bool:
        """Rented as it reads: on demand (not spot), billing just the GPUs wanted, from a row
        whose label does not say "N× only" of another size."""
        return (
            self.billed_gpus == self.count
            and not self.row.is_spot
            and (self.count in self.row.gpu_counts or 1 in self.row.gpu_counts)
        )


def quote(row: PriceRow, count: int) -> Quote:
    """The cost of `count` GPUs in one instance from `row`.

    The smallest quoted instance size with at least `count` GPUs is billed whole (a row quoted
    only for 8-GPU nodes costs 8 GPUs even for 1). Beyond the largest quoted size the per-GPU
    rate is assumed to hold, and the quote says so.
    """
    if count < 1:
        raise CatalogError(_("GPU count must be ≥ 1 (got {value})").format(value=count))
    sizes = [c for c in row.gpu_counts if c >= count]
    note = None
    if sizes:
        billed = min(sizes)
        if billed != count:
            note = Deferred(N_("sold as {n}-GPU instances: pays for {n}"), n=billed)
    else:
        billed = count
        quoted = "/".join(f"{c}×" for c in row.gpu_counts)
        note = Deferred(N_("{count}× assumed at the per-GPU rate quoted for {quoted}"),
                        count=count, quoted=quoted)
    return Quote(
        row=row,
        count=count,
        billed_gpus=billed,
        per_hour=row.price_per_gpu_hour * billed,
        note=note,
    )


def rows_for(card: str, rows: Iterable[PriceRow], currency: str | None = "USD") -> list[PriceRow]:
    return [r for r in rows if r.gpu == card and (currency is None or r.currency == currency)]


def _priced(rows: list[PriceRow], include_spot: bool,
            include_simulated: bool = False) -> list[PriceRow]:
    """The rows a lowest price is taken from: never the sandbox's simulated prices, unless asked
    (a catalog filtered to the sandbox shows the prices its New screen charges)."""
    return [r for r in rows if (include_spot or not r.is_spot)
            and (include_simulated or not r.simulated)]


def cheapest_quote(
    card: str,
    count: int,
    rows: Iterable[PriceRow],
    currency: str = "USD",
    include_spot: bool = True,
    exact_first: bool = False,
) -> Quote | None:
    """The cheapest way to get `count` GPUs of `card` in one instance, or None if unpriced.

    `exact_first`: the cheapest instance billing exactly `count` GPUs, and only where none
    exists one sold bigger (it bills more GPUs than wanted: its note says so)."""
    quotes = [quote(r, count) for r in _priced(rows_for(card, rows, currency), include_spot)]
    if not quotes:
        return None
    return min(quotes, key=lambda q: (exact_first and q.billed_gpus != count, q.per_hour,
                                      q.billed_gpus, q.row.provider, q.row.tier))


def lowest_price(
    card: str, rows: Iterable[PriceRow], currency: str = "USD", include_spot: bool = True,
    include_simulated: bool = False, rentable_first: bool = False,
) -> PriceRow | None:
    """The row with the lowest per-GPU-hour price for `card` (any instance size).

    `rentable_first`: the lowest a renter can take as it is — one GPU, on demand — and only
    where no such row exists a spot or a multi-GPU-only one (its `caveat` says which)."""
    candidates = _priced(rows_for(card, rows, currency), include_spot, include_simulated)
    if not candidates:
        return None
    if rentable_first:
        return min(candidates, key=lambda r: (r.caveat_rank, r.price_per_gpu_hour, r.provider,
                                              r.tier))
    return min(candidates, key=lambda r: (r.price_per_gpu_hour, r.provider, r.tier))


class PricePerf(BaseModel):
    """Price-performance of one card at its lowest price. None where a figure is missing."""

    model_config = ConfigDict(frozen=True)

    card: str
    lowest: PriceRow | None
    usd_per_gpu_hour: Decimal | None
    usd_per_bf16_tflop_hour: Decimal | None  # dense BF16; None on cards without BF16 (T4, V100)
    usd_per_gb_vram_hour: Decimal | None
    bandwidth_gbs_per_usd_hour: Decimal | None  # GB/s of memory bandwidth per $/h


def price_performance(
    spec: GpuSpec, rows: Iterable[PriceRow], currency: str = "USD", include_spot: bool = True,
    include_simulated: bool = False, rentable_first: bool = False,
) -> PricePerf:
    row = lowest_price(spec.key, rows, currency, include_spot, include_simulated,
                       rentable_first)
    if row is None:
        return PricePerf(
            card=spec.key,
            lowest=None,
            usd_per_gpu_hour=None,
            usd_per_bf16_tflop_hour=None,
            usd_per_gb_vram_hour=None,
            bandwidth_gbs_per_usd_hour=None,
        )
    price = row.price_per_gpu_hour
    q = Decimal("0.0001")
    return PricePerf(
        card=spec.key,
        lowest=row,
        usd_per_gpu_hour=price,
        usd_per_bf16_tflop_hour=(price / Decimal(str(spec.bf16_tflops))).quantize(
            Decimal("0.000001")
        )
        if spec.bf16_tflops > 0
        else None,
        usd_per_gb_vram_hour=(price / Decimal(str(spec.vram_gb))).quantize(q),
        bandwidth_gbs_per_usd_hour=(Decimal(str(spec.memory_bandwidth_gbs)) / price).quantize(
            Decimal("0.1")
        )
        if price > 0
        else None,
    )


def price_performance_table(
    specs: Mapping[str, GpuSpec] | None = None,
    rows: Iterable[PriceRow] | None = None,
    currency: str = "USD",
    include_spot: bool = True,
) -> dict[str, PricePerf]:
    """`price_performance` for every card, by card key."""
    specs = load_specs() if specs is None else specs
    rows = load_prices() if rows is None else list(rows)
    return {k: price_performance(s, rows, currency, include_spot) for k, s in specs.items()}


def reference_offers(
    provider_name: str | None = "reference",
    rows: Iterable[PriceRow] | None = None,
    specs: Mapping[str, GpuSpec] | None = None,
    available: bool = False,
) -> list[Offer]:
    """Price rows as `Offer`s, one per quoted instance size.

    `provider_name` None keeps each row's own provider; otherwise every offer is that provider's
    and the row's provider goes into `tier` and `offer_id`. Reference offers are not stock:
    `available` is False unless asked.
    """
    specs = load_specs() if specs is None else specs
    rows = load_prices() if rows is None else rows
    offers = []
    seen: dict[str, int] = {}
    for row in rows:
        spec = specs.get(row.gpu)
        if spec is None:
            continue
        for count in row.gpu_counts:
            offer_id = f"{row.provider}:{row.tier}:{row.gpu}:{count}x" + (
                f":{row.region}" if row.region else ""
            )
            seen[offer_id] = seen.get(offer_id, 0) + 1
            if seen[offer_id] > 1:  # the same offer from another source
                offer_id += f"#{seen[offer_id]}"
            offers.append(
                Offer(
                    provider=provider_name or row.provider,
                    offer_id=offer_id,
                    gpu=spec.name,
                    gpu_count=count,
                    vram_gb=spec.vram_gb,
                    price_per_gpu_hour=row.price_per_gpu_hour,
                    billing=row.billing_rule(count),
                    region=row.region,
                    available=available,
                    tier=row.tier if provider_name is None else f"{row.provider} {row.tier}",
                    source=f"{row.provider}: {row.source}",
                    as_of=row.as_of,
                )
            )
    return offers
