"""The HTTP API (Ollama's docs/api.md shapes)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..ollama_shim import VERSION
from .common import (
    _iso,
    _now_local,
    parse_duration,
)
from .library import (
    LIBRARY,
    LibraryModel,
    _sha,
    layers_of,
    model_details,
    normalize_name,
)
from .placement import LoadRefused
from .runtime import OllamaState, log

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
