"""A thin async client for one Ollama server, over the official `ollama` Python client.

Everything comes back as small frozen dataclasses (not the library's pydantic types), and every
failure as one of three exceptions with a one-line message:

- `OllamaUnreachable`: nothing answered (server not running, forward gone, connection lost);
- `OllamaNotFound`: HTTP 404 (`/api/delete`, `/api/show` of a model that is not installed);
- `OllamaError`: anything else the server said, including an `{"error": ...}` line in the
  middle of a streamed `/api/pull` answered with HTTP 200.

Every request has a timeout: `timeout` for the quick calls, `long_timeout` (between two
streamed lines, or for a whole load) for pulls and loads.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import ollama

from gputui.errors import GputuiError
from gputui.i18n import N_, Deferred

__all__ = [
    "InstalledModel",
    "ModelInfo",
    "OllamaClient",
    "OllamaError",
    "OllamaNotFound",
    "OllamaUnreachable",
    "PullEvent",
    "PullProgress",
    "RunningModel",
    "normalize_name",
    "parse_host",
]

DEFAULT_PORT = 11434
_REGISTRY = "registry.ollama.ai"


def normalize_name(name: str) -> str:
    """A model name as Ollama stores it: 'qwen2.5' -> 'qwen2.5:latest',
    'registry.ollama.ai/library/qwen2.5:7b' and 'library/qwen2.5:7b' -> 'qwen2.5:7b'."""
    name = name.strip()
    for prefix in (f"{_REGISTRY}/library/", f"{_REGISTRY}/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def parse_host(value: str | None) -> tuple[str, int]:
    """OLLAMA_HOST as Ollama reads it: '127.0.0.1:11500', '0.0.0.0', 'http://host:port',
    ':11500', '[::1]:11434' -> (host, port); unset: 127.0.0.1:11434."""
    text = (value or "").strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    text = text.split("/", 1)[0]
    host, port = "127.0.0.1", DEFAULT_PORT
    if text.startswith("["):
        end = text.find("]")
        host = text[1:end] or host
        rest = text[end + 1:]
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
        return host, port
    if ":" in text:
        h, _, p = text.rpartition(":")
        host = h or host
        if p.isdigit():
            port = int(p)
    elif text:
        host = text
    return host, port


class OllamaError(GputuiError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class OllamaNotFound(OllamaError):
    pass


class OllamaUnreachable(OllamaError):
    pass


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class InstalledModel:
    """One entry of `/api/tags`."""

    name: str
    size: int
    digest: str
    modified_at: datetime | None = None
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None
    format: str | None = None

    @property
    def short_id(self) -> str:
        return self.digest.removeprefix("sha256:")[:12]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "size": self.size, "digest": self.digest,
            "modified_at": self.modified_at.isoformat() if self.modified_at else None,
            "family": self.family, "parameter_size": self.parameter_size,
            "quantization": self.quantization, "format": self.format,
        }


@dataclass(frozen=True)
class RunningModel:
    """One entry of `/api/ps`."""

    name: str
    size: int
    size_vram: int
    digest: str = ""
    expires_at: datetime | None = None
    context_length: int | None = None
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None

    @property
    def gpu_share(self) -> float:
        """0..1: the part of the model in GPU memory."""
        return 0.0 if self.size <= 0 else min(1.0, self.size_vram / self.size)

    @property
    def processor(self) -> str:
        """As `ollama ps` shows it: '100% GPU', '100% CPU', '48%/52% CPU/GPU'."""
        if self.size <= 0 or self.size_vram <= 0:
            return "100% CPU"
        if self.size_vram >= self.size:
            return "100% GPU"
        gpu = round(self.gpu_share * 100)
        return f"{100 - gpu}%/{gpu}% CPU/GPU"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "size": self.size, "size_vram": self.size_vram,
            "gpu_share": round(self.gpu_share, 4), "processor": self.processor,
            "digest": self.digest,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "context_length": self.context_length, "family": self.family,
            "parameter_size": self.parameter_size, "quantization": self.quantization,
        }


@dataclass(frozen=True)
class ModelInfo:
    """What `/api/show` says about the shape of a model (None where it does not say)."""

    name: str
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None
    parameter_count: int | None = None
    layers: int | None = None
    embedding: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    context_length: int | None = None
    capabilities: tuple[str, ...] = ()

    @property
    def head_dim(self) -> int | None:
        if self.embedding and self.heads:
            return self.embedding // self.heads
        return None

    def kv_bytes(self, context: int, parallel: int = 1) -> int | None:
        """The f16 KV cache for `context` tokens x `parallel` sequences, when the shape is known."""
        if not (self.layers and self.kv_heads and self.head_dim):
            return None
        return 2 * self.layers * self.kv_heads * self.head_dim * 2 * context * parallel


@dataclass(frozen=True)
class PullEvent:
    """One streamed line of `/api/pull`."""

    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


@dataclass
class PullProgress:
    """Pull progress summed over the layers seen so far (each layer counted once, by digest)."""

    model: str
    status: str = ""
    layers: dict[str, tuple[int, int]] = field(default_factory=dict)  # digest -> (total, done)
    done: bool = False
    digest: str | None = None  # the layer of the latest line, if it named one

    def update(self, event: PullEvent) -> PullProgress:
        self.status = event.status
        self.digest = event.digest
        if event.digest and event.total:
            _, before = self.layers.get(event.digest, (0, 0))
            completed = max(before, event.completed or 0)
            self.layers[event.digest] = (event.total, min(completed, event.total))
        if event.status == "success":
            self.done = True
        return self

    @property
    def total(self) -> int:
        return sum(total for total, _ in self.layers.values())

    @property
    def completed(self) -> int:
        return sum(done for _, done in self.layers.values())

    @property
    def fraction(self) -> float:
        if self.done:
            return 1.0
        return self.completed / self.total if self.total else 0.0


# --------------------------------------------------------------------------- the client


def _details(obj: Any) -> dict[str, Any]:
    details = getattr(obj, "details", None)
    if details is None:
        return {}
    return {
        "family": details.family,
        "parameter_size": details.parameter_size,
        "quantization": details.quantization_level,
        "format": details.format,
    }


def _models(data: Any) -> list[dict[str, Any]]:
    models = data.get("models") if isinstance(data, dict) else None
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def _details_json(m: dict[str, Any]) -> dict[str, Any]:
    details = m.get("details")
    d: dict[str, Any] = details if isinstance(details, dict) else {}

    def text(key: str) -> str | None:
        value = d.get(key)
        return str(value) if value not in (None, "") else None

    return {"family": text("family"), "parameter_size": text("parameter_size"),
            "quantization": text("quantization_level"), "format": text("format")}


def _time(value: Any) -> datetime | None:
    """RFC 3339 with nanoseconds ("2023-11-04T14:56:49.277302595-07:00") -> datetime."""
    if not isinstance(value, str) or not value:
        return None
    m = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?", value.strip())
    if m is None:
        return None
    frac = (m.group(2) or "")[:7]
    zone = m.group(3) or "+00:00"
    try:
        return datetime.fromisoformat(m.group(1) + frac + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class OllamaClient:
    """One Ollama server at `base_url` ("http://127.0.0.1:PORT")."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        long_timeout: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        extra: dict[str, Any] = {} if transport is None else {"transport": transport}
        self.timeout = timeout
        self._quick = ollama.AsyncClient(host=self.base_url, timeout=timeout, **extra)
        slow = httpx.Timeout(timeout, read=long_timeout)
        self._slow = ollama.AsyncClient(host=self.base_url, timeout=slow, **extra)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, **extra)

    async def aclose(self) -> None:
        for closer in (self._quick.close, self._slow.close, self._http.aclose):
            with contextlib.suppress(Exception):
                await closer()

    async def __aenter__(self) -> OllamaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- errors --------------------------------------------------------------------------------
    def _map(self, exc: BaseException) -> OllamaError:
        if isinstance(exc, ollama.ResponseError):
            status = exc.status_code if exc.status_code and exc.status_code > 0 else None
            message = str(exc.error).strip() or f"HTTP {status}"
            if status == 404:
                return OllamaNotFound(message, 404)
            return OllamaError(message, status)
        if isinstance(exc, httpx.TimeoutException):
            return OllamaError(Deferred(N_("Ollama at {url} did not answer in time"),
                                        url=self.base_url))
        if isinstance(exc, ConnectionError | httpx.TransportError):
            return OllamaUnreachable(Deferred(N_("cannot reach Ollama at {url}"),
                                              url=self.base_url))
        return OllamaError(f"{type(exc).__name__}: {exc}")

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except (ollama.ResponseError, ConnectionError, httpx.HTTPError) as exc:
            raise self._map(exc) from None

    # -- the API -------------------------------------------------------------------------------
    async def version(self) -> str:
        try:
            resp = await self._http.get("/api/version")
        except httpx.HTTPError as exc:
            raise self._map(exc) from None
        if resp.status_code != 200:
            raise OllamaError(f"/api/version: HTTP {resp.status_code}", resp.status_code)
        try:
            return str(resp.json().get("version") or "")
        except ValueError:
            raise OllamaError(Deferred(N_("{path}: the answer is not JSON"),
                                       path="/api/version")) from None

    async def _get_json(self, path: str) -> Any:
        try:
            resp = await self._http.get(path)
        except httpx.HTTPError as exc:
            raise self._map(exc) from None
        if resp.status_code != 200:
            raise self._map(ollama.ResponseError(resp.text, resp.status_code))
        try:
            return resp.json()
        except ValueError:
            raise OllamaError(Deferred(N_("{path}: the answer is not JSON"), path=path)) from None

    async def tags(self) -> list[InstalledModel]:
        # Parsed here rather than by the library: docs/api.md's shape names a model "name",
        # current servers send "name" and "model", and the library keeps only "model".
        data = await self._get_json("/api/tags")
        out = []
        for m in _models(data):
            out.append(InstalledModel(
                name=str(m.get("model") or m.get("name") or ""), size=_int(m.get("size")) or 0,
                digest=str(m.get("digest") or ""), modified_at=_time(m.get("modified_at")),
                **_details_json(m),
            ))
        return out

    async def ps(self) -> list[RunningModel]:
        data = await self._get_json("/api/ps")
        out = []
        for m in _models(data):
            details = _details_json(m)
            details.pop("format", None)
            out.append(RunningModel(
                name=str(m.get("model") or m.get("name") or ""), size=_int(m.get("size")) or 0,
                size_vram=_int(m.get("size_vram")) or 0, digest=str(m.get("digest") or ""),
                expires_at=_time(m.get("expires_at")),
                context_length=_int(m.get("context_length")), **details,
            ))
        return out

    async def show(self, model: str) -> ModelInfo:
        resp = await self._call(self._quick.show(model))
        info: Mapping[str, Any] = resp.modelinfo or {}
        arch = str(info.get("general.architecture") or "")
        details = _details(resp)
        details.pop("format", None)

        def get(key: str) -> int | None:
            return _int(info.get(f"{arch}.{key}")) if arch else None

        return ModelInfo(
            name=model,
            parameter_count=_int(info.get("general.parameter_count")),
            layers=get("block_count"),
            embedding=get("embedding_length"),
            heads=get("attention.head_count"),
            kv_heads=get("attention.head_count_kv"),
            context_length=get("context_length"),
            capabilities=tuple(resp.capabilities or ()),
            **details,
        )

    async def pull(self, model: str) -> AsyncGenerator[PullEvent, None]:
        """The streamed progress lines. Leaving the loop early (or cancelling the task) closes
        the connection, which cancels the pull on the server; a later pull resumes it."""
        stream: Any = None
        try:
            stream = await self._slow.pull(model, stream=True)
            async for part in stream:
                yield PullEvent(
                    status=part.status or "", digest=part.digest, total=part.total,
                    completed=part.completed,
                )
        except (ollama.ResponseError, ConnectionError, httpx.HTTPError) as exc:
            raise self._map(exc) from None
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.aclose()

    async def delete(self, model: str) -> None:
        await self._call(self._quick.delete(model))

    async def load(
        self, model: str, *, keep_alive: float | str | None = None, num_ctx: int | None = None
    ) -> None:
        """Load into memory (a generate with no prompt); `keep_alive` as Ollama takes it
        (seconds, "10m", -1 for ever; None: the server's default)."""
        options = {"num_ctx": num_ctx} if num_ctx else None
        await self._call(self._slow.generate(model=model, keep_alive=keep_alive, options=options))

    async def unload(self, model: str) -> None:
        await self._call(self._slow.generate(model=model, keep_alive=0))
