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
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import ollama

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
]


class OllamaError(Exception):
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

    def update(self, event: PullEvent) -> PullProgress:
        self.status = event.status
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
            return OllamaError(f"Ollama at {self.base_url} did not answer in time")
        if isinstance(exc, ConnectionError | httpx.TransportError):
            return OllamaUnreachable(f"cannot reach Ollama at {self.base_url}")
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
            raise OllamaError("/api/version: not JSON") from None

    async def tags(self) -> list[InstalledModel]:
        resp = await self._call(self._quick.list())
        out = []
        for m in resp.models:
            out.append(InstalledModel(
                name=m.model or "", size=int(m.size or 0), digest=m.digest or "",
                modified_at=m.modified_at, **_details(m),
            ))
        return out

    async def ps(self) -> list[RunningModel]:
        resp = await self._call(self._quick.ps())
        out = []
        for m in resp.models:
            details = _details(m)
            details.pop("format", None)
            out.append(RunningModel(
                name=m.model or m.name or "", size=int(m.size or 0),
                size_vram=int(m.size_vram or 0), digest=m.digest or "",
                expires_at=m.expires_at, context_length=m.context_length, **details,
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

    async def pull(self, model: str) -> AsyncIterator[PullEvent]:
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
