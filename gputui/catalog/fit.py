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
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from gputui.i18n import N_, Deferred, _

from .errors import FitError
from .prices import PriceRow, Quote, cheapest_quote, load_prices
from .shapes import (  # noqa: F401 - re-exported: callers import them from fit
    MODELS,
    PRECISIONS,
    Job,
    ModelConfig,
    Precision,
    custom_model,
    get_job,
    get_model,
    get_precision,
)
from .specs import GIB, GpuSpec, load_specs

GB = 10**9
CUDA_CONTEXT_BYTES = 1 * GIB  # CUDA context + cuBLAS/cuDNN workspaces, per GPU (0.5–1 GiB seen)
FRAGMENTATION = 0.10  # caching-allocator fragmentation and temporary buffers
DEFAULT_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
DEFAULT_LORA_RANK = 16


# --- the estimate -----------------------------------------------------------------------------


class FitPart(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str  # weights, adapters, kv_cache, gradients, optimizer, activations, overhead
    bytes: int = Field(ge=0)
    # English as a string (JSON); a `Deferred` shows itself in the interface language
    assumption: SkipValidation[str]
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
    notes: SkipValidation[tuple[str, ...]] = ()  # English strings (JSON); Deferred: shown()

    def bytes_per_gpu(self, gpus: int = 1) -> int:
        """Memory each of `gpus` GPUs needs: split parts divided, the rest on every GPU, plus
        fragmentation and a CUDA context."""
        if gpus < 1:
            raise FitError(_("GPU count must be ≥ 1 (got {value})").format(value=gpus))
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
            assumption=Deferred(
                N_("runtime: CUDA context and library workspaces {gib} GiB per GPU + {share} of "
                   "the rest for allocator fragmentation and temporary buffers"),
                gib=f"{CUDA_CONTEXT_BYTES / GIB:g}", share=f"{FRAGMENTATION:.0%}",
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
            raise FitError(_("{field} must be a whole number ≥ 1 (got {value})").format(
                field=field, value=repr(value)))
    if kv_cache_bits is not None and kv_cache_bits not in (4, 8, 16, 32):
        raise FitError(_("kv_cache_bits must be 4, 8, 16 or 32 (got {value})").format(
            value=repr(kv_cache_bits)))
    if m.max_context is not None and context > m.max_context:
        raise FitError(_("context {context} tokens is beyond {model}'s limit of {limit} "
                         "tokens").format(context=f"{context:,}", model=m.name,
                                          limit=f"{m.max_context:,}"))

    notes: list[str] = []
    if m.guessed:
        notes.append(Deferred(
            N_("{model}: {fields} not given, estimated (layers {layers}, hidden {hidden}, heads "
               "{heads}, kv_heads {kv_heads}, head_dim {head_dim}, vocab {vocab}); give them for "
               "an exact KV cache and activations"),
            model=m.name, fields=", ".join(m.guessed), layers=m.layers, hidden=m.hidden,
            heads=m.heads, kv_heads=m.kv_heads, head_dim=m.head_dim, vocab=f"{m.vocab:,}",
        ))
    if m.native_context is not None and context > m.native_context:
        notes.append(Deferred(
            N_("beyond {context} tokens {model} needs YaRN rope scaling switched on (see its "
               "model card)"),
            context=f"{m.native_context:,}", model=m.name,
        ))

    # What the job does with the precision asked for.
    if j.training and prec.kind == "gguf":
        raise FitError(_("{precision} is a llama.cpp inference format: it cannot be fine-tuned "
                         "(use qlora or bf16)").format(precision=prec.label))
    if j is Job.FULL and prec.kind != "float":
        raise FitError(_("full fine-tuning trains the weights themselves: use fp32 or bf16/fp16, "
                         "not {precision} (for a 4-bit base use --job qlora)").format(
                             precision=prec.label))
    if j is Job.LORA and prec.key in ("int4", "nf4"):
        notes.append(Deferred(N_("LoRA on a 4-bit base is QLoRA: estimated as QLoRA")))
        j = Job.QLORA
    compute = prec  # the dtype of activations, KV cache and (full FT) gradients
    base = prec  # the dtype the weights are stored in
    if j is Job.QLORA:
        if prec.key not in ("nf4", "int4", "bf16", "fp16", "fp32"):
            raise FitError(_("QLoRA keeps the base in 4-bit NF4 and computes in bf16/fp16: not "
                             "{precision}").format(precision=prec.label))
        base = PRECISIONS["nf4"]
        compute = prec if prec.kind == "float" else PRECISIONS["bf16"]
        if prec.key not in ("nf4", "int4"):
            notes.append(Deferred(
                N_("QLoRA stores the base in NF4 whatever the precision; {precision} is taken as "
                   "the compute type"), precision=prec.label))
    elif prec.kind != "float":
        compute = PRECISIONS["bf16"]
    act_bytes = 4 if compute.key == "fp32" else 2

    params = m.params
    tokens = context * batch
    parts: list[FitPart] = []

    # Weights.
    if base.kind == "float" or base.quantises_embeddings or not m.embeddings_known:
        weights = params * base.weight_bytes
        size = (Deferred(N_("{n} bytes"), n=f"{base.weight_bytes:g}") if base.kind == "float"
                else Deferred(N_("{n} bits"), n=f"{base.bits:g}"))
        text = Deferred(N_("{count} params × {size} ({precision}: {why})"), count=_count(params),
                        size=size, precision=base.label, why=base.why)
        if base.kind != "float" and not base.quantises_embeddings:
            text = Deferred(N_("{text}; embedding share unknown for this model, all parameters "
                               "taken as quantised"), text=text)
    else:
        emb = m.embedding_params
        weights = emb * 2 + (params - emb) * base.weight_bytes
        text = Deferred(
            N_("{layer} layer params × {bits} bits ({precision}: {why}) + {emb} embedding/output "
               "params × 2 bytes"),
            layer=_count(params - emb), bits=f"{base.bits:g}", precision=base.label,
            why=base.why, emb=_count(emb),
        )
    if j is Job.FULL:
        text = Deferred(N_("{text}; the working copy for forward and backward"), text=text)
    if j in (Job.LORA, Job.QLORA):
        text = Deferred(N_("{text} (frozen base)"), text=text)
    parts.append(FitPart(name="weights", bytes=math.ceil(weights), assumption=text, split=True))

    # Adapters, gradients, optimiser states.
    if j in (Job.LORA, Job.QLORA):
        adapters = m.lora_params(lora_rank)
        parts.append(
            FitPart(
                name="adapters",
                bytes=adapters * 4,
                split=True,
                assumption=Deferred(
                    N_("LoRA rank {rank} on q,k,v,o,gate,up,down of every layer: {count} params "
                       "({share} of the model) × 4 bytes (fp32, the PEFT default)"),
                    rank=lora_rank, count=_count(adapters), share=f"{adapters / params:.2%}",
                ),
            )
        )
        parts.append(
            FitPart(
                name="gradients",
                bytes=adapters * 4,
                split=True,
                assumption=Deferred(N_("adapters only: {count} × 4 bytes (fp32); the base is "
                                       "frozen"), count=_count(adapters)),
            )
        )
        parts.append(
            FitPart(
                name="optimizer",
                bytes=adapters * 8,
                split=True,
                assumption=Deferred(N_("Adam m and v for the adapters: {count} × 8 bytes (fp32)"),
                                    count=_count(adapters)),
            )
        )
    elif j is Job.FULL:
        if compute.key == "fp32":
            parts.append(
                FitPart(
                    name="gradients",
                    bytes=params * 4,
                    split=True,
                    assumption=Deferred(N_("{count} × 4 bytes (fp32 gradients)"),
                                        count=_count(params)),
                )
            )
            parts.append(
                FitPart(
                    name="optimizer",
                    bytes=params * 8,
                    split=True,
                    assumption=Deferred(N_("Adam m and v: {count} × 8 bytes (fp32); 4+4+8 = 16 "
                                           "bytes per parameter of model state"),
                                        count=_count(params)),
                )
            )
        else:
            parts.append(
                FitPart(
                    name="gradients",
                    bytes=params * 2,
                    split=True,
                    assumption=Deferred(N_("{count} × 2 bytes ({precision} gradients, mixed "
                                           "precision)"),
                                        count=_count(params), precision=compute.label),
                )
            )
            parts.append(
                FitPart(
                    name="optimizer",
                    bytes=params * 12,
                    split=True,
                    assumption=Deferred(
                        N_("{count} × 12 bytes: fp32 master weights (4) + Adam m (4) + v (4); "
                           "with the 2+2 of weights and gradients, 16 bytes per parameter as in "
                           "the ZeRO paper"), count=_count(params)),
                )
            )
        notes.append(Deferred(
            N_("full fine-tuning with Adam keeps 16 bytes per parameter of model state ({gib}) "
               "before activations: about 8× the bf16 weights. Sharding it over GPUs needs FSDP "
               "or ZeRO-3"), gib=_gib(params * 16)))
    else:
        none = Deferred(N_("none: inference"))
        parts.append(FitPart(name="gradients", bytes=0, split=True, assumption=none))
        parts.append(FitPart(name="optimizer", bytes=0, split=True, assumption=none))

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
                assumption=Deferred(
                    N_("2 × {layers} layers × {kv_heads} kv_heads × {head_dim} head_dim × {bytes} "
                       "bytes × {context} tokens × {batch} = {kib} KiB per token{default}"),
                    layers=m.layers, kv_heads=m.kv_heads, head_dim=m.head_dim, bytes=f"{kv_b:g}",
                    context=f"{context:,}", batch=batch, kib=f"{per_token / 1024:g}",
                    default="" if kv_cache_bits
                    else Deferred(N_(" (KV cache in 16-bit, the engines' default)")),
                ),
            )
        )
    else:
        parts.append(
            FitPart(
                name="kv_cache",
                bytes=0,
                split=True,
                assumption=Deferred(N_("none: training does not keep a KV cache")),
            )
        )

    # Activations.
    h, i = m.hidden, m.intermediate
    if j is Job.INFERENCE:
        act = tokens * (2 * h + 2 * i) * act_bytes + batch * m.vocab * 4
        text = Deferred(
            N_("peak of a prefill of {context} tokens × {batch} at once: hidden states and one "
               "MLP's gate/up outputs (2·{hidden} + 2·{inter} values × {bytes} bytes per token) + "
               "last-token logits in fp32; engines that chunk the prefill need less"),
            context=f"{context:,}", batch=batch, hidden=h, inter=i, bytes=act_bytes,
        )
    else:
        per_layer = 4 * h + 2 * m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim + 4 * i
        logits = tokens * m.vocab * (act_bytes + 4)
        if gradient_checkpointing:
            act = tokens * (m.layers * h + per_layer) * act_bytes + logits
            text = Deferred(
                N_("gradient checkpointing on: each layer's input ({hidden} values/token) kept for "
                   "{layers} layers, plus one layer recomputed ({per_layer} values/token)"),
                hidden=h, layers=m.layers, per_layer=f"{per_layer:,}",
            )
        else:
            act = tokens * m.layers * per_layer * act_bytes + logits
            text = Deferred(
                N_("gradient checkpointing off: every layer keeps {per_layer} values/token for "
                   "backward (norm inputs, q/k/v, attention output, gate/up/product of the MLP; "
                   "FlashAttention, no s² scores; in the manner of Korthikanti et al. 2022)"),
                per_layer=f"{per_layer:,}",
            )
        text = Deferred(
            N_("{text}; × {bytes} bytes × {context} tokens × {batch}; + logits {vocab} × "
               "({bytes}+4 fp32) bytes per token for the loss"),
            text=text, bytes=act_bytes, context=f"{context:,}", batch=batch, vocab=f"{m.vocab:,}",
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
        msg = Deferred(
            N_("LoRA keeps the whole base model in {precision} ({gib} of weights); QLoRA (a 4-bit "
               "NF4 base) would need about {total} GiB in total"),
            precision=prec.label, gib=_gib(weights), total=f"{q.total_gib:.1f}",
        )
        small = 24 * GIB * 0.99
        if estimate.total_bytes > small >= q.total_bytes:
            msg = Deferred(N_("{text}: a {precision} LoRA of {model} does not fit a 24 GiB card, "
                              "QLoRA does"), text=msg, precision=prec.label, model=m.name)
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
    warnings: SkipValidation[tuple[str, ...]] = ()  # English strings (JSON); Deferred: shown()

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
            out.append(Deferred(N_("PCIe only: slower")))
        elif spec.nvlink_kind == "bridge-2gpu":
            out.append(Deferred(
                N_("NVLink bridge only if the host has one fitted (most rentals do not); "
                   "otherwise PCIe: slower")
                if count == 2
                else N_("NVLink bridges join pairs only: PCIe between pairs, slower")
            ))
        if estimate.job is Job.INFERENCE and estimate.heads % count:
            out.append(Deferred(
                N_("{count}-way tensor parallel needs the {heads} attention heads divisible by "
                   "{count} (vLLM refuses): split by layers (pipeline) instead"),
                count=count, heads=estimate.heads,
            ))
    if estimate.precision in ("bf16",) and spec.bf16_tflops == 0:
        out.append(Deferred(N_("no BF16 on this card: run in FP16")))
    if estimate.precision == "fp8" and spec.fp8_tflops == 0:
        out.append(Deferred(N_("no FP8 tensor cores: FP8 weights are computed in 16-bit "
                               "(slower)")))
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
        raise FitError(_("GPU counts must be whole numbers ≥ 1"))
    options = []
    for spec in specs.values():
        usable = spec.usable_bytes
        count = next((c for c in counts if estimate.bytes_per_gpu(c) <= usable), None)
        fits = count is not None
        shown = count if count is not None else counts[-1]
        # what a renter pays for the GPUs the job needs, as the catalog's table: an instance of
        # exactly that many on demand first; an instance sold only bigger (it bills all its GPUs)
        # only where none is; spot only where nothing else is (its tier says so)
        q = (
            cheapest_quote(spec.key, count, rows, currency, include_spot=False,
                           exact_first=True)
            or (cheapest_quote(spec.key, count, rows, currency, exact_first=True)
                if include_spot else None)
            if count is not None
            else None
        )
        warnings = _warnings(estimate, spec, shown, fits)
        if not fits:
            warnings.insert(0, Deferred(
                N_("does not fit {count}×: needs {need} GiB per GPU of {usable} GiB usable"),
                count=shown, need=f"{estimate.gib_per_gpu(shown):.1f}",
                usable=f"{spec.usable_gib:.1f}",
            ))
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
