"""The catalog commands (`gputui catalog`, `fit`, `cost`) as plain functions: JSON shapes, text
output, and bad input as one line with exit code 2. Also the loose GPU-name rule they rely on."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.catalog import (
    AmbiguousGpu,
    CatalogError,
    FitError,
    UnknownGpu,
    load_specs,
    match_card,
    match_gpu,
)
from gputui.catalog.match import catalog_aliases, words
from gputui.cli import catalog_report as report
from gputui.config import Config, PriceOverride
from gputui.providers.sandbox import sandbox_offers
from gputui.services import catalog as svc

SPECS = load_specs()
SANDBOX_NAMES = [o.gpu for o in sandbox_offers()]


def run_json(capsys, fn, *args, **kw):
    code = report.run_command(fn, *args, as_json=True, **kw)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""
    return json.loads(out)


def run_bad(capsys, fn, *args, **kw) -> str:
    code = report.run_command(fn, *args, **kw)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("gputui: ") and err.count("\n") == 1  # one clear line
    return err


# ------------------------------------------------------------------------------- name matching


def test_words_split_at_punctuation_and_letter_digit_boundaries():
    assert words("NVIDIA GeForce RTX 4090-D") == ("rtx", "4090", "d")
    assert words("H100 80GB SXM5") == ("h", "100", "80", "gb", "sxm", "5")
    assert words("Tesla T4") == ("t", "4")


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("4090", "GeForce RTX 4090"),  # the plain one over its 4090 D variant (design example)
        ("h100 sxm", "H100 80GB SXM5"),  # words may be skipped and shortened (design example)
        ("H100-SXM", "H100 80GB SXM5"),
        ("RTX 4090", "GeForce RTX 4090"),  # exact wins
        ("4090 D", "GeForce RTX 4090 D (China SKU)"),
        ("4090d", "GeForce RTX 4090 D (China SKU)"),
        ("a100 sxm 80", "A100 80GB SXM4"),  # any order
        ("A100-SXM4-80GB", "A100 80GB SXM4"),
        ("A10", "A10"),  # exact, though it starts every A100
        ("L4", "L4"),
        ("L40", "L40S"),
        ("a800", "A800 80GB SXM4 (China SKU)"),
        ("h200", "H200 141GB SXM5"),
        ("B200", "B200 (HGX B200)"),
        ("6000 ada", "RTX 6000 Ada Generation"),
    ],
)
def test_typed_names_find_the_sandbox_offer(query: str, name: str):
    assert match_gpu(query, SANDBOX_NAMES) == name
    assert match_card(query).name == name


@pytest.mark.parametrize(
    ("query", "candidates"),
    [
        ("A100", ["A100 40GB PCIe", "A100 40GB SXM4", "A100 80GB PCIe", "A100 80GB SXM4"]),
        ("A100 80GB", ["A100 80GB PCIe", "A100 80GB SXM4"]),
        ("H100", ["H100 80GB PCIe", "H100 80GB SXM5"]),
        ("6000", ["RTX 6000 Ada Generation", "RTX A6000"]),
    ],
)
def test_siblings_stay_ambiguous_with_the_candidates_listed(query: str, candidates: list[str]):
    with pytest.raises(AmbiguousGpu) as exc:
        match_gpu(query, SANDBOX_NAMES)
    assert exc.value.candidates == candidates
    assert all(c in str(exc.value) for c in candidates)
    with pytest.raises(AmbiguousGpu) as exc:
        match_card(query)
    assert exc.value.candidates == candidates


def test_the_plain_name_wins_only_over_its_own_variants():
    assert match_gpu("h100", ["H100", "H100 SXM", "H100 PCIe"]) == "H100"
    with pytest.raises(AmbiguousGpu):
        match_gpu("h100", ["H100 SXM", "H100 PCIe"])
    with pytest.raises(AmbiguousGpu):  # equal words in another order: no plain one
        match_gpu("a100", ["A100 SXM4 80GB", "A100 80GB SXM4"])
    with pytest.raises(UnknownGpu) as exc:
        match_gpu("RTX 9999", SANDBOX_NAMES)
    assert exc.value.query == "RTX 9999"


def test_catalog_aliases_let_an_offer_be_found_by_any_catalog_spelling():
    aliases = catalog_aliases(SANDBOX_NAMES)
    assert set(aliases) == set(SANDBOX_NAMES)  # every sandbox offer is a catalog card
    with pytest.raises(UnknownGpu):
        match_gpu("H100 HBM3", SANDBOX_NAMES)
    assert match_gpu("H100 HBM3", SANDBOX_NAMES, aliases=aliases) == "H100 80GB SXM5"
    assert match_gpu("h100_pcie", SANDBOX_NAMES, aliases=aliases) == "H100 80GB PCIe"
    with pytest.raises(AmbiguousGpu):  # aliases add spellings, not answers
        match_gpu("A100", SANDBOX_NAMES, aliases=aliases)


_LABELS = sorted((label, s.name) for s in SPECS.values() for label in (s.key, s.name, *s.aliases))


@given(st.sampled_from(_LABELS), st.sampled_from([str.lower, str.upper, lambda x: x]))
def test_every_catalog_spelling_finds_its_offer(label_name, case):
    label, name = label_name
    names = SANDBOX_NAMES
    assert match_gpu(case(label), names, aliases=catalog_aliases(names)) == name


# --------------------------------------------------------------------------------- catalog


def test_catalog_json_has_every_card_with_its_prices(capsys):
    cards = run_json(capsys, report.catalog_command, Config())
    assert len(cards) == len(SPECS)
    by_key = {c["key"]: c for c in cards}
    h100 = by_key["h100_sxm"]
    spec = SPECS["h100_sxm"]
    for field in (
        "name",
        "architecture",
        "vram_gb",
        "memory_bandwidth_gbs",
        "bf16_tflops",
        "fp16_tflops",
        "fp8_tflops",
        "tdp_w",
        "nvlink_gbs",
        "prices",
    ):
        assert field in h100
    assert h100["bf16_tflops"] == spec.bf16_tflops and h100["tensor_figures"] == "dense"
    assert h100["prices"]
    for p in h100["prices"]:
        assert {"provider", "tier", "usd_per_gpu_hour", "billing", "as_of"} <= set(p)
        assert p["billing"] in ("second", "minute", "hour") and p["as_of"]
    low = min(p["usd_per_gpu_hour"] for p in h100["prices"])
    assert h100["usd_per_gpu_hour"] == low == h100["lowest_price"]["usd_per_gpu_hour"]
    assert h100["usd_per_bf16_tflop_hour"] == pytest.approx(low / spec.bf16_tflops, abs=1e-6)
    assert h100["usd_per_gb_vram_hour"] == pytest.approx(low / spec.vram_gb, abs=1e-4)
    assert h100["bandwidth_gbs_per_usd_hour"] == pytest.approx(
        spec.memory_bandwidth_gbs / low, abs=0.1
    )
    # cheapest first by default; unpriced cards last, with nulls
    prices = [c["usd_per_gpu_hour"] for c in cards]
    priced = [p for p in prices if p is not None]
    assert prices[: len(priced)] == sorted(priced)
    assert by_key["t4"]["prices"] == [] and by_key["t4"]["usd_per_gpu_hour"] is None


def test_catalog_sort_and_filters(capsys):
    cards = run_json(
        capsys,
        report.catalog_command,
        Config(),
        sort="bandwidth",
        min_vram=80,
        interconnect="nvlink",
    )
    assert cards and all(c["vram_gb"] >= 80 and c["nvlink_gbs"] > 0 for c in cards)
    bw = [c["memory_bandwidth_gbs"] for c in cards]
    assert bw == sorted(bw, reverse=True)
    cards = run_json(capsys, report.catalog_command, Config(), sort="bandwidth", reverse=True)
    bw = [c["memory_bandwidth_gbs"] for c in cards]
    assert bw == sorted(bw)
    cards = run_json(capsys, report.catalog_command, Config(), arch="hopper", interconnect="pcie")
    assert cards == []
    cards = run_json(capsys, report.catalog_command, Config(), arch="Ada")
    assert {c["key"] for c in cards} == {"rtx_4090", "rtx_4090d", "l40s", "l4", "rtx_6000_ada"}
    cards = run_json(capsys, report.catalog_command, Config(), provider="Lambda")
    assert cards and all(p["provider"] == "lambda" for c in cards for p in c["prices"])


def test_catalog_every_sort_column_works(capsys):
    for col in svc.COLUMNS:
        cards = run_json(capsys, report.catalog_command, Config(), sort=col.key)
        assert len(cards) == len(SPECS)


def test_catalog_text_says_prices_are_dated(capsys):
    assert report.run_command(report.catalog_command, Config(), min_vram=100) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["GPU", "VRAM", "$/GPU·h"]
    assert "H200 141GB SXM5" in out and "RTX 4090" not in out
    assert "not live quotes" in out and "dense" in out


def test_user_prices_from_config_join_the_table(capsys):
    config = Config(
        prices=[PriceOverride(provider="mylab", gpu="4090", price_per_gpu_hour=Decimal("0.05"))]
    )
    cards = run_json(capsys, report.catalog_command, config)
    assert cards[0]["key"] == "rtx_4090"
    assert cards[0]["lowest_price"]["provider"] == "mylab"
    assert cards[0]["lowest_price"]["user"] is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sort": "speed"}, "unknown sort column 'speed'"),
        ({"arch": "Kepler"}, "unknown architecture 'Kepler'; one of: Ada Lovelace"),
        ({"provider": "acme"}, "unknown provider 'acme'; one of:"),
        ({"min_vram": -1}, "minimum VRAM must be a number ≥ 0"),
        ({"interconnect": "infiniband"}, "interconnect must be nvlink or pcie"),
    ],
)
def test_catalog_bad_input(capsys, kwargs, message):
    assert message in run_bad(capsys, report.catalog_command, Config(), **kwargs)


def test_bad_config_price_is_bad_input(capsys):
    config = Config(prices=[PriceOverride(provider="me", gpu="RTX 9999", price_per_gpu_hour=1)])
    err = run_bad(capsys, report.catalog_command, config)
    assert "price override 1" in err and "RTX 9999" in err


# ------------------------------------------------------------------------------------- fit


def test_fit_json_shape(capsys):
    data = run_json(
        capsys,
        report.fit_command,
        Config(),
        "Qwen2.5-7B",
        job="inference",
        precision="bf16",
        context=8192,
        batch=2,
    )
    assert data["model"] == "Qwen2.5-7B" and data["context"] == 8192 and data["batch"] == 2
    assert set(data["breakdown"]) == {
        "weights",
        "gradients",
        "optimizer",
        "kv_cache",
        "activations",
        "overhead",
    }
    assert data["total_gb"] == pytest.approx(sum(data["breakdown"].values()), abs=0.02)
    # the unit the screens use (GiB) beside the 10^9-byte fields scripts already read
    assert data["total_gib"] == pytest.approx(data["total_gb"] * 1e9 / 2**30, abs=0.01)
    assert data["breakdown_gib"]["weights"] == pytest.approx(
        data["breakdown"]["weights"] * 1e9 / 2**30, abs=0.001)
    assert all(f["need_gib_per_gpu"] < f["need_gb_per_gpu"] for f in data["fits"])
    assert len(data["assumptions"]) == len(data["breakdown"])
    assert data["fits"] and all({"gpu", "count"} <= set(f) for f in data["fits"])
    priced = [Decimal(f["usd_per_hour"]) for f in data["fits"] if f["usd_per_hour"]]
    assert priced == sorted(priced)  # cheapest first
    assert "not live quotes" in data["prices"]
    # 2 × 28 layers × 4 kv heads × 128 × 2 bytes × 8192 tokens × 2 sequences
    assert data["breakdown"]["kv_cache"] == pytest.approx(
        2 * 28 * 4 * 128 * 2 * 8192 * 2 / 1e9, abs=0.001
    )


def test_fit_a_model_given_by_its_parameter_count(capsys):
    data = run_json(
        capsys,
        report.fit_command,
        Config(),
        params="13B",
        layers=40,
        kv_heads=40,
        head_dim=128,
        job="lora",
        precision="bf16",
    )
    assert data["params"] == 13_000_000_000
    assert any("does not fit a 24 GiB card, QLoRA does" in n for n in data["notes"])
    assert all(f["count"] > 1 or f["usable_gb_per_gpu"] > 24 for f in data["fits"])
    full = run_json(capsys, report.fit_command, Config(), params=7e9, job="full", precision="bf16")
    # ZeRO paper: mixed-precision Adam keeps 16 bytes per parameter of model state
    state = sum(full["breakdown"][k] for k in ("weights", "gradients", "optimizer"))
    assert state == pytest.approx(16 * 7e9 / 1e9, rel=0.001)


def test_fit_text_shows_breakdown_assumptions_and_cards(capsys):
    assert (
        report.run_command(
            report.fit_command, Config(), "llama-3.1-70b", job="inference", precision="q4_k_m"
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Needs" in out and "weights" in out and "Q4_K_M" in out
    assert "GiB on one GPU" in out and "GiB/GPU" in out
    assert " GB" not in out  # one unit for memory, as on every screen
    assert "GPUs" in out and "cheapest at" in out and "not live quotes" in out


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("GPT-5",), {}, "unknown model 'GPT-5'"),
        (("Qwen2.5-7B",), {"context": 200_000}, "beyond Qwen2.5-7B's limit of 131,072"),
        (("Qwen2.5-7B",), {"precision": "fp4"}, "unknown precision 'fp4'"),
        (("Qwen2.5-7B",), {"job": "pretrain"}, "unknown job 'pretrain'"),
        (("Qwen2.5-7B",), {"batch": 0}, "batch must be a whole number ≥ 1"),
        (("Qwen2.5-7B",), {"job": "full", "precision": "q4_k_m"}, "cannot be fine-tuned"),
        ((), {}, "give a model name"),
        ((), {"params": "-7e9"}, "params must be a positive number"),
        ((), {"params": "lots"}, "params must be a number"),
        (("Qwen2.5-7B",), {"params": "7e9"}, "not both"),
        (("Qwen2.5-7B",), {"layers": 32}, "go with --params"),
    ],
)
def test_fit_bad_input(capsys, args, kwargs, message):
    kw = {"job": "inference", "precision": "bf16", **kwargs}
    assert message in run_bad(capsys, report.fit_command, Config(), *args, **kw)


def test_parse_count():
    assert svc.parse_count("7e9") == 7e9
    assert svc.parse_count("7B") == 7e9
    assert svc.parse_count("1.5b") == 1.5e9
    assert svc.parse_count("350M") == 350e6
    assert svc.parse_count("13_000_000_000") == 13e9
    for bad in ("", "x", "0", "-1", "inf", "nan"):
        with pytest.raises(FitError):
            svc.parse_count(bad)


# ------------------------------------------------------------------------------------- cost


def test_cost_json_per_provider_and_billing(capsys):
    data = run_json(capsys, report.cost_command, Config(), "h100 sxm", count=8, hours=30)
    assert data["card"] == "h100_sxm" and data["count"] == 8 and data["hours"] == "30"
    costs = data["costs"]
    assert costs and [Decimal(c["cost"]) for c in costs] == sorted(
        Decimal(c["cost"]) for c in costs
    )
    for c in costs:
        assert {"provider", "tier", "package", "billing", "cost", "by_granularity", "as_of"} <= set(
            c
        )
        assert set(c["by_granularity"]) == {"second", "minute", "hour"}
    # an hourly row: 8 GPUs × 30 h × its per-GPU price, billed by the hour or finer
    hourly = next(c for c in costs if c["package"] == "hourly" and c["billed_gpus"] == 8)
    per_gpu = Decimal(hourly["price_per_hour"]) / 8
    assert Decimal(hourly["cost"]) == (per_gpu * 8 * 30).quantize(Decimal("0.01"))
    # the daily package against the hourly price
    assert data["break_even"] and data["break_even"][0]["package"] == "daily"
    assert "not live quotes" in data["prices"]


def test_cost_text_and_unpriced_card(capsys):
    assert report.run_command(report.cost_command, Config(), "4090", count=1, hours=2.5) == 0
    out = capsys.readouterr().out
    assert out.startswith("1× GeForce RTX 4090 for 2.5 h") and "not live quotes" in out
    assert report.run_command(report.cost_command, Config(), "T4", count=1, hours=1) == 0
    assert "No reference price for the T4" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("gpu", "kwargs", "message"),
    [
        ("RTX 9999", {}, "unknown GPU 'RTX 9999'"),
        ("A100", {}, "ambiguous: it matches A100 40GB PCIe"),
        ("", {}, "give a GPU name"),
        ("4090", {"hours": -1}, "hours must be ≥ 0"),
        ("4090", {"hours": "soon"}, "hours must be a number"),
        ("4090", {"count": 0}, "GPU count must be a whole number ≥ 1"),
    ],
)
def test_cost_bad_input(capsys, gpu, kwargs, message):
    kw = {"count": 1, "hours": 1, **kwargs}
    assert message in run_bad(capsys, report.cost_command, Config(), gpu, **kw)


def test_errors_are_catalog_errors():
    # the contract with the command line: every bad input is a CatalogError (a ValueError)
    with pytest.raises(CatalogError):
        svc.cost("A100", count=1, hours=1)
    with pytest.raises(CatalogError):
        svc.fit("nope", job="inference", precision="bf16")
    with pytest.raises(CatalogError):
        svc.card_rows(filters=svc.Filters(arch="nope"))


# ------------------------------------------------------- issue 29: what a renter actually pays


def _rows(*specs: tuple[str, str, str, list[int]]):
    """Price rows of the user's own (provider, card, per-GPU price, instance sizes) alone."""
    from gputui.catalog import load_prices

    return [r for r in load_prices([
        {"provider": p, "gpu": gpu, "price_per_gpu_hour": price, "gpu_counts": sizes}
        for p, gpu, price, sizes in specs]) if r.user]


def test_the_fit_names_a_card_to_rent_as_its_row_reads_not_a_bigger_instance(capsys):
    """Issue 29.1: "cheapest 1× RTX 3090 at $0.33/h" named a row sold only as 2-GPU instances
    (it pays for 2), while the RTX 6000 Ada rented alone at $0.37 was the one to take."""
    code = report.run_command(report.fit_command, Config(), "Qwen2.5-7B", job="inference",
                              precision="bf16")
    out = capsys.readouterr().out
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("Cheapest to rent for this job: "))
    assert line == "Cheapest to rent for this job: 1× RTX 6000 Ada at $0.37/h (vast marketplace)"
    data = run_json(capsys, report.fit_command, Config(), "Qwen2.5-7B", job="inference",
                    precision="bf16")
    cheapest = data["cheapest"]
    assert cheapest["gpu"].startswith("RTX 6000 Ada") and cheapest["as_shown"]
    assert cheapest["count"] == cheapest["billed_gpus"] == 1
    # no row that rents as it reads is cheaper, and the 3090's row is one it can rent alone
    answer = svc.fit("Qwen2.5-7B", job="inference", precision="bf16")
    assert answer.cheapest is not None and answer.cheapest.hourly == Decimal("0.37")
    assert all(o.hourly >= answer.cheapest.hourly for o in answer.fitting
               if o.quote is not None and o.quote.as_shown)
    rtx3090 = next(o for o in answer.options if o.card == "rtx_3090")
    assert rtx3090.quote is not None and rtx3090.quote.as_shown
    assert not any("pays for" in str(w) for w in rtx3090.warnings)


def test_the_fit_prefers_the_gpus_it_needs_over_a_cheaper_bigger_instance():
    rows = _rows(("bigbox", "RTX 3090", "0.10", [2]), ("single", "RTX 3090", "0.30", [1]),
                 ("other", "RTX 4090", "0.25", [1]))
    answer = svc.fit("Qwen2.5-7B", job="inference", precision="bf16", prices=rows)
    rtx3090 = next(o for o in answer.options if o.card == "rtx_3090")
    assert rtx3090.quote is not None and rtx3090.quote.row.provider == "single"
    assert answer.cheapest is not None and answer.cheapest.card == "rtx_4090"
    assert answer.cheapest_text() == "1× RTX 4090 at $0.25/h"
    # only a bigger instance priced: named, with what it bills
    only_big = svc.fit("Qwen2.5-7B", job="inference", precision="bf16",
                       prices=_rows(("bigbox", "RTX 3090", "0.10", [2])))
    assert only_big.cheapest is not None and only_big.cheapest.card == "rtx_3090"
    assert only_big.cheapest_text(where=True) == (
        "1× RTX 3090 at $0.20/h (bigbox on-demand (2× only)); sold as 2-GPU instances: "
        "pays for 2")


def test_one_providers_cost_rows_say_which_listing_each_is(capsys):
    """Issue 29.2: for 2× RTX 4090, four "vast marketplace" rows at $0.79, $0.80, $1.39 and
    $2.77/h with nothing saying what differs: their instance sizes do."""
    code = report.run_command(report.cost_command, Config(), "4090", count=2, hours=1)
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    header = next(x for x in lines if x.startswith("provider"))
    assert header.split()[:3] == ["provider", "tier", "sold"]
    vast = {x.split()[2]: x for x in lines if x.startswith("vast ")}
    assert set(vast) == {"1×", "2×", "4×", "8×"}
    assert "$0.79" in vast["2×"] and "$2.77" in vast["8×"] and "pays for 8" in vast["8×"]
    data = run_json(capsys, report.cost_command, Config(), "4090", count=2, hours=1)
    assert sorted(c["gpu_counts"] for c in data["costs"] if c["provider"] == "vast") == [
        [1], [2], [4], [8]]
