"""A local emulator of AutoDL's open API for Pro instances, for tests: a real HTTP server on
127.0.0.1 following shared/reference/autodl-pro-api.md.

- auth by the bare token in `Authorization` (no `Bearer`); a wrong one is HTTP 401; a token of an
  account without identity verification gets the envelope failure "请先完成实名认证";
- every answer is the envelope `{"code", "msg", "data", "request_id"}`; logical failures are
  **HTTP 200** with a code other than "Success" and a Chinese message (余额不足, 暂无库存,
  实例不存在, 请求参数错误, 不支持的启动模式, state errors);
- money in milliyuan; `started_at`/`stopped_at` as Go `sql.NullTime`, `created_at` a plain
  +08:00 string, `expired_at` null;
- statuses `creating` → `starting` → `running` (sshd accepts `ssh_delay` later) →
  `shutting_down` → `shutdown` → (`releasing` → `released`); `release` only from `shutdown`, a
  second `power_off` while `shutting_down` is refused; 15 days shut down → released and wiped;
- every power cycle moves the instance: a new SSH port and a new root password (an asyncssh
  server with password auth on 127.0.0.1, built on gputui's sandbox instance server); a
  non-login shell has no conda on PATH, a login shell (`bash -lc`) does; `start_command` runs at
  each boot, and a `shutdown -h` on the instance powers it off (billing stops); powered off,
  the snapshot's `ssh_port` is 0 (a stopped instance has no endpoint);
- a wallet that runs down with use (per second of `running`, at the spec's `payg_price`);
- injection: `fail()` (any status, before or after the action is done), `delay()` (an answer that
  comes too late, after the action), `refuse()` (an envelope failure), sold-out specs,
  `fail_boot()`, `advance()` (move the clock, e.g. 15 days), `sell_out()` (stock that frees
  after some refused creates), `machine_full()` (power_on finds no free GPU for some tries),
  `wipe_at()` (when a shut-down instance is released and wiped), `use_disk()` (the snapshot's
  `usage_info` for the system and data disks);
- private images: `image/save` (`instance_uuid`, `image_name` → `{"image_uuid"}`) and
  `image/private/list` (paged like the instance list). The reference documents no list item
  fields nor statuses: here an item is `{image_uuid, image_name, instance_uuid, status,
  created_at, image_size}` with `status` "saving" for `image_save_s`, then "finished" (or
  "failed", `fail_image()`); an image holds the system disk only (its size is the root fs's);
- the snapshot's `jupyter_domain` and `service_6006`/`service_6008` `_domain`/`_port_protocol`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncssh

from gputui.sandbox.server import InstanceServer, _ServerConn, ensure_host_key

TEST_TOKEN = "autodl-dev-token-7f3a9c2e5b1d4e6f8a0b2c4d6e8f0a1b3c5d7e9f"
CST = timezone(timedelta(hours=8))
WIPE_DAYS = 15

# spec -> (payg milliyuan per GPU-hour, nvidia-smi name, MiB, TDP W)
DEFAULT_SPECS: dict[str, tuple[int, str, int, float]] = {
    "4090D": (1880, "NVIDIA GeForce RTX 4090 D", 24564, 425.0),
    "5090-p": (2780, "NVIDIA GeForce RTX 5090", 32607, 575.0),
    "v-48g": (2580, "NVIDIA GeForce RTX 4090", 49140, 450.0),
    "v-48g-350w": (1580, "NVIDIA GeForce RTX 3090", 49140, 350.0),
    "v-32g-p": (1480, "NVIDIA GeForce RTX 4080 SUPER", 32760, 320.0),
    "pro6000-p": (5980, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 600.0),
    "h800": (9880, "NVIDIA H800", 81559, 700.0),
}


class _Refusal(Exception):
    def __init__(self, msg: str, code: str = "Failed") -> None:
        super().__init__(msg)
        self.msg = msg
        self.code = code


@dataclass
class _Rule:
    prefix: str
    times: int
    status: int = 0  # 0: a delay rule
    body: bytes = b""
    seconds: float = 0.0
    after: bool = False
    envelope: tuple[str, str] | None = None  # (code, msg): an HTTP-200 refusal

    def matches(self, path: str) -> bool:
        return path.startswith(self.prefix)


@dataclass
class Cycle:
    """One power-on: where the instance is reachable and with what, until it powers off."""

    on_at: float
    boot_s: float
    port: int
    password: str
    off_at: float | None = None

    @property
    def running_from(self) -> float:
        return self.on_at + self.boot_s


@dataclass
class EmuInstance:
    uuid: str
    name: str
    spec: str
    gpus: int
    image: str
    expand_gb: int
    created_at: float
    price_milli: int  # per hour, the whole instance
    cycles: list[Cycle] = field(default_factory=list)
    release_at: float | None = None
    failed: bool = False
    server: Any = None
    root: Path | None = None
    start_commands: list[str] = field(default_factory=list)
    # disk use in bytes (the snapshot's usage_info): system disk and data disk
    root_used: int = 12 << 30
    data_used: int = 0
    data_total: int = 50 << 30


class PasswordInstanceServer(InstanceServer):
    """The sandbox instance server, but logging in as AutoDL's boxes do: root and a password;
    a non-login shell's PATH is the bare system one (no conda)."""

    def __init__(self, root: Path, host_key: asyncssh.SSHKey, password: str) -> None:
        super().__init__(root, host_key, None, _instance_off)  # type: ignore[arg-type]
        self._password = password
        self._base_path = "/usr/bin:/bin"

    async def _start(self, port: int, power_poll_interval: float | None) -> None:
        server = self

        class _Conn(_ServerConn):
            def password_auth_supported(self) -> bool:
                return True

            def validate_password(self, username: str, password: str) -> bool:
                return username == "root" and hmac.compare_digest(password.encode(),
                                                                   server._password.encode())

            def public_key_auth_supported(self) -> bool:
                return False

        self._acceptor = await asyncssh.listen(
            host="127.0.0.1", port=port, server_factory=lambda: _Conn(self),
            server_host_keys=[self._host_key], process_factory=self._session, encoding=None,
            line_editor=False, allow_scp=True, sftp_factory=self._sftp, agent_forwarding=False,
            x11_forwarding=False, password_auth=True, kbdint_auth=False, host_based_auth=False,
            public_key_auth=False, gss_host=None, config=None, login_timeout=30,
            keepalive_interval=15, keepalive_count_max=3)
        self.port = self._acceptor.get_port()
        if power_poll_interval:
            self._poll_task = asyncio.create_task(self._poll_power(power_poll_interval))


def _instance_off(root: Path) -> bool:
    from gputui.sandbox.server import instance_powered_off

    return instance_powered_off(root)


class AutoDLEmulator:
    def __init__(
        self,
        *,
        tokens: Iterable[str] = (TEST_TOKEN,),
        unverified_tokens: Iterable[str] = (),
        specs: dict[str, tuple[int, str, int, float]] | None = None,
        sold_out: Iterable[str] = (),
        balance: Decimal = Decimal("312.40"),
        vouchers: Decimal = Decimal("20"),
        accumulate: Decimal = Decimal("1024.50"),
        creating_s: float = 0.3,
        starting_s: float = 0.3,
        ssh_delay: float = 0.6,
        shutting_s: float = 0.3,
        releasing_s: float = 0.2,
        ssh_root: Path | None = None,
        image_save_s: float = 0.4,
    ) -> None:
        self.tokens = set(tokens)
        self.unverified = set(unverified_tokens)
        self.specs = dict(DEFAULT_SPECS if specs is None else specs)
        self.sold_out = set(sold_out)
        self.sold_out_tries: dict[str, int] = {}  # spec -> creates refused before stock frees
        self.no_gpu_tries: dict[str, int] = {}  # uuid -> power_ons refused (its machine full)
        self.initial_milli = int(balance * 1000)
        self.voucher_milli = int(vouchers * 1000)
        self.accumulate_milli = int(accumulate * 1000)
        self.creating_s = creating_s
        self.starting_s = starting_s
        self.ssh_delay = ssh_delay
        self.shutting_s = shutting_s
        self.releasing_s = releasing_s
        self.ssh_root = Path(ssh_root) if ssh_root else None
        self.offset = 0.0  # advance(): the platform's clock ahead of ours
        self.list_hidden = False  # injection: new instances missing from `list` (a lagging index)
        self.instances: dict[str, EmuInstance] = {}
        self.calls: list[tuple[str, str, int, str]] = []  # (method, path, http, code)
        self.bodies: list[dict[str, Any]] = []  # create bodies, as received
        self.auth_headers: list[str] = []
        self.ssh_error: str | None = None
        self.image_save_s = image_save_s
        self.images: dict[str, dict[str, Any]] = {}  # image_uuid -> record
        self._rules: list[_Rule] = []
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[Any] = []

    # -- running -----------------------------------------------------------------------------

    async def start(self) -> AutoDLEmulator:
        self._loop = asyncio.get_running_loop()
        emulator = self

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload = emulator.handle(method, self.path, self.headers, body)
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="autodl-emulator",
                         daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    async def close(self) -> None:
        if self._httpd is not None:
            httpd, self._httpd = self._httpd, None
            await asyncio.to_thread(httpd.shutdown)
            httpd.server_close()
        for fut in self._tasks:
            fut.cancel()
        for inst in list(self.instances.values()):
            await self._stop_server(inst)

    async def __aenter__(self) -> AutoDLEmulator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- injection and inspection --------------------------------------------------------------

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds

    def fail(self, prefix: str, status: int = 500, *, times: int = 1, after: bool = False,
             body: bytes = b'{"error":"internal"}') -> None:
        """The next `times` calls under `/api/v1/dev{prefix}` answer HTTP `status`; `after`:
        the action is done first (the caller cannot know it happened)."""
        with self._lock:
            self._rules.append(_Rule("/api/v1/dev" + prefix, times, status=status, body=body,
                                     after=after))

    def delay(self, prefix: str, seconds: float, *, times: int = 1, after: bool = True) -> None:
        with self._lock:
            self._rules.append(_Rule("/api/v1/dev" + prefix, times, seconds=seconds, after=after))

    def refuse(self, prefix: str, msg: str, *, code: str = "Failed", times: int = 1) -> None:
        """The next `times` calls get HTTP 200 with an envelope failure."""
        with self._lock:
            self._rules.append(_Rule("/api/v1/dev" + prefix, times, status=200,
                                     envelope=(code, msg)))

    def clear_faults(self) -> None:
        """Every injected failure and delay still pending is dropped."""
        with self._lock:
            self._rules.clear()

    def sell_out(self, spec: str, tries: int) -> None:
        """The next `tries` creates of `spec` are refused for stock (暂无库存); then it frees."""
        with self._lock:
            self.sold_out_tries[spec] = tries

    def machine_full(self, uuid: str, tries: int) -> None:
        """The next `tries` power_ons of the instance find no free GPU on its machine."""
        with self._lock:
            self.no_gpu_tries[uuid] = tries

    def wipe_at(self, uuid: str) -> float | None:
        """When AutoDL releases and wipes the instance (15 days shut down), platform time;
        None while it is powered on."""
        with self._lock:
            c = self.instances[uuid].cycles[-1]
            return None if c.off_at is None else c.off_at + self.shutting_s + WIPE_DAYS * 86400

    def use_disk(self, uuid: str, *, system_gb: float | None = None,
                 data_gb: float | None = None, data_total_gb: float | None = None) -> None:
        """Set what the snapshot's usage_info reports for the instance's disks."""
        with self._lock:
            inst = self.instances[uuid]
            if system_gb is not None:
                inst.root_used = int(system_gb * (1 << 30))
            if data_gb is not None:
                inst.data_used = int(data_gb * (1 << 30))
            if data_total_gb is not None:
                inst.data_total = int(data_total_gb * (1 << 30))

    def fail_image(self, image_uuid: str) -> None:
        with self._lock:
            self.images[image_uuid]["failed"] = True

    def add_image(self, name: str, *, saved: bool = True) -> str:
        """A private image already in the account (saved long ago, or still saving)."""
        with self._lock:
            image_uuid = f"image-{uuidlib.uuid4().hex[:10]}"
            at = self.now() - (86400 if saved else 0)
            self.images[image_uuid] = {"name": name, "instance": "", "at": at, "failed": False}
            return image_uuid

    def fail_boot(self, uuid: str) -> None:
        with self._lock:
            self.instances[uuid].failed = True

    def count(self, path: str, http: int | None = None) -> int:
        with self._lock:
            return sum(1 for _, p, s, _ in self.calls
                       if p == "/api/v1/dev" + path and (http is None or s == http))

    def status_of(self, uuid: str) -> str:
        with self._lock:
            return self._status(self.instances[uuid], self.now())

    def password(self, uuid: str) -> str:
        with self._lock:
            return self.instances[uuid].cycles[-1].password

    def balance_milli(self) -> int:
        with self._lock:
            return self.initial_milli - self._spent(self.now())

    def charged(self, uuid: str) -> Decimal:
        """What the wallet paid for the instance so far, in yuan (unrounded)."""
        with self._lock:
            return Decimal(self._charge(self.instances[uuid], self.now())) / 1000

    # -- HTTP ------------------------------------------------------------------------------------

    def handle(self, method: str, raw: str, headers: Any, body: bytes) -> tuple[int, bytes]:
        url = urlsplit(raw)
        path = url.path.rstrip("/")
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with self._lock:
            before = self._take(path, after=False)
        for rule in before:
            if rule.seconds:
                time.sleep(rule.seconds)
        status, payload, code = self._handle(method, path, query, headers, body, before)
        with self._lock:
            after = self._take(path, after=True) if status == 200 else []
        for rule in after:
            if rule.seconds:
                time.sleep(rule.seconds)
            if rule.status:
                status, payload, code = rule.status, rule.body, ""
        with self._lock:
            self.calls.append((method, path, status, code))
        return status, payload

    def _take(self, path: str, *, after: bool) -> list[_Rule]:
        taken: list[_Rule] = []
        for is_delay in (True, False):
            for rule in self._rules:
                if rule.after == after and rule.matches(path) and (rule.status == 0) == is_delay:
                    rule.times -= 1
                    taken.append(rule)
                    break
        self._rules = [r for r in self._rules if r.times > 0]
        return taken

    def _handle(self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes,
                before: list[_Rule]) -> tuple[int, bytes, str]:
        token = (headers.get("Authorization") or "").strip()
        with self._lock:
            self.auth_headers.append(token[:6])
            if token not in self.tokens and token not in self.unverified:
                return 401, b'{"code":"Unauthorized","msg":"token invalid"}', "401"
            for rule in before:
                if rule.envelope:
                    return 200, _envelope(None, *rule.envelope), rule.envelope[0]
                if rule.status:
                    return rule.status, rule.body, ""
            if token in self.unverified:
                return 200, _envelope(None, "AuthorizationFailed", "请先完成实名认证后再使用开发者API"), \
                    "AuthorizationFailed"
            try:
                req = json.loads(body.decode() or "{}") if method == "POST" else dict(query)
                if not isinstance(req, dict):
                    raise ValueError
            except (ValueError, UnicodeDecodeError):
                return 200, _envelope(None, "InvalidParams", "请求参数错误"), "InvalidParams"
            try:
                data = self._route(method, path, req)
            except _Refusal as r:
                return 200, _envelope(None, r.code, r.msg), r.code
        return 200, _envelope(data, "Success", ""), "Success"

    def _route(self, method: str, path: str, req: dict[str, Any]) -> Any:
        now = self.now()
        route = path.removeprefix("/api/v1/dev")
        match (method, route):
            case ("POST", "/instance/pro/create"):
                return self._create(req, now)
            case ("POST", "/instance/pro/list"):
                items = [self._json(i, now) for i in self.instances.values()
                         if self._status(i, now) != "gone" and not self.list_hidden]
                size = int(req.get("page_size") or 10)
                page = int(req.get("page_index") or 1)
                total = len(items)
                return {"list": items[(page - 1) * size: page * size], "page_index": page,
                        "page_size": size, "max_page": max(1, -(-total // size)),
                        "result_total": total}
            case ("GET", "/instance/pro/status"):
                return self._status(self._get(req), now)
            case ("GET", "/instance/pro/snapshot"):
                return self._snapshot(self._get(req), now)
            case ("POST", "/instance/pro/power_off"):
                inst = self._get(req)
                st = self._status(inst, now)
                if st == "shutting_down":
                    raise _Refusal("实例正在关机中，请勿重复操作", "InstanceStatusError")
                if st in ("creating", "starting", "running"):
                    inst.cycles[-1].off_at = now
                    self._schedule_stop(inst)
                elif st != "shutdown":
                    raise _Refusal("实例当前状态不允许关机", "InstanceStatusError")
                return None
            case ("POST", "/instance/pro/power_on"):
                inst = self._get(req)
                if req.get("payload") != "gpu":
                    raise _Refusal("不支持的启动模式", "InvalidStartMode")
                if self._status(inst, now) != "shutdown":
                    raise _Refusal("实例当前状态不允许开机", "InstanceStatusError")
                if self.initial_milli - self._spent(now) <= 0:
                    raise _Refusal("余额不足，请充值后再试", "InsufficientBalance")
                if self.no_gpu_tries.get(inst.uuid, 0) > 0:
                    self.no_gpu_tries[inst.uuid] -= 1
                    raise _Refusal("资源不足，当前主机没有空闲的GPU，请稍后再试", "NoStock")
                self._power_on(inst, now, str(req.get("start_command") or ""), first=False)
                return None
            case ("POST", "/instance/pro/release"):
                inst = self._get(req)
                st = self._status(inst, now)
                if st in ("releasing", "released"):
                    raise _Refusal("实例已释放", "InstanceStatusError")
                if st != "shutdown":
                    raise _Refusal("实例未关机，不允许释放", "InstanceStatusError")
                inst.release_at = now
                return None
            case ("POST", "/instance/pro/image/save"):
                inst = self._get(req)
                name = req.get("image_name")
                if not isinstance(name, str) or not name.strip() or len(name) > 64:
                    raise _Refusal("请求参数错误: image_name", "InvalidParams")
                if self._status(inst, now) not in ("running", "shutdown"):
                    raise _Refusal("实例当前状态不允许保存镜像", "InstanceStatusError")
                image_uuid = f"image-{uuidlib.uuid4().hex[:10]}"
                self.images[image_uuid] = {"name": name, "instance": inst.uuid, "at": now,
                                           "failed": False}
                return {"image_uuid": image_uuid}
            case ("POST", "/instance/pro/image/private/list"):
                items = [self._image_json(k, v, now) for k, v in self.images.items()]
                size = int(req.get("page_size") or 10)
                page = int(req.get("page_index") or 1)
                total = len(items)
                return {"list": items[(page - 1) * size: page * size], "page_index": page,
                        "page_size": size, "max_page": max(1, -(-total // size)),
                        "result_total": total}
            case ("POST", "/wallet/balance"):
                spent = self._spent(now)
                return {"assets": self.initial_milli - spent,
                        "accumulate": self.accumulate_milli + spent,
                        "voucher_balance": self.voucher_milli}
        raise _Refusal("请求参数错误: 未知接口", "InvalidParams")

    def _get(self, req: dict[str, Any]) -> EmuInstance:
        inst = self.instances.get(str(req.get("instance_uuid") or ""))
        if inst is None or self._status(inst, self.now()) == "gone":
            raise _Refusal("实例不存在", "InstanceNotFound")
        return inst

    def _create(self, req: dict[str, Any], now: float) -> str:
        self.bodies.append(dict(req))
        spec = req.get("gpu_spec_uuid")
        amount = req.get("req_gpu_amount")
        expand = req.get("expand_system_disk_by_gb", 0)
        if spec not in self.specs or not isinstance(amount, int) or not 1 <= amount <= 4 \
                or not isinstance(expand, int) or not 0 <= expand <= 500 \
                or not isinstance(req.get("image_uuid"), str) \
                or not isinstance(req.get("cuda_v_from", 0), int):
            raise _Refusal("请求参数错误", "InvalidParams")
        image = req["image_uuid"]
        rec = self.images.get(image)
        if not image.startswith("base-image-") and (
                rec is None or self._image_json(image, rec, now)["status"] != "finished"):
            raise _Refusal("镜像不存在或未保存完成", "ImageNotFound")
        if spec in self.sold_out:
            raise _Refusal("暂无库存，请稍后再试或选择其他规格", "NoStock")
        if self.sold_out_tries.get(spec, 0) > 0:
            self.sold_out_tries[spec] -= 1
            raise _Refusal("暂无库存，请稍后再试或选择其他规格", "NoStock")
        if self.initial_milli - self._spent(now) <= 0:
            raise _Refusal("余额不足，请充值后再试", "InsufficientBalance")
        uuid = f"pro-{uuidlib.uuid4().hex[:12]}"
        inst = EmuInstance(uuid=uuid, name=str(req.get("instance_name") or uuid), spec=spec,
                           gpus=amount, image=req["image_uuid"], expand_gb=expand,
                           created_at=now, price_milli=self.specs[spec][0] * amount)
        self.instances[uuid] = inst
        self._power_on(inst, now, str(req.get("start_command") or ""), first=True)
        return uuid

    def _power_on(self, inst: EmuInstance, now: float, start_command: str, *, first: bool) -> None:
        boot = (self.creating_s if first else 0.0) + self.starting_s
        cycle = Cycle(on_at=now, boot_s=boot, port=_free_port(),
                      password=secrets.token_urlsafe(12))
        inst.cycles.append(cycle)
        inst.start_commands.append(start_command)
        if self.ssh_root is not None and self._loop is not None:
            self._tasks.append(asyncio.run_coroutine_threadsafe(
                self._serve_when_up(inst, cycle, start_command), self._loop))

    # -- status and time ---------------------------------------------------------------------------

    def _on_instance_off(self, inst: EmuInstance, cycle: Cycle) -> float | None:
        """A `shutdown -h` run on the instance: when it went off (platform time)."""
        if inst.root is None or cycle.off_at is not None:
            return None
        from gputui.sandbox.shims.state import power_state

        try:
            state = power_state(inst.root)
        except Exception:
            return None
        if state.is_off and state.at is not None:
            return state.at.timestamp() + self.offset
        return None

    def _status(self, inst: EmuInstance, t: float) -> str:
        if inst.release_at is not None:
            if t - inst.release_at < self.releasing_s:
                return "releasing"
            return "released" if t - inst.release_at < 3600 else "gone"
        if inst.failed:
            return "failed"
        cycle = inst.cycles[-1]
        off = self._on_instance_off(inst, cycle)
        if off is not None and off <= t:
            cycle.off_at = max(off, cycle.on_at)
            self._schedule_stop(inst)
        if cycle.off_at is not None:
            if t - cycle.off_at < self.shutting_s:
                return "shutting_down"
            wipe = cycle.off_at + self.shutting_s + WIPE_DAYS * 86400
            if t >= wipe:  # 15 days shut down: released and its data wiped
                inst.release_at = wipe
                return self._status(inst, t)
            return "shutdown"
        if t < cycle.running_from:
            first = len(inst.cycles) == 1
            return "creating" if first and t - cycle.on_at < self.creating_s else "starting"
        return "running"

    def _charge(self, inst: EmuInstance, t: float) -> int:
        """Milliyuan charged for the instance: per second of `running` (billing by power)."""
        secs = 0.0
        for c in inst.cycles:
            end = min(x for x in (c.off_at, inst.release_at, t) if x is not None)
            secs += max(0.0, end - c.running_from)
        return int(secs * inst.price_milli / 3600)

    def _spent(self, t: float) -> int:
        for inst in self.instances.values():
            self._status(inst, t)  # pick up on-instance power-offs
        return sum(self._charge(i, t) for i in self.instances.values())

    def _json(self, inst: EmuInstance, t: float) -> dict[str, Any]:
        st = self._status(inst, t)
        c = inst.cycles[-1]
        started = c.running_from if t >= c.running_from else None
        stopped = c.off_at
        return {
            "uuid": inst.uuid, "name": inst.name, "status": st, "sub_status": "",
            "machine_id": f"m-{inst.uuid[-6:]}", "region_sign": "westDC3",
            "region_name": "西北B区", "charge_type": "payg", "start_mode": "gpu",
            "req_gpu_amount": inst.gpus, "gpu_spec_uuid": inst.spec,
            "created_at": _cst(inst.created_at),
            "status_at": _cst(t),
            "started_at": _null_time(started),
            "stopped_at": _null_time(stopped),
            "expired_at": None,
            "timed_shutdown_at": {"Time": "0001-01-01T00:00:00Z", "Valid": False},
        }

    def _image_json(self, image_uuid: str, rec: dict[str, Any], t: float) -> dict[str, Any]:
        if rec["failed"]:
            status = "failed"
        else:
            status = "saving" if t - rec["at"] < self.image_save_s else "finished"
        return {"image_uuid": image_uuid, "image_name": rec["name"],
                "instance_uuid": rec["instance"], "status": status,
                "created_at": _cst(rec["at"]), "image_size": 12 << 30}

    def _snapshot(self, inst: EmuInstance, t: float) -> dict[str, Any]:
        c = inst.cycles[-1]
        # powered off, the box has no port: the snapshot says 0 (as AutoDL's does)
        port = 0 if self._status(inst, t) in ("shutting_down", "shutdown") else c.port
        return {
            "region_sign": "westDC3", "payg_price": inst.price_milli,
            "origin_pay_price": int(inst.price_milli * 1.1),
            "snapshot_gpu_alias_name": self.specs[inst.spec][1], "chip_corp": "nvidia",
            "cpu_arch": "x86", "ssh_command": f"ssh -p {port} root@127.0.0.1",
            "proxy_host": "127.0.0.1", "ssh_port": port, "root_password": c.password,
            "jupyter_token": secrets.token_hex(8),
            "jupyter_domain": f"https://{inst.uuid}-jupyter.westb.seetacloud.com:8443",
            "service_6006_domain": f"{inst.uuid}-6006.westb.seetacloud.com:8443",
            "service_6006_port_protocol": "https",
            "service_6008_domain": f"{inst.uuid}-6008.westb.seetacloud.com:8443",
            "service_6008_port_protocol": "http",
            "system_init_disk_size": 30 * 1024**3,
            "expand_system_disk_size": inst.expand_gb * 1024**3,
            "usage_info": {"cpu_usage_percent": 3, "mem_usage_percent": 10,
                           "mem_usage": 1 << 30, "mem_limit": 64 << 30,
                           "root_fs_used_size": inst.root_used,
                           "root_fs_total_size": (30 + inst.expand_gb) << 30,
                           "data_disk_used_size": inst.data_used,
                           "data_disk_total_size": inst.data_total},
        }

    # -- SSH -----------------------------------------------------------------------------------------

    async def _serve_when_up(self, inst: EmuInstance, cycle: Cycle, start_command: str) -> None:
        """sshd accepts `ssh_delay` after `running`, on this cycle's port and password."""
        try:
            wait = cycle.running_from + self.ssh_delay - self.now()
            if wait > 0:
                await asyncio.sleep(wait)
            if cycle.off_at is not None or inst.cycles[-1] is not cycle:
                return
            await self._start_server(inst, cycle, start_command)
        except Exception as exc:  # the API goes on; the instance is just unreachable
            self.ssh_error = f"{type(exc).__name__}: {exc}"

    async def _start_server(self, inst: EmuInstance, cycle: Cycle, start_command: str) -> None:
        from gputui.sandbox.shims.state import create_instance_dir, power_on

        assert self.ssh_root is not None
        _, smi, mib, tdp = self.specs[inst.spec]
        root = self.ssh_root / inst.uuid
        if not (root / ".sandbox").exists():
            await asyncio.to_thread(
                create_instance_dir, root, instance_id=inst.uuid, gpu_name=smi,
                gpu_count=inst.gpus, memory_total_mib=mib, power_limit_w=tdp, tdp_w=tdp)
            conda = root / "miniconda3" / "bin"
            conda.mkdir(parents=True, exist_ok=True)
            (conda / "conda").write_text("#!/bin/sh\necho 'conda 24.5.0'\n")
            (conda / "conda").chmod(0o755)
            # a login shell (bash -l) reads this: conda's PATH, as on AutoDL's images
            (root / ".bash_profile").write_text(
                'export PATH="$HOME/bin:$HOME/miniconda3/bin:$PATH"\n')
        await asyncio.to_thread(power_on, root)
        inst.root = root
        server = PasswordInstanceServer(root, ensure_host_key(self.ssh_root / "host_keys" /
                                                              inst.uuid), cycle.password)
        await server._start(cycle.port, 0.5)
        inst.server = server
        if start_command:  # AutoDL runs it after boot
            env = {"PATH": f"{root / 'bin'}:/usr/bin:/bin", "HOME": str(root),
                   "GPUTUI_SANDBOX_ROOT": str(root)}
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", start_command, cwd=root, env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
            await proc.wait()

    def _schedule_stop(self, inst: EmuInstance) -> None:
        if inst.server is not None and self._loop is not None:
            self._tasks.append(asyncio.run_coroutine_threadsafe(self._stop_server(inst),
                                                                self._loop))

    async def _stop_server(self, inst: EmuInstance) -> None:
        server, inst.server = inst.server, None
        if server is not None:
            with contextlib.suppress(Exception):
                await server.aclose()


def _envelope(data: Any, code: str, msg: str) -> bytes:
    return json.dumps({"code": code, "msg": msg, "data": data,
                       "request_id": uuidlib.uuid4().hex}, ensure_ascii=False).encode()


def _cst(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).astimezone(CST).isoformat(timespec="seconds")


def _null_time(t: float | None) -> dict[str, Any]:
    if t is None:
        return {"Time": "0001-01-01T00:00:00Z", "Valid": False}
    return {"Time": _cst(t), "Valid": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


__all__ = ["TEST_TOKEN", "AutoDLEmulator", "PasswordInstanceServer"]
