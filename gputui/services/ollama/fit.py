"""Will a model fit the selected GPUs: the estimate and the check."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gputui.i18n import N_
from gputui.i18n import Deferred as D
from gputui.remote.ollama_client import (
    InstalledModel,
    ModelInfo,
)
from gputui.services.ollama.common import (
    FIT_MARGIN,
    GPU_OVERHEAD_BYTES,
    MIB,
)
from gputui.services.ollama.gpus import (
    GpuInfo,
)

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    weights: int | None  # bytes
    kv: int
    graph: int
    context: int
    parallel: int
    source: str  # "installed" | "catalog" | "unknown"

    @property
    def weights_kv(self) -> int:
        return int(((self.weights or 0) + self.kv) * (1 + FIT_MARGIN))

    @property
    def fixed_per_gpu(self) -> int:
        return self.graph + GPU_OVERHEAD_BYTES

    @property
    def one_gpu(self) -> int:
        return self.weights_kv + self.fixed_per_gpu


def _gb(n: float) -> str:
    """Memory and model sizes, GiB like every GPU figure (format.format_gib)."""
    from gputui.format import format_gib

    return format_gib(n)


def _human(n: float) -> str:
    from gputui.format import format_gib

    return format_gib(n) if n >= 2**30 else f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{int(n)} B"


def _catalog_tag(catalog_name: str) -> str:
    """'Qwen2.5-7B' -> 'qwen2.5:7b'; 'Llama-3.1-70B' -> 'llama3.1:70b'."""
    base, _sep, size = catalog_name.lower().rpartition("-")
    return f"{base.replace('llama-', 'llama')}:{size}"


def estimate_model(
    name: str,
    *,
    installed: InstalledModel | None,
    info: ModelInfo | None,
    context: int,
    parallel: int,
) -> ModelEstimate:
    """Weights + KV cache + graph for `name` at `context` tokens x `parallel` sequences: from
    the server when it knows the model, else from the catalog's estimator."""
    from gputui.catalog.errors import FitError
    from gputui.catalog.fit import estimate_fit, get_model

    catalog = None
    with contextlib.suppress(FitError):
        catalog = get_model(name)
    weights = installed.size if installed is not None else None
    source = "installed" if weights is not None else "unknown"
    kv = info.kv_bytes(context, parallel) if info is not None else None
    embedding = info.embedding if info is not None else None
    if catalog is not None:
        ctx = min(context, catalog.max_context or context)
        if weights is None:
            with contextlib.suppress(FitError):
                est = estimate_fit(catalog, "inference", "q4_k_m", context=ctx)
                weights = next(p.bytes for p in est.parts if p.name == "weights")
                source = "catalog"
        if kv is None:
            kv = int(catalog.kv_bytes_per_token(2) * ctx * parallel)
        if embedding is None:
            embedding = catalog.hidden
    graph = context * parallel * embedding * 8 if embedding else 512 * MIB
    return ModelEstimate(name, weights, kv or 0, graph, context, parallel, source)


FitVerdict = Literal["loaded", "fits", "spread", "spill", "unknown"]


@dataclass(frozen=True)
class FitCheck:
    model: str
    verdict: FitVerdict
    message: str  # a Deferred: English (JSON), shown in the interface language with `shown`
    estimate: ModelEstimate | None = None
    selected: tuple[int, ...] = ()
    gpu: int | None = None  # where it goes when it fits on one
    free_bytes: int = 0  # on the selected GPUs
    would_fit: tuple[str, ...] = ()  # models that would fit the selection instead
    better_selection: tuple[int, ...] | None = None  # GPUs that would hold it

    @property
    def ok(self) -> bool:
        return self.verdict in ("loaded", "fits", "spread", "unknown")

    def as_dict(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "model": self.model, "verdict": self.verdict, "ok": self.ok, "message": self.message,
            "need_bytes": est.one_gpu if est else None,
            "weights_bytes": est.weights if est else None,
            "kv_bytes": est.kv if est else None,
            "context": est.context if est else None,
            "selected": list(self.selected), "gpu": self.gpu, "free_bytes": self.free_bytes,
            "would_fit": list(self.would_fit),
            "better_selection": None if self.better_selection is None
            else list(self.better_selection),
        }


def _fits(est: ModelEstimate, gpus: Sequence[GpuInfo]) -> tuple[str, int | None] | None:
    """('fits', gpu) on the one GPU with most free memory, ('spread', None) over all, else None."""
    if not gpus:
        return None
    best = max(gpus, key=lambda g: g.free_bytes)
    if best.free_bytes >= est.one_gpu:
        return "fits", best.index
    room = sum(max(0, g.free_bytes - est.fixed_per_gpu) for g in gpus)
    if len(gpus) > 1 and room >= est.weights_kv:
        return "spread", None
    return None


def check_fit(
    est: ModelEstimate,
    gpus: Sequence[GpuInfo],
    selected: Sequence[int],
    *,
    loaded: bool = False,
    candidates: Sequence[ModelEstimate] = (),
) -> FitCheck:
    """Will `est` fit the `selected` GPUs' free memory (as Ollama would place it)?"""
    chosen = [g for g in gpus if g.index in selected]
    free = sum(g.free_bytes for g in chosen)
    where: D | str
    if len(chosen) == 1:
        where = D(N_("GPU {index} ({name})"), index=chosen[0].index, name=chosen[0].short_name)
    elif chosen:
        where = D(N_("GPUs {ids}"), ids=",".join(str(g.index) for g in chosen))
    else:
        where = D(N_("the selected GPUs (none visible)"))
    if loaded:
        return FitCheck(est.model, "loaded", D(N_("{model} is loaded already"), model=est.model),
                        est, tuple(selected), free_bytes=free)
    if est.weights is None:
        return FitCheck(est.model, "unknown",
                        D(N_("{model}: size unknown until it is pulled; no fit check"),
                          model=est.model), est, tuple(selected), free_bytes=free)
    need = D(N_("{model} needs about {need} ({weights} weights + {kv} KV cache at {context} "
                "tokens + runtime)"), model=est.model, need=_gb(est.one_gpu),
             weights=_gb(est.weights), kv=_gb(est.kv), context=f"{est.context:,}")
    placed = _fits(est, chosen)
    if placed is not None:
        verdict, gpu = placed
        if verdict == "fits":
            msg = D(N_("{need}: fits on GPU {index}"), need=need, index=gpu)
        else:
            msg = D(N_("{need}: fits spread over GPUs {ids}"), need=need,
                    ids=", ".join(str(g.index) for g in chosen))
        return FitCheck(est.model, verdict, msg, est, tuple(selected), gpu=gpu,  # type: ignore[arg-type]
                        free_bytes=free)
    would = [c.model for c in sorted(candidates, key=lambda c: -(c.weights or 0))
             if c.model != est.model and c.weights is not None and _fits(c, chosen)]
    better: tuple[int, ...] | None = None
    others = [g for g in gpus if g.index not in selected]
    if others and _fits(est, gpus) is not None:
        better = tuple(g.index for g in gpus)
    message = D(N_("{need}, more than the {free} free on {where}; Ollama would put the rest on "
                   "the CPU (very slow) or refuse"), need=need, free=_gb(free), where=where)
    if would:
        message = D(N_("{message}; would fit: {models}"), message=message,
                    models=", ".join(would[:4]))
    if better is not None:
        message = D(N_("{message}; or select GPUs {ids}"), message=message,
                    ids=",".join(str(i) for i in better))
    return FitCheck(est.model, "spill", message, est, tuple(selected),
                    free_bytes=free, would_fit=tuple(would[:4]), better_selection=better)


