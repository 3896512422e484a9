"""Will my job fit? A GPU-memory estimate with every assumption visible, and the cards it fits.

Units: bytes inside, GiB (2^30 bytes) in every figure shown, as on every other screen (card
capacities are NVIDIA's marketed "GB", which are GiB of physical memory: see
`GpuSpec.usable_bytes`). The JSON keeps its `*_gb` fields (10^9 bytes) for scripts and adds
`*_gib` beside them.

The arithmetic is the standard one:
* weights: parameters × bytes per parameter of the format;
* KV cache (inference): 2 (K and V) × layers × kv_heads × head_dim × bytes × tokens × batch;
* full fine-tuning with Adam in mixed precision: 2 (bf16 weights) + 2 (bf16 gradients)
  + 12 (fp32 master weights, Adam m and v) = 16 bytes per parameter of model state, as in the
  ZeRO paper (Rajbhandari et al. 2020, §3.1);
* LoRA/QLoRA: a frozen base plus small fp32 adapters with their gradients and Adam states;
* activations: the tensors a Llama-style layer saves for backward, counted in the manner of
  Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
  34·s·b·h bytes per GPT layer), with FlashAttention (no s² attention matrix);
* runtime: a CUDA context per GPU and a share for allocator fragmentation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gputui.i18n import _

from .errors import FitError
from .prices import PriceRow, Quote, cheapest_quote, load_prices
from .specs import GIB, GpuSpec, load_specs

GB = 10**9
CUDA_CONTEXT_BYTES = 1 * GIB  # CUDA context + cuBLAS/cuDNN workspaces, per GPU (0.5–1 GiB seen)
FRAGMENTATION = 0.10  # caching-allocator fragmentation and temporary buffers
DEFAULT_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
DEFAULT_LORA_RANK = 16


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
    guessed: list[str] = []
    if hidden is None:
        guessed.append("hidden")
        if layers is None:
            hidden = round((128 * n / 12) ** (1 / 3))
        else:
            hidden = round(math.sqrt(n / (12 * layers)))
    if layers is None:
        guessed.append("layers")
        layers = max(1, round(n / (12 * hidden * hidden)))
    if head_dim is None:
        if heads is not None and hidden % heads == 0:
            head_dim = hidden // heads
        else:
            guessed.append("head_dim")
            head_dim = 128
    if heads is None:
        guessed.append("heads")
        heads = max(1, round(hidden / head_dim))
    if kv_heads is None:
        guessed.append("kv_heads")
        kv_heads = heads
    if vocab is None:
        guessed.append("vocab")
        vocab = 128_000
    if intermediate is None:
        guessed.append("intermediate")
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
        Precision("fp32", "fp32", 32, "float", True, "4 bytes per parameter"),
        Precision("bf16", "bf16", 16, "float", True, "2 bytes per parameter"),
        Precision("fp16", "fp16", 16, "float", True, "2 bytes per parameter"),
        Precision(
            "fp8",
            "fp8",
            8,
            "quant",
            False,
            "1 byte per parameter (per-tensor scales negligible); embeddings and output head kept in bf16",
        ),
        Precision(
            "int8",
            "int8",
            8,
            "quant",
            False,
            "1 byte per parameter (LLM.int8 / W8A16; scales negligible); embeddings and output head kept in bf16",
        ),
        Precision(
            "int4",
            "int4",
            4.156,
            "quant",
            False,
            "4 bits + an fp16 scale and 4-bit zero point per group of 128 (GPTQ/AWQ) = 4.16 bits; "
            "embeddings and output head kept in bf16",
        ),
        Precision(
            "nf4",
            "nf4",
            4.127,
            "quant",
            False,
            "4-bit NormalFloat with double quantisation = 4.127 bits (QLoRA paper, Dettmers et al. 2023, §3); "
            "embeddings and output head kept in bf16",
        ),
        Precision(
            "q4_k_m",
            "GGUF Q4_K_M",
            4.85,
            "gguf",
            True,
            "4.85 bits per weight over the whole file (llama.cpp's usual Q4_K_M figure)",
        ),
        Precision(
            "q5_k_m",
            "GGUF Q5_K_M",
            5.69,
            "gguf",
            True,
            "5.69 bits per weight over the whole file (llama.cpp's usual Q5_K_M figure)",
        ),
        Precision(
            "q8_0",
            "GGUF Q8_0",
            8.5,
            "gguf",
            True,
            "8.5 bits per weight: 32 int8 + one fp16 scale per block (llama.cpp Q8_0)",
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


# --- the estimate -----------------------------------------------------------------------------


class FitPart(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str  # weights, adapters, kv_cache, gradients, optimizer, activations, overhead
    bytes: int = Field(ge=0)
    assumption: str
    split: bool  # divided across GPUs (tensor parallel / sharded), or needed on each GPU

    @property
    def gb(self) -> float:
        return self.bytes / GB

    @property
    def gib(self) -> float:
        return self.bytes / GIB


class FitEstimate(BaseModel):
    """GPU memory one job needs. `parts` excludes the runtime overhead, which depends on the
    GPU count: see `bytes_per_gpu`."""

    model_config = ConfigDict(frozen=True)

    model: str
    params: int
    job: Job
    precision: str
    context: int
    batch: int
    heads: int
    kv_heads: int
    parts: tuple[FitPart, ...]
    notes: tuple[str, ...] = ()

    def bytes_per_gpu(self, gpus: int = 1) -> int:
        """Memory each of `gpus` GPUs needs: split parts divided, the rest on every GPU, plus
        fragmentation and a CUDA context."""
        if gpus < 1:
            raise FitError(f"GPU count must be ≥ 1 (got {gpus})")
        split = sum(p.bytes for p in self.parts if p.split)
        whole = sum(p.bytes for p in self.parts if not p.split)
        return math.ceil((split / gpus + whole) * (1 + FRAGMENTATION) + CUDA_CONTEXT_BYTES)

    def gb_per_gpu(self, gpus: int = 1) -> float:
        return self.bytes_per_gpu(gpus) / GB

    def gib_per_gpu(self, gpus: int = 1) -> float:
        return self.bytes_per_gpu(gpus) / GIB

    @property
    def overhead(self) -> FitPart:
        rest = sum(p.bytes for p in self.parts)
        return FitPart(
            name="overhead",
            bytes=self.bytes_per_gpu(1) - rest,
            assumption=(
                f"runtime: CUDA context and library workspaces {CUDA_CONTEXT_BYTES / GIB:g} GiB per GPU "
                f"+ {FRAGMENTATION:.0%} of the rest for allocator fragmentation and temporary buffers"
            ),
            split=False,
        )

    @property
    def all_parts(self) -> tuple[FitPart, ...]:
        return (*self.parts, self.overhead)

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_gpu(1)

    @property
    def total_gb(self) -> float:
        return self.total_bytes / GB

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    @property
    def breakdown(self) -> dict[str, float]:
        """Part → GB (10^9 bytes) on one GPU (kept for scripts; see breakdown_gib)."""
        return {p.name: round(p.gb, 3) for p in self.all_parts}

    @property
    def breakdown_gib(self) -> dict[str, float]:
        """Part → GiB on one GPU, the unit shown."""
        return {p.name: round(p.gib, 3) for p in self.all_parts}

    @property
    def assumptions(self) -> list[str]:
        return [f"{p.name}: {p.assumption}" for p in self.all_parts]

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "params": self.params,
            "job": self.job.value,
            "precision": self.precision,
            "context": self.context,
            "batch": self.batch,
            "total_gb": round(self.total_gb, 2),
            "total_gib": round(self.total_gib, 2),
            "breakdown": self.breakdown,
            "breakdown_gib": self.breakdown_gib,
            "assumptions": self.assumptions,
            "notes": list(self.notes),
        }


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n < 10 * GIB else f"{n / GIB:.1f} GiB"


def _count(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def estimate_fit(
    model: ModelConfig | str,
    job: Job | str,
    precision: Precision | str,
    context: int = 4096,
    batch: int = 1,
    *,
    lora_rank: int = DEFAULT_LORA_RANK,
    gradient_checkpointing: bool = True,
    kv_cache_bits: int | None = None,
) -> FitEstimate:
    """The memory `job` on `model` needs in `precision` for `context` tokens × `batch` sequences.

    Raises `FitError` on input it cannot answer: an unknown model/job/precision, a context beyond
    the model's limit, a job the format cannot do (training a GGUF file, full fine-tuning 4-bit).
    """
    m = get_model(model) if isinstance(model, str) else model
    j = get_job(job)
    prec = get_precision(precision) if isinstance(precision, str) else precision
    for field, value in (("context", context), ("batch", batch), ("lora_rank", lora_rank)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FitError(f"{field} must be a whole number ≥ 1 (got {value!r})")
    if kv_cache_bits is not None and kv_cache_bits not in (4, 8, 16, 32):
        raise FitError(f"kv_cache_bits must be 4, 8, 16 or 32 (got {kv_cache_bits!r})")
    if m.max_context is not None and context > m.max_context:
        raise FitError(
            f"context {context:,} tokens is beyond {m.name}'s limit of {m.max_context:,} tokens"
        )

    notes: list[str] = []
    if m.guessed:
        notes.append(
            f"{m.name}: {', '.join(m.guessed)} not given, estimated (layers {m.layers}, hidden {m.hidden}, "
            f"heads {m.heads}, kv_heads {m.kv_heads}, head_dim {m.head_dim}, vocab {m.vocab:,}); "
            "give them for an exact KV cache and activations"
        )
    if m.native_context is not None and context > m.native_context:
        notes.append(
            f"beyond {m.native_context:,} tokens {m.name} needs YaRN rope scaling switched on (see its model card)"
        )

    # What the job does with the precision asked for.
    if j.training and prec.kind == "gguf":
        raise FitError(
            f"{prec.label} is a llama.cpp inference format: it cannot be fine-tuned (use qlora or bf16)"
        )
    if j is Job.FULL and prec.kind != "float":
        raise FitError(
            f"full fine-tuning trains the weights themselves: use fp32 or bf16/fp16, not {prec.label} "
            "(for a 4-bit base use --job qlora)"
        )
    if j is Job.LORA and prec.key in ("int4", "nf4"):
        notes.append("LoRA on a 4-bit base is QLoRA: estimated as QLoRA")
        j = Job.QLORA
    compute = prec  # the dtype of activations, KV cache and (full FT) gradients
    base = prec  # the dtype the weights are stored in
    if j is Job.QLORA:
        if prec.key not in ("nf4", "int4", "bf16", "fp16", "fp32"):
            raise FitError(
                f"QLoRA keeps the base in 4-bit NF4 and computes in bf16/fp16: not {prec.label}"
            )
        base = PRECISIONS["nf4"]
        compute = prec if prec.kind == "float" else PRECISIONS["bf16"]
        if prec.key not in ("nf4", "int4"):
            notes.append(
                f"QLoRA stores the base in NF4 whatever the precision; {prec.label} is taken as the compute type"
            )
    elif prec.kind != "float":
        compute = PRECISIONS["bf16"]
    act_bytes = 4 if compute.key == "fp32" else 2

    params = m.params
    tokens = context * batch
    parts: list[FitPart] = []

    # Weights.
    if base.kind == "float" or base.quantises_embeddings or not m.embeddings_known:
        weights = params * base.weight_bytes
        size = f"{base.weight_bytes:g} bytes" if base.kind == "float" else f"{base.bits:g} bits"
        text = f"{_count(params)} params × {size} ({base.label}: {base.why})"
        if base.kind != "float" and not base.quantises_embeddings:
            text += "; embedding share unknown for this model, all parameters taken as quantised"
    else:
        emb = m.embedding_params
        weights = emb * 2 + (params - emb) * base.weight_bytes
        text = (
            f"{_count(params - emb)} layer params × {base.bits:g} bits ({base.label}: {base.why}) "
            f"+ {_count(emb)} embedding/output params × 2 bytes"
        )
    if j is Job.FULL:
        text += "; the working copy for forward and backward"
    if j in (Job.LORA, Job.QLORA):
        text += " (frozen base)"
    parts.append(FitPart(name="weights", bytes=math.ceil(weights), assumption=text, split=True))

    # Adapters, gradients, optimiser states.
    if j in (Job.LORA, Job.QLORA):
        adapters = m.lora_params(lora_rank)
        parts.append(
            FitPart(
                name="adapters",
                bytes=adapters * 4,
                split=True,
                assumption=(
                    f"LoRA rank {lora_rank} on q,k,v,o,gate,up,down of every layer: {_count(adapters)} params "
                    f"({adapters / params:.2%} of the model) × 4 bytes (fp32, the PEFT default)"
                ),
            )
        )
        parts.append(
            FitPart(
                name="gradients",
                bytes=adapters * 4,
                split=True,
                assumption=f"adapters only: {_count(adapters)} × 4 bytes (fp32); the base is frozen",
            )
        )
        parts.append(
            FitPart(
                name="optimizer",
                bytes=adapters * 8,
                split=True,
                assumption=f"Adam m and v for the adapters: {_count(adapters)} × 8 bytes (fp32)",
            )
        )
    elif j is Job.FULL:
        if compute.key == "fp32":
            parts.append(
                FitPart(
                    name="gradients",
                    bytes=params * 4,
                    split=True,
                    assumption=f"{_count(params)} × 4 bytes (fp32 gradients)",
                )
            )
            parts.append(
                FitPart(
                    name="optimizer",
                    bytes=params * 8,
                    split=True,
                    assumption=f"Adam m and v: {_count(params)} × 8 bytes (fp32); "
                    "4+4+8 = 16 bytes per parameter of model state",
                )
            )
        else:
            parts.append(
                FitPart(
                    name="gradients",
                    bytes=params * 2,
                    split=True,
                    assumption=f"{_count(params)} × 2 bytes ({compute.label} gradients, mixed precision)",
                )
            )
            parts.append(
                FitPart(
                    name="optimizer",
                    bytes=params * 12,
                    split=True,
                    assumption=(
                        f"{_count(params)} × 12 bytes: fp32 master weights (4) + Adam m (4) + v (4); with the "
                        "2+2 of weights and gradients, 16 bytes per parameter as in the ZeRO paper"
                    ),
                )
            )
        notes.append(
            f"full fine-tuning with Adam keeps 16 bytes per parameter of model state ({_gib(params * 16)}) "
            "before activations: about 8× the bf16 weights. Sharding it over GPUs needs FSDP or ZeRO-3"
        )
    else:
        parts.append(FitPart(name="gradients", bytes=0, split=True, assumption="none: inference"))
        parts.append(FitPart(name="optimizer", bytes=0, split=True, assumption="none: inference"))

    # KV cache.
    if j is Job.INFERENCE:
        kv_b = kv_cache_bits / 8 if kv_cache_bits else (4 if compute.key == "fp32" else 2)
        per_token = m.kv_bytes_per_token(kv_b)
        kv = math.ceil(per_token * tokens)
        parts.append(
            FitPart(
                name="kv_cache",
                bytes=kv,
                split=True,
                assumption=(
                    f"2 × {m.layers} layers × {m.kv_heads} kv_heads × {m.head_dim} head_dim × {kv_b:g} bytes "
                    f"× {context:,} tokens × {batch} = {per_token / 1024:g} KiB per token"
                    + ("" if kv_cache_bits else " (KV cache in 16-bit, the engines' default)")
                ),
            )
        )
    else:
        parts.append(
            FitPart(
                name="kv_cache",
                bytes=0,
                split=True,
                assumption="none: training does not keep a KV cache",
            )
        )

    # Activations.
    h, i = m.hidden, m.intermediate
    if j is Job.INFERENCE:
        act = tokens * (2 * h + 2 * i) * act_bytes + batch * m.vocab * 4
        text = (
            f"peak of a prefill of {context:,} tokens × {batch} at once: hidden states and one MLP's gate/up "
            f"outputs (2·{h} + 2·{i} values × {act_bytes} bytes per token) + last-token logits in fp32; "
            "engines that chunk the prefill need less"
        )
    else:
        per_layer = 4 * h + 2 * m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim + 4 * i
        logits = tokens * m.vocab * (act_bytes + 4)
        if gradient_checkpointing:
            act = tokens * (m.layers * h + per_layer) * act_bytes + logits
            text = (
                f"gradient checkpointing on: each layer's input ({h} values/token) kept for {m.layers} layers, "
                f"plus one layer recomputed ({per_layer:,} values/token)"
            )
        else:
            act = tokens * m.layers * per_layer * act_bytes + logits
            text = (
                f"gradient checkpointing off: every layer keeps {per_layer:,} values/token for backward "
                "(norm inputs, q/k/v, attention output, gate/up/product of the MLP; FlashAttention, no s² "
                "scores; in the manner of Korthikanti et al. 2022)"
            )
        text += (
            f"; × {act_bytes} bytes × {context:,} tokens × {batch}; + logits {m.vocab:,} × "
            f"({act_bytes}+4 fp32) bytes per token for the loss"
        )
    parts.append(FitPart(name="activations", bytes=math.ceil(act), assumption=text, split=False))

    estimate = FitEstimate(
        model=m.name,
        params=params,
        job=j,
        precision=(base.label if j is Job.QLORA else prec.label),
        context=context,
        batch=batch,
        heads=m.heads,
        kv_heads=m.kv_heads,
        parts=tuple(parts),
        notes=tuple(notes),
    )

    # Where a common rule of thumb misleads, say so.
    if j is Job.LORA and prec.kind == "float":
        q = estimate_fit(
            m,
            Job.QLORA,
            "nf4",
            context,
            batch,
            lora_rank=lora_rank,
            gradient_checkpointing=gradient_checkpointing,
        )
        msg = (
            f"LoRA keeps the whole base model in {prec.label} ({_gib(weights)} of weights); "
            f"QLoRA (a 4-bit NF4 base) would need about {q.total_gib:.1f} GiB in total"
        )
        small = 24 * GIB * 0.99
        if estimate.total_bytes > small >= q.total_bytes:
            msg += f": a {prec.label} LoRA of {m.name} does not fit a 24 GiB card, QLoRA does"
        estimate = estimate.model_copy(update={"notes": (*estimate.notes, msg)})
    return estimate


# --- which cards -------------------------------------------------------------------------------


class FitOption(BaseModel):
    """One card for an estimate: how many GPUs it takes and what that costs per hour."""

    model_config = ConfigDict(frozen=True)

    card: str
    name: str
    vram_gb: float
    usable_gb: float  # per GPU, GB
    fits: bool
    count: int | None  # GPUs needed; None when even the largest count does not fit
    need_gb_per_gpu: float  # at `count`, or at the largest count tried when it does not fit
    hourly: Decimal | None  # the instance of `count` GPUs, cheapest known price
    quote: Quote | None
    interconnect: str
    warnings: tuple[str, ...] = ()

    @property
    def provider(self) -> str | None:
        return self.quote.row.provider if self.quote else None

    @property
    def need_gib_per_gpu(self) -> float:
        return self.need_gb_per_gpu * GB / GIB

    @property
    def usable_gib(self) -> float:
        return self.usable_gb * GB / GIB

    def as_dict(self) -> dict[str, object]:
        return {
            "gpu": self.name,
            "card": self.card,
            "count": self.count,
            "fits": self.fits,
            "need_gb_per_gpu": round(self.need_gb_per_gpu, 2),
            "usable_gb_per_gpu": round(self.usable_gb, 2),
            "need_gib_per_gpu": round(self.need_gib_per_gpu, 2),
            "usable_gib_per_gpu": round(self.usable_gib, 2),
            "usd_per_hour": None if self.hourly is None else str(self.hourly),
            "provider": self.provider,
            "tier": self.quote.row.tier if self.quote else None,
            "as_of": self.quote.row.as_of if self.quote else None,
            "interconnect": self.interconnect,
            "warnings": list(self.warnings),
        }


def _warnings(estimate: FitEstimate, spec: GpuSpec, count: int, fits: bool) -> list[str]:
    out: list[str] = []
    if fits and count > 1:
        if not spec.has_nvlink:
            out.append("PCIe only: slower")
        elif spec.nvlink_kind == "bridge-2gpu":
            out.append(
                "NVLink bridge only if the host has one fitted (most rentals do not); otherwise PCIe: slower"
                if count == 2
                else "NVLink bridges join pairs only: PCIe between pairs, slower"
            )
        if estimate.job is Job.INFERENCE and estimate.heads % count:
            out.append(
                f"{count}-way tensor parallel needs the {estimate.heads} attention heads divisible by {count} "
                "(vLLM refuses): split by layers (pipeline) instead"
            )
    if estimate.precision in ("bf16",) and spec.bf16_tflops == 0:
        out.append("no BF16 on this card: run in FP16")
    if estimate.precision == "fp8" and spec.fp8_tflops == 0:
        out.append("no FP8 tensor cores: FP8 weights are computed in 16-bit (slower)")
    return out


def cards_that_fit(
    estimate: FitEstimate,
    specs: Mapping[str, GpuSpec] | None = None,
    prices: Iterable[PriceRow] | None = None,
    counts: Sequence[int] = DEFAULT_COUNTS,
    currency: str = "USD",
    include_spot: bool = True,
) -> list[FitOption]:
    """Every card with the fewest GPUs (of `counts`) the estimate fits on, and the cheapest known
    hourly price of that many; cheapest first, then fitting cards without a price, then cards
    that do not fit even the largest count."""
    specs = load_specs() if specs is None else specs
    rows = load_prices() if prices is None else list(prices)
    counts = sorted(set(counts))
    if not counts or counts[0] < 1:
        raise FitError("GPU counts must be whole numbers ≥ 1")
    options = []
    for spec in specs.values():
        usable = spec.usable_bytes
        count = next((c for c in counts if estimate.bytes_per_gpu(c) <= usable), None)
        fits = count is not None
        shown = count if count is not None else counts[-1]
        # an on-demand price first, as the catalog's table: spot only where nothing else is
        # (its tier says so in the "cheapest at" column)
        q = (
            cheapest_quote(spec.key, count, rows, currency, include_spot=False)
            or (cheapest_quote(spec.key, count, rows, currency) if include_spot else None)
            if count is not None
            else None
        )
        warnings = _warnings(estimate, spec, shown, fits)
        if not fits:
            warnings.insert(
                0,
                f"does not fit {shown}×: needs {estimate.gib_per_gpu(shown):.1f} GiB per GPU "
                f"of {spec.usable_gib:.1f} GiB usable",
            )
        elif q is not None and q.note:
            warnings.append(q.note)
        options.append(
            FitOption(
                card=spec.key,
                name=spec.name,
                vram_gb=spec.vram_gb,
                usable_gb=spec.usable_gb,
                fits=fits,
                count=count,
                need_gb_per_gpu=estimate.gb_per_gpu(shown),
                hourly=q.per_hour if q else None,
                quote=q,
                interconnect=spec.interconnect,
                warnings=tuple(warnings),
            )
        )

    def order(o: FitOption) -> tuple[object, ...]:
        if not o.fits:
            return (2, 0, -o.usable_gb, o.name)
        if o.hourly is None:
            return (1, o.count, -o.usable_gb, o.name)
        return (0, o.hourly, o.count, o.name)

    return sorted(options, key=order)
