"""A real HTTP receiver on 127.0.0.1 for Apprise's `json://` scheme: it records every message
and answers by path — `/ok...` 200, `/fail...` 500, `/hang...` holds the request until the test
ends, `/flaky...` 500 the first time, then 200."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    title: str
    body: str
    type: str
    raw: bytes
    authorization: str | None


@dataclass
class Receiver:
    port: int = 0
    messages: list[Received] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)  # requests started, per path
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "ok", auth: str = "") -> str:
        return f"json://{auth + '@' if auth else ''}127.0.0.1:{self.port}/{path}"

    def wait_for(self, n: int, timeout: float = 15.0) -> list[Received]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if len(self.messages) >= n:
                    return list(self.messages)
            time.sleep(0.02)
        with self.lock:
            return list(self.messages)

    def wait_hits(self, path: str, n: int = 1, timeout: float = 15.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if self.hits.get(path, 0) >= n:
                    return True
            time.sleep(0.02)
        return False


def start_receiver() -> tuple[Receiver, ThreadingHTTPServer]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0].strip("/")
            with rec.lock:
                rec.hits[path] = rec.hits.get(path, 0) + 1
                first = rec.hits[path] == 1
            if path.startswith("hang"):
                rec.release.wait(60)
            code = 500 if path.startswith("fail") or (path.startswith("flaky") and first) \
                else 200
            if code == 200:
                data = json.loads(raw)
                with rec.lock:
                    rec.messages.append(Received(path, data.get("title", ""),
                                                 data.get("message", ""), data.get("type", ""),
                                                 raw, self.headers.get("Authorization")))
            try:
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return rec, server
