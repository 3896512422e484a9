"""A local emulator of Lambda Cloud's public API v1, for tests: a real HTTP server on 127.0.0.1.

It follows the documented shapes (API 1.10.0, the OpenAPI document Lambda publishes):

- every success is `{"data": ...}`; every failure is `{"error": {"code", "message",
  "suggestion"?}}` with the documented codes (`global/invalid-api-key` 401,
  `global/account-inactive` 403, `instance-operations/launch/insufficient-capacity` 400,
  `global/quota-exceeded` 400, `global/invalid-parameters` 400, `global/object-does-not-exist`
  404, `global/not-found` 404, `global/conflict` 409, `global/internal-error` 500);
- auth by `Authorization: Bearer KEY`, or Basic (`base64(KEY:)`, or the bare key), as documented;
- `GET /instance-types` is a map keyed by type name, each with `instance_type` (whose
  `price_cents_per_hour` is for the whole instance) and `regions_with_capacity_available`;
- launch validates its body (`region_name`, `instance_type_name`, exactly one `ssh_key_names`
  entry, `name` up to 64 characters, tags) and answers `{"instance_ids": [...]}`;
- instances go `booting` → `active` (with an `ip`) and, once terminated, `terminating` →
  `terminated` → 404; `GET /instances` lists the ones not yet terminated;
- rate limits: about one request per second per key, and one launch per 12 s (both settable);
  a refused request gets 429 with a non-JSON (HTML) body, as a gateway sends it;
- billing as Lambda documents it: per minute, from the moment the instance is active until the
  moment it is terminated (`bill()`).

Injection for tests: `fail()` (any status and body, before or after the action is done),
`delay()` (latency before the answer, or after the action so the answer is lost), capacity,
quota, unhealthy and preempted instances.

With `ssh_root`, every instance is a real SSH endpoint: a sandbox instance server (simulated
GPUs of the type's card, `nvidia-smi`, a real shell) on its own loopback address `127.0.0.N` at
one shared port (`ssh_port`), accepting only the public key named in the launch. Halting it
(`shutdown -h now`) refuses SSH but, as on Lambda, leaves it `active` and billing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import errno
import json
import math
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TEST_KEY = "secret_gputui-test_0123456789abcdef0123456789abcdef.fedcba9876543210fedcba98"

REGIONS = {
    "test-east-1": "Test East 1 (emulator)",
    "test-west-1": "Test West 1 (emulator)",
    "test-south-1": "Test South 1 (emulator)",
}


def instance_type(name: str, description: str, gpu_description: str, cents: int, gpus: int,
                  vcpus: int, memory_gib: int, storage_gib: int) -> dict[str, Any]:
    return {
        "name": name, "description": description, "gpu_description": gpu_description,
        "price_cents_per_hour": cents,
        "specs": {"vcpus": vcpus, "memory_gib": memory_gib, "storage_gib": storage_gib,
                  "gpus": gpus},
    }


# (instance type, regions with capacity)
DEFAULT_TYPES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "gpu_1x_a10": (instance_type("gpu_1x_a10", "1x A10 (24 GB PCIe)", "A10 (24 GB PCIe)",
                                 129, 1, 30, 200, 1400), ["test-east-1"]),
    "gpu_1x_h100_pcie": (instance_type("gpu_1x_h100_pcie", "1x H100 (80 GB PCIe)",
                                       "H100 (80 GB PCIe)", 329, 1, 26, 200, 1024),
                         ["test-east-1", "test-west-1"]),
    "gpu_8x_h100_sxm5": (instance_type("gpu_8x_h100_sxm5", "8x H100 (80 GB SXM5)",
                                       "H100 (80 GB SXM5)", 2392, 8, 208, 1800, 24780),
                         ["test-west-1"]),
    "gpu_1x_a100_sxm4": (instance_type("gpu_1x_a100_sxm4", "1x A100 (40 GB SXM4)",
                                       "A100 (40 GB SXM4)", 199, 1, 30, 200, 512), []),
    "gpu_2x_a6000": (instance_type("gpu_2x_a6000", "2x RTX A6000 (48 GB)", "RTX A6000 (48 GB)",
                                   218, 2, 28, 200, 1024), ["test-east-1"]),
    "gpu_1x_gh200": (instance_type("gpu_1x_gh200", "1x GH200 (96 GB)", "GH200 (96 GB)",
                                   149, 1, 64, 432, 4096), ["test-south-1"]),
}

_TAG_KEY = re.compile(r"^[a-z][a-z0-9-:]+$")
_HOSTNAME = re.compile(r"^[a-z0-9][0-9a-z-]{0,62}$")
_KEY_PREFIXES = ("ssh-", "ecdsa-", "sk-")

_RATE_LIMITED_BODY = (b"<html>\r\n<head><title>429 Too Many Requests</title></head>\r\n<body>\r\n"
                      b"<center><h1>429 Too Many Requests</h1></center>\r\n</body>\r\n</html>\r\n")


class _ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, suggestion: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.suggestion = status, code, message, suggestion

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.suggestion is not None:
            err["suggestion"] = self.suggestion
        return {"error": err}


def _invalid(message: str) -> _ApiError:
    return _ApiError(400, "global/invalid-parameters", message)


def _instance_not_found() -> _ApiError:
    return _ApiError(404, "global/object-does-not-exist", "Specified instance does not exist.")


@dataclass
class _Rule:
    prefix: str
    method: str | None
    times: int
    status: int = 500
    body: bytes | None = None
    content_type: str = "application/json"
    seconds: float = 0.0
    after: bool = False

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and path.startswith(self.prefix) and (
            self.method is None or self.method == method)


@dataclass
class EmulatedInstance:
    id: str
    name: str | None
    type_name: str
    region: str
    ssh_key_name: str
    public_key: str
    tags: list[dict[str, str]]
    hostname: str | None
    ip: str
    launched_at: float
    active_at: float
    terminate_at: float | None = None
    preempted_at: float | None = None
    restart_until: float | None = None
    unhealthy: bool = False
    server: Any = None
    root: Path | None = None
    jupyter_token: str = field(default_factory=lambda: uuid.uuid4().hex)


class LambdaEmulator:
    """Start with `await emu.start()` (or `async with`), point the client at `emu.base_url`."""

    def __init__(
        self,
        *,
        api_keys: Iterable[str] = (TEST_KEY,),
        inactive_keys: Iterable[str] = (),
        types: dict[str, tuple[dict[str, Any], list[str]]] | None = None,
        boot_seconds: float = 0.3,
        terminate_seconds: float = 0.3,
        gone_seconds: float = 0.5,
        request_interval: float = 1.0,  # documented: about one request per second
        launch_interval: float = 12.0,  # documented: one launch per 12 s (five per minute)
        retry_after: float | None = None,  # not documented: off unless a test asks
        quota: int | None = None,
        ssh_root: Path | None = None,
    ) -> None:
        self.api_keys = set(api_keys)
        self.inactive_keys = set(inactive_keys)
        src = DEFAULT_TYPES if types is None else types
        self.types = {n: copy.deepcopy(t) for n, (t, _) in src.items()}
        self.capacity = {n: list(r) for n, (_, r) in src.items()}
        self.boot_seconds = boot_seconds
        self.terminate_seconds = terminate_seconds
        self.gone_seconds = gone_seconds
        self.request_interval = request_interval
        self.launch_interval = launch_interval
        self.retry_after = retry_after
        self.quota = quota
        self.ssh_root = Path(ssh_root) if ssh_root else None
        self.ssh_port = 0
        self.ssh_error: str | None = None
        self.instances: dict[str, EmulatedInstance] = {}
        self.ssh_keys: list[dict[str, str]] = []
        self.calls: list[tuple[str, str, int]] = []  # (method, path, status): never a key
        self._rules: list[_Rule] = []
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_octet = 2
        self._stops: list[Any] = []

    # -- running ----------------------------------------------------------------------------------

    async def start(self) -> LambdaEmulator:
        self._loop = asyncio.get_running_loop()
        if self.ssh_root is not None:
            self.ssh_port = _free_port()
        emulator = self

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body leave in one write (no delayed-ACK stalls)
            disable_nagle_algorithm = True

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, payload = emulator.handle(method, self.path, self.headers, body)
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="lambda-emulator", daemon=True)
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/api/v1"

    async def close(self) -> None:
        if self._httpd is not None:
            httpd, self._httpd = self._httpd, None
            await asyncio.to_thread(httpd.shutdown)
            httpd.server_close()
        for inst in list(self.instances.values()):
            if inst.server is not None:
                await self._stop_server(inst)
        for fut in self._stops:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(fut)

    async def __aenter__(self) -> LambdaEmulator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- injection and inspection -----------------------------------------------------------------

    def fail(self, prefix: str, status: int = 500, *, times: int = 1, body: Any = None,
             content_type: str | None = None, method: str | None = None,
             after: bool = False) -> None:
        """The next `times` requests under `/api/v1{prefix}` answer `status` with `body` (a
        dict is sent as JSON; default: the documented internal-error envelope). `after=True`
        does the action first, then fails: the caller cannot know it happened."""
        if body is None:
            raw = json.dumps({"error": {
                "code": "global/internal-error", "message": "An internal server error occurred.",
                "suggestion": "Try again later. Contact Support if the problem persists."}}).encode()
        elif isinstance(body, dict | list):
            raw = json.dumps(body).encode()
        elif isinstance(body, str):
            raw = body.encode()
        else:
            raw = bytes(body)
        if content_type is None:
            content_type = "application/json" if body is None or isinstance(body, dict | list) \
                else "text/html"
        with self._lock:
            self._rules.append(_Rule("/api/v1" + prefix, method, times, status=status, body=raw,
                                     content_type=content_type, after=after))

    def delay(self, prefix: str, seconds: float, *, times: int = 1, method: str | None = None,
              after: bool = False) -> None:
        """Latency: the next `times` answers under `/api/v1{prefix}` come `seconds` late
        (`after=True`: the action is done first, so a client that gives up missed it)."""
        with self._lock:
            self._rules.append(_Rule("/api/v1" + prefix, method, times, status=0,
                                     seconds=seconds, after=after))

    def set_capacity(self, type_name: str, regions: list[str]) -> None:
        with self._lock:
            self.capacity[type_name] = list(regions)

    def set_unhealthy(self, instance_id: str, unhealthy: bool = True) -> None:
        with self._lock:
            self.instances[instance_id].unhealthy = unhealthy

    def preempt(self, instance_id: str) -> None:
        with self._lock:
            self.instances[instance_id].preempted_at = time.time()

    def count(self, method: str, prefix: str, status: int | None = None) -> int:
        with self._lock:
            return sum(1 for m, p, s in self.calls if m == method and p.startswith("/api/v1" + prefix)
                       and (status is None or s == status))

    def status(self, instance_id: str, at: float | None = None) -> str | None:
        """The instance's status now (None once it is gone: the API answers 404)."""
        with self._lock:
            inst = self.instances.get(instance_id)
            return None if inst is None else self._status(inst, at or time.time())

    def active_at(self, instance_id: str) -> datetime:
        return datetime.fromtimestamp(self.instances[instance_id].active_at, UTC)

    def bill(self, instance_id: str, at: datetime | None = None) -> Decimal:
        """What Lambda charges for the instance up to `at`: whole minutes from active to
        terminate, at the type's hourly price, rounded to the cent."""
        with self._lock:
            inst = self.instances[instance_id]
            t = at.timestamp() if at is not None else time.time()
            ends = [e for e in (inst.terminate_at, inst.preempted_at) if e is not None]
            end = min([t, *ends])
            seconds = end - inst.active_at
            if seconds <= 0:
                return Decimal("0.00")
            minutes = math.ceil(round(seconds, 6) / 60)
            cents = Decimal(self.types[inst.type_name]["price_cents_per_hour"])
            return (cents * minutes / 60 / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    # -- the HTTP side ------------------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, headers: Any, body: bytes
               ) -> tuple[int, dict[str, str], bytes]:
        path = urlsplit(raw_path).path.rstrip("/") or "/"
        with self._lock:
            before = self._take(method, path, after=False)
        for rule in before:
            if rule.seconds:
                time.sleep(rule.seconds)
        status, out_headers, payload, starts = self._handle_locked(method, path, headers, body,
                                                                   before)
        for inst in starts:
            self._start_server_blocking(inst)
        with self._lock:
            after = self._take(method, path, after=True) if status < 400 else []
        for rule in after:
            if rule.seconds:
                time.sleep(rule.seconds)
            if rule.status:
                status, out_headers, payload = rule.status, {"Content-Type": rule.content_type}, \
                    rule.body or b""
        with self._lock:
            self.calls.append((method, path, status))
        return status, out_headers, payload

    def _take(self, method: str, path: str, *, after: bool) -> list[_Rule]:
        """The first matching delay and the first matching failure, each used up once."""
        taken: list[_Rule] = []
        for is_delay in (True, False):
            for rule in self._rules:
                if rule.after == after and rule.matches(method, path) \
                        and (rule.status == 0) == is_delay:
                    rule.times -= 1
                    taken.append(rule)
                    break
        self._rules = [r for r in self._rules if r.times > 0]
        return taken

    def _handle_locked(self, method: str, path: str, headers: Any, body: bytes,
                       before: list[_Rule]) -> tuple[int, dict[str, str], bytes, list[EmulatedInstance]]:
        json_headers = {"Content-Type": "application/json"}
        starts: list[EmulatedInstance] = []
        with self._lock:
            try:
                key = self._authenticate(headers)
                limited = self._rate_limited(key, method, path)
                if limited is not None:
                    return (*limited, [])
                for rule in before:
                    if rule.status:
                        return rule.status, {"Content-Type": rule.content_type}, rule.body or b"", []
                data = self._route(method, path, body, starts)
            except _ApiError as err:
                return err.status, json_headers, json.dumps(err.body()).encode(), []
        return 200, json_headers, json.dumps({"data": data}).encode(), starts

    def _authenticate(self, headers: Any) -> str:
        auth = (headers.get("Authorization") or "").strip()
        key = ""
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            key = value.strip()
        elif scheme.lower() == "basic":
            value = value.strip()
            try:
                decoded = base64.b64decode(value, validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                decoded = ""
            key = decoded[:-1] if decoded.endswith(":") else (value if value in self.api_keys
                                                              else decoded)
        if key not in self.api_keys and key not in self.inactive_keys:
            raise _ApiError(401, "global/invalid-api-key", "API key was invalid, expired, or deleted.",
                            "Check your API key or create a new one, then try again.")
        if key in self.inactive_keys:
            raise _ApiError(403, "global/account-inactive", "Your account is inactive.",
                            "Make sure you have verified your email address and have a valid "
                            "payment method. Contact Support if problems continue.")
        return key

    def _rate_limited(self, key: str, method: str, path: str
                      ) -> tuple[int, dict[str, str], bytes] | None:
        now = time.monotonic()
        buckets = [("any", self.request_interval)]
        if method == "POST" and path == "/api/v1/instance-operations/launch":
            buckets.append(("launch", self.launch_interval))
        for name, interval in buckets:
            last = self._last.get((key, name))
            if interval > 0 and last is not None and now - last < interval:
                headers = {"Content-Type": "text/html"}
                if self.retry_after is not None:
                    headers["Retry-After"] = f"{self.retry_after:g}"
                return 429, headers, _RATE_LIMITED_BODY
        for name, _ in buckets:
            self._last[(key, name)] = now
        return None

    def _route(self, method: str, path: str, body: bytes, starts: list[EmulatedInstance]) -> Any:
        parts = path.split("/")[3:] if path.startswith("/api/v1/") else None
        if not parts:
            raise _ApiError(404, "global/not-found", "The requested resource was not found.")
        now = time.time()
        match (method, parts):
            case ("GET", ["instance-types"]):
                return {n: {"instance_type": copy.deepcopy(t),
                            "regions_with_capacity_available": [
                                {"name": r, "description": REGIONS.get(r, r)}
                                for r in self.capacity.get(n, [])]}
                        for n, t in self.types.items()}
            case ("GET", ["regions"]):
                return [{"name": n, "description": d} for n, d in REGIONS.items()]
            case ("GET", ["instances"]):
                return [self._json(i, now) for i in self.instances.values()
                        if self._status(i, now) in ("booting", "active", "unhealthy", "terminating")]
            case ("GET", ["instances", iid]):
                return self._json(self._live(iid, now), now)
            case ("POST", ["instances", iid]):
                inst = self._live(iid, now)
                req = _body(body)
                name = req.get("name")
                if not isinstance(name, str) or len(name) > 64:
                    raise _invalid("name must be a string of at most 64 characters")
                inst.name = name
                return self._json(inst, now)
            case ("POST", ["instance-operations", "launch"]):
                return self._launch(_body(body), now, starts)
            case ("POST", ["instance-operations", "terminate"]):
                found = self._targets(_body(body), now)
                for inst in found:
                    if inst.terminate_at is None and self._status(inst, now) != "preempted":
                        inst.terminate_at = now
                        self._schedule_stop(inst)
                return {"terminated_instances": [self._json(i, now) for i in found]}
            case ("POST", ["instance-operations", "restart"]):
                found = self._targets(_body(body), now)
                for inst in found:
                    if self._status(inst, now) not in ("active", "unhealthy"):
                        raise _ApiError(409, "global/conflict",
                                        "The request conflicts with the current state of the resource.")
                for inst in found:
                    inst.restart_until = now + self.boot_seconds
                return {"restarted_instances": [self._json(i, now) for i in found]}
            case ("GET", ["ssh-keys"]):
                return [dict(k) for k in self.ssh_keys]
            case ("POST", ["ssh-keys"]):
                return self._add_key(_body(body))
            case ("DELETE", ["ssh-keys", kid]):
                for k in self.ssh_keys:
                    if k["id"] == kid:
                        self.ssh_keys.remove(k)
                        return {}
                raise _ApiError(404, "global/not-found", "The requested resource was not found.")
        raise _ApiError(404, "global/not-found", "The requested resource was not found.")

    def _targets(self, req: dict[str, Any], now: float) -> list[EmulatedInstance]:
        ids = req.get("instance_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise _invalid("instance_ids must be a non-empty list of instance IDs")
        return [self._live(i, now) for i in ids]

    def _live(self, iid: str, now: float) -> EmulatedInstance:
        inst = self.instances.get(iid)
        if inst is None or self._status(inst, now) is None:
            raise _instance_not_found()
        return inst

    def _add_key(self, req: dict[str, Any]) -> dict[str, str]:
        name = req.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 64:
            raise _invalid("name is required: 1 to 64 characters")
        if any(k["name"] == name for k in self.ssh_keys):
            raise _invalid(f"An SSH key named {name!r} already exists.")
        public = req.get("public_key")
        private = None
        if public is None:
            import asyncssh

            key = asyncssh.generate_private_key("ssh-ed25519")
            public = key.export_public_key("openssh").decode().strip()
            private = key.export_private_key("openssh").decode()
        if not isinstance(public, str) or not 1 <= len(public) <= 4096 \
                or not public.startswith(_KEY_PREFIXES) or len(public.split()) < 2:
            raise _invalid("public_key is not a valid SSH public key")
        entry = {"id": uuid.uuid4().hex, "name": name, "public_key": public.strip()}
        self.ssh_keys.append(entry)
        return {**entry, "private_key": private} if private else dict(entry)

    def _launch(self, req: dict[str, Any], now: float, starts: list[EmulatedInstance]) -> Any:
        region, type_name = req.get("region_name"), req.get("instance_type_name")
        keys = req.get("ssh_key_names")
        missing = [f for f in ("region_name", "instance_type_name", "ssh_key_names") if f not in req]
        if missing:
            raise _invalid(f"Missing required field(s): {', '.join(missing)}")
        if not isinstance(region, str) or not isinstance(type_name, str):
            raise _invalid("region_name and instance_type_name must be strings")
        if not isinstance(keys, list) or len(keys) != 1 or not isinstance(keys[0], str):
            raise _invalid("Exactly one SSH key must be specified in ssh_key_names")
        name = req.get("name")
        if name is not None and (not isinstance(name, str) or len(name) > 64):
            raise _invalid("name must be 64 characters or fewer")
        hostname = req.get("hostname")
        if hostname is not None and (not isinstance(hostname, str) or not _HOSTNAME.match(hostname)):
            raise _invalid("hostname must match ^[a-z0-9][0-9a-z-]{0,62}$")
        tags = req.get("tags") or []
        if not isinstance(tags, list) or not all(
                isinstance(t, dict) and isinstance(t.get("key"), str)
                and len(t["key"]) <= 55 and _TAG_KEY.match(t["key"])
                and isinstance(t.get("value"), str) and len(t["value"]) <= 128 for t in tags):
            raise _invalid("tags must be {key, value} pairs; keys match ^[a-z][a-z0-9-:]+$")
        quantity = req.get("quantity", 1)
        if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
            raise _invalid("quantity must be a positive integer")
        if type_name not in self.types:
            raise _ApiError(404, "global/object-does-not-exist",
                            f"Instance type {type_name!r} does not exist.",
                            "List the instance types with GET /api/v1/instance-types.")
        if region not in REGIONS:
            raise _ApiError(404, "global/object-does-not-exist",
                            f"Region {region!r} does not exist.", "Check the region name.")
        key = next((k for k in self.ssh_keys if k["name"] == keys[0]), None)
        if key is None:
            raise _ApiError(404, "global/object-does-not-exist",
                            f"SSH key {keys[0]!r} does not exist.",
                            "Add the key with POST /api/v1/ssh-keys first.")
        if region not in self.capacity.get(type_name, []):
            raise _ApiError(400, "instance-operations/launch/insufficient-capacity",
                            "Not enough capacity to fulfill launch request.",
                            "Try another region or instance type.")
        live = sum(1 for i in self.instances.values()
                   if self._status(i, now) in ("booting", "active", "unhealthy"))
        if self.quota is not None and live + quantity > self.quota:
            raise _ApiError(400, "global/quota-exceeded", "Quota exceeded.",
                            "Contact Support to increase your quota.")
        ids = []
        for _ in range(quantity):
            inst = EmulatedInstance(
                id=uuid.uuid4().hex, name=name, type_name=type_name, region=region,
                ssh_key_name=key["name"], public_key=key["public_key"],
                tags=[{"key": t["key"], "value": t["value"]} for t in tags], hostname=hostname,
                ip=self._next_ip(), launched_at=now, active_at=now + self.boot_seconds,
            )
            self.instances[inst.id] = inst
            if self.ssh_root is not None and self._loop is not None and self.ssh_error is None:
                starts.append(inst)
            ids.append(inst.id)
        return {"instance_ids": ids}

    def _next_ip(self) -> str:
        n = self._next_octet
        self._next_octet += 1
        if self.ssh_root is not None:
            return f"127.0.{n // 250}.{n % 250 + 2}" if n >= 250 else f"127.0.0.{n}"
        return f"198.51.100.{n % 250 + 2}"  # TEST-NET-2: never routed

    def _status(self, inst: EmulatedInstance, t: float) -> str | None:
        if inst.preempted_at is not None and t >= inst.preempted_at:
            return None if t >= inst.preempted_at + self.terminate_seconds + self.gone_seconds \
                else "preempted"
        if inst.terminate_at is not None:
            since = t - inst.terminate_at
            if since < self.terminate_seconds:
                return "terminating"
            if since < self.terminate_seconds + self.gone_seconds:
                return "terminated"
            return None
        if t < inst.active_at or (inst.restart_until is not None and t < inst.restart_until):
            return "booting"
        return "unhealthy" if inst.unhealthy else "active"

    def _json(self, inst: EmulatedInstance, now: float) -> dict[str, Any]:
        status = self._status(inst, now)
        ended = status in ("terminating", "terminated", "preempted")
        booting = status == "booting"

        def action(available: bool, code: str = "vm-has-not-launched") -> dict[str, Any]:
            if available:
                return {"available": True}
            return {"available": False, "reason_code": code,
                    "reason_description": "The instance cannot do that in its current state."}

        launched = now >= inst.active_at
        out: dict[str, Any] = {
            "id": inst.id,
            "status": status,
            "ssh_key_names": [inst.ssh_key_name],
            "file_system_names": [],
            "region": {"name": inst.region, "description": REGIONS.get(inst.region, inst.region)},
            "instance_type": copy.deepcopy(self.types[inst.type_name]),
            "actions": {
                "migrate": action(False, "vm-has-not-launched" if not launched else "vm-is-too-old"),
                "rebuild": action(launched and not ended and not booting),
                "restart": action(launched and not ended and not booting,
                                  "vm-is-terminating" if ended else "vm-has-not-launched"),
                "cold_reboot": action(launched and not ended and not booting),
                "terminate": action(not ended, "vm-is-terminating"),
            },
            "tags": [dict(t) for t in inst.tags],
            "is_reserved": False,
        }
        if inst.name is not None:
            out["name"] = inst.name
        if launched:
            out["ip"] = inst.ip
            out["private_ip"] = f"10.0.{len(inst.id) % 250}.{int(inst.id[:2], 16) % 250 + 2}"
            out["hostname"] = inst.hostname or inst.ip.replace(".", "-")
            out["jupyter_token"] = inst.jupyter_token
            out["jupyter_url"] = (f"https://jupyter-{inst.id}.lambdaspaces.example/"
                                  f"?token={inst.jupyter_token}")
        return out

    # -- SSH endpoints ---------------------------------------------------------------------------------

    def _start_server_blocking(self, inst: EmulatedInstance) -> None:
        """From the HTTP thread: serve the instance over SSH on the test's event loop."""
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self._start_server(inst), self._loop)
        try:
            fut.result(timeout=20)
        except Exception as exc:  # the API goes on; the instance is just unreachable
            self.ssh_error = f"{type(exc).__name__}: {exc}"

    async def _start_server(self, inst: EmulatedInstance) -> None:
        from gputui.providers.lambda_cloud import gpu_card
        from gputui.sandbox import server as sandbox_server
        from gputui.sandbox.shims.state import create_instance_dir

        assert self.ssh_root is not None
        t = self.types[inst.type_name]
        card, vram = gpu_card(t["gpu_description"])
        spec = _spec(card)
        smi_name = next((a for a in spec.aliases if a.startswith("NVIDIA ")), f"NVIDIA {spec.name}") \
            if spec else f"NVIDIA {card}"
        mem = (spec.nvidia_smi_total_mib or int(spec.vram_gb * 1024)) if spec \
            else int((vram or 24) * 1024)
        tdp = spec.tdp_w if spec else 700.0
        root = self.ssh_root / inst.id
        await asyncio.to_thread(
            create_instance_dir, root, instance_id=inst.id, gpu_name=smi_name,
            gpu_count=int(t["specs"]["gpus"]), memory_total_mib=mem, power_limit_w=tdp, tdp_w=tdp)
        for _ in range(5):
            # The sandbox server listens on its module's LISTEN_HOST; an emulated Lambda
            # instance has its own loopback address, so that is set for the duration of start.
            saved = sandbox_server.LISTEN_HOST
            sandbox_server.LISTEN_HOST = inst.ip
            try:
                inst.server = await sandbox_server.start_instance_server(
                    root, host_key_path=self.ssh_root / "host_keys" / inst.id,
                    authorized_keys=[inst.public_key], port=self.ssh_port)
                inst.root = root
                return
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                inst.ip = self._next_ip()  # that address:port is taken; take the next address
            finally:
                sandbox_server.LISTEN_HOST = saved
        raise OSError(errno.EADDRINUSE, "no free loopback address for the instance")

    def host_key(self, instance_id: str) -> Any:
        from gputui.sandbox.server import ensure_host_key

        assert self.ssh_root is not None
        return ensure_host_key(self.ssh_root / "host_keys" / instance_id)

    def _schedule_stop(self, inst: EmulatedInstance) -> None:
        if inst.server is not None and self._loop is not None:
            self._stops.append(asyncio.run_coroutine_threadsafe(self._stop_server(inst), self._loop))

    async def _stop_server(self, inst: EmulatedInstance) -> None:
        server, inst.server = inst.server, None
        if server is not None:
            with contextlib.suppress(Exception):
                await server.aclose()
        if inst.root is not None:
            from gputui.sandbox.shims.state import kill_processes

            with contextlib.suppress(Exception):
                await asyncio.to_thread(kill_processes, inst.root)

    @staticmethod
    def loopback_aliases_work() -> bool:
        """Linux answers on all of 127.0.0.0/8; other systems may not."""
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.2", 0))
            except OSError:
                return False
        return True


def _spec(card: str) -> Any:
    from gputui.catalog.match import card_for_reported_name

    return card_for_reported_name(card)


def _body(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8") or "null")
    except (ValueError, UnicodeDecodeError):
        raise _invalid("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise _invalid("The request body must be a JSON object.")
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
