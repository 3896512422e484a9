"""Model shapes (the built-in models and any given by parameter count), number formats
(precisions) and kinds of job: what the fit estimate is computed from."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gputui.i18n import N_, Deferred, _

from .errors import FitError

# --- models -----------------------------------------------------------------------------------


class ModelConfig(BaseModel):
    """The shape of a decoder-only transformer (Llama/Qwen style: GQA attention, SwiGLU MLP)."""

    model_config = ConfigDict(frozen=True)

    name: str
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate: int = Field(ge=1)
    vocab: int = Field(ge=1)
    tied_embeddings: bool = False
    qkv_bias: bool = False
    max_context: int | None = None  # longest context the model supports
    native_context: int | None = None  # beyond it, rope scaling (YaRN) must be switched on
    params_given: int | None = None  # for a model given by parameter count
    published_params: str | None = None  # the model card's figure, for reference
    guessed: tuple[str, ...] = ()  # shape fields not given, estimated (custom models)
    source: str = ""

    def linear_shapes(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of every weight matrix of one layer."""
        h, q, kv, i = (
            self.hidden,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
            self.intermediate,
        )
        return [
            ("q_proj", h, q),
            ("k_proj", h, kv),
            ("v_proj", h, kv),
            ("o_proj", q, h),
            ("gate_proj", h, i),
            ("up_proj", h, i),
            ("down_proj", i, h),
        ]

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def computed_params(self) -> int:
        per_layer = sum(a * b for _, a, b in self.linear_shapes()) + 2 * self.hidden
        if self.qkv_bias:
            per_layer += (self.heads + 2 * self.kv_heads) * self.head_dim
        return self.layers * per_layer + self.embedding_params + self.hidden

    @property
    def params(self) -> int:
        return self.params_given if self.params_given is not None else self.computed_params

    @property
    def embeddings_known(self) -> bool:
        """Whether the embedding/output share of the parameters is known (not guessed)."""
        return not ({"vocab", "hidden"} & set(self.guessed))

    def lora_params(self, rank: int) -> int:
        """LoRA adapter parameters, rank `rank` on all seven projections of every layer."""
        return self.layers * rank * sum(a + b for _, a, b in self.linear_shapes())

    def kv_bytes_per_token(self, bytes_per_value: float) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value


# Shapes from each model's config.json on its Hugging Face model card (Qwen/Qwen2.5-*,
# meta-llama/Llama-3.1-*): hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings; head_dim =
# hidden_size / num_attention_heads. Qwen2.5 has biases on q/k/v. Context limits from the
# model cards (Qwen2.5 ≥7B: 131,072 tokens with YaRN, 32,768 native; Llama 3.1: 128K).
_QWEN = "config.json on the model card (Qwen/Qwen2.5-*, Hugging Face)"
_LLAMA = "config.json on the model card (meta-llama/Llama-3.1-*, Hugging Face)"

MODELS: dict[str, ModelConfig] = {
    m.name.lower(): m
    for m in (
        ModelConfig(
            name="Qwen2.5-0.5B",
            layers=24,
            hidden=896,
            heads=14,
            kv_heads=2,
            head_dim=64,
            intermediate=4864,
            vocab=151936,
            tied_embeddings=True,
            qkv_bias=True,
            max_context=32768,
            published_params="0.49B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Qwen2.5-1.5B",
            layers=28,
            hidden=1536,
            heads=12,
            kv_heads=2,
            head_dim=128,
            intermediate=8960,
            vocab=151936,
            tied_embeddings=True,
            qkv_bias=True,
            max_context=32768,
            published_params="1.54B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Qwen2.5-3B",
            layers=36,
            hidden=2048,
            heads=16,
            kv_heads=2,
            head_dim=128,
            intermediate=11008,
            vocab=151936,
            tied_embeddings=True,
            qkv_bias=True,
            max_context=32768,
            published_params="3.09B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Qwen2.5-7B",
            layers=28,
            hidden=3584,
            heads=28,
            kv_heads=4,
            head_dim=128,
            intermediate=18944,
            vocab=152064,
            qkv_bias=True,
            max_context=131072,
            native_context=32768,
            published_params="7.61B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Qwen2.5-14B",
            layers=48,
            hidden=5120,
            heads=40,
            kv_heads=8,
            head_dim=128,
            intermediate=13824,
            vocab=152064,
            qkv_bias=True,
            max_context=131072,
            native_context=32768,
            published_params="14.7B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Qwen2.5-32B",
            layers=64,
            hidden=5120,
            heads=40,
            kv_heads=8,
            head_dim=128,
            intermediate=27648,
            vocab=152064,
            qkv_bias=True,
            max_context=131072,
            native_context=32768,
            published_params="32.5B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Qwen2.5-72B",
            layers=80,
            hidden=8192,
            heads=64,
            kv_heads=8,
            head_dim=128,
            intermediate=29568,
            vocab=152064,
            qkv_bias=True,
            max_context=131072,
            native_context=32768,
            published_params="72.7B",
            source=_QWEN,
        ),
        ModelConfig(
            name="Llama-3.1-8B",
            layers=32,
            hidden=4096,
            heads=32,
            kv_heads=8,
            head_dim=128,
            intermediate=14336,
            vocab=128256,
            max_context=131072,
            published_params="8.03B",
            source=_LLAMA,
        ),
        ModelConfig(
            name="Llama-3.1-70B",
            layers=80,
            hidden=8192,
            heads=64,
            kv_heads=8,
            head_dim=128,
            intermediate=28672,
            vocab=128256,
            max_context=131072,
            published_params="70.6B",
            source=_LLAMA,
        ),
    )
}


def _model_key(name: str) -> str:
    name = (
        name.strip().lower().rsplit("/", 1)[-1]
    )  # "Qwen/Qwen2.5-7B-Instruct" -> "qwen2.5-7b-instruct"
    name = re.sub(r"\b(meta|instruct|chat|base|hf)\b", " ", name)
    return re.sub(r"[^a-z0-9.]+", "", name).replace(".", "")


_MODEL_KEYS = {_model_key(m.name): m for m in MODELS.values()}


def get_model(name: str) -> ModelConfig:
    """A built-in model by a loose name: 'Qwen2.5-7B', 'qwen2.5:7b', 'meta-llama/Llama-3.1-70B-Instruct'."""
    model = _MODEL_KEYS.get(_model_key(name))
    if model is None:
        known = ", ".join(m.name for m in MODELS.values())
        raise FitError(
            _("unknown model {name}; built in: {known} (or give --params and the shape)").format(
                name=repr(name), known=known)
        )
    return model


def custom_model(
    params: float,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    *,
    heads: int | None = None,
    hidden: int | None = None,
    intermediate: int | None = None,
    vocab: int | None = None,
    max_context: int | None = None,
    name: str | None = None,
) -> ModelConfig:
    """A model given by its parameter count; shape fields not given are estimated and listed in
    `guessed` (and in the estimate's assumptions).

    Guesses: hidden and layers from params ≈ 12·layers·hidden² (GPT rule) with hidden/layers ≈ 128
    (Llama 2 7B/13B: 4096/32, 5120/40); head_dim 128; heads = hidden/head_dim; kv_heads = heads
    (no GQA: the largest KV cache); vocab 128,000; intermediate from the per-layer parameters.
    """
    for field, value in (
        ("params", params),
        ("layers", layers),
        ("kv_heads", kv_heads),
        ("head_dim", head_dim),
        ("heads", heads),
        ("hidden", hidden),
        ("intermediate", intermediate),
        ("vocab", vocab),
        ("max_context", max_context),
    ):
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise FitError(_("{field} must be a positive number (got {value})").format(
                field=field, value=repr(value)))
    n = int(params)
    if n < 1_000_000:
        raise FitError(_("params is the parameter count, e.g. 13e9 for a 13B model (got "
                         "{value})").format(value=repr(params)))
    # the shape fields estimated, by their names (--layers, --kv-heads...: the note lists them)
    guessed: list[str] = []
    guess = guessed.append
    if hidden is None:
        guess("hidden")
        if layers is None:
            hidden = round((128 * n / 12) ** (1 / 3))
        else:
            hidden = round(math.sqrt(n / (12 * layers)))
    if layers is None:
        guess("layers")
        layers = max(1, round(n / (12 * hidden * hidden)))
    if head_dim is None:
        if heads is not None and hidden % heads == 0:
            head_dim = hidden // heads
        else:
            guess("head_dim")
            head_dim = 128
    if heads is None:
        guess("heads")
        heads = max(1, round(hidden / head_dim))
    if kv_heads is None:
        guess("kv_heads")
        kv_heads = heads
    if vocab is None:
        guess("vocab")
        vocab = 128_000
    if intermediate is None:
        guess("intermediate")
        embed = 0 if "vocab" in guessed else 2 * vocab * hidden
        attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        intermediate = max(hidden, round(((n - embed) / layers - attn) / (3 * hidden)))
    return ModelConfig(
        name=name or f"custom {n / 1e9:.3g}B",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        max_context=max_context,
        params_given=n,
        guessed=tuple(guessed),
        source="given by the user",
    )


# --- precisions and jobs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Precision:
    key: str
    label: str
    bits: float  # bits per weight of the quantised tensors
    kind: str  # "float" | "quant" | "gguf"
    quantises_embeddings: bool  # GGUF: whole file; others keep embeddings/output in 16-bit
    why: str

    @property
    def weight_bytes(self) -> float:
        return self.bits / 8


PRECISIONS: dict[str, Precision] = {
    p.key: p
    for p in (
        Precision("fp32", "fp32", 32, "float", True, Deferred(N_("4 bytes per parameter"))),
        Precision("bf16", "bf16", 16, "float", True, Deferred(N_("2 bytes per parameter"))),
        Precision("fp16", "fp16", 16, "float", True, Deferred(N_("2 bytes per parameter"))),
        Precision(
            "fp8",
            "fp8",
            8,
            "quant",
            False,
            Deferred(N_(
                "1 byte per parameter (per-tensor scales negligible); embeddings and output head kept in bf16"
            )),
        ),
        Precision(
            "int8",
            "int8",
            8,
            "quant",
            False,
            Deferred(N_(
                "1 byte per parameter (LLM.int8 / W8A16; scales negligible); embeddings and output head kept in bf16"
            )),
        ),
        Precision(
            "int4",
            "int4",
            4.156,
            "quant",
            False,
            Deferred(N_(
                "4 bits + an fp16 scale and 4-bit zero point per group of 128 (GPTQ/AWQ) = 4.16 bits; "
                "embeddings and output head kept in bf16"
            )),
        ),
        Precision(
            "nf4",
            "nf4",
            4.127,
            "quant",
            False,
            Deferred(N_(
                "4-bit NormalFloat with double quantisation = 4.127 bits (QLoRA paper, Dettmers et al. 2023, §3); "
                "embeddings and output head kept in bf16"
            )),
        ),
        Precision(
            "q4_k_m",
            "GGUF Q4_K_M",
            4.85,
            "gguf",
            True,
            Deferred(N_(
                "4.85 bits per weight over the whole file (llama.cpp's usual Q4_K_M figure)"
            )),
        ),
        Precision(
            "q5_k_m",
            "GGUF Q5_K_M",
            5.69,
            "gguf",
            True,
            Deferred(N_(
                "5.69 bits per weight over the whole file (llama.cpp's usual Q5_K_M figure)"
            )),
        ),
        Precision(
            "q8_0",
            "GGUF Q8_0",
            8.5,
            "gguf",
            True,
            Deferred(N_(
                "8.5 bits per weight: 32 int8 + one fp16 scale per block (llama.cpp Q8_0)"
            )),
        ),
    )
}

_PRECISION_ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "f8": "fp8",
    "fp8e4m3": "fp8",
    "int8": "int8",
    "8bit": "int8",
    "llmint8": "int8",
    "w8a16": "int8",
    "int4": "int4",
    "4bit": "int4",
    "gptq": "int4",
    "awq": "int4",
    "w4a16": "int4",
    "nf4": "nf4",
    "bnb4bit": "nf4",
    "q4km": "q4_k_m",
    "ggufq4km": "q4_k_m",
    "q5km": "q5_k_m",
    "ggufq5km": "q5_k_m",
    "q80": "q8_0",
    "ggufq80": "q8_0",
}


def get_precision(name: str) -> Precision:
    key = _PRECISION_ALIASES.get(re.sub(r"[^a-z0-9]+", "", name.lower()))
    if key is None:
        known = ", ".join(p.label for p in PRECISIONS.values())
        raise FitError(_("unknown precision {name}; one of: {known}").format(name=repr(name),
                                                                             known=known))
    return PRECISIONS[key]


class Job(StrEnum):
    INFERENCE = "inference"
    LORA = "lora"
    QLORA = "qlora"
    FULL = "full"

    @property
    def training(self) -> bool:
        return self is not Job.INFERENCE


_JOB_ALIASES = {
    "inference": Job.INFERENCE,
    "infer": Job.INFERENCE,
    "serve": Job.INFERENCE,
    "serving": Job.INFERENCE,
    "lora": Job.LORA,
    "qlora": Job.QLORA,
    "full": Job.FULL,
    "fullft": Job.FULL,
    "fullfinetune": Job.FULL,
    "fullfinetuning": Job.FULL,
    "finetune": Job.FULL,
    "fft": Job.FULL,
}


def get_job(name: str | Job) -> Job:
    if isinstance(name, Job):
        return name
    job = _JOB_ALIASES.get(re.sub(r"[^a-z]+", "", name.lower()))
    if job is None:
        raise FitError(_("unknown job {name}; one of: inference, lora, qlora, full").format(
            name=repr(name)))
    return job
