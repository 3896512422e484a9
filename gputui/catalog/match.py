"""Loose GPU-name matching, as the design states it.

Case, spaces, dashes (and any other punctuation) and the vendor words NVIDIA, GeForce and Tesla
are ignored. An exact match wins (`RTX 4090` is not `RTX 4090 D`); otherwise a name that is the
only one to contain the query wins (`H200`, `A6000`); several → `AmbiguousGpu` listing them;
none → `UnknownGpu` with close suggestions.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

from .errors import AmbiguousGpu, UnknownGpu
from .specs import GpuSpec, load_specs

K = TypeVar("K", bound=Hashable)

_VENDOR = re.compile(r"\b(nvidia|geforce|tesla)\b")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalise(name: str) -> str:
    """'NVIDIA GeForce RTX 4090-D' -> 'rtx4090d'."""
    words = _NON_ALNUM.sub(" ", name.lower())
    return _VENDOR.sub(" ", words).replace(" ", "")


def _resolve(query: str, labelled: Iterable[tuple[str, K]], display: Mapping[K, str]) -> K:
    """Match `query` against labels; each label names a target. Uniqueness is per target."""
    q = normalise(query)
    pairs = [(normalise(label), target) for label, target in labelled]
    if not q:
        raise UnknownGpu(query)
    exact = list(dict.fromkeys(t for n, t in pairs if n == q))
    if len(exact) == 1:
        return exact[0]
    if len(exact) > 1:
        raise AmbiguousGpu(query, sorted(display[t] for t in exact))
    partial = list(dict.fromkeys(t for n, t in pairs if q in n))
    if len(partial) == 1:
        return partial[0]
    if len(partial) > 1:
        raise AmbiguousGpu(query, sorted(display[t] for t in partial))
    by_norm: dict[str, K] = {}
    for n, t in pairs:
        by_norm.setdefault(n, t)
    close = difflib.get_close_matches(q, list(by_norm), n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(display[by_norm[c]] for c in close))[:3]
    raise UnknownGpu(query, suggestions)


def match_gpu(query: str, names: Iterable[str]) -> str:
    """The one name of `names` that `query` means (see the module doc). Returns it as given.

    Names that differ only in case, spacing or vendor words count as one name (the first given).
    Raises `AmbiguousGpu` (listing the candidates) or `UnknownGpu` (with close suggestions).
    """
    names = list(names)
    first: dict[str, str] = {}
    for name in names:
        first.setdefault(normalise(name), name)
    return _resolve(
        query, ((n, first[normalise(n)]) for n in names), {v: v for v in first.values()}
    )


def _card_labels(specs: Mapping[str, GpuSpec]) -> list[tuple[str, str]]:
    labels: list[tuple[str, str]] = []
    for key, spec in specs.items():
        labels.append((key, key))
        labels.append((spec.name, key))
        labels.extend((alias, key) for alias in spec.aliases)
    return labels


def match_card(query: str, specs: Mapping[str, GpuSpec] | None = None) -> GpuSpec:
    """The catalog card `query` means, matched against each card's key, name and aliases."""
    specs = load_specs() if specs is None else specs
    key = _resolve(query, _card_labels(specs), {k: s.name for k, s in specs.items()})
    return specs[key]


def card_for_reported_name(
    nvidia_smi_name: str | None, specs: Mapping[str, GpuSpec] | None = None
) -> GpuSpec | None:
    """The card for a name as nvidia-smi/NVML prints it ('NVIDIA A100-SXM4-80GB'), or None.

    Only exact (normalised) matches against card keys, names and aliases count: a substring
    would map an unlisted card onto a listed one (an 'NVIDIA L40' is not an L40S).
    """
    if not nvidia_smi_name:
        return None
    specs = load_specs() if specs is None else specs
    wanted = normalise(nvidia_smi_name)
    if not wanted:
        return None
    for label, key in _card_labels(specs):
        if normalise(label) == wanted:
            return specs[key]
    return None
