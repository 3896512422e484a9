"""Drill: one instance row that cannot be read (a status this version does not know) is
reported, kept untouched and skipped; every other instance is listed, reaped and released."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from datetime import timedelta
from pathlib import Path

from gputui.models import Lease, utcnow
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], env=run_gputui_env(home), capture_output=True,
                          text=True, timeout=180)


def test_a_zombie_row_blocks_nothing(gputui_home: Path):
    for name in ("overdue", "healthy"):
        made = gputui(gputui_home, "create", "--gpu", "4090", "--name", name,
                      "--release-after", "1h")
        assert made.returncode == 0, made.stderr
    db = gputui_home / "state.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        data = json.loads(conn.execute("SELECT data FROM instances LIMIT 1").fetchone()[0])
        data.update(id="zombie1", name="zombie", status="zombie")
        zombie = json.dumps(data)
        conn.execute("INSERT INTO instances(id, data, live, updated) VALUES (?, ?, 1, 0)",
                     ("zombie1", zombie))
    store = SessionStore(db)
    overdue = next(i for i in store.instances_sync() if i.name == "overdue")
    store.update_lease_sync(overdue.id, lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(minutes=1)}))

    listed = gputui(gputui_home, "instances")
    assert listed.returncode == 0, listed.stderr
    assert "overdue" in listed.stdout and "healthy" in listed.stdout
    assert "zombie1" in listed.stderr and "skipped" in listed.stderr
    as_json = gputui(gputui_home, "instances", "--json")
    assert as_json.returncode == 0
    assert sorted(i["name"] for i in json.loads(as_json.stdout)) == ["healthy", "overdue"]

    reaped = gputui(gputui_home, "reap", "--json")
    assert reaped.returncode == 0, reaped.stderr
    report = json.loads(reaped.stdout)
    assert report["released"] == ["overdue"] and report["errors"] == []
    assert any("zombie1" in line for line in report["unreadable"])

    released = gputui(gputui_home, "release", "healthy")
    assert released.returncode == 0 and "released healthy" in released.stdout, released.stderr
    costs = gputui(gputui_home, "costs", "--json")
    assert costs.returncode == 0
    assert sorted(r["name"] for r in json.loads(costs.stdout)["rows"]) == ["healthy", "overdue"]

    with contextlib.closing(sqlite3.connect(db)) as conn:  # the bad row is exactly as it was
        assert conn.execute("SELECT data, live FROM instances WHERE id='zombie1'").fetchone() \
            == (zombie, 1)


def test_a_second_store_in_one_process_keeps_the_wal_safe(gputui_home: Path):
    """Opening the state file again in a process that has it open must not drop SQLite's lock
    (closing any descriptor of a file drops all of a process's POSIX locks on it): another
    process would then checkpoint and delete the WAL under the open connection."""
    db = gputui_home / "state.db"
    first = SessionStore(db)
    first.put_lease_sync(Lease(instance_id="a"))
    second = SessionStore(db)
    assert (gputui_home / "state.db-wal").exists()
    listed = gputui(gputui_home, "instances")
    assert listed.returncode == 0, listed.stderr
    assert (gputui_home / "state.db-wal").exists()  # still ours: not checkpointed away
    first.put_lease_sync(first.get_lease_sync("a").model_copy(update={"warned": [10]}))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM leases").fetchone() == (1,)
    assert second.get_lease_sync("a").warned == [10]
    first.close()
    second.close()


def test_an_unreadable_when_done_record_holds_only_its_own_instance(gputui_home: Path):
    """A when-done record cut short (a full disk, a hand edit) is reported once and its
    instance held; every other instance is still released at its deadline, and
    `gputui reap --json` still prints JSON."""
    ids = {}
    for name in ("broken", "overdue"):
        made = gputui(gputui_home, "create", "--gpu", "4090", "--name", name,
                      "--release-after", "1h", "--json")
        assert made.returncode == 0, made.stderr
        ids[name] = json.loads(made.stdout)["id"]
    record = gputui_home / "jobs" / f"{ids['broken']}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"policy": "release", "pulls": [{"remote": "out", "lo')
    store = SessionStore(gputui_home / "state.db")
    store.update_lease_sync(ids["overdue"], lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(minutes=1)}))

    reaped = gputui(gputui_home, "reap", "--json")
    assert reaped.returncode == 0, reaped.stderr
    report = json.loads(reaped.stdout)
    assert report["released"] == ["overdue"] and report["errors"] == []
    [bad] = report["unreadable"]
    assert str(record) in bad and "broken is held" in bad and "when-done POLICY" in bad
    assert record.read_text().endswith('"lo')  # left untouched

    # the same as text: the bad record said once, on stderr; exit 0 (nothing due was kept)
    text = gputui(gputui_home, "reap")
    assert text.returncode == 0, text.stderr
    assert text.stderr.count("unreadable when-done record") == 1, text.stderr

    # its queue still works, and says why it is held and how out
    added = gputui(gputui_home, "jobs", "broken", "add", "--", "true")
    assert added.returncode == 0 and added.stdout.split() == ["1"], added.stderr
    listed = gputui(gputui_home, "jobs", "broken")
    assert listed.returncode == 0, listed.stderr
    assert "when done: held: when-done record unreadable — " in listed.stdout
    assert "`gputui release broken` releases it" in listed.stdout
    assert record.read_text().endswith('"lo')  # still untouched

    # when the held instance is itself due, it is kept and `reap` says why and how out
    store.update_lease_sync(ids["broken"], lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(minutes=1)}))
    due = gputui(gputui_home, "reap", "--json")
    assert due.returncode == 1
    report = json.loads(due.stdout)
    assert report["released"] == [] and len(report["unreadable"]) == 1
    [held] = report["errors"]
    assert held.startswith("broken: held: its when-done record cannot be read")
    assert "gputui release broken" in held
    assert store.get_instance_sync(ids["broken"]).status.live

    # writing the record anew ends the hold: the next reap releases it
    record.write_text(json.dumps({"policy": "release", "pulls": []}))
    fixed = gputui(gputui_home, "reap", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout) == {"released": ["broken"], "errors": [], "unreadable": []}
