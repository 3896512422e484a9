"""The server's state: loaded models, their GPU processes, keep-alive expiry."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..gpu_load import visible_gpus
from ..state import (
    GpuUse,
    InstanceSpec,
    ProcRecord,
    live_processes,
    load_instance,
    locked,
    memory_free_mib,
    proc_start_time,
    register_process,
    unregister_process,
)
from .common import (
    DEFAULT_CONTEXT,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_RAM_GIB,
    FOREVER_S,
    GIB,
    MARKER,
    MIB,
    human_gib,
    parse_duration,
)
from .library import (
    LIBRARY,
    LibraryModel,
    manifest_digest,
    normalize_name,
)
from .placement import LoadRefused, Placement, place
from .store import ModelStore

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
