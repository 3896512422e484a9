"""Installed models on the instance's disk, where Ollama keeps them (manifests, -partial pulls)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from .common import (
    REGISTRY,
)
from .library import (
    LibraryModel,
    _sha,
    layers_of,
    manifest_digest,
    normalize_name,
)

# --------------------------------------------------------------------------- the model store


class ModelStore:
    """Installed models on disk, in Ollama's layout."""

    def __init__(self, models_dir: Path) -> None:
        self.dir = models_dir

    def manifest_path(self, name: str) -> Path:
        model, _, tag = normalize_name(name).partition(":")
        if "/" not in model:
            model = f"library/{model}"
        return self.dir / "manifests" / REGISTRY / model / tag

    def partial_path(self, digest: str) -> Path:
        return self.dir / "blobs" / (digest.replace(":", "-") + "-partial")

    def installed(self) -> list[tuple[str, dict[str, Any], float]]:
        root = self.dir / "manifests" / REGISTRY
        out: list[tuple[str, dict[str, Any], float]] = []
        if not root.is_dir():
            return out
        for path in root.glob("*/*/*"):
            if not path.is_file() or path.name.startswith("."):
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                mtime = path.stat().st_mtime
            except (OSError, ValueError):
                continue
            namespace, model, tag = path.relative_to(root).parts
            name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
            out.append((name, data, mtime))
        out.sort(key=lambda item: -item[2])
        return out

    def get(self, name: str) -> tuple[dict[str, Any], float] | None:
        path = self.manifest_path(name)
        try:
            return json.loads(path.read_text(encoding="utf-8")), path.stat().st_mtime
        except (OSError, ValueError):
            return None

    def write(self, model: LibraryModel) -> None:
        path = self.manifest_path(model.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        layers = layers_of(model)
        data = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "digest": "sha256:" + _sha("config:" + model.blob),
                "size": 487,
            },
            "layers": [{"mediaType": m, "digest": d, "size": s} for m, d, s in layers],
            "gputui": {"name": model.name, "digest": manifest_digest(model)},
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)

    def delete(self, name: str) -> bool:
        path = self.manifest_path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        with contextlib.suppress(OSError):
            path.parent.rmdir()
        return True

    def partial(self, digest: str) -> int:
        try:
            return int(self.partial_path(digest).read_text(encoding="utf-8").strip() or 0)
        except (OSError, ValueError):
            return 0

    def set_partial(self, digest: str, completed: int | None) -> None:
        path = self.partial_path(digest)
        if completed is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(completed), encoding="utf-8")
