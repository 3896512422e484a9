"""Catalog data (specs, reference prices), GPU-name matching and price lookups."""

from __future__ import annotations

import re
import tomllib
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.catalog import (
    AmbiguousGpu,
    CatalogError,
    UnknownGpu,
    card_for_reported_name,
    cheapest_quote,
    load_prices,
    load_specs,
    lowest_price,
    match_card,
    match_gpu,
    normalise,
    price_performance,
    price_performance_table,
    quote,
    reference_offers,
)
from gputui.models import Granularity, Offer
from tests.shared import captures_dir, reference

# ---------------------------------------------------------------------------------------- specs


def test_all_21_reference_cards_load_with_their_source():
    specs = load_specs()
    assert len(specs) == 21
    for key, spec in specs.items():
        assert spec.key == key
        assert spec.source.strip(), key
        assert spec.tensor_figures == "dense"
        assert spec.vram_gb > 0 and spec.memory_bandwidth_gbs > 0


def test_specs_are_cached_but_callers_get_their_own_dict():
    a = load_specs()
    a.pop("rtx_4090")
    assert "rtx_4090" in load_specs()


def test_every_card_equals_the_reference_data():
    reference_specs = reference("gpu-specs.toml")
    reference_data = {
        k: v for k, v in tomllib.loads(reference_specs.read_text()).items() if isinstance(v, dict)
    }
    specs = load_specs()
    assert set(specs) == set(reference_data)
    renamed = {
        "fp16_tensor_tflops_dense": "fp16_tflops",
        "bf16_tensor_tflops_dense": "bf16_tflops",
        "fp8_tensor_tflops_dense": "fp8_tflops",
        "int8_tensor_tops_dense": "int8_tops",
    }
    for key, ref in reference_data.items():
        spec = specs[key]
        for field, value in ref.items():
            assert getattr(spec, renamed.get(field, field)) == value, (key, field)


def test_interconnect_labels_tell_nvlink_from_pcie():
    specs = load_specs()
    assert specs["h100_sxm"].has_nvlink and "NVSwitch" in specs["h100_sxm"].interconnect
    assert not specs["rtx_4090"].has_nvlink and specs["rtx_4090"].interconnect == "PCIe 4"
    assert "bridge" in specs["rtx_3090"].interconnect


def test_usable_memory_follows_what_nvidia_smi_reports():
    specs = load_specs()
    # an H100 reports 81559 MiB; about 1 % of it is reserved
    assert specs["h100_sxm"].usable_bytes == int(81559 * 2**20 * 0.99)
    # an L4 (GDDR6 with ECC on) loses 1/16 to ECC: less than its marketed 24 GiB
    assert specs["l4"].usable_bytes < 24 * 2**30 * 15 / 16
    assert "MiB" in specs["h100_sxm"].usable_note


def _fixture_gpus() -> list[tuple[str, int]]:
    """(product name, memory.total MiB) for every GPU of the real nvidia-smi captures."""
    found = []
    for f in sorted(captures_dir().iterdir()):
        text = f.read_text(errors="replace")
        if f.suffix == ".xml":
            for sec in re.split(r"<gpu id=", text)[1:]:
                name = re.search(r"<product_name>([^<]*)<", sec)
                totals = [int(x) for x in re.findall(r"<fb_memory_usage>\s*<total>(\d+) MiB", sec)]
                if name and totals:
                    found.append((name.group(1), max(totals)))
        elif f.suffix == ".txt" and "exporter" in f.name:
            for sec in re.split(r"Product Name\s*:", text)[1:]:
                totals = [
                    int(x) for x in re.findall(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB", sec)
                ]
                if totals:
                    found.append((sec.splitlines()[0].strip(), max(totals)))
    return found


def test_real_nvidia_smi_names_map_to_cards_and_memory_matches():
    gpus = _fixture_gpus()
    mapped = {}
    for name, total in gpus:
        card = card_for_reported_name(name)
        if card is not None:
            mapped[name] = card.key
            if card.nvidia_smi_total_mib is not None:
                assert card.nvidia_smi_total_mib == total, name
    assert mapped == {
        "NVIDIA A100-SXM4-40GB": "a100_40gb_sxm",
        "NVIDIA A100-SXM4-80GB": "a100_80gb_sxm",
        "NVIDIA GeForce RTX 3090": "rtx_3090",
        "NVIDIA GeForce RTX 4090": "rtx_4090",
        "NVIDIA H100 80GB HBM3": "h100_sxm",
        "NVIDIA H200": "h200_sxm",
        "NVIDIA L40S": "l40s",
        "Tesla T4": "t4",
    }


@pytest.mark.parametrize(
    ("reported", "card"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100_80gb_sxm"),
        ("NVIDIA A100 80GB PCIe", "a100_80gb_pcie"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA GeForce RTX 4090 D", "rtx_4090d"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),
        ("Tesla V100-SXM2-32GB", "v100_32gb_sxm2"),
    ],
)
def test_card_for_reported_name(reported: str, card: str):
    spec = card_for_reported_name(reported)
    assert spec is not None and spec.key == card


@pytest.mark.parametrize(
    "reported",
    [
        "NVIDIA A10G",
        "NVIDIA L40",
        "NVIDIA GeForce RTX 3060 Laptop GPU",
        "Graphics Device",
        "",
        None,
    ],
)
def test_unlisted_reported_names_give_none_not_a_neighbour(reported: str | None):
    # A10G is not an A10, an L40 is not an L40S: no substring guessing for reported names
    assert card_for_reported_name(reported) is None


def test_no_alias_points_at_two_cards():
    seen: dict[str, str] = {}
    for key, spec in load_specs().items():
        for label in (key, spec.name, *spec.aliases):
            n = normalise(label)
            assert seen.setdefault(n, key) == key, (label, seen[n], key)


# ------------------------------------------------------------------------------------- matching


@pytest.mark.parametrize(
    ("query", "card"),
    [
        ("RTX 4090", "rtx_4090"),  # exact wins over the 4090 D it is a substring of
        ("rtx-4090", "rtx_4090"),
        ("NVIDIA GeForce RTX 4090", "rtx_4090"),  # vendor words ignored
        ("geforce rtx 4090", "rtx_4090"),
        ("RTX 4090 D", "rtx_4090d"),
        ("4090D", "rtx_4090d"),
        ("H100 SXM", "h100_sxm"),
        ("h100-pcie", "h100_pcie"),
        ("H200", "h200_sxm"),  # unique substring
        ("A6000", "rtx_a6000"),
        ("A10", "a10"),  # exact, though a substring of every A100
        ("L4", "l4"),
        ("Tesla T4", "t4"),
        ("A100-SXM4-80GB", "a100_80gb_sxm"),
        ("b200", "b200"),
    ],
)
def test_match_card(query: str, card: str):
    assert match_card(query).key == card


def test_every_card_as_home_shows_it_is_found_again():
    """The narrow GPU column's names ('RTX 4090 D CN' for 'GeForce RTX 4090 D (China SKU)')
    typed back to `--gpu` find that card and no other; the plain card still wins its own
    short name ('4090' is the RTX 4090)."""
    from gputui.format import short_gpu

    for key, spec in load_specs().items():
        assert match_card(short_gpu(spec.name)).key == key, short_gpu(spec.name)
    assert match_card("RTX 4090 D CN").key == "rtx_4090d"
    assert match_card("4090").key == "rtx_4090"
    offer = "GeForce RTX 4090 D (China SKU)"  # a provider's offer, found by its short name
    assert match_gpu("4090 D CN", [offer, "GeForce RTX 4090"]) == offer


def test_ambiguous_name_is_refused_with_the_candidates():
    # "4090" is the plain RTX 4090, not its 4090 D variant (design: `4090` is enough)
    assert match_card("4090").key == "rtx_4090"
    with pytest.raises(AmbiguousGpu) as exc:
        match_card("A100")
    assert isinstance(exc.value, ValueError)
    assert exc.value.candidates == [
        "A100 40GB PCIe", "A100 40GB SXM4", "A100 80GB PCIe", "A100 80GB SXM4"
    ]
    assert "A100 40GB PCIe," in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(AmbiguousGpu) as exc:
        match_card("H100")
    assert len(exc.value.candidates) == 2


def test_unknown_name_suggests_close_ones():
    with pytest.raises(UnknownGpu) as exc:
        match_card("RTX 4O90")
    assert isinstance(exc.value, ValueError)
    assert "GeForce RTX 4090" in exc.value.suggestions
    with pytest.raises(UnknownGpu):
        match_card("   ")
    with pytest.raises(UnknownGpu):
        match_card("NVIDIA")  # nothing left once vendor words go


def test_match_gpu_against_a_providers_offer_names():
    names = ["GeForce RTX 4090", "GeForce RTX 4090 D", "H100 SXM", "H100 PCIe", "A100 80GB"]
    assert match_gpu("rtx 4090", names) == "GeForce RTX 4090"
    assert match_gpu("NVIDIA RTX-4090-D", names) == "GeForce RTX 4090 D"
    assert match_gpu("sxm", names) == "H100 SXM"
    assert match_gpu("a100", names) == "A100 80GB"
    assert match_gpu("4090", names) == "GeForce RTX 4090"  # the plain one, not its D variant
    with pytest.raises(AmbiguousGpu) as exc:
        match_gpu("h100", names)
    assert exc.value.candidates == ["H100 PCIe", "H100 SXM"]
    with pytest.raises(UnknownGpu):
        match_gpu("B200", names)


def test_match_gpu_treats_spellings_of_one_name_as_one():
    assert match_gpu("4090", ["NVIDIA GeForce RTX 4090", "RTX 4090"]) == "NVIDIA GeForce RTX 4090"


_CARDS = sorted(load_specs().values(), key=lambda s: s.key)


@given(
    spec=st.sampled_from(_CARDS),
    which=st.integers(min_value=0, max_value=20),
    upper=st.lists(st.booleans(), min_size=60, max_size=60),
    sep=st.sampled_from([" ", "-", "  ", "_", " - "]),
)
def test_any_spelling_of_a_card_label_finds_that_card(spec, which, upper, sep):
    labels = [spec.key, spec.name, *spec.aliases]
    label = labels[which % len(labels)]
    mangled = "".join(
        c.upper() if u else c.lower()
        for c, u in zip(label, upper + [False] * len(label), strict=False)
    )
    mangled = re.sub(r"[ _]+", sep, mangled)
    assert match_card(mangled).key == spec.key


# --------------------------------------------------------------------------------------- prices


def test_every_verified_price_row_loads_and_maps_to_a_card():
    rows = load_prices()
    specs = load_specs()
    assert len(rows) == 62
    for row in rows:
        assert row.gpu in specs
        assert row.source and row.as_of
        # yuan only from AutoDL (autodl-pro-api.md), each with how far to trust it
        assert row.currency == ("CNY" if row.provider == "autodl" else "USD")
        assert (row.strength is not None) == (row.provider == "autodl")
        assert row.price_per_gpu_hour > 0
        assert not row.user
    assert {r.provider for r in rows} == {"lambda", "runpod", "vast", "aws", "autodl"}


def test_unverified_figures_are_not_shipped():
    rows = load_prices()
    # AutoDL's figures come from autodl-pro-api.md, dated and with their strength; the
    # [R] rows of gpu-prices.md are still not shipped
    autodl = {(r.gpu, r.tier): (r.price_per_gpu_hour, r.as_of, r.strength)
              for r in rows if r.provider == "autodl"}
    assert autodl[("rtx_4090", "pay-as-you-go")] == (Decimal("1.88"), "2026-10-02", "medium")
    assert autodl[("a800_80gb_sxm", "pay-as-you-go")] == (Decimal("4.98"), "2026-09", "weak")
    assert not [r for r in rows if r.currency != "USD" and r.provider != "autodl"]
    # the post-June-2025 AWS p5 rate (≈6.9/GPU-h) is [R] only
    p5 = [r for r in rows if r.provider == "aws" and r.gpu == "h100_sxm" and r.tier == "on-demand"]
    assert [r.price_per_gpu_hour for r in p5] == [Decimal("12.29")]
    assert "STALE" in (p5[0].note or "")


def test_multi_gpu_listings_are_per_gpu_exactly():
    """A listing quoted as 'Nx ... $P' stores P/N per GPU, exactly."""
    checked = 0
    for row in load_prices():
        m = re.search(r"(\d+)x (?:listing|node) \$([\d.]+)", row.source)
        if m and len(row.gpu_counts) == 1:
            n, total = int(m.group(1)), Decimal(m.group(2))
            assert row.gpu_counts == (n,)
            assert row.price_per_gpu_hour * n == total, row.source
            checked += 1
    assert checked >= 10


def test_serverless_prices_are_the_per_second_price_times_3600():
    rows = [r for r in load_prices() if r.tier == "serverless-flex"]
    assert len(rows) == 10
    for row in rows:
        per_second = Decimal(re.search(r"\$([\d.]+)/s", row.source).group(1))
        assert row.price_per_gpu_hour == per_second * 3600
        assert row.granularity is Granularity.SECOND
        assert row.storage_per_gb_month == Decimal("0.10")


def test_provider_billing_defaults_apply():
    rows = load_prices()
    lam = next(r for r in rows if r.provider == "lambda")
    assert lam.granularity is Granularity.MINUTE and lam.minimum_seconds == 60
    vast = next(r for r in rows if r.provider == "vast")
    assert vast.granularity is Granularity.SECOND
    block = next(r for r in rows if r.tier == "capacity-block")
    assert block.package == "daily" and block.minimum_seconds == 86400


def test_user_override_replaces_the_reference_row_and_additions_append():
    base = load_prices()
    rows = load_prices(
        [
            {
                "provider": "lambda",
                "tier": "on-demand",
                "gpu": "A10",
                "price_per_gpu_hour": "0.75",
                "granularity": "minute",
                "as_of": "2026-12-01",
            },
            {
                "provider": "autodl",
                "tier": "按量",
                "gpu": "RTX 4090",
                "price_per_gpu_hour": 1.98,
                "currency": "cny",
                "granularity": "second",
            },
        ]
    )
    # the reference has two Lambda A10 on-demand rows (two sources): the user's row replaces both
    assert len(rows) == len(base) - 1 + 1
    a10 = [r for r in rows if r.provider == "lambda" and r.gpu == "a10"]
    assert [(r.price_per_gpu_hour, r.user, r.as_of) for r in a10] == [
        (Decimal("0.75"), True, "2026-12-01")
    ]
    added = rows[-1]
    assert added.user and added.gpu == "rtx_4090" and added.currency == "CNY"
    assert added.price_per_gpu_hour == Decimal("1.98")
    assert len(load_prices()) == len(base)  # the reference is untouched


def test_override_a_weekly_package_by_its_package_price():
    row = load_prices(
        [
            {
                "provider": "autodl",
                "gpu": "rtx_4090",
                "package": "weekly",
                "price_per_gpu_package": "168",
                "currency": "CNY",
            }
        ]
    )[-1]
    assert row.price_per_gpu_hour == Decimal(1)
    assert row.granularity is Granularity.HOUR  # a row that does not say: the dearest reading


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": "abc"}, "price_per_gpu_hour"),
        ({"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": -1}, "price_per_gpu_hour"),
        ({"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": "nan"}, "price_per_gpu_hour"),
        ({"provider": "x", "gpu": "RTX 4090"}, "price_per_gpu_hour"),
        ({"provider": "x", "gpu": "RTX 4090", "prce": 1}, "prce"),
        ({"provider": "x", "gpu": "A100", "price_per_gpu_hour": 1}, "gpu"),  # ambiguous
        ({"provider": "x", "gpu": "Voodoo 5", "price_per_gpu_hour": 1}, "gpu"),
        ({"provider": "x", "price_per_gpu_hour": 1}, "gpu"),
        ({"gpu": "RTX 4090", "price_per_gpu_hour": 1}, "provider"),
        (
            {"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": 1, "granularity": "week"},
            "granularity",
        ),
        (
            {"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": 1, "gpu_counts": [0]},
            "gpu_counts",
        ),
        (
            {"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": 1, "minimum_seconds": -5},
            "minimum_seconds",
        ),
        (
            {"provider": "x", "gpu": "RTX 4090", "price_per_gpu_hour": 1, "package": "yearly"},
            "package",
        ),
        ({"provider": "x", "gpu": "RTX 4090", "price_per_gpu_package": 9}, "price_per_gpu_package"),
    ],
)
def test_bad_override_rows_name_the_field(row, field):
    with pytest.raises(CatalogError) as exc:
        load_prices([{"provider": "ok", "gpu": "L4", "price_per_gpu_hour": "0.5"}, row])
    message = str(exc.value)
    assert f"'{field}'" in message
    assert message.startswith("price override 2")
    assert "\n" not in message


def test_an_override_that_is_not_a_table_is_refused():
    with pytest.raises(CatalogError, match="override 1"):
        load_prices(["rtx 4090 = 0.3"])  # type: ignore[list-item]


def test_quote_bills_whole_instances_and_flags_extrapolation():
    rows = load_prices()
    p4d = next(
        r
        for r in rows
        if r.provider == "aws" and r.gpu == "a100_40gb_sxm" and r.tier == "on-demand"
    )
    q = quote(p4d, 1)
    assert q.billed_gpus == 8 and q.per_hour == Decimal("32.77") and "8-GPU" in (q.note or "")
    assert p4d.label == "aws on-demand (8× only)"  # the catalog's "lowest at" says so too
    a6000 = next(r for r in rows if r.provider == "lambda" and r.gpu == "rtx_a6000")
    assert quote(a6000, 2).per_hour == Decimal("2.18") and quote(a6000, 2).note is None
    assert a6000.label == "lambda on-demand"  # sold singly too: nothing to flag
    q8 = quote(a6000, 8)
    assert q8.billed_gpus == 8 and "assumed" in (q8.note or "")
    with pytest.raises(CatalogError):
        quote(a6000, 0)


def test_cheapest_quote_uses_the_listing_of_that_size():
    rows = load_prices()
    q = cheapest_quote("rtx_4090", 8, rows)
    assert q is not None and q.per_hour == Decimal("2.72")  # RunPod spot 0.34 × 8
    q = cheapest_quote("rtx_4090", 8, rows, include_spot=False)
    assert q is not None and q.per_hour == Decimal("2.77")  # the Vast 8× listing
    assert cheapest_quote("t4", 1, rows) is None


def test_lowest_price_and_price_performance():
    specs = load_specs()
    rows = load_prices()
    low = lowest_price("h100_sxm", rows)
    assert low is not None and low.provider == "vast" and low.price_per_gpu_hour == Decimal("1.87")
    perf = price_performance(specs["h100_sxm"], rows)
    assert perf.usd_per_bf16_tflop_hour == (Decimal("1.87") / 989).quantize(Decimal("0.000001"))
    assert perf.usd_per_gb_vram_hour == (Decimal("1.87") / 80).quantize(Decimal("0.0001"))
    assert perf.bandwidth_gbs_per_usd_hour == (Decimal(3350) / Decimal("1.87")).quantize(
        Decimal("0.1")
    )
    table = price_performance_table()
    assert set(table) == set(specs)
    assert table["t4"].lowest is None and table["t4"].usd_per_bf16_tflop_hour is None
    # a card without BF16 has no $/BF16-TFLOP even when priced
    assert price_performance(specs["v100_32gb_sxm2"], rows).usd_per_bf16_tflop_hour is None


def test_reference_offers_are_offers_with_source_and_date():
    rows = load_prices()
    offers = reference_offers()
    assert len(offers) == sum(len(r.gpu_counts) for r in rows)
    assert all(isinstance(o, Offer) and o.source and o.as_of and not o.available for o in offers)
    assert all(o.provider == "reference" for o in offers)
    for o in offers:
        assert o.billing.price_per_hour == o.price_per_gpu_hour * o.gpu_count
    a6000 = [o for o in offers if o.offer_id.startswith("lambda:on-demand:rtx_a6000")]
    assert sorted(o.gpu_count for o in a6000) == [1, 2, 4]
    assert a6000[0].gpu == "RTX A6000" and a6000[0].billing.granularity is Granularity.MINUTE
    own = reference_offers(provider_name=None)
    assert {o.provider for o in own} == {"lambda", "runpod", "vast", "aws", "autodl"}
    assert len({o.offer_id for o in own}) == len(own)
