"""The models the simulated registry offers, with their real download sizes and layer digests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .common import (
    REGISTRY,
)

# --------------------------------------------------------------------------- the library


@dataclass(frozen=True)
class LibraryModel:
    """One tag of the public library: download size of its GGUF blob and its shape."""

    name: str  # "qwen2.5:7b"
    family: str  # "qwen2" / "llama" (general.architecture)
    parameter_size: str  # as Ollama prints it: "7.6B"
    parameter_count: int
    size: int  # bytes of the model blob (Q4_K_M), as listed on ollama.com
    layers: int  # <arch>.block_count
    embedding: int  # <arch>.embedding_length
    heads: int  # <arch>.attention.head_count
    kv_heads: int  # <arch>.attention.head_count_kv
    context_length: int  # <arch>.context_length
    quantization: str = "Q4_K_M"
    alias_of: str | None = None  # "qwen2.5:latest" is "qwen2.5:7b"

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads

    @property
    def blob(self) -> str:
        return self.alias_of or self.name

    def kv_bytes(self, context: int, parallel: int = 1) -> int:
        """f16 K and V for every layer: 2 x layers x kv_heads x head_dim x 2 bytes per token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2 * context * parallel

    def graph_bytes(self, context: int, parallel: int = 1) -> int:
        """The compute graph's buffers (needed whole on every GPU the model uses)."""
        return context * parallel * self.embedding * 8


def _lib(*rows: tuple[Any, ...]) -> dict[str, LibraryModel]:
    out: dict[str, LibraryModel] = {}
    for row in rows:
        model = LibraryModel(*row)
        out[model.name] = model
    return out


# Download sizes of the default (Q4_K_M) tags as ollama.com lists them (0.5b 398 MB, 1.5b
# 986 MB, 3b 1.9 GB, 7b 4.7 GB, 14b 9.0 GB, 32b 20 GB, 72b 47 GB; llama3.1 8b 4.9 GB, 70b
# 43 GB; llama3.2 1b 1.3 GB, 3b 2.0 GB). Shapes from each model's config.json (the same
# figures as gputui.catalog.fit.MODELS).
LIBRARY: dict[str, LibraryModel] = _lib(
    ("qwen2.5:0.5b", "qwen2", "494.03M", 494_032_768, 397_821_189, 24, 896, 14, 2, 32768),
    ("qwen2.5:1.5b", "qwen2", "1.5B", 1_543_714_304, 986_061_892, 28, 1536, 12, 2, 32768),
    ("qwen2.5:3b", "qwen2", "3.1B", 3_085_938_688, 1_929_912_432, 36, 2048, 16, 2, 32768),
    ("qwen2.5:7b", "qwen2", "7.6B", 7_615_616_512, 4_683_087_332, 28, 3584, 28, 4, 32768),
    ("qwen2.5:14b", "qwen2", "14.8B", 14_770_033_664, 8_988_124_069, 48, 5120, 40, 8, 32768),
    ("qwen2.5:32b", "qwen2", "32.8B", 32_763_876_352, 19_851_349_856, 64, 5120, 40, 8, 32768),
    ("qwen2.5:72b", "qwen2", "72.7B", 72_706_203_648, 47_415_724_378, 80, 8192, 64, 8, 32768),
    ("llama3.1:8b", "llama", "8.0B", 8_030_261_248, 4_920_753_328, 32, 4096, 32, 8, 131072),
    ("llama3.1:70b", "llama", "70.6B", 70_553_706_496, 42_520_413_916, 80, 8192, 64, 8, 131072),
    ("llama3.2:1b", "llama", "1.2B", 1_235_814_400, 1_321_098_329, 16, 2048, 32, 8, 131072),
    ("llama3.2:3b", "llama", "3.2B", 3_212_749_824, 2_019_393_189, 28, 3072, 24, 8, 131072),
)
for _alias, _target in (
    ("qwen2.5:latest", "qwen2.5:7b"),
    ("llama3.1:latest", "llama3.1:8b"),
    ("llama3.2:latest", "llama3.2:3b"),
):
    _t = LIBRARY[_target]
    LIBRARY[_alias] = LibraryModel(
        _alias, _t.family, _t.parameter_size, _t.parameter_count, _t.size, _t.layers,
        _t.embedding, _t.heads, _t.kv_heads, _t.context_length, _t.quantization, _target,
    )

# The small layers every tag has besides the weights: (media type suffix, size in bytes).
_SMALL_LAYERS = (("template", 1482), ("license", 11343), ("system", 68), ("params", 148))


def normalize_name(name: str) -> str:
    """'qwen2.5' -> 'qwen2.5:latest'; 'library/qwen2.5:7b' and
    'registry.ollama.ai/library/qwen2.5:7b' -> 'qwen2.5:7b'."""
    name = name.strip()
    for prefix in (f"{REGISTRY}/library/", f"{REGISTRY}/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def layers_of(model: LibraryModel) -> list[tuple[str, str, int]]:
    """(media type, digest, size) of each layer, the weights first."""
    base = model.blob
    out = [("application/vnd.ollama.image.model", "sha256:" + _sha(f"gguf:{base}"), model.size)]
    for kind, size in _SMALL_LAYERS:
        digest = "sha256:" + _sha(f"{kind}:{model.family}:{base}")
        out.append((f"application/vnd.ollama.image.{kind}", digest, size))
    return out


def manifest_digest(model: LibraryModel) -> str:
    return _sha("manifest:" + model.blob)



def model_details(model: LibraryModel) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": model.family,
        "families": [model.family],
        "parameter_size": model.parameter_size,
        "quantization_level": model.quantization,
    }
