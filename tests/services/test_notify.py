"""Notifications through Apprise, to a real HTTP receiver on 127.0.0.1 (Apprise's `json://`):
they arrive, once across processes, in the configured language, cleaned, gathered into a digest
when many come at once, retried, and never in the way of the caller; the URLs' secrets never
reach a log, the state, a notice or the command's output."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.config import Config, NotifySettings
from gputui.i18n import set_language
from gputui.models import LedgerEntry, utcnow
from gputui.sanitize import has_control
from gputui.services import notify
from gputui.services.notify import NotifyService, mask_url, scrub
from gputui.store import Notice, SessionStore
from tests.conftest import GPUTUI, REPO, run_gputui_env

SECRET = "s3cretPa55"


@pytest.fixture
def store(gputui_home: Path):
    gputui_home.mkdir(parents=True, exist_ok=True)
    s = SessionStore(gputui_home / "state.db")
    yield s
    s.close()


def config_for(*urls: str, **notify_settings) -> Config:
    return Config(notify=NotifySettings(urls=list(urls), **notify_settings))


def fast(store: SessionStore, config: Config, **kw) -> NotifyService:
    opts = {"timeout_s": 1.0, "attempts": 2, "backoff_s": 0.05, "window_s": 0.05,
            "close_wait_s": 5.0, "env": {}}
    opts.update(kw)
    return NotifyService(store, config, **opts)


def entry(name: str = "box", instance_id: str = "i-1", reason: str = "timer") -> LedgerEntry:
    now = utcnow()
    return LedgerEntry(instance_id=instance_id, name=name, provider="sandbox", gpu="RTX 4090",
                       gpu_count=2, started_at=now - timedelta(hours=1, minutes=5), ended_at=now,
                       running_seconds=3900, compute_cost=Decimal("1.30"),
                       storage_cost=Decimal("0.00"), currency="USD", end_reason=reason)


# --- arriving -------------------------------------------------------------------------------


def test_a_released_notification_arrives_with_title_body_and_cost(receiver, store):
    svc = fast(store, config_for(receiver.url("ok")))
    assert svc.submit(notify.released(entry(), actor="daemon"))
    assert svc.wait_idle(10)
    [got] = receiver.wait_for(1)
    assert got.title == "box released"
    assert got.body == ("box (2× RTX 4090) was released by its release timer, through gputui "
                        "daemon after 1h05m; it cost $1.30.")
    assert got.type == "info"
    [row] = store.notifications_sync("i-1")
    assert row["key"] == "released:i-1:" and row["state"] == "sent"


def test_no_url_configured_sends_nothing_and_starts_no_thread(store):
    svc = NotifyService(store, Config(), env={})
    assert not svc.submit(notify.released(entry()))
    assert svc._thread is None and store.notifications_sync() == []


def test_environment_urls_are_used_beside_the_config_ones(receiver, store):
    env = {"GPUTUI_NOTIFY_URLS": f"  {receiver.url('ok/env')}   {receiver.url('ok/cfg')} "}
    svc = fast(store, config_for(receiver.url("ok/cfg")), env=env)
    assert svc.urls == [receiver.url("ok/cfg"), receiver.url("ok/env")]  # each once
    svc.submit(notify.released(entry()))
    assert svc.wait_idle(10)
    assert sorted(m.path for m in receiver.wait_for(2)) == ["ok/cfg", "ok/env"]


def test_events_not_chosen_are_not_sent_and_run_failed_is_opt_in(receiver, store):
    inst = _inst()
    only_released = fast(store, config_for(receiver.url(), events=["released"]))
    assert not only_released.submit(notify.still_billing(inst, "HTTP 503"))
    default = fast(store, config_for(receiver.url()))
    assert not default.submit(notify.run_failed(inst, "train", 3, "2"))
    opted = fast(store, config_for(receiver.url(), run_failed=True))
    assert opted.submit(notify.run_failed(inst, "train", 3, "2"))
    assert opted.wait_idle(10)
    [got] = receiver.wait_for(1)
    assert got.title == "gpu-box: run train failed" and "exit code 3" in got.body


def _inst(name: str = "gpu-box"):
    from gputui.models import BillingRule, Instance

    return Instance(id="i-9", name=name, provider="sandbox", offer_id="o", gpu="RTX 4090",
                    gpu_count=1, billing=BillingRule(price_per_hour=Decimal("0.50")))


# --- once, across processes ---------------------------------------------------------------


SUBMIT = """
import sys
from pathlib import Path
from gputui.config import Config, NotifySettings
from gputui.services import notify
from gputui.services.notify import NotifyService
from gputui.models import BillingRule, Instance
from decimal import Decimal
from gputui.store import SessionStore

store = SessionStore(Path(sys.argv[1]))
svc = NotifyService(store, Config(notify=NotifySettings(urls=[sys.argv[2]])), env={},
                    window_s=0.05, timeout_s=2, attempts=1)
inst = Instance(id="i-9", name="gpu-box", provider="sandbox", offer_id="o", gpu="RTX 4090",
                gpu_count=1, billing=BillingRule(price_per_hour=Decimal("0.50")))
sys.stdin.readline()  # all start together
svc.submit(notify.still_billing(inst, "HTTP 503"))
svc.drain(10)
print(len(svc.deliveries))
"""


def test_each_event_is_sent_once_though_several_processes_see_it(receiver, store,
                                                                 gputui_home: Path):
    url = receiver.url("ok")
    procs = [subprocess.Popen([sys.executable, "-c", SUBMIT, str(gputui_home / "state.db"), url],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=run_gputui_env(gputui_home), cwd=REPO) for _ in range(3)]
    time.sleep(0.5)  # let them import; then everyone at once, this process too
    here = fast(store, config_for(url))
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    here.submit(notify.still_billing(_inst(), "HTTP 503"))
    here.wait_idle(10)
    sent = [int(p.communicate(timeout=60)[0].strip() or 0) for p in procs]
    sent.append(len(here.deliveries))
    assert sum(sent) == 1, sent
    time.sleep(0.3)  # a duplicate would have arrived by now
    assert len(receiver.messages) == 1
    assert receiver.messages[0].title == "gpu-box: STILL BILLING"
    # and later, the same event again (the next tick, another console): not sent again
    again = fast(SessionStore(gputui_home / "state.db"), config_for(url))
    assert again.submit(notify.still_billing(_inst(), "HTTP 503"))
    assert again.wait_idle(10) and again.deliveries == []
    assert len(receiver.messages) == 1


def test_a_claim_whose_process_died_is_taken_over(store):
    assert store.claim_notification_sync("k:1:", "released", "1", "owner-a")
    assert not store.claim_notification_sync("k:1:", "released", "1", "owner-b")  # fresh, alive
    # the holder died before it could send: its pid is gone
    store._conn.execute("UPDATE notifications SET pid=? WHERE key='k:1:'", (_dead_pid(),))
    assert store.claim_notification_sync("k:1:", "released", "1", "owner-b")
    store.finish_notification_sync("k:1:", "sent", "ok")
    assert not store.claim_notification_sync("k:1:", "released", "1", "owner-c")  # sent: never


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --- never in the way -------------------------------------------------------------------------


async def test_a_hanging_receiver_does_not_delay_the_caller(receiver, store):
    svc = fast(store, config_for(receiver.url("hang")), timeout_s=1.0, attempts=2)
    started = time.monotonic()
    for i in range(3):
        svc.submit(notify.released(entry(instance_id=f"i-{i}")))
    took = time.monotonic() - started
    assert took < 0.2, took  # queued, not sent, on the caller's time
    assert await asyncio.to_thread(receiver.wait_hits, "hang")
    # the thread gives up after its tries, records it, and says so (masked)
    notices: list[Notice] = []
    store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    assert await asyncio.to_thread(svc.wait_idle, 15)
    await asyncio.sleep(0.05)  # the notice is posted to this loop
    rows = store.notifications_sync()
    assert [r["state"] for r in rows] == ["failed"] * 3
    assert all("timeout" in r["detail"] for r in rows)
    assert any("not delivered" in n.text and "json://127.0.0.1" in n.text for n in notices)


def test_a_refusing_receiver_is_retried_then_recorded(receiver, store):
    svc = fast(store, config_for(receiver.url("fail")), attempts=3)
    svc.submit(notify.released(entry()))
    assert svc.wait_idle(15)
    assert receiver.hits["fail"] == 3  # tried three times
    [row] = store.notifications_sync()
    assert row["state"] == "failed" and "500" in row["detail"]


def test_a_flaky_receiver_gets_it_on_the_retry(receiver, store):
    svc = fast(store, config_for(receiver.url("flaky")), attempts=3)
    svc.submit(notify.released(entry()))
    assert svc.wait_idle(15)
    assert len(receiver.wait_for(1)) == 1 and receiver.hits["flaky"] == 2
    assert store.notifications_sync()[0]["state"] == "sent"
    assert svc.deliveries[0].results[0].attempts == 2


def test_many_events_at_once_go_as_one_digest(receiver, store):
    svc = fast(store, config_for(receiver.url()), window_s=0.5, digest_over=3)
    for i in range(6):
        svc.submit(notify.released(entry(name=f"box{i}", instance_id=f"i-{i}")))
    assert svc.wait_idle(10)
    [got] = receiver.wait_for(1)
    assert got.title == "gputui: 6 events"
    assert got.body.splitlines() == [f"• box{i} released" for i in range(6)]
    assert {r["state"] for r in store.notifications_sync()} == {"sent"}
    # a few at once go one by one
    svc.submit(notify.released(entry(name="solo", instance_id="i-solo")))
    assert svc.wait_idle(10)
    assert receiver.wait_for(2)[1].title == "solo released"


# --- clean, private, in the renter's language -------------------------------------------------


def test_control_characters_in_a_hostile_name_never_reach_the_payload(receiver, store):
    hostile = "evil\x1b]52;c;QUFBQQ==\x07\x1b[31mred\u202e\r\nnext\x00"
    svc = fast(store, config_for(receiver.url()))
    svc.submit(notify.still_billing(_inst(name=hostile), "bad\x1b[2Jerror\x07"))
    assert svc.wait_idle(10)
    [got] = receiver.wait_for(1)
    for text in (got.title, got.body):
        assert not has_control(text) and "\x1b" not in text and "\u202e" not in text
    assert got.title.startswith("evil") and "red" in got.title
    assert "\\u001b" not in got.raw.decode()  # not even escaped in the JSON


def test_chinese_body_when_the_language_is_zh(receiver, store):
    set_language("zh")
    svc = fast(store, config_for(receiver.url()))
    svc.submit(notify.released(entry()))
    assert svc.wait_idle(10)
    [got] = receiver.wait_for(1)
    assert got.title == "box 已释放"
    assert "释放定时器" in got.body and "$1.30" in got.body
    assert "released" not in got.body


async def test_no_secret_in_any_log_state_notice_or_payload(receiver, store, gputui_home: Path,
                                                            caplog):
    caplog.set_level(logging.DEBUG)
    urls = [receiver.url(f"fail/tok3n{SECRET}?token=qq{SECRET}", auth=f"user:{SECRET}"),
            receiver.url(f"hang/{SECRET}", auth=f"bob:{SECRET}"),
            receiver.url("ok/path-" + SECRET, auth=f"me:{SECRET}")]
    notices: list[Notice] = []
    store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    svc = fast(store, config_for(*urls), attempts=1)
    svc.submit(notify.released(entry()))
    assert await asyncio.to_thread(svc.wait_idle, 15)
    await asyncio.sleep(0.05)
    [got] = receiver.wait_for(1)
    assert SECRET not in got.raw.decode()  # the payload (the password is the receiver's auth)
    texts = [n.text for n in notices] + [n.log_text for n in notices]
    assert len(notices) == 2 and all("json://***@127.0.0.1:" in t for t in texts)
    detail = store.notifications_sync()[0]["detail"]
    assert "refused" in detail and "timeout" in detail and "json://***@127.0.0.1" in detail
    logged = "\n".join(r.getMessage() for r in caplog.records)
    state = await asyncio.to_thread(_state_bytes, gputui_home)
    for where in (*texts, detail, logged, state.decode("latin-1")):
        assert SECRET not in where


def _state_bytes(home: Path) -> bytes:
    """The state database as it lies on disk (its WAL too)."""
    return b"".join(p.read_bytes() for p in home.glob("state.db*"))


@pytest.mark.parametrize(("url", "shown"), [
    ("json://user:pw@127.0.0.1:8080/hook?token=abc", "json://***@127.0.0.1:8080/***"),
    ("jsons://hooks.example.com/a/b", "jsons://hooks.example.com/***"),
    ("bark://api.day.app/MyDeviceKey123", "bark://api.day.app/***"),
    ("dingtalk://aabbccddeeff0011/", "dingtalk://***"),
    ("dingtalk://secret@tokenabc/", "dingtalk://***@***"),
    ("wecombot://botkey1234", "wecombot://***"),
    ("feishu://abcdef-1234", "feishu://***"),
    ("tgram://123456789:AAbbCC_dd/12315544/", "tgram://***/***"),
    ("mailto://me:apppass@qq.com", "mailto://***@qq.com"),
    ("ntfys://ntfy.sh/my-secret-topic", "ntfys://ntfy.sh/***"),
    ("ntfy://my-topic", "ntfy://***"),
    ("not a url", "***"),
])
def test_urls_are_masked_when_shown(url, shown):
    assert mask_url(url) == shown


def test_scrub_masks_every_piece_of_a_url():
    url = "tgram://123456789:AAbbCC_dd/12315544/?token=zz-top"
    said = "error sending to 123456789:AAbbCC_dd chat 12315544 token zz-top\x1b[31m"
    out = scrub(said, [url])
    assert "AAbbCC_dd" not in out and "12315544" not in out and "zz-top" not in out
    assert "\x1b" not in out


# --- gputui notify test -------------------------------------------------------------------------


def gputui(home: Path, *args: str, env: dict | None = None, timeout: float = 60):
    full = run_gputui_env(home)
    full.update(env or {})
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, env=full,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_notify_test_says_per_url_what_happened(receiver, gputui_home: Path):
    urls = [receiver.url("ok"), receiver.url(f"fail/{SECRET}", auth=f"u:{SECRET}"),
            receiver.url("hang"), f"nosuchservice://{SECRET}"]
    started = time.monotonic()
    out = gputui(gputui_home, "notify", "test", "--timeout", "1",
                 env={"GPUTUI_NOTIFY_URLS": " ".join(urls)})
    assert time.monotonic() - started < 20  # the URLs are tried side by side
    assert out.returncode == 1, out
    lines = out.stdout.splitlines()
    port = receiver.port
    assert lines[0] == f"json://127.0.0.1:{port}/***: ok"
    assert lines[1].startswith(f"json://***@127.0.0.1:{port}/***: refused — ")
    assert "500" in lines[1]
    assert lines[2].startswith(f"json://127.0.0.1:{port}/***: timed out")
    assert lines[3].startswith("nosuchservice://***: not a valid Apprise URL")
    assert SECRET not in out.stdout + out.stderr
    [got] = receiver.wait_for(1)
    assert got.title == "gputui test notification"

    js = gputui(gputui_home, "notify", "test", "--json", "--timeout", "1",
                env={"GPUTUI_NOTIFY_URLS": " ".join(urls[:2])})
    assert js.returncode == 1
    data = json.loads(js.stdout)
    assert [r["status"] for r in data["results"]] == ["ok", "refused"] and data["ok"] is False
    assert SECRET not in js.stdout

    ok = gputui(gputui_home, "notify", "test", env={"GPUTUI_NOTIFY_URLS": urls[0]})
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": ok")


def test_notify_test_with_no_url_says_how_to_configure(gputui_home: Path):
    out = gputui(gputui_home, "notify", "test", env={"GPUTUI_NOTIFY_URLS": ""})
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "[notify]" in out.stderr
    assert "GPUTUI_NOTIFY_URLS" in out.stderr and "Traceback" not in out.stderr


def test_a_config_holding_urls_must_be_private(receiver, gputui_home: Path):
    gputui_home.mkdir(parents=True, exist_ok=True)
    cfg = gputui_home / "config.toml"
    cfg.write_text(f'[notify]\nurls = ["{receiver.url("ok/" + SECRET)}"]\n')
    cfg.chmod(0o644)
    out = gputui(gputui_home, "notify", "test", env={"GPUTUI_NOTIFY_URLS": ""})
    assert out.returncode == 2 and "chmod 600" in out.stderr and "notify.urls" in out.stderr
    assert SECRET not in out.stderr + out.stdout
    cfg.chmod(0o600)
    out = gputui(gputui_home, "notify", "test", env={"GPUTUI_NOTIFY_URLS": ""})
    assert out.returncode == 0, out
    cfg.write_text(f'[notify]\nurls = ["{SECRET}"]\nevents = ["released"]\n')
    out = gputui(gputui_home, "notify", "test")
    assert out.returncode == 2 and "notify.urls" in out.stderr and "urls[0]" in out.stderr
    assert SECRET not in out.stderr and out.stderr.count("\n") == 1
    cfg.write_text('[notify]\nurls = []\nevents = ["nonsense"]\n')
    out = gputui(gputui_home, "notify", "test")
    assert out.returncode == 2 and "notify.events" in out.stderr


def test_the_first_frame_and_help_do_not_import_apprise():
    probe = ("import sys; from gputui.cli import build_parser; build_parser(); "
             "import gputui.services.hub, gputui.services.notify, gputui.services.leases; "
             "print('apprise' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.stdout.strip() == "False", out
