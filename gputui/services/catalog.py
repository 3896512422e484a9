"""The catalog as the console and the commands see it: the card table (filters, sorting,
price-performance), the fit question and the job cost — plain functions, no Textual.

Nothing here prints: the commands that do are in `gputui.cli.catalog_report`. Bad input raises
`gputui.catalog.CatalogError` (its subclasses `UnknownGpu`, `AmbiguousGpu`, `FitError`
included) with a one-line message; the command line turns it into that line on stderr and
exit code 2.

Prices are reference prices: dated public figures (each with `as_of` and `source`) and the
user's own from config.toml, never live quotes. Everything printed says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gputui.catalog import (
    CatalogError,
    FitError,
    GpuSpec,
    PricePerf,
    PriceRow,
    cards_that_fit,
    custom_model,
    estimate_fit,
    get_model,
    job_costs,
    load_prices,
    load_specs,
    match_card,
    package_break_evens,
    price_performance,
    rows_for,
)
from gputui.catalog.fit import FitEstimate, FitOption
from gputui.catalog.jobcost import BreakEven, JobCost
from gputui.format import short_gpu
from gputui.i18n import N_, Deferred, _, shown
from gputui.models import Offer

# English (it goes into the JSON too): translate it with _() where it is shown
PRICE_NOTE = N_("reference prices with their date, not live quotes")
INTERCONNECTS = ("nvlink", "pcie")

# --- prices -------------------------------------------------------------------------------------


def catalog_prices(config: Any = None, *, state_dir: Any = "default") -> list[PriceRow]:
    """Reference prices with the user's `[[prices]]` from config.toml applied (see
    `load_prices`), then, for a card a provider sells without a sourced price there, the last
    live price gputui saw for it (`seen_price_rows`). Raises `CatalogError` naming a bad config
    row."""
    overrides = []
    for p in getattr(config, "prices", None) or []:
        data = p.model_dump(exclude_none=True) if hasattr(p, "model_dump") else dict(p)
        overrides.append(data)
    rows = load_prices(overrides or None)
    if state_dir == "default":
        from gputui.paths import state_dir as default_state_dir

        state_dir = default_state_dir()
    return rows + seen_price_rows(rows, state_dir)


def seen_price_rows(rows: Sequence[PriceRow], state_dir: Any) -> list[PriceRow]:
    """The last live price seen per provider spec (AutoDL's `payg_price`), as a price row of the
    card — only where that provider has no reference row for the card: the sourced reference
    price comes first. Each says when and where it was seen; it is a sighting, not a quote."""
    from gputui.catalog.match import card_for_reported_name
    from gputui.catalog.seen import seen_prices

    have = {(r.provider, r.gpu) for r in rows}
    out: list[PriceRow] = []
    for seen in seen_prices(state_dir):
        # exact names only: a loose match would price a modified 48 GB 4090 as the 4090
        card = card_for_reported_name(seen.gpu) if seen.gpu else None
        if card is None:
            continue
        if (seen.provider, card.key) in have:
            continue
        have.add((seen.provider, card.key))
        out.append(PriceRow(
            provider=seen.provider, tier="pay-as-you-go (last seen)", gpu=card.key,
            price_per_gpu_hour=seen.price_per_gpu_hour, currency=seen.currency,
            granularity=_seen_granularity(rows, seen.provider), as_of=seen.date,
            strength="weak",
            source=(f"last live price seen at {seen.provider} ({seen.offer_id}, instance "
                    f"{seen.instance}) on {seen.date}; not a quote"),
        ))
    return out


def _seen_granularity(rows: Sequence[PriceRow], provider: str) -> Any:
    """The provider's billing granularity as its reference rows state it (AutoDL: per started
    hour assumed, the dearest reading), else per hour."""
    from gputui.models import Granularity

    return next((r.granularity for r in rows if r.provider == provider), Granularity.HOUR)


# --- the card table -----------------------------------------------------------------------------


def architecture_family(spec: GpuSpec) -> str:
    """'Ada Lovelace (AD102)' -> 'Ada Lovelace'."""
    return spec.architecture.split("(")[0].strip()


def link_label(spec: GpuSpec) -> str:
    """Short interconnect: 'NVLink 900', 'NVL bridge 112', 'PCIe 4'."""
    if not spec.has_nvlink:
        return f"PCIe {spec.pcie_gen}"
    if spec.nvlink_kind == "bridge-2gpu":
        return f"NVL bridge {spec.nvlink_gbs:.0f}"
    return f"NVLink {spec.nvlink_gbs:g}"


@dataclass(frozen=True)
class CardRow:
    """One card of the table: its spec, its price rows (after the provider filter) and the
    price-performance at the lowest of them."""

    spec: GpuSpec
    perf: PricePerf
    prices: tuple[PriceRow, ...] = ()

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def lowest(self) -> PriceRow | None:
        return self.perf.lowest

    def as_dict(self) -> dict[str, Any]:
        s, p = self.spec, self.perf
        low = p.lowest
        return {
            "key": s.key,
            "name": s.name,
            "architecture": s.architecture,
            "form_factor": s.form_factor,
            "vram_gb": s.vram_gb,
            "memory_type": s.memory_type,
            "memory_bandwidth_gbs": s.memory_bandwidth_gbs,
            "fp32_tflops": s.fp32_tflops,
            "bf16_tflops": s.bf16_tflops,
            "fp16_tflops": s.fp16_tflops,
            "fp8_tflops": s.fp8_tflops,
            "int8_tops": s.int8_tops,
            "tensor_figures": s.tensor_figures,
            "tdp_w": s.tdp_w,
            "nvlink_gbs": s.nvlink_gbs,
            "nvlink_kind": s.nvlink_kind,
            "interconnect": s.interconnect,
            "pcie_gen": s.pcie_gen,
            "source": s.source,
            "lowest_price": None if low is None else _price_dict(low),
            # what keeps that price from being one GPU on demand ("spot", "8× only"), or ""
            "price_caveat": "" if low is None else low.caveat,
            "usd_per_gpu_hour": _num(p.usd_per_gpu_hour),
            "usd_per_bf16_tflop_hour": _num(p.usd_per_bf16_tflop_hour),
            "usd_per_gb_vram_hour": _num(p.usd_per_gb_vram_hour),
            "bandwidth_gbs_per_usd_hour": _num(p.bandwidth_gbs_per_usd_hour),
            "prices": [_price_dict(r) for r in self.prices],
        }


def _num(d: Decimal | None) -> float | None:
    return None if d is None else float(d)


def _price_dict(r: PriceRow) -> dict[str, Any]:
    usd = r.price_per_gpu_hour if r.currency == "USD" else None
    return {
        "provider": r.provider,
        "tier": r.tier,
        "usd_per_gpu_hour": _num(usd),
        "price_per_gpu_hour": str(r.price_per_gpu_hour),
        "currency": r.currency,
        "billing": r.granularity.value,
        "minimum_seconds": r.minimum_seconds,
        "package": r.package,
        "gpu_counts": list(r.gpu_counts),
        "as_of": r.as_of,
        "source": r.source,
        "user": r.user,
    }


@dataclass(frozen=True)
class Column:
    """A column of the card table: how to read, show and sort it."""

    key: str
    label: str  # short, for the console header
    title: str  # long, for help and the command's --sort list
    value: Callable[[CardRow], Any]  # None = no figure (always sorted last)
    show: Callable[[CardRow], str]
    descending: bool = False  # the natural order: best first
    numeric: bool = True


def _money(d: Decimal | None, places: int = 2, currency: str = "USD") -> str:
    if d is None:
        return "—"
    from gputui.format import CURRENCY_SYMBOLS, format_money

    if places == 2:  # a price: the one money rule (format.py)
        return format_money(d, currency)
    symbol = CURRENCY_SYMBOLS.get(currency)
    return f"{symbol}{d:,.{places}f}" if symbol else f"{d:,.{places}f} {currency}"


def _cur(row: CardRow) -> str:
    """The currency of a card's price figures: its lowest row's."""
    return row.lowest.currency if row.lowest else "USD"


def _fig(v: float, unit: str = "") -> str:
    if not v:
        return "—"
    text = f"{v:,.0f}" if v >= 100 else f"{v:g}"
    return f"{text}{unit}"


def _as_of(row: CardRow) -> str:
    return row.lowest.as_of if row.lowest else "—"


#: the price tiers of the price table and the providers (data, English), as shown
TIERS = {t: t for t in (N_("on-demand"), N_("pay-as-you-go"), N_("pay-as-you-go (older)"),
                         N_("pay-as-you-go (last seen)"), N_("marketplace"), N_("community"),
                         N_("secure"), N_("spot"), N_("serverless-flex"),
                         N_("capacity-block"), N_("simulated"))}


def tier_text(tier: object) -> object:
    """A tier for display: a known one a `Deferred` (shown() translates it), any other as is."""
    if isinstance(tier, str) and not isinstance(tier, Deferred) and tier in TIERS:
        return Deferred(tier)
    return tier


def _where(row: CardRow) -> str:
    if not row.lowest:
        return "—"
    # a converted row's tier is a Deferred ("on-demand (USD at ¥7.2/$)"): shown() translates it
    return Deferred("{provider} {tier}", provider=row.lowest.provider,
                    tier=tier_text(row.lowest.tier))


def _price_cell(row: CardRow) -> str:
    """The price, and — where it is not one GPU on demand — what it is ('$1.39 spot',
    '$2.79 8×'): never a spot or a node-only price read as the plain price."""
    text = _money(row.perf.usd_per_gpu_hour, 2, _cur(row))
    low = row.lowest
    if low is None or not low.caveat:
        return text
    if 1 in low.gpu_counts:  # spot: one GPU, taken away at any time
        return Deferred(N_("{price} spot"), price=text)
    if low.is_spot:
        return Deferred(N_("{price} spot {n}×"), price=text, n=min(low.gpu_counts))
    return f"{text} {min(low.gpu_counts)}×"


# Most important first: a narrow terminal cuts from the right.
COLUMNS: tuple[Column, ...] = (
    Column(
        "name",
        "GPU",
        N_("card name"),
        lambda r: r.spec.name.lower(),
        lambda r: short_gpu(r.spec.name),
        numeric=False,
    ),
    Column(
        "vram",
        "VRAM",
        N_("memory, GiB"),
        lambda r: r.spec.vram_gb,
        lambda r: f"{r.spec.vram_gb:g} GiB",  # marketed "GB" are GiB (catalog/fit.py)
        descending=True,
    ),
    Column(
        "price",
        "$/GPU·h",
        N_("lowest price per GPU-hour one GPU rents at on demand (else marked spot or N× only)"),
        lambda r: r.perf.usd_per_gpu_hour,
        _price_cell,
    ),
    Column(
        "provider",
        N_("Price at"),
        N_("provider and tier of that price"),
        lambda r: _where(r).lower() if r.lowest else None,
        _where,
        numeric=False,
    ),
    Column(
        "bandwidth",
        "GB/s",
        N_("memory bandwidth, GB/s"),
        lambda r: r.spec.memory_bandwidth_gbs,
        lambda r: _fig(r.spec.memory_bandwidth_gbs),
        descending=True,
    ),
    Column(
        "bf16",
        "BF16 TF",
        N_("dense BF16 tensor TFLOPS"),
        lambda r: r.spec.bf16_tflops or None,
        lambda r: _fig(r.spec.bf16_tflops),
        descending=True,
    ),
    Column(
        "fp8",
        "FP8 TF",
        N_("dense FP8 tensor TFLOPS"),
        lambda r: r.spec.fp8_tflops or None,
        lambda r: _fig(r.spec.fp8_tflops),
        descending=True,
    ),
    Column(
        "usd_per_tflop",
        "$/TF·h",
        N_("$ per dense BF16 TFLOP-hour"),
        lambda r: r.perf.usd_per_bf16_tflop_hour,
        lambda r: _money(r.perf.usd_per_bf16_tflop_hour, 4, _cur(r)),
    ),
    Column(
        "usd_per_gb",
        "$/GiB·h",
        N_("$ per GiB of VRAM per hour"),
        lambda r: r.perf.usd_per_gb_vram_hour,
        lambda r: _money(r.perf.usd_per_gb_vram_hour, 4, _cur(r)),
    ),
    Column(
        "bw_per_usd",
        N_("GB/s per $"),
        N_("memory bandwidth per $/hour"),
        lambda r: r.perf.bandwidth_gbs_per_usd_hour,
        lambda r: (
            "—"
            if r.perf.bandwidth_gbs_per_usd_hour is None
            else f"{r.perf.bandwidth_gbs_per_usd_hour:,.0f}"
        ),
        descending=True,
    ),
    Column(
        "link",
        N_("Link"),
        N_("NVLink GB/s (0 = PCIe only)"),
        lambda r: r.spec.nvlink_gbs,
        lambda r: link_label(r.spec),
        descending=True,
    ),
    Column("tdp", N_("TDP W"), N_("board power, W"), lambda r: r.spec.tdp_w, lambda r: _fig(r.spec.tdp_w)),
    Column(
        "as_of",
        N_("Price as of"),
        N_("date of the lowest price"),
        lambda r: _as_of(r) if r.lowest else None,
        _as_of,
        numeric=False,
    ),
    Column(
        "arch",
        N_("Architecture"),
        N_("architecture"),
        lambda r: r.spec.architecture.lower(),
        lambda r: architecture_family(r.spec),
        numeric=False,
    ),
)
COLUMN_BY_KEY = {c.key: c for c in COLUMNS}
DEFAULT_SORT = "price"


def get_column(key: str) -> Column:
    wanted = key.strip().lower().replace("-", "_")
    if wanted in COLUMN_BY_KEY:
        return COLUMN_BY_KEY[wanted]
    raise CatalogError(_("unknown sort column {key}; one of: {columns}").format(
        key=repr(key), columns=", ".join(COLUMN_BY_KEY)))


def sort_cards(
    cards: Iterable[CardRow], column: str = DEFAULT_SORT, reverse: bool = False
) -> list[CardRow]:
    """Best first in the column's natural order (`reverse` flips it); cards without the figure
    last either way, then by name."""
    col = get_column(column)
    have = [c for c in cards if col.value(c) is not None]
    missing = [c for c in cards if col.value(c) is None]
    descending = col.descending != reverse
    have.sort(key=lambda c: c.spec.name.lower())
    have.sort(key=col.value, reverse=descending)
    missing.sort(key=lambda c: c.spec.name.lower())
    return have + missing


@dataclass(frozen=True)
class Filters:
    min_vram: float | None = None
    arch: str | None = None
    provider: str | None = None
    interconnect: str | None = None  # "nvlink" | "pcie"

    def describe(self) -> str:
        parts = []
        if self.min_vram:
            parts.append(_("VRAM ≥ {gib} GiB").format(gib=f"{self.min_vram:g}"))
        if self.arch:
            parts.append(self.arch)
        if self.provider:
            parts.append(self.provider)
        if self.interconnect:
            parts.append("NVLink" if self.interconnect == "nvlink" else _("PCIe only"))
        return ", ".join(parts)


def architectures(specs: Mapping[str, GpuSpec] | None = None) -> list[str]:
    specs = load_specs() if specs is None else specs
    return sorted({architecture_family(s) for s in specs.values()})


def offer_price_rows(offers: Iterable[Offer], today: str) -> list[PriceRow]:
    """A provider's own offers as price rows of the catalog table (what it sells now; sold-out
    offers and GPUs the catalog does not know are left out)."""
    from gputui.catalog.match import card_for_reported_name, match_card

    out: list[PriceRow] = []
    for o in offers:
        if not o.available or o.price_per_gpu_hour <= 0:  # no price known (AutoDL: on creation)
            continue
        card = card_for_reported_name(o.gpu)
        if card is None:
            try:
                card = match_card(o.gpu)
            except CatalogError:
                continue
        out.append(PriceRow(
            provider=o.provider, tier=o.tier or "on-demand", gpu=card.key,
            price_per_gpu_hour=o.price_per_gpu_hour, gpu_counts=(o.gpu_count,),
            currency=o.billing.currency, granularity=o.billing.granularity,
            minimum_seconds=o.billing.minimum_seconds,
            storage_per_gb_month=o.billing.storage_per_gb_month or None,
            package=o.billing.package, region=o.region, as_of=o.as_of or today,
            source=o.source or f"{o.provider} offers ({today})",
        ))
    return out


def rows_in_currency(rows: Iterable[PriceRow], currency: str,
                     cny_per_usd: Decimal | None = None,
                     rate_note: str | None = None) -> list[PriceRow]:
    """The rows for a view in `currency`: those priced in it, and — only through the rate the
    user configured — the others converted, each saying so in its tier and note. Without a rate
    the others are left out (¥ and $ are never compared at a made-up rate)."""
    from gputui.services.costs import convert

    out: list[PriceRow] = []
    for r in rows:
        if r.currency == currency:
            out.append(r)
            continue
        if cny_per_usd is None or {r.currency, currency} != {"USD", "CNY"}:
            continue
        # English as strings; Deferred, so that the console shows them in its language
        note = Deferred(N_("converted from {currency} at ¥{rate}/$ ({source})"),
                        currency=r.currency, rate=cny_per_usd,
                        source=rate_note or Deferred(N_("your config")))
        conv = {"price_per_gpu_hour": convert(r.price_per_gpu_hour, r.currency, currency,
                                              cny_per_usd),
                "currency": currency,
                "tier": Deferred(N_("{tier} ({currency} at ¥{rate}/$)"), tier=tier_text(r.tier),
                                 currency=r.currency, rate=cny_per_usd),
                "note": Deferred("{note}; {more}", note=note, more=r.note) if r.note else note}
        if r.price_max_per_gpu_hour is not None:
            conv["price_max_per_gpu_hour"] = convert(r.price_max_per_gpu_hour, r.currency,
                                                     currency, cny_per_usd)
        if r.storage_per_gb_month is not None:
            conv["storage_per_gb_month"] = convert(r.storage_per_gb_month, r.currency, currency,
                                                   cny_per_usd)
        out.append(r.model_copy(update=conv))
    return out


def providers(rows: Iterable[PriceRow]) -> list[str]:
    return sorted({r.provider for r in rows}, key=str.lower)


def check_filters(
    filters: Filters, rows: Sequence[PriceRow], specs: Mapping[str, GpuSpec] | None = None
) -> Filters:
    """The filters, normalised; `CatalogError` for a value that matches nothing known."""
    specs = load_specs() if specs is None else specs
    min_vram = filters.min_vram
    if min_vram is not None and (min_vram != min_vram or min_vram < 0):
        raise CatalogError(_("minimum VRAM must be a number ≥ 0 (got {value})").format(
            value=repr(min_vram)))
    arch = (filters.arch or "").strip() or None
    if arch and not any(arch.lower() in s.architecture.lower() for s in specs.values()):
        raise CatalogError(_("unknown architecture {name}; one of: {known}").format(
            name=repr(arch), known=", ".join(architectures(specs))))
    provider = (filters.provider or "").strip() or None
    if provider:
        known = {p.lower(): p for p in providers(rows)}
        if provider.lower() not in known:
            raise CatalogError(_("unknown provider {name}; one of: {known}").format(
                name=repr(provider), known=", ".join(known.values())))
        provider = known[provider.lower()]
    link = (filters.interconnect or "").strip().lower() or None
    if link and link not in INTERCONNECTS:
        raise CatalogError(_("interconnect must be nvlink or pcie (got {value})").format(
            value=repr(filters.interconnect)))
    return Filters(min_vram or None, arch, provider, link)


def card_rows(
    rows: Sequence[PriceRow] | None = None,
    filters: Filters | None = None,
    specs: Mapping[str, GpuSpec] | None = None,
    currency: str = "USD",
) -> list[CardRow]:
    """Every card passing `filters`, in catalog order. With a provider filter, a card needs a
    price from that provider and its price columns use that provider's prices only."""
    specs = load_specs() if specs is None else specs
    rows = load_prices() if rows is None else list(rows)
    f = check_filters(filters or Filters(), rows, specs)
    if f.provider:
        rows = [r for r in rows if r.provider == f.provider]
    out = []
    for spec in specs.values():
        if f.min_vram and spec.vram_gb < f.min_vram:
            continue
        if f.arch and f.arch.lower() not in spec.architecture.lower():
            continue
        if f.interconnect == "nvlink" and not spec.has_nvlink:
            continue
        if f.interconnect == "pcie" and spec.has_nvlink:
            continue
        mine = rows_for(spec.key, rows, currency=None)
        if f.provider and not mine:
            continue
        # filtered to one provider, its own prices: the sandbox's are what its New screen
        # charges (simulated prices never count as the lowest anywhere else)
        out.append(CardRow(spec, price_performance(spec, mine, currency,
                                                   include_simulated=bool(f.provider),
                                                   rentable_first=True),
                           tuple(mine)))
    return out


# --- fit ------------------------------------------------------------------------------------


_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(text: str | float | int, what: str = "params") -> float:
    """'7e9', '7B', '70b', '1.5B', '350M' -> a number; `FitError` otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower().replace("_", "").replace(",", "")
        mult = 1.0
        if raw and raw[-1] in _SUFFIX:
            mult, raw = _SUFFIX[raw[-1]], raw[:-1]
        try:
            value = float(raw) * mult
        except ValueError:
            raise FitError(_("{what} must be a number such as 7e9 or 7B (got {value})").format(
                what=what, value=repr(text))) from None
    if not value > 0 or value == float("inf"):
        raise FitError(_("{what} must be a positive number (got {value})").format(
            what=what, value=repr(text)))
    return value


def fit_model(
    model: str | None = None,
    *,
    params: str | float | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    heads: int | None = None,
):  # -> ModelConfig
    """A built-in model by name, or a custom one by its parameter count (shape optional)."""
    if params not in (None, ""):
        if model:
            raise FitError(_("give a model name or --params, not both"))
        return custom_model(parse_count(params), layers, kv_heads, head_dim, heads=heads)
    if any(v is not None for v in (layers, kv_heads, head_dim, heads)):
        raise FitError(_("--layers, --kv-heads, --head-dim and --heads go with --params"))
    if not model:
        raise FitError(_("give a model name (e.g. Qwen2.5-7B) or --params N"))
    return get_model(model)


@dataclass(frozen=True)
class FitAnswer:
    estimate: FitEstimate
    options: list[FitOption] = field(default_factory=list)

    @property
    def fitting(self) -> list[FitOption]:
        return [o for o in self.options if o.fits]

    @property
    def cheapest(self) -> FitOption | None:
        """The cheapest fitting card a renter can take as its row reads: the GPUs the job needs,
        on demand, billing no more GPUs than that. Only where no card rents so, the cheapest
        priced one (`cheapest_text` names its catch)."""
        priced = [o for o in self.fitting if o.quote is not None]
        return next((o for o in priced if o.quote and o.quote.as_shown), None) or next(
            iter(priced), None)

    def cheapest_text(self, where: bool = False) -> str:
        """'1× RTX 6000 Ada at $0.37/h' (`where`: '… (vast marketplace)'), with the catch where
        it is not rented as it reads ('…; sold as 8-GPU instances: pays for 8'); '' when nothing
        fitting is priced. In the interface language."""
        o = self.cheapest
        if o is None or o.quote is None:
            return ""
        q = o.quote
        text = _("{count}× {gpu} at {price}/h").format(
            count=o.count, gpu=short_gpu(o.name), price=_money(o.hourly, currency=q.row.currency))
        if where:
            text = f"{text} ({shown(q.row.label)})"
        if q.as_shown:
            return text
        catch = shown(q.note) if q.note else _("spot: can be taken away")
        return _("{text}; {catch}").format(text=text, catch=catch)

    def as_dict(self) -> dict[str, Any]:
        d = self.estimate.as_dict()
        cheapest = self.cheapest
        d["cheapest"] = None if cheapest is None else {
            **cheapest.as_dict(),
            "as_shown": bool(cheapest.quote and cheapest.quote.as_shown),
            "billed_gpus": cheapest.quote.billed_gpus if cheapest.quote else None,
        }
        d["fits"] = [o.as_dict() for o in self.fitting]
        d["does_not_fit"] = [o.as_dict() for o in self.options if not o.fits]
        d["prices"] = PRICE_NOTE
        return d


def fit(
    model: str | None = None,
    *,
    job: str,
    precision: str,
    context: int = 4096,
    batch: int = 1,
    params: str | float | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    heads: int | None = None,
    lora_rank: int | None = None,
    prices: Sequence[PriceRow] | None = None,
    currency: str = "USD",
) -> FitAnswer:
    """The estimate and every card with the fewest GPUs it fits on, cheapest first, priced in
    `currency` (the rows priced in it)."""
    m = fit_model(
        model, params=params, layers=layers, kv_heads=kv_heads, head_dim=head_dim, heads=heads
    )
    if lora_rank is None:
        est = estimate_fit(m, job, precision, context, batch)
    else:
        est = estimate_fit(m, job, precision, context, batch, lora_rank=lora_rank)
    return FitAnswer(est, cards_that_fit(est, prices=load_prices() if prices is None else prices,
                                         currency=currency))


def _where_opt(o: FitOption) -> str:
    return str(shown(o.quote.row.label)) if o.quote else _("no price")


def _link_short(o: FitOption) -> str:
    spec = load_specs().get(o.card)
    return link_label(spec) if spec else o.interconnect


# --- job cost ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostAnswer:
    spec: GpuSpec
    count: int
    hours: Decimal
    costs: list[JobCost]
    break_evens: list[BreakEven]

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.spec.name,
            "card": self.spec.key,
            "count": self.count,
            "hours": str(self.hours),
            "costs": [c.as_dict() for c in self.costs],
            "break_even": [
                {
                    "provider": b.provider,
                    "package": b.package.package,
                    "tier": b.package.tier,
                    "hourly_tier": b.hourly.tier,
                    "period_hours": b.period_hours,
                    "package_cost_per_gpu": str(b.package_cost),
                    "break_even_hours": str(b.break_even_hours),
                    "pays_off": b.pays_off,
                    "statement": b.statement,
                }
                for b in self.break_evens
            ],
            "prices": PRICE_NOTE,
        }


def cost(
    gpu: str,
    *,
    count: int = 1,
    hours: float | str | Decimal,
    prices: Sequence[PriceRow] | None = None,
) -> CostAnswer:
    """`count` × `gpu` for `hours` on every priced row, cheapest first, and package break-evens."""
    if not str(gpu).strip():
        raise CatalogError(_("give a GPU name, e.g. 4090 or 'H100 SXM'"))
    rows = load_prices() if prices is None else list(prices)
    spec = match_card(gpu)
    costs = job_costs(spec.key, count, hours, rows)
    h = Decimal(str(hours).strip())
    return CostAnswer(spec, count, h, costs, package_break_evens(spec.key, rows))


# what the console and the commands call the parts of an estimate and the jobs (JSON keeps the
# keys: weights, kv_cache, ...; inference, lora, ...)
PART_LABELS = {"weights": N_("weights"), "adapters": N_("adapters"), "gradients": N_("gradients"),
               "optimizer": N_("optimizer"), "kv_cache": N_("kv_cache"),
               "activations": N_("activations"), "overhead": N_("overhead")}
JOB_LABELS = {"inference": N_("inference"), "lora": "lora", "qlora": "qlora", "full": N_("full")}
BILLING = {"second": N_("per second"), "minute": N_("per minute"), "hour": N_("per hour")}


def part_label(name: str) -> str:
    """The English name of a part of the estimate, marked: translate it with _() to show it."""
    return PART_LABELS.get(name, name)


def job_label(job: Any) -> str:
    """A job's English name, marked: translate it with _() to show it."""
    value = getattr(job, "value", job)
    return JOB_LABELS.get(str(value), str(value))


def billing_label(granularity: str, minimum_seconds: int = 0) -> str:
    """'per second, 60s min' (English as a string; `shown()` gives it in the interface
    language)."""
    per = Deferred(BILLING.get(granularity, granularity))
    if not minimum_seconds:
        return per
    return Deferred(N_("{per}, {seconds}s min"), per=per, seconds=minimum_seconds)


def sold_as(row: PriceRow) -> str:
    """The instance sizes a row is sold in, '1×', '8×', '1/2/4/8×': what tells apart one
    provider's rows of a card (its 1×, 2× and 8× listings)."""
    return "/".join(str(n) for n in row.gpu_counts) + "×"


def cost_cells(c: JobCost) -> list[str]:
    from gputui.format import format_money
    from gputui.models import Granularity

    cur = c.row.currency
    return [
        c.row.provider,
        tier_text(c.row.tier),  # type: ignore[list-item]  # shown() by the screen
        sold_as(c.row),
        c.row.package,
        billing_label(c.row.granularity.value, c.row.minimum_seconds),
        format_money(c.cost, cur),
        f"{c.billed_hours.normalize():f}",
        format_money(c.price_per_hour, cur),
        *(format_money(c.by_granularity[g], cur) for g in Granularity),
        c.row.as_of,
        "; ".join(str(shown(note)) for note in c.notes),  # shown: only ever displayed
    ]
