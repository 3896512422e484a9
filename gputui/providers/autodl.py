"""`autodl`: AutoDL's open API for Pro instances (China; money in yuan), over httpx.

The platform's facts are in shared/reference/autodl-pro-api.md; how they are used here:

- **Transport.** Every call carries `Authorization: <token>` (the bare developer token, no
  `Bearer`). Every answer is an envelope `{"code", "msg", "data", "request_id"}`; a logical
  failure is **HTTP 200 with `code` other than "Success"** and a Chinese `msg`, mapped here to one
  clear line by what the message says (余额不足, 暂无库存/资源不足, 不存在, 请求参数错误, 实名, 不支持的启动模式),
  the platform's own words kept in brackets. HTTP 401/403 is a refused token (bad input, exit 2);
  429, 5xx and timeouts are retried with backoff — except `create`, which is never retried.
- **Money** is milliyuan (`1880` = ¥1.88); everything here is `Decimal` yuan, currency `CNY`.
- **Times** may be Go's `sql.NullTime` (`{"Time", "Valid"}`), a plain string, or null, in China
  Standard Time (+08:00 when the string carries no offset); read by `parse_time`.
- **Offers** are the Pro GPU specs reachable through the API. The API lists no price for a spec,
  so an offer carries a dated reference price where one is sourced (with its date and strength),
  else the last live `payg_price` gputui read for that spec (with its date), and otherwise no
  price (`price_known=False`, "price on creation" — never ¥0.00); the instance's real price is
  its snapshot's `payg_price`, read as soon as it exists and on every refresh.
- **Create** is not idempotent. Each instance is named `NAME.gputui-ID`; an answer lost (timeout,
  5xx) is resolved by finding that name in `list`, never by creating again. Found nowhere, the
  record is kept ("outcome unknown") for `refresh` to find it by name, and written off after 15
  minutes. Before anything is recorded, `check_request` refuses a count outside 1–4, a disk above
  what the API takes, and a wallet below the minimum balance (a wallet at zero does not stop an
  instance cleanly: AutoDL keeps it, unusable).
- **Boot.** `creating` → `starting` → `running`; `running` comes before sshd accepts, so the SSH
  port is then probed for an SSH banner with growing gaps.
- **SSH** is `root@proxy_host:ssh_port` with the snapshot's `root_password`. Both are read from
  the snapshot on **every** connection (`link_target`): the port and password change when the
  instance moves on a power cycle. The password lives only in the open link's memory: never in
  the state database, a log line, an export or a screen. A moved endpoint is a new host for
  known_hosts (its first key is trusted, since the API says the instance is there).
- **Remote commands** run in a login shell (`bash -lc`): conda's PATH (/root/miniconda3/bin)
  arrives only that way.
- **Stop/start** are `power_off`/`power_on` (billing is by power state). **Release** needs a
  completed shutdown: it powers off, waits for `shutdown`, then releases, and records the end
  only when AutoDL shows `releasing`/`released`.
- **The release timer.** There is no scheduled-shutdown endpoint (`scheduled_release=False`:
  nothing is claimed at the provider). Layer 1, on the instance: `start_command` arms a
  `shutdown -h` for the deadline at every boot (and `arm` re-arms it over SSH on extend); since
  power-off stops the GPU charge, that alone stops the meter. Layer 3: the console and `reap`
  power it off at the deadline and release it (or only power it off, `at_deadline = "stop"`).
- **Unknown statuses** are kept as the status detail, never fatal. An instance left shut down
  for 15 days is released and wiped by AutoDL (`WIPE_AFTER_DAYS`).

**The token** comes from `AUTODL_TOKEN` or `[providers.autodl] token` in config.toml (which must
then be mode 0600, or the config is refused). It is never logged, stored or shown unmasked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from gputui.config import AUTODL_TOKEN_ENV
from gputui.errors import BadInput, said, without_prefix
from gputui.i18n import N_, Deferred
from gputui.models import (
    BillingRule,
    DiskUsage,
    Granularity,
    Instance,
    InstanceStatus,
    Offer,
    SSHEndpoint,
    as_utc,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    Provider,
    ProviderContext,
    ProviderError,
)
from gputui.providers.rest import ApiKey, KeyedHttpClient, mask_key

if TYPE_CHECKING:
    import httpx

    from gputui.config import Config

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.autodl.com"
ENV_KEY = AUTODL_TOKEN_ENV
ENV_BASE = "AUTODL_API_BASE"
TOKEN_PAGE = Deferred(N_("the AutoDL console (设置 → 开发者 Token)"))
CURRENCY = "CNY"
CST = timezone(timedelta(hours=8), "CST")
WIPE_AFTER_DAYS = 15  # shut down this long: released and wiped by AutoDL
MAX_GPUS = 4
MAX_EXPAND_GB = 500
SYSTEM_DISK_GB = 30
DATA_FOLDER = "~/autodl-tmp"  # /root/autodl-tmp: the data disk (faster, not in images)
NAME_TAG = ".gputui-"  # instance_name = NAME.gputui-OURID: found again by name
LOGIN_SHELL = "bash -lc"
SSH_USER = "root"
_P = "/api/v1/dev"


# -- the GPU specs ----------------------------------------------------------------------------

# gpu_spec_uuid -> (catalog card name, VRAM GB, AutoDL's words). Reachable through the API in
# 2026-08 (reference file); the 48 GB/32 GB cards are modified consumer boards.
PRO_SPECS: dict[str, tuple[str, float, str]] = {
    "4090D": ("GeForce RTX 4090 D (China SKU)", 24, "RTX 4090 D 24G"),
    "5090-p": ("GeForce RTX 5090", 32, "RTX 5090 32G"),
    "v-48g": ("RTX 4090 48GB (modified)", 48, "4090-48G"),
    "v-48g-350w": ("RTX 3090 48GB (modified)", 48, "3090-48G"),
    "v-32g-p": ("RTX 4080 SUPER 32GB (modified)", 32, "4080S-32G"),
    "pro6000-p": ("RTX PRO 6000 96GB", 96, "RTX PRO 6000 96G"),
    "h800": ("H800 80GB", 80, "H800-80G"),
}

# Dated reference prices (¥/GPU-hour), from the reference file; never live quotes.
REFERENCE_PRICES: dict[str, tuple[Decimal, str, str, str]] = {
    # spec: (price, source, date, strength)
    "5090-p": (Decimal("2.78"), "参考价 in a renter's notes (platform inferred to be AutoDL)",
               "2026-09", "weak"),
}


def yuan(milli: Any) -> Decimal | None:
    """Milliyuan (an integer, ¥ × 1000) → yuan; None for anything else."""
    if isinstance(milli, bool) or milli is None:
        return None
    try:
        value = Decimal(str(milli))
    except ArithmeticError:
        return None
    if not value.is_finite():
        return None
    return value / 1000


def parse_time(value: Any) -> datetime | None:
    """AutoDL's nullable times: `{"Time", "Valid"}` (Go sql.NullTime), a plain string, or null.
    A string without an offset is China Standard Time; Go's zero time is None."""
    if isinstance(value, Mapping):
        if not value.get("Valid"):
            return None
        value = value.get("Time")
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace(" ", "T", 1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)  # Go writes nanoseconds
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=CST)
    if at.year <= 1:
        return None
    return at.astimezone(UTC)


def disk_usage(snapshot: Mapping[str, Any]) -> DiskUsage | None:
    """The snapshot's `usage_info` → the system disk (`root_fs_*`) and the data disk
    (`data_disk_*`), in bytes; values that are not whole non-negative numbers are unknown."""
    info = snapshot.get("usage_info")
    if not isinstance(info, Mapping):
        return None

    def size(key: str) -> int | None:
        value = info.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
                or value != value or value > 1 << 60:
            return None
        return int(value)

    usage = DiskUsage(system_used=size("root_fs_used_size"),
                      system_total=size("root_fs_total_size"),
                      data_used=size("data_disk_used_size"),
                      data_total=size("data_disk_total_size"))
    if all(v is None for v in (usage.system_used, usage.system_total, usage.data_used,
                               usage.data_total)):
        return None
    return usage


def resolve_token(config: Config, env: Mapping[str, str] | None = None
                  ) -> tuple[ApiKey | None, str]:
    """(token, where it came from). `AUTODL_TOKEN` wins over config.toml (whose mode load_config
    has checked)."""
    env = os.environ if env is None else env
    raw = (env.get(ENV_KEY) or "").strip()
    source = ENV_KEY
    if not raw:
        raw = (config.providers.autodl.token or "").strip()
        source = "config.toml [providers.autodl] token"
    if not raw:
        return None, ""
    try:
        return ApiKey(raw), source
    except ValueError as exc:
        raise AutoDLAuthError(Deferred(N_("autodl: the token in {source} is unusable: {reason}"),
                                       source=source, reason=said(exc))) from None


def normalise_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://", url):
        raise ValueError(Deferred(N_("{url} is not an http(s) URL"), url=repr(url)))
    return url.removesuffix("/api/v1/dev").removesuffix("/api/v1")


def clean(text: Any, limit: int = 120) -> str:
    """Text from the API made safe for a terminal (gputui's one sanitiser): no escape
    sequences, control or bidi characters, one line."""
    from gputui.sanitize import sanitize

    return sanitize(text, limit)


# -- errors --------------------------------------------------------------------------------------


class AutoDLError(ProviderError):
    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 kind: str = "other", retryable: bool = False,
                 outcome_unknown: bool = False) -> None:
        super().__init__(message, retryable=retryable, outcome_unknown=outcome_unknown)
        self.status = status
        self.code = code
        self.kind = kind  # balance | stock | not_found | params | identity | boot_mode | state | ...

    @property
    def not_found(self) -> bool:
        return self.kind == "not_found"


class AutoDLAuthError(AutoDLError, BadInput):
    """No token, or AutoDL refused it: the request cannot be made at all (exit 2)."""


class AutoDLBadRequest(AutoDLError, BadInput):
    """A request AutoDL would refuse (count, disk, spec): refused before anything is created."""


# What AutoDL's messages say → (kind, our line). Matched in order, on the Chinese text.
_MESSAGES: list[tuple[tuple[str, ...], str, str]] = [
    (("实名",), "identity",
     N_("the account has not passed identity verification (实名认证), so AutoDL's API refuses "
        "it — complete it in the AutoDL console")),
    (("余额不足", "余额"), "balance",
     N_("the wallet balance is too low — top up in the AutoDL console")),
    (("库存", "资源不足", "售罄"), "stock",
     N_("no stock of that GPU spec right now — try another spec or later")),
    (("不支持的启动模式", "启动模式"), "boot_mode",
     N_("unsupported boot mode (the API boots with GPUs only)")),
    (("不存在", "未找到"), "not_found", N_("not found")),
    (("参数",), "params", N_("the request was refused as invalid")),
    (("状态", "关机中", "开机中", "正在"), "state",
     N_("the instance is not in a state that allows that now")),
]


def envelope_error(code: Any, msg: Any, what: str) -> AutoDLError:
    text = clean(msg or "", 160)
    kind, line = next(((k, v) for needles, k, v in _MESSAGES if any(n in text for n in needles)),
                      ("other", N_("AutoDL refused it")))
    # AutoDL's own words follow ours, as they came (sanitised), in brackets.
    out = Deferred(N_("autodl: {what}: {line}{said}"), what=what, line=Deferred(line),
                   said=f" [{text}]" if text else "")
    return AutoDLError(out, code=clean(code or "", 40) or None, kind=kind)


class _Ambiguous(Exception):
    def __init__(self, error: AutoDLError) -> None:
        super().__init__(str(error))
        self.error = error


# -- the provider ------------------------------------------------------------------------------


class AutoDLProvider(KeyedHttpClient, Provider):
    name = "autodl"
    label = N_("AutoDL (Pro, ¥)")
    currency = CURRENCY
    login_shell = LOGIN_SHELL
    wipe_after_days = WIPE_AFTER_DAYS
    data_folder = DATA_FOLDER
    capabilities = Capabilities(
        stop_start=True,
        scheduled_release=False,  # no scheduled-shutdown endpoint exists: none is claimed
        power_off_stops_billing=True,  # billing is by power state
        account=True,
        sold_out_refusals=True,  # 暂无库存 / 资源不足 / 售罄 (kind "stock")
        tags=True,  # instances carry our id: `find_tagged` finds a lost launch
        spot=False,
        simulated=False,
        max_gpus=MAX_GPUS,  # check_request refuses more
    )

    def __init__(
        self,
        ctx: ProviderContext,
        *,
        token: str | None = None,
        base_url: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        poll_interval: float = 5.0,
        boot_timeout: float = 20 * 60.0,
        ssh_timeout: float = 5 * 60.0,
        ssh_first_wait: float = 5.0,
        stop_timeout: float = 5 * 60.0,
        find_attempts: int = 3,
        find_interval: float = 5.0,
        max_attempts: int = 5,
        backoff: float = 1.0,
        backoff_max: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.ctx = ctx
        env = os.environ if env is None else env
        settings = ctx.config.providers.autodl
        self.settings = settings
        if token is not None:
            try:
                self._key: ApiKey | None = ApiKey(token)
            except ValueError as exc:
                raise AutoDLAuthError(Deferred(N_("autodl: unusable token: {reason}"),
                                               reason=said(exc))) from None
            self.key_source = "given"
        else:
            self._key, self.key_source = resolve_token(ctx.config, env)
        raw_base = base_url or (env.get(ENV_BASE) or "").strip() or settings.base_url \
            or DEFAULT_BASE_URL
        try:
            self.base_url = normalise_base_url(raw_base)
        except ValueError as exc:
            raise ProviderError(Deferred(N_("autodl: base_url: {reason}"),
                                         reason=said(exc))) from None
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.poll_interval = poll_interval
        self.boot_timeout = boot_timeout
        self.ssh_timeout = ssh_timeout
        self.ssh_first_wait = ssh_first_wait
        self.stop_timeout = stop_timeout
        self.find_attempts = max(1, find_attempts)
        self.find_interval = find_interval
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.min_balance = Decimal(settings.min_balance)
        self.at_deadline = settings.at_deadline
        self.keep_stopped = settings.keep_stopped
        self._transport = transport
        self.warnings: list[str] = []

    def __repr__(self) -> str:
        key = self._key.masked if self._key else "(no token)"
        return f"AutoDLProvider(base_url={self.base_url!r}, token={key})"

    @property
    def key_hint(self) -> str:
        if self._key is None:
            return Deferred(N_("no token (set {env})"), env=ENV_KEY)
        return Deferred(N_("{key} from {source}"), key=self._key.masked, source=self.key_source)

    # -- HTTP ----------------------------------------------------------------------------------

    HEADERS: ClassVar[dict[str, str]] = {**KeyedHttpClient.HEADERS,
                                         "Content-Type": "application/json"}

    def _authorization(self, key: ApiKey) -> str:
        return key.reveal()  # bare: no "Bearer"

    def _no_key_error(self) -> Exception:
        return AutoDLAuthError(Deferred(
            N_("autodl: no token — set {env}, or token under [providers.autodl] in "
               "config.toml (mode 0600); make one in {page}"),
            env=ENV_KEY, page=TOKEN_PAGE))

    def _delay(self, attempt: int, retry_after: float | None = None) -> float:
        delay = min(self.backoff_max, self.backoff * 2 ** (attempt - 1))
        delay += random.uniform(0, self.backoff / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, 60.0))
        return delay

    async def _call(self, method: str, path: str, what: str, *, body: Any = None,
                    params: Mapping[str, Any] | None = None, once: bool = False) -> Any:
        """One API call; returns the envelope's `data`.

        HTTP-200 envelope failures and 401/403 are raised at once. 429, 5xx and timeouts are
        retried with backoff — unless `once` (create): then 429 (not processed) is retried and
        anything else that may have been processed raises `_Ambiguous`.
        """
        import httpx

        client = self._http()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                if method == "GET":
                    resp = await client.get(_P + path, params=dict(params or {}))
                else:
                    resp = await client.post(_P + path, json=body if body is not None else {})
            except httpx.TimeoutException:
                err = AutoDLError(Deferred(N_("autodl: {what}: no answer within {seconds} s"),
                                           what=what, seconds=f"{self.timeout:g}"),
                                  retryable=True)
            except httpx.TransportError as exc:
                err = AutoDLError(Deferred(N_("autodl: {what}: cannot reach {url} ({reason})"),
                                           what=what, url=self.base_url,
                                           reason=type(exc).__name__), retryable=True)
                if once and isinstance(exc, httpx.ConnectError):
                    err.kind = "not_sent"  # never reached the server: nothing happened
            else:
                log.debug("%s %s -> %s", method, path, resp.status_code)
                status = resp.status_code
                if status in (401, 403):
                    raise AutoDLAuthError(Deferred(
                        N_("autodl: {what}: the token was refused (HTTP {status}) — make one in "
                           "{page} and set {env}"), what=what, status=status, page=TOKEN_PAGE,
                        env=ENV_KEY), status=status, kind="auth") from None
                if status == 200:
                    try:
                        env = resp.json()
                        code = env["code"]
                    except (ValueError, KeyError, TypeError):
                        err = AutoDLError(Deferred(
                            N_("autodl: {what}: unexpected answer (not the documented envelope)"),
                            what=what), status=status, retryable=True)
                    else:
                        if code == "Success":
                            return env.get("data")
                        raise envelope_error(code, env.get("msg"), what)
                elif status == 429:
                    ra = resp.headers.get("Retry-After")
                    with contextlib.suppress(TypeError, ValueError):
                        retry_after = max(0.0, float(ra)) if ra else None
                    err = AutoDLError(Deferred(N_("autodl: {what}: rate limited (HTTP 429)"),
                                               what=what), status=429, retryable=True)
                elif status >= 500:
                    err = AutoDLError(Deferred(N_("autodl: {what}: AutoDL answered HTTP {status}"),
                                               what=what, status=status),
                                      status=status, retryable=True)
                else:
                    raise AutoDLError(Deferred(N_("autodl: {what}: HTTP {status}"), what=what,
                                               status=status), status=status) from None
            if once and err.status != 429 and err.kind != "not_sent":
                raise _Ambiguous(err)
            if attempt >= self.max_attempts:
                raise AutoDLError(Deferred(N_("{error} — gave up after {tries} tries"),
                                           error=str(err), tries=attempt), status=err.status,
                                  retryable=True) from None
            delay = self._delay(attempt, retry_after)
            log.info("%s (retrying in %.1f s)", self._scrub(str(err)), delay)
            await asyncio.sleep(delay)

    # -- reading -----------------------------------------------------------------------------------

    async def list_instances(self) -> list[dict[str, Any]]:
        """Every Pro instance, all pages (there is no single-instance GET)."""
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            data = await self._call("POST", "/instance/pro/list",
                                    Deferred(N_("listing instances")),
                                    body={"page_index": page, "page_size": 100})
            if not isinstance(data, Mapping):
                raise AutoDLError(Deferred(
                    N_("autodl: listing instances: unexpected answer (not a page)")))
            out.extend(dict(x) for x in data.get("list") or [] if isinstance(x, Mapping))
            max_page = int(data.get("max_page") or 1)
            if page >= max_page or page >= 100:
                return out
            page += 1

    async def find(self, *, uuid: str | None = None, our_id: str | None = None
                   ) -> dict[str, Any] | None:
        """One instance from the list, by AutoDL's uuid or by the name carrying our id."""
        for item in await self.list_instances():
            if uuid and item.get("uuid") == uuid:
                return dict(item)
            if our_id and str(item.get("name") or "").endswith(NAME_TAG + our_id):
                return dict(item)
        return None

    async def find_tagged(self, our_id: str) -> dict[str, Any] | None:
        """For the hub's sweep of written-off records: the instance carrying our id in its name,
        in the shape the sweep reads (`id`, and `status` "terminated" once released)."""
        item = await self.find(our_id=our_id)
        if item is None:
            return None
        status = str(item.get("status") or "")
        return {"id": str(item.get("uuid")),
                "status": "terminated" if status in ("released", "releasing") else status}

    async def status(self, uuid: str) -> str:
        data = await self._call("GET", "/instance/pro/status",
                                Deferred(N_("reading instance {id}"), id=uuid),
                                params={"instance_uuid": uuid})
        return str(data)

    async def snapshot(self, uuid: str) -> dict[str, Any]:
        data = await self._call("GET", "/instance/pro/snapshot",
                                Deferred(N_("reading instance {id}"), id=uuid),
                                params={"instance_uuid": uuid})
        if not isinstance(data, Mapping):
            raise AutoDLError(Deferred(N_("autodl: reading instance {id}: unexpected snapshot"),
                                       id=uuid))
        return dict(data)

    async def balance(self) -> dict[str, Any]:
        """The wallet, in yuan: balance, vouchers, lifetime spend."""
        data = await self._call("POST", "/wallet/balance", Deferred(N_("reading the wallet")),
                                body={})
        if not isinstance(data, Mapping):
            raise AutoDLError(Deferred(N_("autodl: reading the wallet: unexpected answer")))
        return {
            "provider": self.name,
            "currency": CURRENCY,
            "balance": yuan(data.get("assets")),
            "vouchers": yuan(data.get("voucher_balance")),
            "lifetime_spend": yuan(data.get("accumulate")),
        }

    account = balance

    # -- offers ------------------------------------------------------------------------------------

    async def offers(self) -> list[Offer]:
        """The Pro GPU specs. No API call: the API has no Pro stock or price listing (gpu_stock
        is observed not to match Pro availability).

        The price of a spec, in this order: the sourced reference price (dated, with its
        strength); else the last live `payg_price` gputui read for that spec (dated, with the
        instance it came from); else none — "price on creation" (`price_known=False`), never
        shown as ¥0.00."""
        from gputui.catalog.seen import last_seen

        out = []
        today = utcnow().date().isoformat()
        for spec, (card, vram, words) in PRO_SPECS.items():
            ref = REFERENCE_PRICES.get(spec)
            seen = None if ref is not None else last_seen(self.ctx.state_dir, self.name, spec)
            known = True
            if ref is not None:
                price, source, as_of, strength = ref
                src = (f"AutoDL {words}: reference ¥{price}/h ({source}, {as_of}, {strength}); "
                       "the live price is the instance's payg_price")
                tier = N_("pro pay-as-you-go")
            elif seen is not None:
                price, as_of = seen.price_per_gpu_hour, seen.date
                src = (f"AutoDL {words}: last live payg_price seen, ¥{price}/h on {as_of} "
                       f"(instance {seen.instance}); not a quote")
                tier = N_("pro pay-as-you-go (last seen)")
            else:
                price, as_of, known = Decimal("0"), today, False
                src = (f"AutoDL {words}: no sourced price — the live price (payg_price) is read "
                       "from the instance once it exists")
                tier = N_("pro (price on creation)")
            out.append(Offer(
                provider=self.name, offer_id=spec, gpu=card, gpu_count=1, vram_gb=vram,
                price_per_gpu_hour=price,
                billing=BillingRule(price_per_hour=price, currency=CURRENCY,
                                    granularity=Granularity.SECOND),
                region=None, available=True, tier=tier, images=[self.settings.image],
                source=src, as_of=as_of, price_known=known))
        return out

    def _remember_price(self, inst: Instance, price: Decimal) -> None:
        """A live price read: remembered per GPU for its spec (the next New shows it)."""
        from gputui.catalog.seen import record_seen_price

        spec = inst.offer_id or ""
        if spec not in PRO_SPECS or price <= 0:
            return
        record_seen_price(self.ctx.state_dir, provider=self.name, offer_id=spec,
                          gpu=PRO_SPECS[spec][0], price_per_gpu_hour=price / inst.gpu_count,
                          currency=CURRENCY, instance=inst.name)

    # -- create --------------------------------------------------------------------------------------

    def expand_gb(self, disk_gb: float) -> int:
        return max(0, math.ceil(disk_gb) - SYSTEM_DISK_GB)

    async def check_request(self, request: CreateRequest) -> None:
        """Refuse what AutoDL would refuse, and a wallet below the minimum, before anything is
        recorded or rented."""
        if request.offer_id not in PRO_SPECS:
            raise AutoDLBadRequest(Deferred(
                N_("autodl: unknown GPU spec {spec} (Pro specs: {specs})"),
                spec=repr(request.offer_id), specs=", ".join(PRO_SPECS)))
        if not 1 <= request.gpu_count <= MAX_GPUS:
            raise AutoDLBadRequest(Deferred(
                N_("--count: AutoDL Pro takes 1 to {most} GPUs, not {count}"),
                most=MAX_GPUS, count=request.gpu_count))
        if self.expand_gb(request.disk_gb) > MAX_EXPAND_GB:
            raise AutoDLBadRequest(Deferred(
                N_("--disk: AutoDL takes at most {most} GB ({system} GB system disk + up to "
                   "{expand} GB), not {disk}"), most=SYSTEM_DISK_GB + MAX_EXPAND_GB,
                system=SYSTEM_DISK_GB, expand=MAX_EXPAND_GB, disk=f"{request.disk_gb:g}"))
        if self.min_balance > 0:
            wallet = await self.balance()
            have = wallet["balance"]
            if have is None or have < self.min_balance:
                held = Deferred(N_("unknown")) if have is None else f"¥{have:,.2f}"
                raise AutoDLError(Deferred(
                    N_("autodl: the wallet holds {held}, below the minimum {minimum} for "
                       "creating (at zero AutoDL keeps instances, unusable) — top up, or lower "
                       "[providers.autodl] min_balance"),
                    held=held, minimum=f"¥{self.min_balance:,.2f}"), kind="balance")

    def start_command(self, release_at: datetime | None) -> str:
        """Run at every boot: arm the on-instance power-off for the deadline (layer 1)."""
        if release_at is None:
            return ""
        epoch = int(as_utc(release_at).timestamp())
        return (f"n=$(( ({epoch} - $(date +%s) + 59) / 60 )); [ $n -lt 1 ] && n=1; "
                "shutdown -h +$n >/dev/null 2>&1 || true")

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        """Create once; returns the instance `booting` with AutoDL's uuid (see `boot`)."""
        spec = request.offer_id
        name = f"{request.name[:40]}{NAME_TAG}{instance.id}"
        body: dict[str, Any] = {
            "req_gpu_amount": request.gpu_count,
            "gpu_spec_uuid": spec,
            "image_uuid": request.image or self.settings.image,
            "cuda_v_from": self.settings.cuda_v_from,
            "expand_system_disk_by_gb": self.expand_gb(request.disk_gb),
            "instance_name": name,
        }
        release_at = getattr(request, "release_at", None)
        command = self.start_command(release_at)
        if command:
            body["start_command"] = command
        what = Deferred(N_("creating a {spec} instance"), spec=PRO_SPECS[spec][2])
        try:
            data = await self._call("POST", "/instance/pro/create", what, body=body, once=True)
            uuid = str(data) if isinstance(data, str) and data else None
            if uuid is None:
                raise _Ambiguous(AutoDLError(Deferred(
                    N_("autodl: {what}: the answer named no instance"), what=what)))
        except _Ambiguous as amb:
            uuid = await self._find_after_ambiguous(instance.id, amb.error)
        return instance.model_copy(update={
            "provider_id": uuid,
            "status": InstanceStatus.BOOTING,
            "status_detail": Deferred(N_("creating at AutoDL")),
            "billing": instance.billing.model_copy(update={"currency": CURRENCY}),
        })

    async def _find_after_ambiguous(self, our_id: str, error: AutoDLError) -> str:
        """The create may have happened: look for its name; never create again."""
        for attempt in range(self.find_attempts):
            if attempt:
                await asyncio.sleep(self.find_interval)
            try:
                found = await self.find(our_id=our_id)
            except AutoDLError as exc:
                raise AutoDLError(Deferred(
                    N_("{error}, and looking for it failed too ({reason}); it may exist: gputui "
                       "keeps looking for it by name"),
                    error=str(error), reason=without_prefix(str(exc), "autodl: ")),
                    retryable=True, outcome_unknown=True) from None
            if found is not None:
                log.info("autodl: create answer lost; found %s by its name", found.get("uuid"))
                return str(found["uuid"])
        raise AutoDLError(Deferred(
            N_("{error}; no instance carries its name yet — not created again; gputui keeps "
               "looking for it by name"), error=str(error)),
            retryable=True, outcome_unknown=True)

    async def boot(self, instance: Instance) -> Instance:
        """Wait for `running`, read the live price, then for sshd to accept (it comes after).
        One that never runs is powered off and released so it does not bill."""
        uuid = instance.provider_id
        assert uuid, "boot() follows create()"
        deadline = time.monotonic() + self.boot_timeout
        last = "creating"
        seen_before_running = utcnow()
        while True:
            try:
                item = await self.find(uuid=uuid)
            except AutoDLError as exc:
                if exc.retryable:
                    item = None
                else:
                    raise await self._boot_failed(instance, str(exc)) from None
            if item is not None:
                last = str(item.get("status") or "")
                if last == "running":
                    inst = await self._apply(instance, item, seen_before_running)
                    return await self._wait_ssh(inst)
                if last in ("failed", "released", "releasing"):
                    raise await self._boot_failed(instance, Deferred(
                        N_("AutoDL reports it {status} while it booted"), status=last))
                seen_before_running = utcnow()
            if time.monotonic() >= deadline:
                raise await self._boot_failed(instance, Deferred(
                    N_("still {status} after {minutes} min"), status=clean(last, 30),
                    minutes=f"{self.boot_timeout / 60:g}"))
            await asyncio.sleep(self.poll_interval)

    async def _wait_ssh(self, inst: Instance) -> Instance:
        """`running` is not sshd accepting: probe the port for an SSH banner, spacing the
        attempts out. A box that never answers is reported, not released (it runs, and bills:
        the user decides)."""
        deadline = time.monotonic() + self.ssh_timeout
        gap = self.ssh_first_wait
        why: str = Deferred(N_("no answer"))
        while True:
            try:
                endpoint, _ = await self._endpoint(inst)
            except AutoDLError as exc:
                endpoint, why = None, str(exc)
            if endpoint is not None:
                ok, why = await _ssh_banner(endpoint.host, endpoint.port, self.connect_timeout)
                if ok:
                    return inst.model_copy(update={"ssh": endpoint, "status_detail": None})
            if time.monotonic() >= deadline:
                return inst.model_copy(update={
                    "status_detail": Deferred(
                        N_("running, but sshd does not answer yet ({reason})"),
                        reason=why if isinstance(why, Deferred) else clean(why, 60))})
            await asyncio.sleep(min(gap, max(0.0, deadline - time.monotonic())))
            gap = min(gap * 2, 30.0)

    async def _boot_failed(self, instance: Instance, why: str) -> ProviderError:
        why = without_prefix(why, "autodl: ")
        try:
            await self.release(instance)
        except ProviderError as exc:
            return ProviderError(Deferred(
                N_("autodl: {name}: {why}; releasing it FAILED ({reason}) — release instance "
                   "{id} in the AutoDL console, it may bill until then"),
                name=instance.name, why=why, reason=without_prefix(str(exc), "autodl: "),
                id=instance.provider_id))
        return ProviderError(Deferred(
            N_("autodl: {name}: {why}; it was released so it does not bill"),
            name=instance.name, why=why))

    # -- images ------------------------------------------------------------------------------------

    image_timeout: float = 60 * 60.0

    async def private_images(self) -> list[Any]:
        """The account's private images (`/instance/pro/image/private/list`, every page)."""
        from gputui.catalog.images import private_image

        out = []
        page = 1
        while True:
            data = await self._call("POST", "/instance/pro/image/private/list",
                                    Deferred(N_("listing private images")),
                                    body={"page_index": page, "page_size": 100})
            if not isinstance(data, Mapping):
                raise AutoDLError(Deferred(
                    N_("autodl: listing private images: unexpected answer (not a page)")))
            for x in data.get("list") or []:
                img = private_image(self.name, dict(x)) if isinstance(x, Mapping) else None
                if img is not None:
                    out.append(img)
            max_page = int(data.get("max_page") or 1)
            if page >= max_page or page >= 100:
                return out
            page += 1

    async def images(self) -> list[Any]:
        """The account's private images, then the base images gputui knows (the API lists no
        base images: a dated table, `gputui/catalog/data/images.toml`)."""
        from gputui.catalog.images import all_images

        return all_images(self.name, await self.private_images())

    async def save_image(self, instance: Instance, name: str, progress: Any = None) -> Any:
        """`/instance/pro/image/save`, then the private list polled until the image is saved.
        An image holds the system disk only (not /root/autodl-tmp, the data disk). The save is
        asked once: an answer lost is resolved by finding an image of that name."""
        uuid = instance.provider_id
        if not uuid:
            raise AutoDLError(Deferred(N_("autodl: {name}: not created yet"),
                                       name=instance.name))
        say = progress or (lambda _m: None)
        what = Deferred(N_("saving {name} as image {image}"), name=instance.name,
                        image=repr(name))
        try:
            data = await self._call("POST", "/instance/pro/image/save", what,
                                    body={"instance_uuid": uuid, "image_name": name}, once=True)
            image_id = str(data.get("image_uuid") or "") if isinstance(data, Mapping) else ""
            if not image_id:
                raise _Ambiguous(AutoDLError(Deferred(
                    N_("autodl: {what}: the answer named no image"), what=what)))
        except _Ambiguous as amb:
            image_id = ""
            for img in await self.private_images():
                if img.name == name:
                    image_id = img.id
            if not image_id:
                raise AutoDLError(Deferred(
                    N_("{error}; no image of that name is listed — check `gputui images` "
                       "before saving again"), error=str(amb.error)),
                    outcome_unknown=True) from None
        say(Deferred(N_("saving image {id}"), id=image_id))
        deadline = time.monotonic() + self.image_timeout
        while True:
            found = next((i for i in await self.private_images() if i.id == image_id), None)
            if found is not None:
                state = found.state
                if state == "done":
                    return found
                if state == "failed":
                    raise AutoDLError(Deferred(
                        N_("autodl: saving image {image} failed at AutoDL (status {status})"),
                        image=repr(name), status=repr(found.status)))
                say(Deferred(N_("image {id}: {status}"), id=image_id, status=found.status))
            if time.monotonic() >= deadline:
                raise AutoDLError(Deferred(
                    N_("autodl: image {image} is still being saved after {minutes} min — "
                       "`gputui images` shows when it is ready"), image=repr(name),
                    minutes=f"{self.image_timeout / 60:g}"), retryable=True)
            await asyncio.sleep(self.poll_interval)

    # -- ways in besides SSH -------------------------------------------------------------------------

    async def addresses(self, instance: Instance) -> list[tuple[str, str]]:
        """The snapshot's Jupyter address and its custom-service ports (`service_<port>_domain`,
        AutoDL's 6006/6008), as the API gives them. The Jupyter token is a credential: it is not
        shown (the AutoDL console has it)."""
        uuid = instance.provider_id
        if not uuid:
            return []
        snap = await self.snapshot(uuid)
        out: list[tuple[str, str]] = []
        jupyter = _address(snap.get("jupyter_domain"), "https")
        if jupyter:
            out.append(("Jupyter", jupyter))
        for key in sorted(snap):
            m = re.fullmatch(r"service_(\d{1,5})_domain", str(key))
            if not m:
                continue
            scheme = str(snap.get(f"service_{m.group(1)}_port_protocol") or "https").lower()
            url = _address(snap.get(key), scheme if scheme in ("http", "https") else "https")
            if url:
                out.append((f"service_{m.group(1)}", url))
        return out

    # -- the view ------------------------------------------------------------------------------------

    async def refresh(self, instance: Instance) -> Instance:
        uuid = instance.provider_id
        if not uuid:
            found = await self.find(our_id=instance.id)
            if found is None:
                if utcnow() - instance.created_at > timedelta(minutes=15):
                    failed = instance.model_copy(update={
                        "status_detail": Deferred(
                            N_("never created at AutoDL (no instance carries its name)"))})
                    failed.mark_ended(utcnow(), "failed")
                    return failed
                return instance
            instance = instance.model_copy(update={"provider_id": str(found["uuid"])})
            return await self._apply(instance, found)
        item = await self.find(uuid=uuid)
        if item is None:
            return self._ended(instance, Deferred(N_("gone at AutoDL (no longer listed)")),
                               utcnow())
        return await self._apply(instance, item)

    async def _apply(self, instance: Instance, item: Mapping[str, Any],
                     seen_before: datetime | None = None) -> Instance:
        """AutoDL's list entry onto our record."""
        status = str(item.get("status") or "")
        inst = instance.model_copy()
        started = parse_time(item.get("started_at"))
        stopped = parse_time(item.get("stopped_at"))
        now = utcnow()
        if status in ("released", "releasing"):
            at = stopped or now
            return self._ended(inst, Deferred(N_("{status} at AutoDL"), status=status), at)
        if status == "failed":
            if inst.running_since is None and inst.billed_running_seconds == 0:
                failed = inst.model_copy(update={
                    "status_detail": Deferred(N_("{status} at AutoDL"), status=status)})
                failed.mark_ended(now, "failed")
                return failed
            inst.status_detail = Deferred(
                N_("AutoDL reports it failed (check it in the console)"))
            return inst
        if status == "running":
            if inst.running_since is None:
                # From AutoDL's started_at; without one, from the last sighting before running
                # (never later than the start: the meter errs upwards).
                at = started or seen_before or inst.stopped_at or inst.created_at
                inst.mark_running(at)
            inst.status = InstanceStatus.RUNNING
            # a note that sshd did not answer yet stays until a connection says otherwise
            keep = instance.status == InstanceStatus.RUNNING and "sshd" in (
                instance.status_detail or "")
            inst.status_detail = instance.status_detail if keep else None
            await self._read_price(inst)
            return inst
        if status in ("creating", "starting"):
            if inst.running_since is None:  # (a stopped one powered on again starts over)
                inst.status = InstanceStatus.BOOTING
            inst.status_detail = Deferred(N_("{status} at AutoDL"), status=status)
            return inst
        if status == "shutting_down":
            inst.status_detail = Deferred(
                N_("shutting down (the GPU charge stops at shutdown)"))
            if inst.status == InstanceStatus.REQUESTED:
                inst.status = InstanceStatus.BOOTING
            return inst
        if status == "shutdown":
            at = stopped or now
            if inst.status != InstanceStatus.STOPPED:
                if inst.running_since is not None and at < inst.running_since:
                    at = now
                inst.mark_stopped(at)
            inst.ssh = None
            inst.status_detail = None
            return inst
        # A status gputui does not know: kept, never fatal.
        inst.status_detail = Deferred(N_("AutoDL status {status} (unknown to gputui)"),
                                      status=repr(clean(status, 30)))
        return inst

    async def _read_price(self, inst: Instance) -> None:
        """The live price: the snapshot's payg_price (milliyuan per hour); and the disks' use
        (`usage_info`) from the same snapshot."""
        with contextlib.suppress(AutoDLError):
            snap = await self.snapshot(inst.provider_id or "")
            price = yuan(snap.get("payg_price"))
            if price is not None and price > 0:
                self._remember_price(inst, price)
            if price is not None and price >= 0 and price != inst.billing.price_per_hour:
                inst.billing = inst.billing.model_copy(update={"price_per_hour": price,
                                                              "currency": CURRENCY})
            disks = disk_usage(snap)
            old = inst.disks
            if disks is not None and (old is None or old.model_dump(exclude={"at"})
                                      != disks.model_dump(exclude={"at"})):
                inst.disks = disks  # (unchanged figures are not rewritten on every refresh)

    async def disks(self, inst: Instance) -> DiskUsage | None:
        """The system and data disks' use now (the snapshot's `usage_info`), or None."""
        if not inst.provider_id:
            return None
        return disk_usage(await self.snapshot(inst.provider_id))

    async def live_price(self, inst: Instance) -> Decimal | None:
        """The instance's price per hour now (snapshot `payg_price`), or None if unreadable."""
        try:
            snap = await self.snapshot(inst.provider_id or "")
        except AutoDLError:
            return None
        price = yuan(snap.get("payg_price"))
        if price is not None and price > 0:
            self._remember_price(inst, price)
        return price if price is not None and price >= 0 else None

    def _ended(self, instance: Instance, detail: str, at: datetime) -> Instance:
        if not instance.status.live:
            return instance
        ended = instance.model_copy(update={"status_detail": detail, "ssh": None})
        at = max(as_utc(at), ended.created_at)
        ended.mark_ended(at, instance.end_reason or "external")
        return ended

    # -- SSH ----------------------------------------------------------------------------------------

    async def _endpoint(self, inst: Instance) -> tuple[SSHEndpoint, str]:
        """(endpoint, root password) from the snapshot, read now."""
        uuid = inst.provider_id
        if not uuid:
            raise AutoDLError(Deferred(N_("autodl: {name}: not created yet"), name=inst.name))
        snap = await self.snapshot(uuid)
        host = str(snap.get("proxy_host") or "").strip()
        port = snap.get("ssh_port")
        if not host or not _port(port):
            # (a stopped instance's snapshot says port 0: no endpoint, not a crash)
            m = re.search(r"-p\s+(\d+)\s+\S+@(\S+)", str(snap.get("ssh_command") or ""))
            if not m or not _port(m.group(1)):
                raise AutoDLError(Deferred(
                    N_("autodl: {name}: the snapshot has no SSH endpoint yet"), name=inst.name))
            port, host = m.group(1), m.group(2)
        if not re.fullmatch(r"[A-Za-z0-9.:-]{1,253}", host):
            raise AutoDLError(Deferred(
                N_("autodl: {name}: the snapshot's host is not a host name"), name=inst.name))
        password = str(snap.get("root_password") or "")
        return SSHEndpoint(host=host, port=int(str(port)), user=SSH_USER), password

    async def link_target(self, inst: Instance) -> tuple[SSHEndpoint, dict[str, Any]]:
        """Where to connect and how, read from the snapshot on every connection. The password
        goes to the link only (memory), never into the record."""
        endpoint, password = await self._endpoint(inst)
        options: dict[str, Any] = {"password": password, "client_keys": None,
                                   "agent_path": None}
        if inst.ssh is None or (inst.ssh.host, inst.ssh.port) != (endpoint.host, endpoint.port):
            # the instance is somewhere new: whoever had that port before is not it
            with contextlib.suppress(Exception):
                self.ctx.host_keys.forget(endpoint.host, endpoint.port)
            options["accept_new_host_key"] = True
        elif not self.ctx.host_keys.host_keys(endpoint.host, endpoint.port):
            options["accept_new_host_key"] = True
        return endpoint, options

    def remote(self, command: str) -> str:
        """A command in a login shell: conda's PATH is there only."""
        import shlex

        return f"{LOGIN_SHELL} {shlex.quote(command)}"

    def _forget_host_key(self, inst: Instance) -> None:
        if inst.ssh is not None:
            with contextlib.suppress(Exception):
                self.ctx.host_keys.forget(inst.ssh.host, inst.ssh.port)

    # -- power --------------------------------------------------------------------------------------

    async def stop(self, instance: Instance) -> Instance:
        """Power off (the GPU charge stops at shutdown); returns it `stopped` once AutoDL shows
        `shutdown`."""
        uuid = instance.provider_id
        if not uuid:
            raise AutoDLError(Deferred(N_("autodl: {name}: not created yet"),
                                       name=instance.name))
        status = await self.status(uuid)
        if status not in ("shutting_down", "shutdown"):
            try:
                await self._call("POST", "/instance/pro/power_off",
                                 Deferred(N_("powering off {id}"), id=uuid),
                                 body={"instance_uuid": uuid})
            except AutoDLError as exc:
                if exc.kind == "auth":
                    raise
                status = await self.status(uuid)  # a second power_off is an error: check
                if status not in ("shutting_down", "shutdown"):
                    raise
        inst = await self._wait_for(instance, "shutdown", self.stop_timeout)
        self._forget_host_key(instance)
        return inst

    async def start(self, instance: Instance, release_at: datetime | None = None) -> Instance:
        """Power on with GPUs (re-arming the on-instance timer), then wait for `running` and sshd."""
        uuid = instance.provider_id
        if not uuid:
            raise AutoDLError(Deferred(N_("autodl: {name}: not created yet"),
                                       name=instance.name))
        body: dict[str, Any] = {"instance_uuid": uuid, "payload": "gpu"}
        command = self.start_command(release_at)
        if command:
            body["start_command"] = command
        status = await self.status(uuid)
        if status not in ("starting", "running"):
            await self._call("POST", "/instance/pro/power_on",
                             Deferred(N_("powering on {id}"), id=uuid), body=body)
        inst = instance.model_copy(update={"status": InstanceStatus.BOOTING,
                                           "status_detail": Deferred(N_("starting at AutoDL")),
                                           "ssh": None})
        return await self.boot(inst)

    async def _wait_for(self, instance: Instance, wanted: str, timeout: float) -> Instance:
        deadline = time.monotonic() + timeout
        while True:
            item = await self.find(uuid=instance.provider_id)
            if item is None:
                return self._ended(instance, Deferred(N_("gone at AutoDL")), utcnow())
            inst = await self._apply(instance, item)
            if str(item.get("status")) == wanted or not inst.status.live:
                return inst
            if time.monotonic() >= deadline:
                raise AutoDLError(Deferred(
                    N_("autodl: {name}: still {status} after {seconds} s (wanted {wanted})"),
                    name=instance.name, status=clean(item.get("status"), 30),
                    seconds=f"{timeout:g}", wanted=wanted), retryable=True)
            await asyncio.sleep(self.poll_interval)

    async def release(self, instance: Instance) -> None:
        """Power off, wait for a completed shutdown, release; confirmed by `releasing`/
        `released` (or the instance gone). Idempotent."""
        uuid = instance.provider_id
        if not uuid:
            found = await self.find(our_id=instance.id)
            if found is None:
                return
            uuid = str(found["uuid"])
            instance = instance.model_copy(update={"provider_id": uuid})
        item = await self.find(uuid=uuid)
        if item is None or item.get("status") in ("released", "releasing"):
            self._forget_host_key(instance)
            return
        if item.get("status") != "shutdown":
            await self.stop(instance)
        try:
            await self._call("POST", "/instance/pro/release",
                             Deferred(N_("releasing {id}"), id=uuid),
                             body={"instance_uuid": uuid})
        except AutoDLError as exc:
            if exc.kind == "auth":
                raise
            item = await self.find(uuid=uuid)
            if item is not None and item.get("status") not in ("released", "releasing"):
                raise
        item = await self.find(uuid=uuid)
        if item is not None and item.get("status") not in ("released", "releasing"):
            raise AutoDLError(Deferred(
                N_("autodl: release of {id} was accepted but it still shows {status}"),
                id=uuid, status=clean(item.get("status"), 30)), retryable=True)
        self._forget_host_key(instance)

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        return False  # no scheduled-shutdown endpoint: layers 1 (start_command/SSH) and 3


def _port(value: Any) -> bool:
    """A TCP port a connection can be made to (1-65535), as a number or its digits."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return False
    text = str(value).strip()
    return text.isdigit() and 1 <= int(text) <= 65535


async def _ssh_banner(host: str, port: int, timeout: float) -> tuple[bool, str]:
    """Does sshd answer at host:port (an `SSH-` banner)?"""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError) as exc:
        return False, type(exc).__name__
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
        return line.startswith(b"SSH-"), Deferred(N_("no SSH banner"))
    except (OSError, TimeoutError) as exc:
        return False, type(exc).__name__
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _address(value: Any, scheme: str) -> str:
    """A domain (or URL) from the snapshot as a URL to open; "" for anything that is not one."""
    text = str(value or "").strip().split("?")[0].split("#")[0]  # no query: it may hold a token
    if not text:
        return ""
    if not re.match(r"^https?://", text):
        text = f"{scheme}://{text}"
    if not re.fullmatch(r"https?://[A-Za-z0-9.-]{1,253}(:\d{1,5})?(/[A-Za-z0-9._~/%-]*)?",
                        text):
        return ""
    return text


def autodl_enabled(config: Config, env: Mapping[str, str] | None = None) -> bool:
    return config.providers.autodl.wanted(env)


__all__ = [
    "CURRENCY", "DEFAULT_BASE_URL", "ENV_BASE", "ENV_KEY", "PRO_SPECS", "AutoDLAuthError",
    "AutoDLBadRequest", "AutoDLError", "AutoDLProvider", "autodl_enabled",
    "envelope_error", "mask_key", "parse_time", "resolve_token", "yuan",
]
