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

Run as ``python -m gputui.sandbox.shims.ollama_server serve`` (see __main__.py). The modules, by
idea: common (constants, durations, sizes), library (the registry's models), store (installed
models on disk), placement (Ollama's scheduler), runtime (loaded models, keep-alive), http_api
(the HTTP handler), cli (``serve``: run until stopped or powered off).
"""

from __future__ import annotations

from ..ollama_shim import VERSION, human_bytes, parse_host, sandbox_port
from .cli import main, serve
from .common import (
    DEFAULT_CONTEXT,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_RAM_GIB,
    FOREVER_S,
    GIB,
    GPU_OVERHEAD_BYTES,
    MARKER,
    MIB,
    REGISTRY,
    TICK_S,
    human_gib,
    parse_duration,
)
from .http_api import Handler, make_server
from .library import (
    LIBRARY,
    LibraryModel,
    layers_of,
    manifest_digest,
    model_details,
    normalize_name,
)
from .placement import LoadRefused, Placement, place
from .runtime import Loaded, OllamaState, log
from .store import ModelStore

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_KEEP_ALIVE_S",
    "DEFAULT_RAM_GIB",
    "FOREVER_S",
    "GIB",
    "GPU_OVERHEAD_BYTES",
    "LIBRARY",
    "MARKER",
    "MIB",
    "REGISTRY",
    "TICK_S",
    "VERSION",
    "Handler",
    "LibraryModel",
    "LoadRefused",
    "Loaded",
    "ModelStore",
    "OllamaState",
    "Placement",
    "human_bytes",
    "human_gib",
    "layers_of",
    "log",
    "main",
    "make_server",
    "manifest_digest",
    "model_details",
    "normalize_name",
    "parse_duration",
    "parse_host",
    "place",
    "sandbox_port",
    "serve",
]
