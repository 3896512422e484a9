"""Notifications to the renter's phone or chat, through Apprise (100+ services: Bark, ntfy,
DingTalk, Feishu/Lark, WeCom bot, Telegram, email, a JSON webhook...).

- Where: `[notify] urls` in config.toml (a file holding them must be 0600) and
  `GPUTUI_NOTIFY_URLS` (space-separated). The URLs carry tokens: they are shown masked
  (`mask_url`), and nothing from them reaches a log, the state or a message (`scrub`).
- What: typed events (`NotifyEvent`), each with a key. The first process to see an event
  (console, daemon, reap, run) claims its key in the store and sends it; the others leave it,
  so each is sent once. Title and body are in the interface language and sanitised.
- How: `NotifyService.submit` returns at once. A background thread claims, gathers what comes
  within a short window (more than a few at once: one digest message), and sends to every URL
  with a timeout and a few retries with backoff. A receiver that hangs or refuses never delays
  the caller (a release): the failure is recorded (masked) and said as a notice.

Apprise is imported on first send only: the console's first frame and `gputui --help` never
pay for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, unquote

from gputui.i18n import N_, Deferred, ngettext, shown
from gputui.sanitize import sanitize

if TYPE_CHECKING:
    import asyncio

    from gputui.config import Config
    from gputui.models import Instance, LedgerEntry
    from gputui.store import SessionStore

log = logging.getLogger("gputui.notify")

NOTIFY_URLS_ENV = "GPUTUI_NOTIFY_URLS"
SEND_TIMEOUT_S = 10.0  # one attempt to one URL
ATTEMPTS = 3  # per URL, with backoff (1 s, 2 s...) in between
BACKOFF_S = 1.0
DIGEST_WINDOW_S = 1.5  # events gathered this long after the first one...
DIGEST_OVER = 3  # ...and more than this many of them go as one digest message
CLOSE_WAIT_S = 20.0  # at exit, what is still queued is given this long to go
TITLE_CHARS = 200
BODY_CHARS = 2000

Severity = Literal["info", "warning", "failure"]
Status = Literal["ok", "refused", "timeout", "invalid"]


# --- the URLs -----------------------------------------------------------------------------


def configured_urls(config: Config | None, env: Mapping[str, str] | None = None) -> list[str]:
    """The Apprise URLs to send to: `[notify] urls` in config.toml, then GPUTUI_NOTIFY_URLS
    (space-separated), each once."""
    env = os.environ if env is None else env
    urls: list[str] = []
    notify = getattr(config, "notify", None)
    urls += [u.strip() for u in (getattr(notify, "urls", None) or [])]
    urls += (env.get(NOTIFY_URLS_ENV) or "").split()
    return list(dict.fromkeys(u for u in urls if u))


def wanted(config: Config | None, kind: str) -> bool:
    """Whether the renter asked for events of this kind (`[notify] events`, `run_failed`)."""
    notify = getattr(config, "notify", None)
    if notify is None:
        return kind != "run_failed"
    return bool(notify.wants(kind))


_HOST_RE = re.compile(
    r"localhost|(?:\d{1,3}\.){3}\d{1,3}|\[[0-9A-Fa-f:.]+\]"
    r"|(?:[A-Za-z0-9-]+\.)+[A-Za-z][A-Za-z0-9-]*[A-Za-z]", re.IGNORECASE)
_HOSTPORT_RE = re.compile(r"(?P<host>\[[^\]]*\]|[^:]*)(?::(?P<port>\d{1,5}))?")
# Query parameters that are Apprise's options, not secrets (their values are left in a reason).
_OPTION_KEYS = {"method", "format", "overflow", "retry", "wait", "optional", "rto", "cto",
                "verify", "image", "mode", "priority", "lang"}


def _split(url: str) -> tuple[str, str, str, str, str]:
    """scheme, userinfo, host, port, the rest (path, query, fragment) — loosely: Apprise URLs
    put tokens where a host would be (`tgram://123:abc/...`), so no strict parser."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        return "", "", "", "", url
    match = re.match(r"([^/?#]*)(.*)", rest, re.DOTALL)
    assert match is not None
    authority, tail = match.group(1), match.group(2)
    userinfo, _at, hostport = authority.rpartition("@")
    hp = _HOSTPORT_RE.fullmatch(hostport)
    host, port = (hp.group("host"), hp.group("port") or "") if hp else (hostport, "")
    return scheme, userinfo, host, port, tail


def _hostlike(host: str) -> bool:
    return bool(host) and _HOST_RE.fullmatch(host) is not None


def mask_url(url: str) -> str:
    """The URL as it may be shown: its service and, where it names a real host, the host and
    port; user, password, tokens, path and query masked (`json://127.0.0.1:8080/***`,
    `dingtalk://***`)."""
    scheme, userinfo, host, port, tail = _split(url)
    if not scheme:
        return "***"
    shown_scheme = sanitize(scheme, 20).lower() if re.fullmatch(r"[A-Za-z0-9+.-]+", scheme) \
        else "?"
    where = (host + (f":{port}" if port else "")) if _hostlike(host) else "***"
    out = f"{shown_scheme}://" + ("***@" if userinfo else "") + where
    if tail.strip("/"):
        out += "/***"
    return sanitize(out, 200)


def _secrets(url: str) -> list[str]:
    """Every piece of `url` that may be a secret, longest first (for `scrub`)."""
    scheme, userinfo, host, port, tail = _split(url)
    pieces = {url, url.strip(), userinfo, tail}
    for part in userinfo.split(":"):
        pieces |= {part, unquote(part)}
    if not _hostlike(host):
        pieces |= {host, unquote(host), f"{host}:{port}" if port else host}
    path, _q, query = tail.partition("?")
    for seg in re.split(r"[/#]", path):
        pieces |= {seg, unquote(seg)}
    for key, value in parse_qsl(query.split("#")[0], keep_blank_values=True):
        if key.lower() not in _OPTION_KEYS:
            pieces |= {value}
    pieces |= {query}
    return sorted((p for p in pieces if len(p) >= 3), key=len, reverse=True)


def scrub(text: object, urls: Iterable[str], limit: int = 400) -> str:
    """`text` (an error, Apprise's words) with every secret-looking piece of the URLs masked,
    sanitised: fit for a log, the state or a screen."""
    out = str(text)
    for url in urls:
        for piece in _secrets(url):
            out = out.replace(piece, "***")
    return sanitize(out, limit)


# --- events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NotifyEvent:
    """Something the renter wants to hear about, wherever they are. `title` and `body` are
    `Deferred`: English in the store and logs, the interface language when sent."""

    kind: str
    instance_id: str | None
    name: str
    title: Deferred
    body: Deferred
    discriminator: str = ""
    severity: Severity = "info"

    @property
    def key(self) -> str:
        """Sent once per key, across processes."""
        return f"{self.kind}:{self.instance_id or '-'}:{self.discriminator}"

    def render(self) -> tuple[str, str]:
        """Title and body as sent: in the interface language, cleaned of control characters."""
        return (sanitize(shown(self.title), TITLE_CHARS),
                sanitize(shown(self.body), BODY_CHARS))


def _duration(seconds: float | None) -> Deferred:
    s = max(0, int(seconds or 0))
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (Deferred(N_("{h}h{m:02d}m"), h=h, m=m) if h else
            Deferred(N_("{m}m{s:02d}s"), m=m, s=s))


_RELEASED_BY = {
    "timer": N_("its release timer"), "idle": N_("the idle release"),
    "budget": N_("the budget cap"), "done": N_("its queue's when-done"),
    "external": N_("the platform"), "manual": N_("hand"), "failed": N_("a failure"),
}
_ACTORS = {"daemon": N_("gputui daemon"), "reap": N_("gputui reap"),
           "console": N_("the console"), "run": N_("gputui run")}


def released(entry: LedgerEntry, actor: str | None = None) -> NotifyEvent:
    """An instance was released (or ended by the platform): by whom, what it cost."""
    from gputui.format import format_money

    by = Deferred(_RELEASED_BY.get(entry.end_reason, entry.end_reason))
    if actor in _ACTORS:
        by = Deferred(N_("{by}, through {actor}"), by=by, actor=Deferred(_ACTORS[actor]))
    return NotifyEvent(
        "released", entry.instance_id, entry.name,
        Deferred(N_("{name} released"), name=entry.name),
        Deferred(N_("{name} ({gpu}) was released by {by} after {duration}; it cost {cost}."),
                 name=entry.name, gpu=f"{entry.gpu_count}× {entry.gpu}", by=by,
                 duration=_duration(entry.running_seconds),
                 cost=format_money(entry.total, entry.currency)))


def still_billing(inst: Instance, error: str) -> NotifyEvent:
    """A release that keeps failing: the instance is still billing."""
    return NotifyEvent(
        "still_billing", inst.id, inst.name,
        Deferred(N_("{name}: STILL BILLING"), name=inst.name),
        Deferred(N_("{name} ({provider}) could not be released and is still billing: {error}. "
                    "gputui keeps trying; check it in the provider's dashboard."),
                 name=inst.name, provider=inst.provider, error=error),
        severity="failure")


_QUEUE_OUTCOMES = {"released": N_("released"), "stopped": N_("stopped"),
                   "pulled": N_("kept running (still billing)"),
                   "kept": N_("kept running (still billing)")}


def queue_ended(inst: Instance, *, counts: Mapping[str, int], seconds: float | None,
                cost: Decimal | None, outcome: str, results: str | None,
                discriminator: str = "") -> NotifyEvent:
    """A queue of runs ended: how the runs went, how long and what they cost, where the
    results went, and what became of the instance."""
    from gputui.format import format_small_money

    tally = Deferred(N_("{succeeded} succeeded, {failed} failed, {cancelled} cancelled"),
                     succeeded=counts.get("succeeded", 0),
                     failed=counts.get("failed", 0) + counts.get("lost", 0),
                     cancelled=counts.get("cancelled", 0))
    where = (Deferred(N_("results in {where}"), where=results) if results else
             Deferred(N_("no results were asked for")))
    spent = format_small_money(cost, inst.billing.currency) if cost is not None else "-"
    return NotifyEvent(
        "queue_ended", inst.id, inst.name,
        Deferred(N_("{name}: queue ended"), name=inst.name),
        Deferred(N_("{name}: {tally} in {duration}; the runs cost {cost}; {where}; the instance "
                    "was {outcome}."), name=inst.name, tally=tally, duration=_duration(seconds),
                 cost=spent, where=where,
                 outcome=Deferred(_QUEUE_OUTCOMES.get(outcome, outcome))),
        discriminator=discriminator,
        severity="warning" if counts.get("failed") or counts.get("lost") else "info")


def notify_queue_end(services: Any, inst: Instance, outcome: str, results: str | None,
                     discriminator: str = "") -> bool:
    """The jobs service's call when a queue's when-done is carried out: the runs' tally, time
    and cost from the store's per-run records. Never raises."""
    try:
        if not configured_urls(services.config):
            return False
        from datetime import datetime

        runs = services.store.run_costs_sync(inst.id)
        counts: dict[str, int] = {}
        for run in runs:
            counts[str(run.get("status"))] = counts.get(str(run.get("status")), 0) + 1
        cost = sum((Decimal(str(r["cost"])) for r in runs if r.get("cost") is not None),
                   Decimal(0)) if runs else None
        starts = [datetime.fromisoformat(r["started_at"]) for r in runs if r.get("started_at")]
        ends = [datetime.fromisoformat(r["ended_at"]) for r in runs if r.get("ended_at")]
        seconds = (max(ends) - min(starts)).total_seconds() if starts and ends else None
        return session_notifier(services).submit(queue_ended(
            inst, counts=counts, seconds=seconds, cost=cost, outcome=outcome, results=results,
            discriminator=discriminator))
    except Exception as exc:  # a notification never stops the when-done
        log.warning("queue-end notification not queued: %s", type(exc).__name__)
        return False


def run_failed(inst: Instance, run: str, exit_code: int | None, job_id: str,
               attempt: int = 1) -> NotifyEvent:
    """A run of the queue failed (opt-in: `[notify] run_failed = true`)."""
    code = "-" if exit_code is None else str(exit_code)
    return NotifyEvent(
        "run_failed", inst.id, inst.name,
        Deferred(N_("{name}: run {run} failed"), name=inst.name, run=run),
        Deferred(N_("{name}: run {run} ended with exit code {code}; the queue goes on."),
                 name=inst.name, run=run, code=code),
        discriminator=f"{job_id}:{attempt}", severity="warning")


def deadline_warning(inst: Instance, minutes: int, *, release_at: str, warning: int | None = None,
                     results_not_home: str | None = None) -> NotifyEvent:
    """`minutes` left before the release (the warning configured at `warning` minutes): once
    per warning and deadline (an extended deadline warns again)."""
    body = (Deferred(N_("{name} will be released in {mins} min and the results asked for "
                        "({pulls}) are not home yet."), name=inst.name, mins=minutes,
                     pulls=results_not_home) if results_not_home else
            Deferred(N_("{name} will be released in {mins} min; extend it with gputui extend "
                        "{name}."), name=inst.name, mins=minutes))
    return NotifyEvent(
        "deadline_warning", inst.id, inst.name,
        Deferred(N_("{name}: released in {mins} min"), name=inst.name, mins=minutes), body,
        discriminator=f"{release_at}:{minutes if warning is None else warning}",
        severity="warning")


def release_held(inst: Instance, why: str, discriminator: str = "") -> NotifyEvent:
    return NotifyEvent(
        "release_held", inst.id, inst.name,
        Deferred(N_("{name}: release held"), name=inst.name),
        Deferred(N_("{name} was not released: {why}. It is still billing: release it anyway, "
                    "pull another path, or extend it."), name=inst.name, why=why),
        discriminator=discriminator, severity="warning")


def budget(text: str, level: int, percent: int, instance_id: str | None,
           discriminator: str) -> NotifyEvent:
    """A budget threshold crossed (`level`: 80 or 100), once per cap and period."""
    return NotifyEvent(
        "budget", instance_id, "",
        Deferred(N_("Budget: {share} used"), share=f"{percent}%"),
        text if isinstance(text, Deferred) else Deferred("{text}", text=text),
        discriminator=f"{level}:{discriminator}",
        severity="warning" if level < 100 else "failure")


def wallet_low(provider: str, balance: str, hours: float, discriminator: str) -> NotifyEvent:
    return NotifyEvent(
        "wallet_low", None, provider,
        Deferred(N_("{provider}: wallet low"), provider=provider),
        Deferred(N_("{provider}: the balance {balance} lasts about {hours} h at the current "
                    "rate."), provider=provider, balance=balance, hours=f"{hours:.1f}"),
        discriminator=f"{provider}:{discriminator}", severity="warning")


def wipe_soon(inst: Instance, clock: str, discriminator: str = "") -> NotifyEvent:
    return NotifyEvent(
        "wipe_soon", inst.id, inst.name,
        Deferred(N_("{name}: wiped tomorrow"), name=inst.name),
        Deferred(N_("{name}: {clock} — {provider} releases it and wipes its data; start it or "
                    "save what you need."), name=inst.name, clock=clock, provider=inst.provider),
        discriminator=discriminator, severity="warning")


def card_found(inst: Instance, tries: str, waited: str, what: str = "create",
               since: str = "") -> NotifyEvent:
    """`--wait` found a free card: the instance is created (or started) and bills from now."""
    title = (Deferred(N_("{name}: a card was free — it is starting"), name=inst.name)
             if what == "create" else
             Deferred(N_("{name}: its machine had a free GPU — it is starting"), name=inst.name))
    body = Deferred(N_("{name}: {count}× {gpu} on {provider} after {tries} ({waited} of "
                       "waiting); it bills from now."), name=inst.name, count=inst.gpu_count,
                    gpu=inst.gpu, provider=inst.provider, tries=tries, waited=waited)
    return NotifyEvent("card_found", inst.id, inst.name, title, body,
                       discriminator=f"{what}:{since}")


def keep_failed(inst: Instance, wipe_at: str, why: str) -> NotifyEvent:
    """The keeper could not power a stopped instance on before the wipe (kind `wipe_soon`)."""
    return NotifyEvent(
        "wipe_soon", inst.id, inst.name,
        Deferred(N_("{name}: could not keep it from the wipe"), name=inst.name),
        Deferred(N_("{name}: powering it on failed ({why}); {provider} wipes it at {time}. gputui "
                    "tries again every 10 minutes; the API cannot start it without a GPU — start "
                    "it in the AutoDL console in 无卡模式 (about ¥0.1/h) or save your data."),
                 name=inst.name, why=why, provider=inst.provider, time=wipe_at),
        discriminator=f"keep:{wipe_at}", severity="failure")


def probe_event() -> NotifyEvent:
    """`gputui notify test`'s message."""
    return NotifyEvent("test", None, "", Deferred(N_("gputui test notification")),
                       Deferred(N_("If you can read this, gputui can reach you here.")))


# --- sending --------------------------------------------------------------------------------


@dataclass
class UrlResult:
    """What happened to one URL (masked): ok, refused (with Apprise's reason), timeout,
    invalid (Apprise does not know it)."""

    url: str
    status: Status
    reason: str = ""
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "status": self.status, "reason": self.reason or None,
                "attempts": self.attempts}


_APPRISE_QUIET = False


def _apprise() -> Any:
    """Apprise, imported now; its own log kept to itself (it is read per send, scrubbed)."""
    global _APPRISE_QUIET
    import apprise

    if not _APPRISE_QUIET:
        # Apprise and the HTTP library under it log request lines (paths, tokens): never to a
        # handler of ours. Apprise's words reach us per send, through its result, scrubbed.
        for name in ("apprise", "urllib3"):
            logger = logging.getLogger(name)
            logger.propagate = False
            if not logger.handlers:
                logger.addHandler(logging.NullHandler())
        _APPRISE_QUIET = True
    return apprise


def send_once(url: str, title: str, body: str, *, timeout: float = SEND_TIMEOUT_S,
              severity: Severity = "info") -> UrlResult:
    """One attempt to one URL, within `timeout` seconds (blocking: call from a thread)."""
    from gputui.i18n import _

    apprise = _apprise()
    masked = mask_url(url)
    plugin = apprise.Apprise.instantiate(url)
    if plugin is None:
        return UrlResult(masked, "invalid", _("Apprise does not know this URL (see Apprise's "
                                              "list of services)"))
    lowered = url.lower()
    # Apprise's own deadline is the one that fires, so that a hang reads as a timeout
    if "rto=" not in lowered:
        plugin.socket_read_timeout = timeout + 2.0
    if "cto=" not in lowered:
        plugin.socket_connect_timeout = min(float(plugin.socket_connect_timeout), timeout)
    box = apprise.Apprise()
    box.add(plugin)
    kind = {"info": apprise.NotifyType.INFO, "warning": apprise.NotifyType.WARNING,
            "failure": apprise.NotifyType.FAILURE}[severity]
    try:
        result = box.notify(body=body, title=title, notify_type=kind,
                            body_format=apprise.NotifyFormat.TEXT, interpret_escapes=False,
                            timeout=timeout)
    except Exception as exc:  # a plugin's own bug: a failure like any other
        return UrlResult(masked, "refused", scrub(f"{type(exc).__name__}: {exc}", [url]))
    status = getattr(result, "status", None)
    if bool(result):
        return UrlResult(masked, "ok")
    said = [e.message for r in result for e in r.logs()
            if getattr(e, "level", "") in ("WARNING", "ERROR", "CRITICAL")]
    if int(status if status is not None else 1) == 5:  # AppriseResultStatus.TIMEOUT
        return UrlResult(masked, "timeout", _("no answer within {seconds:g} s").format(
            seconds=timeout))
    reason = scrub(said[-1], [url]) if said else _("the service refused it")
    return UrlResult(masked, "refused", reason)


def send(url: str, title: str, body: str, *, timeout: float = SEND_TIMEOUT_S,
         attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
         severity: Severity = "info", stop: threading.Event | None = None) -> UrlResult:
    """Send to one URL, retrying a failure with backoff (blocking: call from a thread)."""
    result = UrlResult(mask_url(url), "refused")
    for attempt in range(max(1, attempts)):
        result = send_once(url, title, body, timeout=timeout, severity=severity)
        result.attempts = attempt + 1
        if result.ok or result.status == "invalid" or attempt + 1 >= attempts:
            break
        wait = backoff_s * 2 ** attempt
        if stop is not None:
            stop.wait(wait)  # closing: the tries left go without waiting
        else:
            time.sleep(wait)
    return result


def send_all(urls: Sequence[str], title: str, body: str, **kw: Any) -> list[UrlResult]:
    """Send to every URL at once (each in its own thread), results in the URLs' order."""
    if len(urls) == 1:
        return [send(urls[0], title, body, **kw)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(urls)),
                            thread_name_prefix="gputui-notify") as pool:
        return list(pool.map(lambda u: send(u, title, body, **kw), urls))


def send_test(urls: Sequence[str], *, timeout: float = SEND_TIMEOUT_S) -> list[UrlResult]:
    """`gputui notify test`: one notification to each URL, one attempt each."""
    title, body = probe_event().render()
    return send_all(urls, title, body, timeout=timeout, attempts=1)


def _digest(events: Sequence[NotifyEvent]) -> tuple[str, str, Severity]:
    title = sanitize(ngettext("gputui: {n} event", "gputui: {n} events",
                              len(events)).format(n=len(events)), TITLE_CHARS)
    body = "\n".join("• " + ev.render()[0] for ev in events)[:BODY_CHARS * 2]
    worst: Severity = "info"
    for ev in events:
        if ev.severity == "failure" or (ev.severity == "warning" and worst == "info"):
            worst = ev.severity
    return title, body, worst


@dataclass
class _Pending:
    event: NotifyEvent
    loop: asyncio.AbstractEventLoop | None


@dataclass
class Delivery:
    """One message sent (an event, or a digest of several): its keys and each URL's result."""

    keys: list[str]
    title: str
    results: list[UrlResult] = field(default_factory=list)

    @property
    def state(self) -> str:
        ok = sum(r.ok for r in self.results)
        return "sent" if ok == len(self.results) else "partial" if ok else "failed"


class NotifyService:
    """The session's notifications: `submit(event)` returns at once; a background thread
    claims, gathers (a digest when many come at once), sends and records."""

    def __init__(self, store: SessionStore, config: Config | None, *,
                 env: Mapping[str, str] | None = None, timeout_s: float = SEND_TIMEOUT_S,
                 attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
                 window_s: float = DIGEST_WINDOW_S, digest_over: int = DIGEST_OVER,
                 close_wait_s: float = CLOSE_WAIT_S) -> None:
        self.store = store
        self.config = config
        self.urls = configured_urls(config, env)
        self.timeout_s, self.attempts, self.backoff_s = timeout_s, attempts, backoff_s
        self.window_s, self.digest_over, self.close_wait_s = window_s, digest_over, close_wait_s
        self.owner = uuid.uuid4().hex
        self.deliveries: list[Delivery] = []  # what this process sent (for `notify`'s tests)
        self._pending: list[_Pending] = []
        self._seen: set[str] = set()  # keys submitted in this process
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._busy = False
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.urls)

    def submit(self, event: NotifyEvent) -> bool:
        """Queue `event` to be sent (once, across processes). Never waits for the network or
        the store, never raises. False when it is not wanted (no URL, an event not chosen)."""
        if not self.urls or not wanted(self.config, event.kind):
            return False
        if event.key in self._seen:  # this process has it already (a clock says it each tick)
            return False
        import asyncio

        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._cond:
            if self._stop.is_set():
                return False
            self._seen.add(event.key)
            self._pending.append(_Pending(event, loop))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gputui-notify",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def idle(self) -> bool:
        """Nothing queued or being sent."""
        with self._cond:
            return not self._pending and not self._busy

    def wait_idle(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def drain(self, timeout: float | None = None) -> bool:
        """Stop taking events; give what is queued up to `timeout` seconds to go."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(self.close_wait_s if timeout is None else timeout)
        return not thread.is_alive()

    async def close(self) -> None:
        import asyncio

        if self._thread is not None:
            await asyncio.to_thread(self.drain)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop.is_set():
                    self._cond.wait()
                if not self._pending:
                    return
                self._busy = True
                end = time.monotonic() + self.window_s
                while not self._stop.is_set():  # gather what comes at once
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending = self._pending, []
            try:
                self._deliver(batch)
            except Exception as exc:  # never let one bad batch stop the thread
                log.warning("notification batch failed: %s", scrub(exc, self.urls))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _claim(self, event: NotifyEvent) -> bool:
        from gputui.errors import GputuiError

        try:
            return self.store.claim_notification_sync(event.key, event.kind, event.instance_id,
                                                      self.owner)
        except GputuiError as exc:  # the state cannot take it: send rather than stay silent
            log.warning("notification %s not claimed: %s", event.key, exc)
            return True

    def _record(self, delivery: Delivery) -> None:
        from gputui.errors import GputuiError

        detail = "; ".join(f"{r.url}: {r.status}" + (f" ({r.reason})" if r.reason else "")
                           for r in delivery.results)
        detail = scrub(detail, self.urls, 1000)
        for key in delivery.keys:
            with contextlib.suppress(GputuiError):
                self.store.finish_notification_sync(key, delivery.state, detail)

    def _deliver(self, batch: list[_Pending]) -> None:
        seen: set[str] = set()
        mine: list[_Pending] = []
        for item in batch:
            if item.event.key in seen:
                continue
            seen.add(item.event.key)
            if self._claim(item.event):
                mine.append(item)
        if not mine:
            return
        if len(mine) > self.digest_over:
            title, body, severity = _digest([p.event for p in mine])
            messages = [([p.event.key for p in mine], title, body, severity)]
        else:
            messages = [([p.event.key], *p.event.render(), p.event.severity) for p in mine]
        loop = next((p.loop for p in reversed(mine) if p.loop is not None), None)
        for keys, title, body, severity in messages:
            delivery = Delivery(keys, title)
            delivery.results = send_all(self.urls, title, body, timeout=self.timeout_s,
                                        attempts=self.attempts, backoff_s=self.backoff_s,
                                        severity=severity, stop=self._stop)
            self.deliveries.append(delivery)
            self._record(delivery)
            if delivery.state != "sent":
                self._report(delivery, loop)

    def _report(self, delivery: Delivery, loop: asyncio.AbstractEventLoop | None) -> None:
        """A URL that did not take the message: a notice (masked) where a loop can show it,
        else a log line (masked)."""
        failed = [r for r in delivery.results if not r.ok]
        for r in failed:
            text = Deferred(N_("notification not delivered to {url}: {reason}"), url=r.url,
                            reason=scrub(r.reason or r.status, self.urls))
            shown_on_loop = False
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self.store.notify, text, "warning")
                    shown_on_loop = True
            if not shown_on_loop:
                log.warning("%s", text)


def session_notifier(services: Any) -> NotifyService:
    """The session's one NotifyService (made on first use, drained when the session closes)."""
    return services.attached(NotifyService,  # type: ignore[no-any-return]
                             lambda s: NotifyService(s.store, s.config))
