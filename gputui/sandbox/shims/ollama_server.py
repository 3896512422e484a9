"""`ollama serve` on a sandbox instance: a small server speaking the real Ollama HTTP API.

Stdlib only (http.server + json), so it starts fast. It implements what gputui and the
`ollama` CLI use, with the shapes of Ollama's docs/api.md:

    GET  /                 "Ollama is running"
    GET  /api/version      {"version": "0.6.5"}
    GET  /api/tags         installed models
    GET  /api/ps           loaded models (size, size_vram, expires_at, context_length)
    POST /api/show         details, model_info (404 when not installed)
    POST /api/pull         streamed progress lines {"status","digest","total","completed"};
                           an unknown model gives {"error": ...} in the stream at HTTP 200
    DELETE /api/delete     200, or 404 {"error": "model 'x' not found"}
    POST /api/generate     empty prompt: load (keep_alive) / unload (keep_alive 0); with a
                           prompt, a short canned reply
    POST /api/chat         the same with "messages"

Models live where Ollama keeps them (``$OLLAMA_MODELS`` or ``~/.ollama/models``: manifests
under ``manifests/registry.ollama.ai/library/<name>/<tag>``); blobs are not written, only a
small ``-partial`` record while a pull is under way, so a cancelled pull resumes.

A loaded model takes memory on the GPUs that ``CUDA_VISIBLE_DEVICES`` allows (indices or
GPU UUIDs), registered as a GPU process of this server's PID in ``.sandbox/procs`` so the
sandbox ``nvidia-smi`` shows it. Placement follows Ollama's scheduler: the one GPU with the
most free memory when the model fits there, else spread over every visible GPU in proportion
to free memory (``OLLAMA_SCHED_SPREAD=1`` always spreads), else partly on the CPU when the
simulated host memory allows, else Ollama's error ("model requires more system memory ...").

Sandbox-only knobs (environment of the server): ``GPUTUI_SANDBOX_RAM_GIB`` (host memory for
CPU offload, default 16), ``GPUTUI_SANDBOX_OLLAMA_TIME_SCALE`` (multiplies the simulated pull
and load times; 0 makes them instant).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from .gpu_load import visible_gpus
from .ollama_shim import VERSION, human_bytes, parse_host, sandbox_port
from .state import (
    GpuUse,
    InstanceSpec,
    ProcRecord,
    SandboxStateError,
    enforce_power,
    instance_file,
    live_processes,
    load_instance,
    locked,
    memory_free_mib,
    power_file,
    power_state,
    proc_start_time,
    procs_dir,
    register_process,
    root_from_env,
    unregister_process,
)

MARKER = "ollama_server"  # in our /proc/<pid>/cmdline (python -m ...sandbox.shims.ollama_server)
MIB = 1 << 20
GIB = 1 << 30
GPU_OVERHEAD_BYTES = 256 * MIB  # per GPU a model uses: CUDA context, cuBLAS workspace
DEFAULT_CONTEXT = 4096
DEFAULT_KEEP_ALIVE_S = 300.0
FOREVER_S = 292 * 365 * 86400.0  # Go's maximum duration, as Ollama reports "forever"
DEFAULT_RAM_GIB = 16.0
TICK_S = 0.25
REGISTRY = "registry.ollama.ai"


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


# --------------------------------------------------------------------------- helpers


def parse_duration(value: Any, default: float) -> float:
    """keep_alive: a number of seconds, or a Go duration ("5m", "1h30m", "-1", "0").
    Negative means forever."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        for unit in ("ns", "us", "µs", "ms", "s", "m", "h"):
            if text.startswith(unit, i) and number:
                total += float(number) * units[unit]
                number = ""
                i += len(unit)
                break
        else:
            raise ValueError(f"time: invalid duration {value!r}")
    if number:
        raise ValueError(f"time: missing unit in duration {value!r}")
    return sign * total


def human_gib(n: float) -> str:
    """Ollama's HumanBytes2 (binary units), as in its memory errors: '25.7 GiB'."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.1f} MiB"


def _now_local() -> datetime:
    return datetime.now().astimezone()


def _iso(dt: datetime) -> str:
    return dt.isoformat()


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


def model_details(model: LibraryModel) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": model.family,
        "families": [model.family],
        "parameter_size": model.parameter_size,
        "quantization_level": model.quantization,
    }


# --------------------------------------------------------------------------- placement


class LoadRefused(Exception):
    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Placement:
    gpus: dict[int, int]  # GPU index -> bytes
    cpu: int  # bytes left in host memory

    @property
    def vram(self) -> int:
        return sum(self.gpus.values())

    @property
    def total(self) -> int:
        return self.vram + self.cpu


def place(
    weights_kv: int, graph: int, free: list[tuple[int, int]], *, spread: bool, ram_free: int
) -> Placement:
    """Where a model of `weights_kv` bytes (+ `graph` per GPU) goes, given (GPU index, free
    bytes) of the visible GPUs, most free first."""
    fixed = GPU_OVERHEAD_BYTES + graph
    order = sorted(free, key=lambda item: -item[1])
    if order and not spread and order[0][1] >= weights_kv + fixed:
        return Placement({order[0][0]: weights_kv + fixed}, 0)
    usable = [(index, room - fixed) for index, room in order if room - fixed > 0]
    capacity = sum(room for _, room in usable)
    if usable and capacity >= weights_kv:
        parts: dict[int, int] = {}
        left = weights_kv
        for n, (index, room) in enumerate(usable):
            share = left if n == len(usable) - 1 else min(room, weights_kv * room // capacity)
            parts[index] = share + fixed
            left -= share
        return Placement(parts, 0)
    on_gpu = {index: room + fixed for index, room in usable}
    cpu = weights_kv - capacity if usable else weights_kv + graph
    if cpu > ram_free:
        raise LoadRefused(
            f"model requires more system memory ({human_gib(cpu)}) than is available "
            f"({human_gib(max(0, ram_free))})"
        )
    return Placement(on_gpu, cpu)


# --------------------------------------------------------------------------- the server state


@dataclass
class Loaded:
    model: LibraryModel
    name: str
    digest: str
    placement: Placement
    context: int
    expires_at: float  # unix time
    loaded_at: float = field(default_factory=time.time)


class OllamaState:
    """Everything the handlers share. One lock for the loaded models."""

    def __init__(self, root: Path | None, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.lock = threading.RLock()
        self.loaded: dict[str, Loaded] = {}
        models_dir = env.get("OLLAMA_MODELS") or os.path.join(
            os.path.expanduser("~"), ".ollama", "models"
        )
        self.store = ModelStore(Path(models_dir))
        self.pid = os.getpid()
        self.started_at = time.time()
        self.spec: InstanceSpec | None = load_instance(root) if root is not None else None
        self.time_scale = _float(env.get("GPUTUI_SANDBOX_OLLAMA_TIME_SCALE"), 1.0)
        self.ram_bytes = int(_float(env.get("GPUTUI_SANDBOX_RAM_GIB"), DEFAULT_RAM_GIB) * GIB)
        self.stopping = threading.Event()
        self.pulls: dict[str, threading.Lock] = {}

    # -- settings ------------------------------------------------------------------------------
    @property
    def context(self) -> int:
        return max(256, int(_float(self.env.get("OLLAMA_CONTEXT_LENGTH"), DEFAULT_CONTEXT)))

    @property
    def parallel(self) -> int:
        return max(1, int(_float(self.env.get("OLLAMA_NUM_PARALLEL"), 1)))

    @property
    def keep_alive(self) -> float:
        try:
            return parse_duration(self.env.get("OLLAMA_KEEP_ALIVE"), DEFAULT_KEEP_ALIVE_S)
        except ValueError:
            return DEFAULT_KEEP_ALIVE_S

    @property
    def spread(self) -> bool:
        return self.env.get("OLLAMA_SCHED_SPREAD", "").strip().lower() in ("1", "true", "yes")

    def pull_lock(self, name: str) -> threading.Lock:
        with self.lock:
            return self.pulls.setdefault(name, threading.Lock())

    # -- the GPU process record ----------------------------------------------------------------
    def _record(self) -> ProcRecord:
        gpus: dict[int, int] = {}
        for item in self.loaded.values():
            for index, size in item.placement.gpus.items():
                gpus[index] = gpus.get(index, 0) + size
        name = str(self.root / "bin" / "ollama") if self.root else "ollama"
        return ProcRecord(
            pid=self.pid,
            name=name,
            kind="ollama",
            started_at=self.started_at,
            gpus={i: GpuUse(math.ceil(b / MIB), 0.0) for i, b in sorted(gpus.items())},
            marker=MARKER,
            proc_start=proc_start_time(self.pid),
        )

    def publish(self) -> None:
        """Write this server's GPU memory to .sandbox/procs/<pid>.json (caller holds locks)."""
        if self.root is not None:
            register_process(self.root, self._record())

    def unregister(self) -> None:
        if self.root is not None:
            unregister_process(self.root, self.pid)

    # -- loading -------------------------------------------------------------------------------
    def visible(self) -> list[int]:
        if self.spec is None:
            return []
        gpus = visible_gpus(self.spec, self.env.get("CUDA_VISIBLE_DEVICES"))
        return [g.index for g in gpus]

    def load(self, name: str, keep_alive: float, context: int | None = None) -> Loaded:
        name = normalize_name(name)
        model = LIBRARY.get(name)
        if model is None or self.store.get(name) is None:
            raise LoadRefused(f"model '{name}' not found", 404)
        ctx = context or self.context
        ctx = min(ctx, model.context_length)
        with self.lock:
            current = self.loaded.get(name)
            if current is not None and current.context == ctx:
                current.expires_at = _expiry(keep_alive)
                return current
            if current is not None:
                self._unload_locked(name)
            weights_kv = model.size + model.kv_bytes(ctx, self.parallel)
            graph = model.graph_bytes(ctx, self.parallel)
            if self.root is not None and self.spec is not None:
                with locked(self.root):
                    procs = live_processes(self.root)
                    visible = self.visible()
                    free = [
                        (g.index, memory_free_mib(g, procs) * MIB)
                        for g in self.spec.gpus
                        if g.index in visible
                    ]
                    ram_free = self.ram_bytes - sum(x.placement.cpu for x in self.loaded.values())
                    placement = place(weights_kv, graph, free, spread=self.spread,
                                      ram_free=ram_free)
                    item = Loaded(model, name, manifest_digest(model), placement, ctx,
                                  _expiry(keep_alive))
                    self.loaded[name] = item
                    self.publish()
            else:
                placement = place(weights_kv, graph, [], spread=False, ram_free=self.ram_bytes)
                item = Loaded(model, name, manifest_digest(model), placement, ctx,
                              _expiry(keep_alive))
                self.loaded[name] = item
            log("INFO", "server.go", f'new model will fit in available VRAM: "{name}" '
                f'gpus="{sorted(placement.gpus)}" size="{human_gib(placement.total)}" '
                f'vram="{human_gib(placement.vram)}" cpu="{human_gib(placement.cpu)}"')
        self.sleep(min(0.6, 0.05 + model.size / 1e9 * 0.01))
        return item

    def _unload_locked(self, name: str) -> bool:
        item = self.loaded.pop(name, None)
        if item is None:
            return False
        if self.root is not None:
            with locked(self.root):
                self.publish()
        return True

    def unload(self, name: str) -> bool:
        with self.lock:
            return self._unload_locked(normalize_name(name))

    def expire(self, now: float) -> None:
        with self.lock:
            for name in [n for n, item in self.loaded.items() if item.expires_at <= now]:
                self._unload_locked(name)

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self.time_scale > 0:
            time.sleep(seconds * self.time_scale)


def _float(value: str | None, default: float) -> float:
    try:
        return float(value) if value not in (None, "") else default
    except ValueError:
        return default


def _expiry(keep_alive: float) -> float:
    return time.time() + (FOREVER_S if keep_alive < 0 else keep_alive)


def log(level: str, source: str, msg: str) -> None:
    stamp = datetime.now().astimezone().isoformat(timespec="milliseconds")
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"time={stamp} level={level} source={source} msg={json.dumps(msg)}\n")
        sys.stderr.flush()


# --------------------------------------------------------------------------- HTTP


class _ClientGone(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ollama"
    sys_version = ""
    state: OllamaState  # set on the subclass made by make_server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # Ollama logs its own way (see log())

    # -- plumbing ------------------------------------------------------------------------------
    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            self._json({"error": f"invalid character in request body: {exc.msg}"}, 400)
            return None
        if not isinstance(data, dict):
            self._json({"error": "json: cannot unmarshal into Go value of type api.Request"}, 400)
            return None
        return data

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Date", self.date_time_string())
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any, status: int = 200) -> None:
        self._send(status, json.dumps(data).encode(), "application/json; charset=utf-8")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Date", self.date_time_string())
        self.end_headers()

    def _chunk(self, data: dict[str, Any]) -> None:
        payload = json.dumps(data).encode() + b"\n"
        try:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise _ClientGone() from exc

    def _end_stream(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _not_found(self) -> None:
        self._send(404, b"404 page not found", "text/plain")

    @staticmethod
    def _model_name(body: dict[str, Any]) -> str:
        return str(body.get("model") or body.get("name") or "").strip()

    # -- routes --------------------------------------------------------------------------------
    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        if self.path in ("/", "/api/version"):
            self._send(200, b"", "text/plain; charset=utf-8")
        else:
            self._not_found()

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/":
            self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
        elif self.path == "/api/version":
            self._json({"version": VERSION})
        elif self.path == "/api/tags":
            self._json({"models": self._tags()})
        elif self.path == "/api/ps":
            self._json({"models": self._ps()})
        else:
            self._not_found()

    def do_POST(self) -> None:  # noqa: N802
        routes = {
            "/api/show": self._show,
            "/api/pull": self._pull,
            "/api/generate": self._generate,
            "/api/chat": self._chat,
        }
        route = routes.get(self.path)
        if route is None:
            self._not_found()
            return
        body = self._body()
        if body is not None:
            try:
                route(body)
            except _ClientGone:
                self.close_connection = True

    def do_DELETE(self) -> None:  # noqa: N802
        if self.path != "/api/delete":
            self._not_found()
            return
        body = self._body()
        if body is None:
            return
        name = self._model_name(body)
        if not name:
            self._json({"error": "model is required"}, 400)
            return
        full = normalize_name(name)
        self.state.unload(full)
        if not self.state.store.delete(full):
            self._json({"error": f"model '{name}' not found"}, 404)
            return
        log("INFO", "images.go", f"deleted model {full}")
        self._send(200, b"", "text/plain; charset=utf-8")

    # -- handlers ------------------------------------------------------------------------------
    def _tags(self) -> list[dict[str, Any]]:
        out = []
        for name, data, mtime in self.state.store.installed():
            model = LIBRARY.get(name)
            size = sum(int(layer.get("size", 0)) for layer in data.get("layers", []))
            digest = data.get("gputui", {}).get("digest") or _sha(json.dumps(data))
            details = model_details(model) if model else {"format": "gguf", "family": ""}
            out.append({
                "name": name,
                "model": name,
                "modified_at": _iso(datetime.fromtimestamp(mtime).astimezone()),
                "size": size,
                "digest": digest,
                "details": details,
            })
        return out

    def _ps(self) -> list[dict[str, Any]]:
        out = []
        with self.state.lock:
            items = sorted(self.state.loaded.values(), key=lambda x: -x.loaded_at)
            for item in items:
                expires = datetime.fromtimestamp(min(item.expires_at, 1e10)).astimezone()
                out.append({
                    "name": item.name,
                    "model": item.name,
                    "size": item.placement.total,
                    "digest": item.digest,
                    "details": model_details(item.model),
                    "expires_at": _iso(expires),
                    "size_vram": item.placement.vram,
                    "context_length": item.context,
                })
        return out

    def _show(self, body: dict[str, Any]) -> None:
        name = self._model_name(body)
        if not name:
            self._json({"error": "model is required"}, 400)
            return
        full = normalize_name(name)
        found = self.state.store.get(full)
        model = LIBRARY.get(full)
        if found is None or model is None:
            self._json({"error": f"model '{name}' not found"}, 404)
            return
        _, mtime = found
        arch = model.family
        self._json({
            "license": "(license text)",
            "modelfile": (
                f'# Modelfile generated by "ollama show"\n# To build a new Modelfile based on '
                f"this, replace FROM with:\n# FROM {full}\n\nFROM {full}\n"
            ),
            "parameters": 'stop                           "<|im_end|>"',
            "template": "{{ .Prompt }}",
            "details": model_details(model),
            "model_info": {
                "general.architecture": arch,
                "general.file_type": 15,
                "general.parameter_count": model.parameter_count,
                "general.quantization_version": 2,
                f"{arch}.attention.head_count": model.heads,
                f"{arch}.attention.head_count_kv": model.kv_heads,
                f"{arch}.block_count": model.layers,
                f"{arch}.context_length": model.context_length,
                f"{arch}.embedding_length": model.embedding,
            },
            "capabilities": ["completion", "tools"],
            "modified_at": _iso(datetime.fromtimestamp(mtime).astimezone()),
        })

    def _pull(self, body: dict[str, Any]) -> None:
        name = self._model_name(body)
        if not name:
            self._json({"error": "model is required"}, 400)
            return
        stream = body.get("stream", True) is not False
        full = normalize_name(name)
        model = LIBRARY.get(full)
        lines = self._pull_lines(full, model)
        try:
            self._pull_reply(full, lines, stream)
        finally:
            lines.close()  # a client that went away releases the pull at once

    def _pull_reply(self, full: str, lines: Any, stream: bool) -> None:
        if not stream:
            last: dict[str, Any] = {}
            for line in lines:
                last = line
                if "error" in line:
                    self._json(line, 500)
                    return
            self._json({"status": last.get("status", "success")})
            return
        self._start_stream()
        try:
            for line in lines:
                self._chunk(line)
        except _ClientGone:
            log("INFO", "download.go", f"pull of {full} cancelled by the client")
            raise
        self._end_stream()

    def _pull_lines(self, full: str, model: LibraryModel | None) -> Any:
        state = self.state
        yield {"status": "pulling manifest"}
        state.sleep(0.02)
        if model is None:
            yield {"error": "pull model manifest: file does not exist"}
            return
        with state.pull_lock(full):
            have = state.store.get(full) is not None
            total_time = min(1.5, 0.15 + model.size / 1e9 * 0.02)
            for _media, digest, size in layers_of(model):
                status = f"pulling {digest[7:19]}"
                done = size if have else state.store.partial(digest)
                if done >= size:
                    yield {"status": status, "digest": digest, "total": size, "completed": size}
                    continue
                yield {"status": status, "digest": digest, "total": size}
                steps = max(2, int(12 * size / model.size)) if size > 1_000_000 else 1
                step_time = total_time * size / model.size / steps
                for k in range(1, steps + 1):
                    state.sleep(step_time)
                    done = max(done, size * k // steps)
                    state.store.set_partial(digest, done)
                    yield {"status": status, "digest": digest, "total": size, "completed": done}
            yield {"status": "verifying sha256 digest"}
            state.sleep(0.01)
            yield {"status": "writing manifest"}
            state.store.write(model)
            for _media, digest, _size in layers_of(model):
                state.store.set_partial(digest, None)
            yield {"status": "success"}
            log("INFO", "images.go", f"pulled {full}")

    def _generate(self, body: dict[str, Any]) -> None:
        self._run_model(body, chat=False)

    def _chat(self, body: dict[str, Any]) -> None:
        self._run_model(body, chat=True)

    def _run_model(self, body: dict[str, Any], *, chat: bool) -> None:
        name = self._model_name(body)
        if not name:
            self._json({"error": "model is required"}, 400)
            return
        full = normalize_name(name)
        try:
            keep_alive = parse_duration(body.get("keep_alive"), self.state.keep_alive)
        except ValueError as exc:
            self._json({"error": str(exc)}, 400)
            return
        raw_options = body.get("options")
        options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
        num_ctx = options.get("num_ctx")
        context = int(num_ctx) if isinstance(num_ctx, int | float) and num_ctx > 0 else None
        empty = (not body.get("messages")) if chat else (not body.get("prompt"))
        created = _iso(_now_local())
        if empty and keep_alive == 0:
            if self.state.store.get(full) is None:
                self._json({"error": f"model '{name}' not found"}, 404)
                return
            self.state.unload(full)
            reply: dict[str, Any] = {"model": name, "created_at": created, "done": True,
                                     "done_reason": "unload"}
            reply.update(_empty_reply(chat))
            self._json(reply)
            return
        started = time.time()
        try:
            self.state.load(full, keep_alive, context)
        except LoadRefused as exc:
            self._json({"error": str(exc)}, exc.status)
            return
        load_ns = int((time.time() - started) * 1e9)
        if empty:
            reply = {"model": name, "created_at": created, "done": True, "done_reason": "load"}
            reply.update(_empty_reply(chat))
            self._json(reply)
            return
        if keep_alive == 0:
            self.state.unload(full)
        words = "This is a simulated reply from the gputui sandbox.".split(" ")
        final = {"model": name, "created_at": created, "done": True, "done_reason": "stop",
                 "total_duration": load_ns + 20_000_000, "load_duration": load_ns,
                 "prompt_eval_count": 12, "prompt_eval_duration": 5_000_000,
                 "eval_count": len(words), "eval_duration": 15_000_000}
        if body.get("stream", True) is False:
            text = " ".join(words)
            final.update({"message": {"role": "assistant", "content": text}} if chat
                         else {"response": text})
            self._json(final)
            return
        self._start_stream()
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            part: dict[str, Any] = {"model": name, "created_at": created, "done": False}
            part.update({"message": {"role": "assistant", "content": piece}} if chat
                        else {"response": piece})
            self._chunk(part)
        final.update(_empty_reply(chat))
        self._chunk(final)
        self._end_stream()


def _empty_reply(chat: bool) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(state: OllamaState, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"state": state})
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_cls = type("BoundServer", (_Server,), {"address_family": family})
    bind = "" if host in ("0.0.0.0", "::") else host
    return server_cls((bind, port), handler)


# --------------------------------------------------------------------------- serve


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _watch(state: OllamaState, server: ThreadingHTTPServer) -> None:
    """Expire models; stop when the instance powers off or its folder goes away."""
    root = state.root
    own = procs_dir(root) / f"{state.pid}.json" if root is not None else None
    while not state.stopping.wait(TICK_S):
        state.expire(time.time())
        if root is None:
            continue
        gone = not instance_file(root).exists()
        off = False
        with contextlib.suppress(SandboxStateError, OSError):
            off = power_file(root).exists() and power_state(root).is_off
        if gone or off or (own is not None and not own.exists()):
            state.stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()
            return


def serve(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise _Stop(signum)

    # First of all, so a signal at any later moment still unregisters the GPU process.
    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGINT, _raise)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # respect nohup
        signal.signal(signal.SIGHUP, _raise)
    state: OllamaState | None = None
    try:
        state = _prepare(env)
        if state is None:
            return 1
        return _run(state, env)
    except _Stop as exc:
        return 0 if exc.signum in (signal.SIGTERM, signal.SIGINT) else 128 + exc.signum
    finally:
        if state is not None:
            state.stopping.set()
            state.unregister()


def _prepare(env: dict[str, str]) -> OllamaState | None:
    root: Path | None = None
    if env.get("GPUTUI_SANDBOX_ROOT") or (Path.cwd() / ".sandbox").is_dir():
        root = root_from_env()
    try:
        if root is not None and enforce_power(root).is_off:
            sys.stderr.write("Error: this sandbox instance is powered off\n")
            return None
        return OllamaState(root, env)
    except SandboxStateError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return None


def _run(state: OllamaState, env: dict[str, str]) -> int:
    host, port = parse_host(env.get("OLLAMA_HOST"))
    try:
        server = make_server(state, host, port)
    except OSError as exc:
        reason = "address already in use" if exc.errno in (98, 48) else (exc.strerror or str(exc))
        sys.stderr.write(f"Error: listen tcp {host}:{port}: bind: {reason}\n")
        return 1
    try:
        keys = sorted(k for k in env if k.startswith("OLLAMA_") or k == "CUDA_VISIBLE_DEVICES")
        config = " ".join(f"{k}:{env[k]}" for k in keys)
        log("INFO", "routes.go", f"server config env=\"map[{config}]\"")
        if state.root is not None:
            with locked(state.root):
                state.publish()
        if state.spec is not None:
            for index in state.visible():
                gpu = state.spec.gpu(index)
                if gpu is not None:
                    log("INFO", "types.go", f'inference compute id={gpu.uuid} library=cuda '
                        f'name="{gpu.name}" total="{human_gib(gpu.memory_total_mib * MIB)}"')
        log("INFO", "routes.go", f"Listening on {host}:{port} (version {VERSION})")
        watcher = threading.Thread(target=_watch, args=(state, server), daemon=True)
        watcher.start()
        server.serve_forever(poll_interval=0.2)
        return 0
    finally:
        state.stopping.set()
        with contextlib.suppress(Exception):
            server.server_close()
        state.unregister()
        log("INFO", "routes.go", "server stopped")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] not in ([], ["serve"]):
        sys.stderr.write("usage: python -m gputui.sandbox.shims.ollama_server serve\n")
        return 2
    return serve()


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "LIBRARY",
    "VERSION",
    "LibraryModel",
    "Placement",
    "human_bytes",
    "normalize_name",
    "parse_duration",
    "parse_host",
    "place",
    "sandbox_port",
    "serve",
]
