"""Drill: a full disk or a read-only state folder. Commands that only read keep working;
writes are refused saying the disk is full / the folder is read-only (not "unreadable"), and
nothing is lost.

The full disk is real where this may mount a tmpfs (root with CAP_SYS_ADMIN): an 8 MiB
tmpfs filled to the last byte, then remounted read-only. Everywhere, SQLite's own "disk is
full" (SQLITE_FULL) is also produced with `PRAGMA max_page_count` on the store's connection.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.models import BillingRule, Instance, Lease, LedgerEntry, SSHEndpoint, utcnow
from gputui.store import SessionStore, StateError
from tests.conftest import GPUTUI, run_gputui_env


def _seed(store: SessionStore) -> Instance:
    inst = Instance(id="live1", name="live", provider="ssh", gpu="A100",
                    billing=BillingRule(price_per_hour=Decimal("2.00")),
                    ssh=SSHEndpoint(host="127.0.0.1", port=9), created_at=utcnow())
    inst.mark_running(utcnow() - timedelta(minutes=30))
    store.put_instance_sync(inst)
    store.put_lease_sync(Lease(instance_id=inst.id, release_at=utcnow() + timedelta(hours=1)))
    done = Instance(id="done1", name="done", provider="ssh", gpu="A100",
                    billing=BillingRule(price_per_hour=Decimal("2.00")), created_at=utcnow())
    done.mark_running(utcnow() - timedelta(hours=1))
    store.put_instance_sync(done)
    done.mark_ended(utcnow(), "manual")
    store.end_instance_sync(done.id, LedgerEntry.from_instance(done, "manual", utcnow()), done)
    return inst


@pytest.fixture
def tmpfs(tmp_path: Path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _commands(home: Path) -> dict[str, subprocess.CompletedProcess]:
    env = run_gputui_env(home)
    runs = {
        "instances": ["instances"], "instances --json": ["instances", "--json"],
        "costs --csv": ["costs", "--csv"], "extend": ["extend", "live", "1h"],
        "release": ["release", "live"],
    }
    return {k: subprocess.run([*GPUTUI, *a], env=env, capture_output=True, text=True, timeout=120)
            for k, a in runs.items()}


def _check(runs: dict[str, subprocess.CompletedProcess], why: str) -> None:
    for key in ("instances", "instances --json", "costs --csv"):
        assert runs[key].returncode == 0, (key, runs[key].stderr)
    assert "live" in runs["instances"].stdout
    assert [i["name"] for i in json.loads(runs["instances --json"].stdout)] == ["live"]
    assert "done" in runs["costs --csv"].stdout and "live" in runs["costs --csv"].stdout
    for key in ("extend", "release"):
        assert runs[key].returncode == 1, (key, runs[key].stdout)
        assert why in runs[key].stderr and "unreadable" not in runs[key].stderr, runs[key].stderr


def test_full_then_read_only_disk(tmpfs: Path):
    home = tmpfs / "home"
    store = SessionStore(home / "state.db")
    inst = _seed(store)
    store.close()
    before = (home / "state.db").read_bytes()
    filler = tmpfs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)  # fill the disk to the last byte
    for size in (1 << 20, 4096, 1):
        try:
            while os.write(fd, b"\0" * size):
                pass
        except OSError:
            pass
    os.close(fd)
    _check(_commands(home), "the disk is full")
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    _check(_commands(home), "the folder is read-only")
    subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    after = SessionStore(home / "state.db")  # nothing was lost
    assert after.get_instance_sync(inst.id).status.live
    assert after.get_lease_sync(inst.id).release_at is not None
    assert [e.name for e in after.ledger_sync()] == ["done"]
    assert len(before) > 0


def test_sqlite_full_is_said_as_a_full_disk(gputui_home: Path):
    store = SessionStore(gputui_home / "state.db")
    inst = _seed(store)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StateError) as err:
        for n in range(2000):  # until the file would have to grow
            store.put_instance_sync(inst.model_copy(update={"id": f"x{n}", "name": "y" * 60}))
    assert "the disk is full" in str(err.value) and "nothing was changed" in str(err.value)
    assert store.get_instance_sync(inst.id).status.live  # reading goes on
    assert [e.name for e in store.ledger_sync()] == ["done"]
