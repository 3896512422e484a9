"""`lambda`: Lambda Cloud's public API v1 (on-demand GPU instances), over httpx.

What the API offers and how it is used here:

- **Offers** come from `GET /instance-types`: a map keyed by type name (`gpu_8x_h100_sxm5`);
  `price_cents_per_hour` is for the whole instance, so the per-GPU price is that over
  `specs.gpus`; an empty `regions_with_capacity_available` means sold out. One offer per type and
  region with capacity (`offer_id` is `TYPE@REGION`), one unavailable offer per sold-out type.
  GPU descriptions ("H100 (80 GB SXM5)") are mapped to catalog cards.
- **Billing** is per minute: it begins when the instance passes its health checks (`active`) and
  ends the moment it is terminated. The API gives no timestamps, so the meter starts at the last
  moment the instance was seen `booting` (never later than Lambda starts) and ends when the
  terminate call was answered (never earlier): the meter can only err upwards.
- **Create** is `POST /instance-operations/launch` with one `ssh_key_names` entry: gputui's own
  key pair (state folder, 0600) is uploaded through `/ssh-keys` unless Lambda already has that
  public key. Each launch carries the tag `gputui-id=<our id>`, so a launch whose answer was lost
  (timeout, 5xx) is found again rather than launched twice. Then `GET /instances/{id}` is polled
  from `booting` to `active` and its `ip`; the instance is `ubuntu@IP` port 22 and is monitored
  over SSH like any other. An instance that never becomes active is terminated, not left billing.
- **Release** is `POST /instance-operations/terminate`, confirmed by the instance showing
  `terminating`/`terminated` or a 404; retried with backoff.
- **Errors** use Lambda's envelope `{"error": {"code", "message", "suggestion"}}` and are turned
  into one clear line keyed on `code`. 429 (whose body may be HTML, not JSON), 5xx and timeouts
  are retried with exponential backoff and jitter (honouring `Retry-After` when sent); 4xx
  (bad key, forbidden, capacity, not found) never are. Requests are paced at Lambda's documented
  limits: about one per second, and one launch per 12 seconds.

**Auto-release on Lambda.** Lambda bills until the instance is terminated, and halting the OS
does not stop the billing (`power_off_stops_billing=False`), so layer 1 (a `shutdown -h` timer
on the instance) would protect nothing and is not armed. Lambda has no provider-side scheduled
termination either (`scheduled_release=False`), so layer 2 does not exist. Protection rests on
layer 3: the console's lease service terminating through the API at the deadline, and
`gputui reap` run from cron (or a systemd timer) while the console is closed. An on-instance agent
that terminates through the API would need the account-wide API key on the instance, which could
then launch and terminate anything in the account; gputui never copies the key to an instance
and does not implement such an agent.

**The API key** comes from `LAMBDA_API_KEY` or `[providers.lambda] api_key` in config.toml (which
must then be mode 0600; a warning says so otherwise). It is sent only as
`Authorization: Bearer`, is never logged, never written to the state database, and appears
masked (`sec…abcd`) in every message, `repr()` and screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import re
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.config import LAMBDA_KEY_ENV
from gputui.errors import os_reason, said, without_prefix
from gputui.i18n import N_, Deferred
from gputui.models import (
    BillingRule,
    Granularity,
    Instance,
    InstanceStatus,
    Offer,
    SSHEndpoint,
    utcnow,
)
from gputui.providers.base import (
    Capabilities,
    CreateRequest,
    Provider,
    ProviderContext,
    ProviderError,
)
from gputui.providers.rest import (  # noqa: F401 (ApiKey, mask_key: imported from here too)
    ApiKey,
    KeyedHttpClient,
    mask_key,
)

if TYPE_CHECKING:
    import httpx

    from gputui.config import Config

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://cloud.lambda.ai/api/v1"
ENV_KEY = LAMBDA_KEY_ENV
ENV_BASE = "LAMBDA_API_BASE"
SSH_USER = "ubuntu"  # Lambda's default user on its images
SSH_PORT = 22
TAG_KEY = "gputui-id"  # launch tag: finds an instance whose launch answer was lost
KEY_DASHBOARD = "https://cloud.lambda.ai/api-keys"

# Documented limits: about one request per second; one launch per 12 s (five per minute).
REQUEST_INTERVAL_S = 1.0
LAUNCH_INTERVAL_S = 12.0

_ENDED = ("terminating", "terminated", "preempted")


# -- the key ----------------------------------------------------------------------------------


def lambda_enabled(config: Config, env: Mapping[str, str] | None = None) -> bool:
    """Register the provider? When `[providers.lambda] enabled` or `LAMBDA_API_KEY` is set."""
    return config.providers.lambda_cloud.wanted(env)


def resolve_key(
    config: Config, env: Mapping[str, str] | None = None, config_file: Path | None = None
) -> tuple[ApiKey | None, str, list[str]]:
    """(key, where it came from, warnings). `LAMBDA_API_KEY` wins over config.toml; a config file
    holding the key must be readable by its owner only."""
    env = os.environ if env is None else env
    warnings: list[str] = []
    raw = (env.get(ENV_KEY) or "").strip()
    source = ENV_KEY
    if not raw:
        raw = (config.providers.lambda_cloud.api_key or "").strip()
        source = "config.toml [providers.lambda] api_key"
        if raw:
            warnings.extend(_key_file_warnings(config_file))
    if not raw:
        return None, "", warnings
    try:
        return ApiKey(raw), source, warnings
    except ValueError as exc:
        warnings.append(Deferred(N_("lambda: the API key in {source} is unusable: {reason}"),
                                 source=source, reason=said(exc)))
        return None, "", warnings


def _key_file_warnings(path: Path | None) -> list[str]:
    if path is None:
        from gputui.config import config_path

        path = config_path()
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return []
    if mode & 0o077:
        return [Deferred(N_("lambda: {path} holds the Lambda API key but is readable by others "
                            "(mode {mode}); run: chmod 600 {path}"),
                         path=path, mode=f"{mode:04o}")]
    return []


def normalise_base_url(url: str) -> str:
    """The API root ending in /api/v1 (a bare host gets it appended)."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://", url):
        raise ValueError(Deferred(N_("{url} is not an http(s) URL"), url=repr(url)))
    rest = url.split("://", 1)[1]
    if "/" not in rest:
        url += "/api/v1"
    return url


# -- GPU names ----------------------------------------------------------------------------------

_GPU_DESC = re.compile(
    r"^\s*(?:\d+\s*x\s+)?(?P<model>.+?)\s*\(\s*(?P<mem>\d+(?:\.\d+)?)\s*GB(?:\s+(?P<form>[^)]*?))?\s*\)\s*$",
    re.I,
)


def gpu_card(description: str) -> tuple[str, float | None]:
    """Lambda's GPU description ("H100 (80 GB SXM5)") → (catalog card name, VRAM in GB).

    Unknown cards keep Lambda's words ("GH200 96GB")."""
    from gputui.catalog.match import card_for_reported_name

    m = _GPU_DESC.match(description or "")
    if not m:
        name = re.sub(r"^\s*\d+\s*x\s+", "", description or "").strip() or "unknown GPU"
        spec = card_for_reported_name(name)
        return (spec.name, spec.vram_gb) if spec else (name, None)
    model, form = m.group("model").strip(), (m.group("form") or "").strip()
    mem = float(m.group("mem"))
    gb = f"{mem:g}GB"
    for candidate in (f"{model} {gb} {form}", f"{model} {form} {gb}", f"{model} {form}",
                      f"{model} {gb}", model):
        spec = card_for_reported_name(" ".join(candidate.split()))
        if spec is not None:
            return spec.name, spec.vram_gb
    return " ".join(f"{model} {gb} {form}".split()), mem


# -- errors ---------------------------------------------------------------------------------------


class LambdaApiError(ProviderError):
    """An answer from the API that is not a success: the HTTP status and Lambda's error code."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status
        self.code = code
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        return self.status == 404 or self.code in ("global/object-does-not-exist", "global/not-found")


def _bare(exc: Exception) -> str:
    return without_prefix(str(exc), "lambda: ")


class _Ambiguous(Exception):
    """A launch whose outcome is unknown (timeout or 5xx): it may have happened."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


# Lambda's error codes in our words (templates: {dashboard} and {env} are filled in).
_FRIENDLY = {
    "global/invalid-api-key": (
        N_("the API key was refused (invalid, expired or deleted) — make one at {dashboard} "
           "and set {env}"), False),
    "global/account-inactive": (
        N_("your Lambda account is inactive — verify your email address and add a payment "
           "method in the Lambda dashboard"), False),
    "global/invalid-address": (
        N_("your billing address is invalid — fix it in the Lambda dashboard"), False),
    "global/forbidden": (N_("forbidden — this API key may not do that"), True),
    "instance-operations/launch/insufficient-capacity": (
        N_("no capacity for that instance type in that region right now — try another region "
           "or GPU"), False),
    "global/quota-exceeded": (
        N_("your account's instance quota is reached — terminate an instance or ask Lambda "
           "support to raise it"), False),
    "instance-operations/launch/file-system-in-wrong-region": (
        N_("the file system is in another region"), True),
    "global/object-does-not-exist": (N_("not found"), True),
    "global/not-found": (N_("not found"), True),
    "global/invalid-parameters": (N_("the request was refused as invalid"), True),
    "global/conflict": (N_("the instance is busy with another operation"), True),
    "global/duplicate": (N_("it already exists"), True),
    "global/internal-error": (N_("Lambda had an internal error"), False),
}

_BY_STATUS = {
    400: N_("the request was refused"),
    401: N_("the API key was refused — make one at {dashboard} and set {env}"),
    403: N_("forbidden — the account or key may not do that"),
    404: N_("not found"),
    409: N_("conflict with the instance's current state"),
    429: N_("rate limited by Lambda (HTTP 429)"),
}


def _said(template: str) -> Deferred:
    """One of the texts above, its links filled in."""
    params = {k: v for k, v in (("dashboard", KEY_DASHBOARD), ("env", ENV_KEY))
              if "{" + k + "}" in template}
    return Deferred(template, **params)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


# -- the provider -----------------------------------------------------------------------------------


class LambdaProvider(KeyedHttpClient, Provider):
    name = "lambda"
    label = "Lambda Cloud"
    capabilities = Capabilities(
        stop_start=False,
        scheduled_release=False,  # no provider-side scheduled termination in API v1
        power_off_stops_billing=False,  # billed until terminate, halted or not
        spot=False,
        simulated=False,
        tags=True,
    )

    def __init__(
        self,
        ctx: ProviderContext,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        env: Mapping[str, str] | None = None,
        config_file: Path | None = None,
        key_path: Path | None = None,
        ssh_port: int = SSH_PORT,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        poll_interval: float = 5.0,
        boot_timeout: float = 20 * 60.0,
        request_interval: float = REQUEST_INTERVAL_S,
        launch_interval: float = LAUNCH_INTERVAL_S,
        max_attempts: int = 5,
        backoff: float = 1.0,
        backoff_max: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.ctx = ctx
        env = os.environ if env is None else env
        settings = ctx.config.providers.lambda_cloud
        self.warnings: list[str] = []
        if api_key is not None:
            try:
                self._key: ApiKey | None = ApiKey(api_key)
            except ValueError as exc:
                raise ProviderError(Deferred(N_("lambda: unusable API key: {reason}"),
                                             reason=said(exc))) from None
            self.key_source = "given"
        else:
            self._key, self.key_source, self.warnings = resolve_key(ctx.config, env, config_file)
        for warning in self.warnings:
            log.warning("%s", warning)
        raw_base = base_url or (env.get(ENV_BASE) or "").strip() or settings.base_url or DEFAULT_BASE_URL
        try:
            self.base_url = normalise_base_url(raw_base)
        except ValueError as exc:
            raise ProviderError(Deferred(N_("lambda: base_url: {reason}"),
                                         reason=said(exc))) from None
        self.key_path = Path(key_path) if key_path else ctx.state_dir / "lambda" / "id_ed25519"
        self.ssh_port = ssh_port
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.poll_interval = poll_interval
        self.boot_timeout = boot_timeout
        self.request_interval = request_interval
        self.launch_interval = launch_interval
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.backoff_max = backoff_max
        self._transport = transport
        self._pace_lock = asyncio.Lock()
        self._next_slot: dict[str, float] = {"any": 0.0, "launch": 0.0}
        self._key_name: str | None = None
        self._seen_booting: dict[str, datetime] = {}  # provider id -> last seen booting
        self._terminated_at: dict[str, datetime] = {}  # provider id -> terminate answered

    def __repr__(self) -> str:
        key = self._key.masked if self._key else "(no key)"
        return f"LambdaProvider(base_url={self.base_url!r}, key={key})"

    @property
    def key_hint(self) -> str:
        """What a screen may show about the key: masked, and where it came from."""
        if self._key is None:
            return Deferred(N_("no API key (set {env})"), env=ENV_KEY)
        return Deferred(N_("{key} from {source}"), key=self._key.masked, source=self.key_source)

    # -- HTTP -------------------------------------------------------------------------------------

    def _authorization(self, key: ApiKey) -> str:
        return f"Bearer {key.reveal()}"

    def _no_key_error(self) -> Exception:
        return ProviderError(Deferred(
            N_("lambda: no API key — set {env}, or api_key under [providers.lambda] in "
               "config.toml (mode 0600); make one at {dashboard}"),
            env=ENV_KEY, dashboard=KEY_DASHBOARD))

    async def _pace(self, kind: str) -> None:
        interval = self.launch_interval if kind == "launch" else self.request_interval
        if interval <= 0:
            return
        async with self._pace_lock:
            now = time.monotonic()
            at = max(now, self._next_slot[kind])
            self._next_slot[kind] = at + interval
        if at > now:
            await asyncio.sleep(at - now)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff * 2 ** (attempt - 1))
        delay += random.uniform(0, self.backoff / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, max(self.backoff_max, 60.0)))
        return delay

    async def _request(self, method: str, path: str, what: str, *, body: Any = None,
                       launch: bool = False) -> Any:
        """One API call, returning the `data` of the answer.

        Retries 429, 5xx and timeouts with backoff; 4xx errors are raised at once. For a launch
        (not idempotent), 5xx and timeouts raise `_Ambiguous` for the caller to reconcile.
        """
        import httpx

        client = self._http()
        attempt = 0
        while True:
            attempt += 1
            await self._pace("any")
            retry_after: float | None = None
            try:
                resp = await client.request(method, path, json=body)
            except httpx.TimeoutException:
                err: LambdaApiError = LambdaApiError(Deferred(
                    N_("lambda: {what}: no answer within {seconds} s"), what=what,
                    seconds=f"{self.timeout:g}"), retryable=True)
            except httpx.TransportError as exc:
                err = LambdaApiError(Deferred(
                    N_("lambda: {what}: cannot reach {url} ({reason})"), what=what,
                    url=self.base_url, reason=type(exc).__name__), retryable=True)
            else:
                log.debug("%s %s -> %s", method, path, resp.status_code)
                if 200 <= resp.status_code < 300:
                    try:
                        payload = resp.json()
                        return payload["data"]
                    except (ValueError, KeyError, TypeError):
                        err = LambdaApiError(Deferred(
                            N_("lambda: {what}: unexpected answer (HTTP {status}, not the "
                               "documented {data})"), what=what, status=resp.status_code,
                            data='{"data": …}'), status=resp.status_code, retryable=True)
                else:
                    err = self._api_error(resp.status_code, resp.content, what,
                                          _retry_after(resp.headers.get("Retry-After")))
                    retry_after = err.retry_after
                    if not err.retryable:
                        raise err from None
            if launch and err.status != 429:
                raise _Ambiguous(err)
            if attempt >= self.max_attempts:
                if err.status == 429:
                    err = LambdaApiError(Deferred(
                        N_("{error} — still refused after {tries} tries; wait a minute and "
                           "retry"), error=str(err), tries=attempt),
                        status=429, code=err.code, retryable=True)
                raise err from None
            delay = self._delay(attempt, retry_after)
            if launch:
                delay = max(delay, self.launch_interval)  # the documented launch limit
            log.info("lambda: %s (retrying in %.1f s, try %d of %d)", self._scrub(str(err)), delay,
                     attempt + 1, self.max_attempts)
            await asyncio.sleep(delay)

    def _api_error(self, status: int, content: bytes, what: str,
                   retry_after: float | None = None) -> LambdaApiError:
        code = message = suggestion = None
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            envelope = json.loads(content.decode("utf-8"))
            err = envelope.get("error") if isinstance(envelope, dict) else None
            if isinstance(err, dict):
                code = err.get("code") if isinstance(err.get("code"), str) else None
                message = err.get("message") if isinstance(err.get("message"), str) else None
                suggestion = err.get("suggestion") if isinstance(err.get("suggestion"), str) else None
        transient = status == 429 or status >= 500 or bool(code and code.startswith("provider/"))
        text: Deferred
        if code in _FRIENDLY:
            text, add_message = _said(_FRIENDLY[code][0]), _FRIENDLY[code][1]
        elif code and code.startswith("provider/"):
            text, add_message = Deferred(N_("Lambda's upstream provider failed")), True
        elif status in _BY_STATUS:
            text, add_message = _said(_BY_STATUS[status]), True
        elif status >= 500:
            text, add_message = Deferred(N_("Lambda answered HTTP {status}"), status=status), True
        else:
            text, add_message = Deferred(N_("HTTP {status}"), status=status), True
        # Lambda's own words (message, suggestion) follow ours, as they came (scrubbed).
        more = ""
        if add_message and message and message.strip().rstrip(".").lower() not in text.lower():
            more += f": {message.strip().rstrip('.')}"
        if suggestion and "—" not in text:  # ours already says what to do
            more += f" ({suggestion.strip().rstrip('.')})"
        if status == 429 or (status >= 500 and code is None):
            more += f" [HTTP {status}]" if str(status) not in f"{what}{text}{more}" else ""
        more = self._scrub(" ".join(more.split()))[:300]
        line = Deferred(N_("lambda: {what}: {text}{more}"), what=what, text=text, more=more)
        return LambdaApiError(line, status=status, code=code, retryable=transient,
                              retry_after=retry_after)

    # -- offers -------------------------------------------------------------------------------------

    async def instance_types(self) -> dict[str, Any]:
        data = await self._request("GET", "/instance-types",
                                   Deferred(N_("listing instance types")))
        if not isinstance(data, dict):
            raise ProviderError(Deferred(
                N_("lambda: listing instance types: unexpected answer (not a map)")))
        return data

    async def offers(self) -> list[Offer]:
        return self.offers_from(await self.instance_types())

    @staticmethod
    def offers_from(types: Mapping[str, Any]) -> list[Offer]:
        """Offers from a `GET /instance-types` payload (see the module doc)."""
        as_of = utcnow().date().isoformat()
        out: list[Offer] = []
        for type_name, item in types.items():
            try:
                it = item["instance_type"]
                gpus = int(it["specs"]["gpus"])
                cents = Decimal(int(it["price_cents_per_hour"]))
                regions = [r["name"] for r in item.get("regions_with_capacity_available") or []]
            except (KeyError, TypeError, ValueError):
                log.warning("lambda: skipping malformed instance type %r", type_name)
                continue
            if gpus < 1:
                continue  # CPU-only types: nothing for a GPU console to rent
            gpu, vram = gpu_card(it.get("gpu_description") or it.get("description") or type_name)
            price = cents / 100
            rule = BillingRule(price_per_hour=price, granularity=Granularity.MINUTE,
                               minimum_seconds=0)
            per_gpu = (price / gpus).quantize(Decimal("0.0001"))
            source = f"Lambda API /instance-types: {type_name} ({it.get('description', '')})"
            for region in regions or [None]:
                out.append(Offer(
                    provider="lambda", offer_id=f"{type_name}@{region}" if region else type_name,
                    gpu=gpu, gpu_count=gpus, vram_gb=vram, price_per_gpu_hour=per_gpu,
                    billing=rule, region=region, available=region is not None, tier="on-demand",
                    source=source, as_of=as_of, images=["lambda-stack"],
                ))
        out.sort(key=lambda o: (not o.available, o.gpu, o.gpu_count, o.price_per_gpu_hour,
                                o.region or ""))
        return out

    # -- SSH key ---------------------------------------------------------------------------------------

    def client_key(self) -> tuple[Path, str]:
        """gputui's key pair for Lambda instances (0600), made on first use."""
        from gputui.remote.keys import ensure_keypair

        try:
            return ensure_keypair(self.key_path, comment="gputui-lambda")
        except OSError as exc:
            raise ProviderError(Deferred(N_("lambda: cannot use the SSH key {path}: {reason}"),
                                         path=self.key_path, reason=os_reason(exc))) from None

    async def ensure_ssh_key(self) -> str:
        """The name under which Lambda holds our public key, uploading it if it is not there."""
        if self._key_name is not None:
            return self._key_name
        _, public = self.client_key()
        mine = public.split()[:2]
        keys = await self._request("GET", "/ssh-keys", Deferred(N_("listing SSH keys")))
        names = set()
        for entry in keys or []:
            names.add(entry.get("name"))
            if (entry.get("public_key") or "").split()[:2] == mine:
                self._key_name = str(entry["name"])
                return self._key_name
        digest = hashlib.sha256(mine[1].encode()).hexdigest()[:12]
        name = f"gputui-{digest}"
        n = 1
        while name in names:
            n += 1
            name = f"gputui-{digest}-{n}"
        added = await self._request("POST", "/ssh-keys", Deferred(N_("adding gputui's SSH key")),
                                    body={"name": name, "public_key": public})
        self._key_name = str(added.get("name") or name)
        return self._key_name

    # -- lifecycle -------------------------------------------------------------------------------------

    async def create(self, request: CreateRequest, instance: Instance) -> Instance:
        """Launch; returns the instance `booting` with Lambda's id (see `boot`)."""
        type_name, _, wanted_region = request.offer_id.partition("@")
        types = await self.instance_types()
        item = types.get(type_name)
        if item is None:
            raise ProviderError(Deferred(
                N_("lambda: no instance type {name} (it may have been retired)"),
                name=repr(type_name)))
        it = item["instance_type"]
        if int(it["specs"]["gpus"]) != request.gpu_count:
            desc = it.get("gpu_description")
            same = {n: v for n, v in types.items()
                    if v["instance_type"].get("gpu_description") == desc}
            match = [n for n, v in same.items()
                     if int(v["instance_type"]["specs"]["gpus"]) == request.gpu_count]
            if not match:
                counts = sorted({int(v["instance_type"]["specs"]["gpus"]) for v in same.values()})
                raise ProviderError(Deferred(
                    N_("lambda: {gpu} comes with {counts} GPU(s) per instance, not {count}"),
                    gpu=desc, counts=", ".join(map(str, counts)), count=request.gpu_count))
            type_name = match[0]
            item, it = types[type_name], types[type_name]["instance_type"]
        regions = [r["name"] for r in item.get("regions_with_capacity_available") or []]
        if not regions:
            raise ProviderError(Deferred(
                N_("lambda: {name} is sold out in every region right now"), name=type_name))
        region = next((r for r in (wanted_region, instance.region) if r and r in regions), regions[0])
        key_name = await self.ensure_ssh_key()
        body: dict[str, Any] = {
            "region_name": region,
            "instance_type_name": type_name,
            "ssh_key_names": [key_name],
            "name": request.name[:64],
            "tags": [{"key": TAG_KEY, "value": instance.id}],
        }
        if request.image:
            body["image"] = {"family": request.image}
        launched_at = utcnow()
        pid = await self._launch(body, instance.id, Deferred(
            N_("launching {name} in {region}"), name=type_name, region=region))
        self._seen_booting[pid] = launched_at
        price = Decimal(int(it["price_cents_per_hour"])) / 100
        return instance.model_copy(update={
            "provider_id": pid,
            "offer_id": f"{type_name}@{region}",
            "region": region,
            "gpu_count": int(it["specs"]["gpus"]),
            "billing": instance.billing.model_copy(update={"price_per_hour": price}),
            "status": InstanceStatus.BOOTING,
            "status_detail": Deferred(N_("booting in {region}"), region=region),
        })

    async def _launch(self, body: dict[str, Any], tag: str, what: str) -> str:
        last: ProviderError | None = None
        for attempt in range(1, self.max_attempts + 1):
            await self._pace("launch")
            try:
                data = await self._request("POST", "/instance-operations/launch", what,
                                           body=body, launch=True)
            except _Ambiguous as amb:
                last = amb.error
                # The launch may have happened: look for our tag before trying again.
                await asyncio.sleep(self._delay(attempt, None))
                try:
                    found = await self.find_tagged(tag)
                except ProviderError as exc:  # cannot tell: launching again could make two
                    raise ProviderError(Deferred(
                        N_("{error}, and looking for it failed too ({reason}); it may have "
                           "launched: gputui keeps looking for it by its tag"),
                        error=str(amb.error), reason=_bare(exc)), retryable=True,
                        outcome_unknown=True) from None
                if found is not None:
                    log.info("lambda: launch answer lost, found instance %s by its tag", found["id"])
                    return str(found["id"])
                continue
            ids = data.get("instance_ids") if isinstance(data, dict) else None
            if not ids:
                raise ProviderError(Deferred(N_("lambda: {what}: the answer named no instance"),
                                             what=what))
            return str(ids[0])
        assert last is not None
        # Lambda's listing may lag a launch it has accepted: keep looking rather than forget it.
        raise ProviderError(Deferred(
            N_("{error} — gave up after {tries} tries; if one of them launched after all, "
               "gputui will find it by its tag"), error=str(last), tries=self.max_attempts),
            retryable=True, outcome_unknown=True)

    async def list_instances(self) -> list[dict[str, Any]]:
        data = await self._request("GET", "/instances", Deferred(N_("listing instances")))
        return list(data or [])

    async def find_tagged(self, our_id: str) -> dict[str, Any] | None:
        """The Lambda instance launched for our instance `our_id`, if any (by its tag)."""
        for inst in await self.list_instances():
            for tag in inst.get("tags") or []:
                if tag.get("key") == TAG_KEY and tag.get("value") == our_id:
                    return inst
        return None

    async def get_instance(self, provider_id: str) -> dict[str, Any]:
        return await self._request("GET", f"/instances/{provider_id}",
                                   Deferred(N_("reading instance {id}"), id=provider_id))

    async def boot(self, instance: Instance) -> Instance:
        """Poll until the instance is `active` with an ip. One that fails to boot is
        terminated (it would bill otherwise), and the error says whether that worked."""
        pid = instance.provider_id
        assert pid, "boot() follows create()"
        deadline = time.monotonic() + self.boot_timeout
        status = "booting"
        while True:
            asked = utcnow()
            try:
                data = await self.get_instance(pid)
            except LambdaApiError as exc:
                if exc.not_found:
                    raise ProviderError(Deferred(
                        N_("lambda: {name}: instance {id} disappeared while booting"),
                        name=instance.name, id=pid)) from None
                if not exc.retryable:
                    raise await self._boot_failed(instance, str(exc)) from None
            else:
                status = str(data.get("status"))
                if status == "active" and data.get("ip"):
                    return self._apply(instance, data, asked)
                if status in _ENDED:
                    raise ProviderError(Deferred(
                        N_("lambda: {name}: Lambda ended instance {id} while it booted "
                           "({status})"), name=instance.name, id=pid, status=status))
                if status == "booting":
                    self._seen_booting[pid] = asked  # Lambda saw it booting after this
            if time.monotonic() >= deadline:
                raise await self._boot_failed(instance, Deferred(
                    N_("still {status} after {minutes} min"), status=status,
                    minutes=f"{self.boot_timeout / 60:g}"))
            await asyncio.sleep(self.poll_interval)

    async def _boot_failed(self, instance: Instance, why: str) -> ProviderError:
        why = without_prefix(why, "lambda: ")
        try:
            await self.release(instance)
        except ProviderError as exc:
            return ProviderError(Deferred(
                N_("lambda: {name}: {why}; terminating it FAILED ({reason}) — terminate instance "
                   "{id} in the Lambda dashboard, it bills until then"),
                name=instance.name, why=why, reason=_bare(exc), id=instance.provider_id))
        return ProviderError(Deferred(
            N_("lambda: {name}: {why}; it was terminated so it does not bill"),
            name=instance.name, why=why))

    async def refresh(self, instance: Instance) -> Instance:
        """Lambda's view: status, ip, and the end of billing once it is terminating."""
        pid = instance.provider_id
        asked = utcnow()
        if not pid:
            # A create interrupted before Lambda's answer was stored: look for its tag.
            found = await self.find_tagged(instance.id)
            if found is None:
                if utcnow() - instance.created_at > timedelta(minutes=15):
                    failed = instance.model_copy(update={
                        "status_detail": Deferred(
                            N_("never launched at Lambda (no instance carries its tag)"))})
                    failed.mark_ended(utcnow(), "failed")
                    return failed
                return instance
            instance = instance.model_copy(update={"provider_id": str(found["id"])})
            return self._apply(instance, found, asked)
        try:
            data = await self.get_instance(pid)
        except LambdaApiError as exc:
            if exc.not_found:
                return self._ended(instance, Deferred(N_("gone at Lambda")))
            raise
        return self._apply(instance, data, asked)

    def _apply(self, instance: Instance, data: Mapping[str, Any],
               asked: datetime | None = None) -> Instance:
        """Lambda's answer onto our record. `asked`: when the question was sent (Lambda's view
        is from after that moment)."""
        pid = str(data.get("id") or instance.provider_id)
        status = str(data.get("status"))
        if status in _ENDED:
            detail = (Deferred(N_("preempted by Lambda")) if status == "preempted"
                      else Deferred(N_("{status} at Lambda"), status=status))
            return self._ended(instance, detail)
        inst = instance.model_copy()
        ip = data.get("ip")
        if ip:
            endpoint = SSHEndpoint(host=str(ip), port=self.ssh_port, user=SSH_USER,
                                   key_path=str(self.key_path))
            if inst.ssh != endpoint:
                inst.ssh = endpoint
        region = (data.get("region") or {}).get("name")
        if region and inst.region != region:
            inst.region = region
        if status == "booting" and inst.running_since is None:
            self._seen_booting[pid] = asked or utcnow()
            inst.status = InstanceStatus.BOOTING
            inst.status_detail = Deferred(N_("booting"))
            return inst
        # active, unhealthy, or booting again after a restart: billing runs either way
        if inst.running_since is None:
            # No sighting of it booting (a restart in between): from its creation, which is
            # before Lambda's start — the meter errs upwards, never down.
            seen = self._seen_booting.pop(pid) if pid in self._seen_booting else None
            inst.mark_running(seen or inst.created_at)
        inst.status = InstanceStatus.RUNNING
        inst.stopped_at = None
        inst.status_detail = {
            "unhealthy": Deferred(N_("Lambda reports it unhealthy (still billing)")),
            "booting": Deferred(N_("restarting (still billing)")),
        }.get(status)
        return inst

    def _ended(self, instance: Instance, detail: str) -> Instance:
        if not instance.status.live:
            return instance
        pid = instance.provider_id or ""
        ended = instance.model_copy(update={"status_detail": detail})
        at = self._terminated_at.get(pid) or utcnow()
        if ended.running_since is None and instance.status in (InstanceStatus.REQUESTED,
                                                                InstanceStatus.BOOTING):
            at = max(at, ended.created_at)
        ended.mark_ended(at, instance.end_reason or "external")
        return ended

    async def release(self, instance: Instance) -> None:
        """Terminate, confirmed by `terminating`/`terminated` or a 404. Idempotent."""
        pid = instance.provider_id
        if not pid:
            found = await self.find_tagged(instance.id)
            if found is None:
                return  # never launched, or long gone
            pid = str(found["id"])
        try:
            data = await self._request("POST", "/instance-operations/terminate",
                                       Deferred(N_("terminating instance {id}"), id=pid),
                                       body={"instance_ids": [pid]})
        except LambdaApiError as exc:
            if not exc.not_found:
                raise
            self._terminated_at.setdefault(pid, utcnow())
            self._forget_host_key(instance)
            return
        now = utcnow()
        shown = {str(i.get("id")): i.get("status") for i in (data or {}).get("terminated_instances") or []}
        status = shown.get(pid)
        if status not in _ENDED:
            try:
                status = (await self.get_instance(pid)).get("status")
            except LambdaApiError as exc:
                if not exc.not_found:
                    raise
                status = "terminated"
        if status not in _ENDED:
            raise ProviderError(Deferred(
                N_("lambda: terminate of {id} was accepted but it still shows {status}"),
                id=pid, status=status), retryable=True)
        self._terminated_at.setdefault(pid, now)
        self._forget_host_key(instance)

    def _forget_host_key(self, instance: Instance) -> None:
        """Lambda hands the IP to someone else later: its host key must not be trusted then."""
        if instance.ssh is None:
            return
        with contextlib.suppress(Exception):
            self.ctx.host_keys.forget(instance.ssh.host, instance.ssh.port)

    async def restart(self, instance: Instance) -> Instance:
        """`POST /instance-operations/restart` (a reboot; billing goes on)."""
        pid = instance.provider_id
        if not pid:
            raise ProviderError(Deferred(N_("lambda: {name}: not launched yet"),
                                         name=instance.name))
        await self._request("POST", "/instance-operations/restart",
                            Deferred(N_("restarting instance {id}"), id=pid),
                            body={"instance_ids": [pid]})
        return await self.refresh(instance)

    async def schedule_release(self, instance: Instance, at: datetime | None) -> bool:
        return False  # Lambda API v1 cannot terminate at a time: layer 3 (lease service, reap)


__all__ = [
    "DEFAULT_BASE_URL", "ENV_BASE", "ENV_KEY", "ApiKey", "LambdaApiError", "LambdaProvider",
    "gpu_card", "lambda_enabled", "mask_key", "normalise_base_url", "resolve_key",
]
