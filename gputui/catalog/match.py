"""Loose GPU-name matching, as the design states it.

A name is read as words: lower case, vendor words (NVIDIA, GeForce, Tesla) dropped, split at
anything that is not a letter or digit *and* where letters meet digits, so 'RTX-4090D' is the
words rtx·4090·d and 'H100 80GB SXM5' is h·100·80·gb·sxm·5. Its *squashed* form is the words run
together ('rtx4090d').

The rule, in order:

1. **Exact**: a name whose squashed form equals the query's wins (`RTX 4090` is not
   `RTX 4090 D`; `A10` is not an `A100`).
2. **Candidates**: the names that contain the query, either as a substring of the squashed form
   (the design's "unique substring", `4090`), or word by word: each word the user typed sits on
   the start of a word of the name (a typed 'H100' on h·100, its last part shortened at most),
   different typed words on different words of the name, in any order — so words may be skipped
   or shortened (`H100 SXM` finds `H100 80GB SXM5`; `A100 SXM 80` finds `A100 80GB SXM4`).
3. **One candidate** wins.
4. **The plain one** wins over its own variants: when one candidate's words are all among the
   words of every other candidate, those others are it plus qualifiers, so the query means it
   (`4090` is the RTX 4090, not the RTX 4090 D (China SKU); type `4090 D` for that one).
   Siblings that differ by a qualifier each (`A100` → 40GB/80GB, SXM4/PCIe; `H100` → SXM5/PCIe)
   have no plain one: the name is refused as ambiguous, listing the candidates.
5. **No candidate**: refused as unknown, with close spellings suggested.

A target (a provider's offer name, a catalog card) may have several labels: a card has its key,
name and aliases; an offer name can be given the labels of its catalog card (`catalog_aliases`).
A target is a candidate if any label is; for rule 4 every matching label of the others counts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from gputui.format import short_gpu

from .errors import AmbiguousGpu, UnknownGpu
from .specs import GpuSpec, load_specs

K = TypeVar("K", bound=Hashable)

_VENDOR = re.compile(r"\b(nvidia|geforce|tesla)\b")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_WORD = re.compile(r"[a-z]+|[0-9]+")


def normalise(name: str) -> str:
    """'NVIDIA GeForce RTX 4090-D' -> 'rtx4090d' (the squashed form)."""
    words = _NON_ALNUM.sub(" ", name.lower())
    return _VENDOR.sub(" ", words).replace(" ", "")


def words(name: str) -> tuple[str, ...]:
    """'NVIDIA GeForce RTX 4090-D' -> ('rtx', '4090', 'd'); 'H100 80GB' -> ('h', '100', '80', 'gb')."""
    text = _VENDOR.sub(" ", _NON_ALNUM.sub(" ", name.lower()))
    return tuple(_WORD.findall(text))


def _runs(name: str) -> tuple[tuple[str, ...], ...]:
    """The words of each run of letters and digits: 'RTX-4090D' -> (('rtx',), ('4090', 'd'))."""
    text = _VENDOR.sub(" ", _NON_ALNUM.sub(" ", name.lower()))
    return tuple(tuple(_WORD.findall(run)) for run in text.split())


def _word_match(query: Sequence[Sequence[str]], label: Sequence[str]) -> bool:
    """Each run of the query sits on consecutive words of the label, its last word shortened
    at most ('h100' on h·100, 'rtx40' on rtx·4090, never h·…·200), runs on different words,
    in any order."""
    spans: list[list[frozenset[int]]] = []
    for run in query:
        k = len(run)
        here = [
            frozenset(range(i, i + k))
            for i in range(len(label) - k + 1)
            if all(label[i + j] == run[j] for j in range(k - 1))
            and label[i + k - 1].startswith(run[-1])
        ]
        if not here:
            return False
        spans.append(here)
    spans.sort(key=len)  # most constrained first

    def place(n: int, used: frozenset[int]) -> bool:
        if n == len(spans):
            return True
        return any(place(n + 1, used | s) for s in spans[n] if not used & s)

    return place(0, frozenset())


class _Label:
    __slots__ = ("runs", "squashed", "words")

    def __init__(self, text: str) -> None:
        self.squashed = normalise(text)
        self.words = words(text)
        self.runs = _runs(text)


def _resolve(query: str, labelled: Iterable[tuple[str, K]], display: Mapping[K, str]) -> K:
    """Match `query` against labels; each label names a target. Uniqueness is per target."""
    q = _Label(query)
    labelled = list(labelled)
    # each label also as the console shows it in a narrow column ('RTX 4090 D CN' for 'GeForce
    # RTX 4090 D (China SKU)'): what a renter reads on Home can be typed back
    labelled += [(short, t) for label, t in labelled
                 if (short := short_gpu(label)) != label and short != "?"]
    pairs = [(_Label(label), target) for label, target in labelled]
    pairs = [(lab, t) for lab, t in pairs if lab.squashed]
    if not q.squashed:
        raise UnknownGpu(query)
    exact = list(dict.fromkeys(t for lab, t in pairs if lab.squashed == q.squashed))
    if len(exact) == 1:
        return exact[0]
    if len(exact) > 1:
        raise AmbiguousGpu(query, sorted(display[t] for t in exact))
    matching: dict[K, list[frozenset[str]]] = {}
    for lab, t in pairs:
        if q.squashed in lab.squashed or _word_match(q.runs, lab.words):
            matching.setdefault(t, []).append(frozenset(lab.words))
    if len(matching) == 1:
        return next(iter(matching))
    if matching:
        plain = [
            t
            for t, sets in matching.items()
            if any(
                all(mine <= theirs for o, others in matching.items() if o != t for theirs in others)
                for mine in sets
            )
        ]
        if len(plain) == 1:
            return plain[0]
        raise AmbiguousGpu(query, sorted(display[t] for t in matching))
    by_norm: dict[str, K] = {}
    for lab, t in pairs:
        by_norm.setdefault(lab.squashed, t)
    close = difflib.get_close_matches(q.squashed, list(by_norm), n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(display[by_norm[c]] for c in close))[:3]
    raise UnknownGpu(query, suggestions)


def match_gpu(
    query: str, names: Iterable[str], aliases: Mapping[str, Iterable[str]] | None = None
) -> str:
    """The one name of `names` that `query` means (see the module doc). Returns it as given.

    `aliases` maps a name to other labels it answers to (see `catalog_aliases`). Names that
    differ only in case, spacing or vendor words count as one name (the first given). Raises
    `AmbiguousGpu` (listing the candidates) or `UnknownGpu` (with close suggestions).
    """
    names = list(names)
    first: dict[str, str] = {}
    for name in names:
        first.setdefault(normalise(name), name)
    labelled: list[tuple[str, str]] = []
    for name in names:
        target = first[normalise(name)]
        labelled.append((name, target))
        for alias in (aliases or {}).get(name, ()):
            labelled.append((alias, target))
    return _resolve(query, labelled, {v: v for v in first.values()})


def catalog_aliases(
    names: Iterable[str], specs: Mapping[str, GpuSpec] | None = None
) -> dict[str, list[str]]:
    """For each name that is a catalog card's (by `card_for_reported_name`), the card's key,
    name and aliases: `match_gpu(q, names, aliases=catalog_aliases(names))` then finds a
    provider's offer by any spelling the catalog knows ('H100 80GB HBM3', 'h100_sxm')."""
    specs = load_specs() if specs is None else specs
    out: dict[str, list[str]] = {}
    for name in names:
        spec = card_for_reported_name(name, specs)
        if spec is not None:
            out[name] = [spec.key, spec.name, *spec.aliases]
    return out


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
