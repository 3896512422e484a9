"""Images: the base images gputui knows (package data, `data/images.toml`, each row dated and
sourced) and a provider's private images, under one readable name — framework, CUDA, Python —
and the loose matching that lets `create --image` take that name instead of an id.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from gputui.catalog.errors import CatalogError
from gputui.i18n import N_, Deferred

# A private image's `status` is not documented (AutoDL): these words mean saved, these failed;
# any other is "still saving", and an entry with no status at all counts as saved once listed.
DONE_WORDS = frozenset({"finished", "success", "succeeded", "done", "completed", "complete",
                        "ready", "available", "normal"})
FAILED_WORDS = frozenset({"failed", "fail", "error", "abnormal"})


@dataclass(frozen=True)
class ImageInfo:
    provider: str
    id: str
    kind: str  # "base" (gputui's table) | "private" (the account's, from the API)
    name: str = ""  # a private image's own name
    framework: str = ""
    framework_version: str = ""
    cuda: str = ""
    python: str = ""
    os: str = ""
    status: str = ""  # a private image: as the API says it (saving, finished...)
    created_at: str = ""
    source: str = ""
    as_of: str = ""

    @property
    def state(self) -> str:
        """"done" (usable), "saving" or "failed"."""
        status = self.status.strip().lower()
        if not status or status in DONE_WORDS:
            return "done"
        return "failed" if status in FAILED_WORDS else "saving"

    @property
    def readable(self) -> str:
        """'PyTorch 2.0.0 · CUDA 11.8 · Python 3.8' (a private image: its own name first)."""
        # names and versions: the same in every language
        parts = [f"{self.framework} {self.framework_version}".strip() if self.framework else "",
                 "CUDA " + self.cuda if self.cuda else "",
                 "Python " + self.python if self.python else ""]
        described = " · ".join(p for p in parts if p)
        if self.kind == "private":
            return f"{self.name or self.id}" + (f" ({described})" if described else "")
        return described or self.id

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "readable": self.readable, "state": self.state}


@cache
def _table() -> tuple[ImageInfo, ...]:
    raw = tomllib.loads(resources.files("gputui.catalog.data").joinpath("images.toml")
                        .read_text(encoding="utf-8"))
    fields = set(ImageInfo.__dataclass_fields__) - {"kind"}
    return tuple(ImageInfo(kind="base", **{k: str(v) for k, v in row.items() if k in fields})
                 for row in raw.get("image", []))


def base_images(provider: str | None = None) -> list[ImageInfo]:
    """The base images of the table (one provider's, or all)."""
    return [i for i in _table() if provider is None or i.provider == provider]


def _norm(text: str) -> str:
    return re.sub(r"[\s·,_()/-]+", " ", text.lower()).replace("python", "py").strip()


def match_image(wanted: str, images: Sequence[ImageInfo]) -> ImageInfo | None:
    """The image `wanted` names: its id, its readable name, or words of it that name one image
    only ('PyTorch 2.0.0', 'pytorch cuda 11.8', a private image's name). None when `wanted`
    looks like an id none of the images has (the provider may know it: it is passed as given).
    Raises `CatalogError` when it names several, or none and is not id-shaped."""
    text = wanted.strip()
    for img in images:
        if text == img.id:
            return img
    n = _norm(text)
    exact = [i for i in images if n in (_norm(i.readable), _norm(i.name or "\0"))]
    if len(exact) == 1:
        return exact[0]
    words = n.split()
    found = [i for i in images if all(w in _norm(f"{i.readable} {i.os} {i.id}").split()
                                      or w in _norm(i.readable) for w in words)]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise CatalogError(Deferred(
            N_("--image: {wanted} names several images: {names}"), wanted=repr(text),
            names="; ".join(i.readable for i in found[:6])))
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{2,127}", text) and " " not in text:
        return None  # an id gputui does not list: the provider decides
    raise CatalogError(Deferred(
        N_("--image: no image is called {wanted} (known: {names})"), wanted=repr(text),
        names="; ".join(i.readable for i in images[:6]) or "-"))


def private_image(provider: str, item: dict[str, Any]) -> ImageInfo | None:
    """A private image as the API lists it. The reference names only `image_uuid` (save's
    answer); the list's other fields are read leniently under their likely names."""
    from gputui.sanitize import sanitize

    def first(*keys: str) -> str:
        for k in keys:
            v = item.get(k)
            if isinstance(v, str | int | float) and not isinstance(v, bool) and str(v).strip():
                return sanitize(str(v), 80)
            if isinstance(v, dict) and v.get("Valid") and isinstance(v.get("Time"), str):
                return sanitize(v["Time"], 40)
        return ""

    image_id = first("image_uuid", "uuid", "id")
    if not image_id:
        return None
    return ImageInfo(provider=provider, id=image_id, kind="private",
                     name=first("image_name", "name"), status=first("status"),
                     created_at=first("created_at"), framework=first("framework"),
                     framework_version=first("framework_version"),
                     cuda=first("cuda_version", "cuda"), python=first("python_version"),
                     source=provider + " API (private images)")


def all_images(provider: str, private: Iterable[ImageInfo] = ()) -> list[ImageInfo]:
    """The account's private images first, then the base images gputui knows."""
    return [*private, *base_images(provider)]


__all__ = ["ImageInfo", "all_images", "base_images", "match_image", "private_image"]
