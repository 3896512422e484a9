"""The fit estimator, checked against independent published figures where there are some."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.catalog import (
    MODELS,
    FitError,
    Job,
    cards_that_fit,
    custom_model,
    estimate_fit,
    get_model,
    get_precision,
    load_prices,
    load_specs,
)
from gputui.catalog.fit import CUDA_CONTEXT_BYTES, GB

GIB = 2**30

# Llama-2-13B, from its config.json on the model card (meta-llama/Llama-2-13b-hf).
LLAMA2_13B = dict(
    layers=40, kv_heads=40, head_dim=128, heads=40, hidden=5120, intermediate=13824, vocab=32000
)


def option(options, card):
    return next(o for o in options if o.card == card)


# ------------------------------------------------------------------------------- model configs


@pytest.mark.parametrize("name", list(MODELS))
def test_builtin_parameter_counts_match_the_model_cards(name):
    """Counted from config.json; the model cards print the total (e.g. Qwen2.5-7B: 7.61B)."""
    m = MODELS[name]
    published = float(m.published_params.rstrip("B")) * 1e9
    assert m.params == pytest.approx(published, rel=0.01)


def test_exact_parameter_counts():
    assert get_model("Llama-3.1-8B").params == 8_030_261_248  # HF model page: 8.03B params
    assert get_model("Llama-3.1-70B").params == 70_553_706_496
    assert get_model("Qwen2.5-7B").params == 7_615_616_512


@pytest.mark.parametrize(
    "name", ["Qwen2.5-7B", "qwen2.5:7b", "Qwen/Qwen2.5-7B-Instruct", "qwen2.5 7b", "QWEN2.5-7B"]
)
def test_model_names_match_loosely(name):
    assert get_model(name).name == "Qwen2.5-7B"


def test_model_names_do_not_confuse_7b_and_72b():
    assert get_model("qwen2.5:72b").name == "Qwen2.5-72B"
    assert get_model("meta-llama/Meta-Llama-3.1-70B-Instruct").name == "Llama-3.1-70B"


def test_unknown_model_is_a_clear_error():
    with pytest.raises(FitError) as exc:
        get_model("gpt-5")
    assert isinstance(exc.value, ValueError)
    assert "Qwen2.5-7B" in str(exc.value) and "--params" in str(exc.value)


# -------------------------------------------------------------------------------------- weights


def test_qwen25_7b_bf16_weights_are_15_2_gb():
    # the model's safetensors on Hugging Face total 15.2 GB
    e = estimate_fit("Qwen2.5-7B", "inference", "bf16")
    assert e.breakdown["weights"] == pytest.approx(15.23, abs=0.01)


@pytest.mark.parametrize(
    ("precision", "published_gb"),
    # bartowski/Meta-Llama-3.1-70B-Instruct-GGUF README file table: Q4_K_M 42.52GB,
    # Q5_K_M 49.95GB, Q8_0 74.98GB
    [("Q4_K_M", 42.52), ("q5_k_m", 49.95), ("GGUF Q8_0", 74.98)],
)
def test_gguf_weights_match_published_file_sizes(precision, published_gb):
    e = estimate_fit("Llama-3.1-70B", "inference", precision)
    assert e.breakdown["weights"] == pytest.approx(published_gb, rel=0.015)


def test_quantised_formats_keep_embeddings_in_16_bit():
    m = get_model("Qwen2.5-7B")
    e = estimate_fit(m, "inference", "nf4")
    emb = m.embedding_params
    expected = emb * 2 + (m.params - emb) * 4.127 / 8
    assert e.parts[0].bytes == pytest.approx(expected, rel=1e-9)
    assert "embedding" in e.parts[0].assumption


@pytest.mark.parametrize(
    "name", ["fp32", "bfloat16", "FP16", "fp8", "int8", "int4", "nf4", "Q4_K_M", "q8_0"]
)
def test_precision_names(name):
    assert get_precision(name)


def test_unknown_precision_is_refused():
    with pytest.raises(FitError, match="unknown precision"):
        estimate_fit("Qwen2.5-7B", "inference", "int3")


# ------------------------------------------------------------------------------------- KV cache


def test_kv_cache_arithmetic_is_exact():
    e = estimate_fit("Llama-3.1-8B", "inference", "bf16", context=8192, batch=3)
    kv = next(p for p in e.parts if p.name == "kv_cache")
    assert kv.bytes == 2 * 32 * 8 * 128 * 2 * 8192 * 3
    assert "2 × 32 layers × 8 kv_heads × 128 head_dim × 2 bytes" in kv.assumption


@pytest.mark.parametrize(
    ("model", "tokens", "gib"),
    # Hugging Face blog "Llama 3.1 - 405B, 70B & 8B", KV cache table (fp16; its "GB" are GiB):
    # 8B 16k 1.95, 128k 15.62; 70B 16k 4.88, 128k 39.06
    [
        ("Llama-3.1-8B", 16_000, 1.953125),
        ("Llama-3.1-8B", 128_000, 15.625),
        ("Llama-3.1-70B", 16_000, 4.8828125),
        ("Llama-3.1-70B", 128_000, 39.0625),
    ],
)
def test_kv_cache_matches_the_llama31_blog_table(model, tokens, gib):
    e = estimate_fit(model, "inference", "fp16", context=tokens)
    kv = next(p for p in e.parts if p.name == "kv_cache")
    assert kv.bytes / GIB == gib


def test_kv_cache_bits_and_fp32():
    e8 = estimate_fit("Llama-3.1-8B", "inference", "bf16", context=1000, kv_cache_bits=8)
    e32 = estimate_fit("Llama-3.1-8B", "inference", "fp32", context=1000)
    kv = lambda e: next(p for p in e.parts if p.name == "kv_cache").bytes  # noqa: E731
    assert kv(e8) * 4 == kv(e32) == 2 * 32 * 8 * 128 * 4 * 1000


def test_training_keeps_no_kv_cache():
    e = estimate_fit("Qwen2.5-7B", "qlora", "nf4")
    assert e.breakdown["kv_cache"] == 0


# ------------------------------------------------------------------------------------- training


def test_full_fine_tune_is_16_bytes_per_parameter_of_model_state():
    # ZeRO paper (Rajbhandari et al. 2020, §3.1): mixed-precision Adam keeps 2+2+12 = 16 bytes/param
    for precision in ("bf16", "fp32"):
        e = estimate_fit("Qwen2.5-7B", "full", precision)
        state = sum(p.bytes for p in e.parts if p.name in ("weights", "gradients", "optimizer"))
        assert state == 16 * e.params


def test_full_fine_tune_of_a_7b_needs_over_100_gb_and_no_single_80gb_card():
    e = estimate_fit("Qwen2.5-7B", "full", "bf16", context=2048)
    assert e.total_gb > 100
    options = cards_that_fit(e)
    assert option(options, "h100_sxm").count == 2
    assert option(options, "b200").count == 1
    assert any("16 bytes per parameter" in n for n in e.notes)


def test_qlora_of_a_7b_fits_a_24_gb_card():
    e = estimate_fit("Qwen2.5-7B", "qlora", "nf4", context=4096)
    assert e.total_gb < 24
    options = cards_that_fit(e)
    for card in ("rtx_4090", "rtx_3090", "a10", "l4"):
        assert option(options, card).count == 1, card


def test_a_13b_lora_in_bf16_does_not_fit_24_gb_and_the_estimate_says_so():
    m = custom_model(13.0e9, **LLAMA2_13B)
    lora = estimate_fit(m, "lora", "bf16", context=2048)
    qlora = estimate_fit(m, "qlora", "nf4", context=2048)
    assert option(cards_that_fit(lora), "rtx_4090").count != 1
    assert option(cards_that_fit(qlora), "rtx_4090").count == 1
    assert any("does not fit a 24 GiB card, QLoRA does" in n for n in lora.notes)


def test_lora_adapters_are_computed_from_the_config():
    m = get_model("Qwen2.5-7B")
    e = estimate_fit(m, "lora", "bf16", lora_rank=16)
    per_layer = 16 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 3)
    assert m.lora_params(16) == 28 * per_layer
    adapters = next(p for p in e.parts if p.name == "adapters")
    assert adapters.bytes == 28 * per_layer * 4
    assert next(p for p in e.parts if p.name == "optimizer").bytes == 28 * per_layer * 8


def test_lora_on_a_4bit_base_is_estimated_as_qlora():
    e = estimate_fit("Qwen2.5-7B", "lora", "nf4")
    assert e.job is Job.QLORA and any("QLoRA" in n for n in e.notes)


def test_gradient_checkpointing_saves_activation_memory():
    on = estimate_fit("Llama-3.1-8B", "lora", "bf16", context=4096, gradient_checkpointing=True)
    off = estimate_fit("Llama-3.1-8B", "lora", "bf16", context=4096, gradient_checkpointing=False)
    assert off.breakdown["activations"] > 3 * on.breakdown["activations"]
    assert "checkpointing on" in next(p for p in on.parts if p.name == "activations").assumption


def test_every_part_states_its_assumption():
    for job in Job:
        e = estimate_fit("Llama-3.1-8B", job, "bf16" if job is not Job.QLORA else "nf4")
        assert set(e.breakdown) >= {
            "weights",
            "kv_cache",
            "gradients",
            "optimizer",
            "activations",
            "overhead",
        }
        assert all(p.assumption for p in e.all_parts)
        assert len(e.assumptions) == len(e.all_parts)
        assert e.total_gb == pytest.approx(sum(e.breakdown.values()), abs=0.01)


def test_as_dict_has_what_the_fit_command_prints():
    d = estimate_fit("Qwen2.5-3B", "inference", "q4_k_m").as_dict()
    assert {"total_gb", "breakdown", "assumptions", "notes", "model", "job", "precision"} <= set(d)
    assert d["precision"] == "GGUF Q4_K_M"


# --------------------------------------------------------------------------------- bad requests


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            dict(model="Llama-3.1-8B", job="inference", precision="bf16", context=200_000),
            "limit of 131,072",
        ),
        (
            dict(model="Qwen2.5-3B", job="inference", precision="bf16", context=40_000),
            "limit of 32,768",
        ),
        (dict(model="Qwen2.5-7B", job="lora", precision="q4_k_m"), "inference format"),
        (dict(model="Qwen2.5-7B", job="full", precision="nf4"), "full fine-tuning"),
        (dict(model="Qwen2.5-7B", job="full", precision="int8"), "full fine-tuning"),
        (dict(model="Qwen2.5-7B", job="qlora", precision="fp8"), "QLoRA"),
        (dict(model="Qwen2.5-7B", job="pretrain", precision="bf16"), "unknown job"),
        (dict(model="Qwen2.5-7B", job="inference", precision="bf16", batch=0), "batch"),
        (dict(model="Qwen2.5-7B", job="inference", precision="bf16", context=-1), "context"),
        (dict(model="Qwen2.5-7B", job="lora", precision="bf16", lora_rank=0), "lora_rank"),
    ],
)
def test_bad_requests_give_a_clear_one_line_error(kwargs, words):
    with pytest.raises(FitError) as exc:
        estimate_fit(**kwargs)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_beyond_native_context_the_estimate_mentions_yarn():
    e = estimate_fit("Qwen2.5-7B", "inference", "bf16", context=65536)
    assert any("YaRN" in n for n in e.notes)


@pytest.mark.parametrize("params", [0, -7e9, 1000])
def test_bad_custom_models_are_refused(params):
    with pytest.raises(FitError):
        custom_model(params)


def test_a_model_given_by_parameter_count_lists_its_guesses():
    m = custom_model(13e9)
    assert set(m.guessed) >= {"layers", "hidden", "kv_heads", "vocab"}
    assert m.params == 13_000_000_000
    e = estimate_fit(m, "inference", "bf16")
    assert any("not given, estimated" in n for n in e.notes)
    assert e.breakdown["weights"] == pytest.approx(26.0)
    # the same count with the real shape gives the exact KV cache
    exact = estimate_fit(custom_model(13e9, **LLAMA2_13B), "inference", "bf16", context=4096)
    assert (
        next(p for p in exact.parts if p.name == "kv_cache").bytes == 2 * 40 * 40 * 128 * 2 * 4096
    )


# ------------------------------------------------------------------------------ cards that fit


def test_llama31_70b_bf16_does_not_fit_one_80gb_card_but_fits_two():
    e = estimate_fit("Llama-3.1-70B", "inference", "bf16", context=4096)
    assert e.total_gb > 141
    options = cards_that_fit(e)
    for card in ("h100_sxm", "a100_80gb_sxm", "a100_80gb_pcie", "h100_pcie"):
        assert option(options, card).count == 2, card
    assert option(options, "h200_sxm").count == 2  # 141 GB card, 158 GB needed
    assert option(options, "b200").count == 1


def test_cheapest_first_then_unpriced_then_not_fitting():
    e = estimate_fit("Llama-3.1-70B", "inference", "bf16")
    options = cards_that_fit(e)
    fits = [o for o in options if o.fits]
    priced = [o for o in fits if o.hourly is not None]
    assert priced and priced == fits[: len(priced)]
    assert [o.hourly for o in priced] == sorted(o.hourly for o in priced)
    assert options[: len(fits)] == fits
    not_fitting = [o for o in options if not o.fits]
    assert {o.card for o in not_fitting} == {"t4"}  # 8 × 16 GB is not enough; 8 × 24 GB is
    for o in not_fitting:
        assert o.count is None and o.hourly is None and "does not fit 8×" in o.warnings[0]
    assert len(options) == 21
    fp32 = cards_that_fit(estimate_fit("Llama-3.1-70B", "inference", "fp32"))
    assert {o.card for o in fp32 if not o.fits} >= {"t4", "l4", "a10", "rtx_4090", "rtx_3090"}


def test_hourly_cost_is_for_the_gpu_count_needed():
    e = estimate_fit("Llama-3.1-70B", "inference", "bf16")
    h100 = option(cards_that_fit(e), "h100_sxm")
    assert h100.count == 2 and h100.hourly == Decimal("1.87") * 2  # Vast 1× listing, 2× assumed
    assert h100.quote is not None and h100.quote.row.provider == "vast"


def test_multi_gpu_on_a_card_without_nvlink_is_flagged_pcie_only():
    e = estimate_fit("Llama-3.1-70B", "inference", "bf16")
    options = cards_that_fit(e)
    assert "PCIe only: slower" in option(options, "l40s").warnings
    assert "PCIe only: slower" not in option(options, "h100_sxm").warnings
    assert any("bridge" in w for w in option(options, "a100_80gb_pcie").warnings)
    one = cards_that_fit(estimate_fit("Qwen2.5-7B", "inference", "bf16"))
    assert "PCIe only: slower" not in option(one, "l40s").warnings  # one GPU: no interconnect


def test_tensor_parallel_needs_heads_divisible_by_the_gpu_count():
    e = estimate_fit("Qwen2.5-7B", "inference", "bf16")  # 28 heads
    options = cards_that_fit(e, counts=(8,))
    assert any("28 attention heads" in w for w in option(options, "h100_sxm").warnings)


def test_cards_without_bf16_are_told_to_use_fp16():
    e = estimate_fit("Qwen2.5-3B", "inference", "bf16")
    assert any("no BF16" in w for w in option(cards_that_fit(e), "t4").warnings)


def test_prices_and_currency_are_respected():
    e = estimate_fit("Qwen2.5-7B", "inference", "bf16")
    only_cny = [r for r in load_prices(
        [{"provider": "autodl", "gpu": "RTX 4090", "price_per_gpu_hour": "1.98", "currency": "CNY"}]
    ) if r.user]  # the reference data now has ¥ rows of its own: this one alone
    in_cny = cards_that_fit(e, prices=only_cny, currency="CNY")
    assert in_cny[0].card == "rtx_4090" and in_cny[0].hourly == Decimal("1.98")
    assert all(o.hourly is None for o in in_cny[1:])


def test_fit_option_as_dict():
    e = estimate_fit("Qwen2.5-7B", "qlora", "nf4")
    d = cards_that_fit(e)[0].as_dict()
    assert {"gpu", "count", "usd_per_hour", "provider", "as_of", "interconnect", "warnings"} <= set(
        d
    )


# ------------------------------------------------------------------------------------ properties

_NAMES = sorted(MODELS)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(_NAMES),
    context=st.integers(min_value=1, max_value=32767),  # +1 stays within every model's limit
    batch=st.integers(min_value=1, max_value=64),
    job=st.sampled_from(list(Job)),
)
def test_more_tokens_never_need_less_memory(name, context, batch, job):
    precision = "nf4" if job is Job.QLORA else "bf16"
    e = estimate_fit(name, job, precision, context, batch)
    assert estimate_fit(name, job, precision, context + 1, batch).total_bytes >= e.total_bytes
    assert estimate_fit(name, job, precision, context, batch + 1).total_bytes >= e.total_bytes


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(_NAMES), context=st.integers(min_value=1, max_value=32768))
def test_more_gpus_never_need_more_memory_each(name, context):
    e = estimate_fit(name, "inference", "bf16", context)
    per = [e.bytes_per_gpu(n) for n in (1, 2, 4, 8)]
    assert per == sorted(per, reverse=True)
    assert all(p > CUDA_CONTEXT_BYTES for p in per)


def test_specs_usable_memory_is_what_fit_compares_against():
    specs = load_specs()
    e = estimate_fit("Qwen2.5-7B", "inference", "bf16")
    o = option(cards_that_fit(e, specs=specs), "rtx_4090")
    assert o.usable_gb == specs["rtx_4090"].usable_gb
    assert o.need_gb_per_gpu == e.total_gb == e.total_bytes / GB


def test_the_cheapest_card_is_one_to_rent_on_demand_not_a_spot_listing():
    """Issue 16: the fit's "cheapest at" is the price the catalog's table shows — on demand
    where any provider sells the card so; a spot listing only where nothing else is."""
    from gputui.catalog import load_prices

    rows = load_prices()
    options = cards_that_fit(estimate_fit("Qwen2.5-7B", "inference", "bf16"))
    rtx3090 = option(options, "rtx_3090")
    assert rtx3090.quote is not None and not rtx3090.quote.row.is_spot
    for o in options:
        if o.quote is None:
            continue
        on_demand = [r for r in rows if r.gpu == o.card and not r.is_spot
                     and r.currency == "USD"]
        assert not o.quote.row.is_spot or not on_demand, o.card
