"""Drill: the console killed mid-way, a clock that jumps, a full or read-only state — nothing lost."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.leases import LeaseService
from gputui.store import SessionStore, StateError
from tests.conftest import GPUTUI, REPO, run_gputui_env


def test_sigkill_during_create_leaves_nothing_unlisted(gputui_home: Path):
    """Killed right after the request was recorded: the next reap either finds the instance
    running (listed, leased, armed) or marks it never created — never a silent orphan."""
    env = run_gputui_env(gputui_home)
    proc = subprocess.Popen([*GPUTUI, "create", "--gpu", "RTX 4090", "--name", "crash"],
                            env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    while "booting" not in (line := proc.stderr.readline()):
        assert line, "create ended before booting"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(2)  # the platform finishes booting on its own (1.5 s), watched or not
    reap = subprocess.run([*GPUTUI, "reap", "--json"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert reap.returncode == 0, reap.stderr
    listed = json.loads(subprocess.run([*GPUTUI, "instances", "--json", "--all"], env=env,
                                       capture_output=True, text=True).stdout)
    [item] = listed
    assert item["name"] == "crash" and item["status"] == "running"
    assert item["release_at"] is not None
    store = SessionStore(gputui_home / "state.db")
    lease = store.get_lease_sync(item["id"])
    assert lease.on_instance_armed and lease.armed_for == lease.release_at  # re-armed by reap


async def test_request_the_provider_never_saw_is_closed(services: Services):
    from gputui.models import BillingRule, Instance

    orphan = Instance(id="never", name="ghost", provider="sandbox", gpu="x",
                      billing=BillingRule(price_per_hour=1), status=InstanceStatus.REQUESTED)
    await services.store.put_instance(orphan)
    await services.store.put_lease(Lease(instance_id="never", release_at=utcnow() + timedelta(hours=1)))
    result = await LeaseService(services).reap()
    assert result.errors == []
    ghost = services.store.get_instance_sync("never")
    assert ghost.status == InstanceStatus.FAILED and "never created" in ghost.status_detail
    [entry] = services.store.ledger_sync()
    assert entry.total == 0 and entry.end_reason == "failed"


async def test_extend_stored_but_not_armed_is_armed_at_next_start(services: Services):
    from gputui.sandbox.shims.state import power_state

    offer = await services.find_offer("sandbox", "RTX 3090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="x"),
                                 lease=Lease(instance_id="x", release_at=utcnow() + timedelta(hours=1)))
    await LeaseService(services).arm(inst)
    new_at = utcnow() + timedelta(hours=5)
    # the console stored the extension and died before touching the instance
    await services.store.update_lease(inst.id, lambda le: le.model_copy(update={"release_at": new_at}))
    await LeaseService(services).tick()
    power = power_state(services.provider("sandbox").instance_root(inst.id))
    assert timedelta(0) <= power.at - new_at < timedelta(minutes=1)
    assert services.provider("sandbox").scheduled_release(inst.id) == new_at


async def test_clock_jumping_back_and_forth_releases_once_at_the_deadline(services: Services):
    offer = await services.find_offer("sandbox", "RTX 3090")
    deadline = utcnow() + timedelta(hours=2)
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="c"),
                                 lease=Lease(instance_id="x", release_at=deadline))
    leases = LeaseService(services)
    for jump in (timedelta(days=-3), timedelta(minutes=-30), timedelta(days=-1)):
        result = await leases.tick(deadline + jump)
        assert result.released == []  # a clock set back never releases early
    assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING
    results = [await leases.tick(deadline + timedelta(seconds=s)) for s in (1, 3600, -60)]
    assert [r.released for r in results] == [["c"], [], []]
    assert len(services.store.ledger_sync()) == 1


async def test_deadline_moved_by_another_process_is_obeyed_at_the_next_tick(services: Services):
    """The clock keeps what it read until the store changes: a deadline moved by another
    process (`gputui extend` in a shell) between two ticks is the one the next tick obeys,
    later (not released at the old deadline) or sooner (released then)."""
    offer = await services.find_offer("sandbox", "RTX 3090")
    deadline = utcnow() + timedelta(hours=2)
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="m"),
                                 lease=Lease(instance_id="x", release_at=deadline))
    leases = LeaseService(services)
    assert (await leases.tick(deadline - timedelta(minutes=5))).released == []
    assert (await leases.tick(deadline - timedelta(minutes=4))).released == []  # nothing moved
    other = SessionStore(services.store.path)  # another process's connection to the state
    try:
        other.update_lease_sync(inst.id, lambda le: le.model_copy(
            update={"release_at": deadline + timedelta(hours=1)}))
        assert (await leases.tick(deadline + timedelta(seconds=1))).released == []
        assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING
        other.update_lease_sync(inst.id, lambda le: le.model_copy(
            update={"release_at": deadline + timedelta(minutes=30)}))
        result = await leases.tick(deadline + timedelta(minutes=30, seconds=1))
    finally:
        other.close()
    assert result.released == ["m"]
    assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RELEASED


def test_full_disk_gives_one_line_and_keeps_the_last_good_state(tmp_path: Path):
    from gputui.models import BillingRule, Instance

    path = tmp_path / "state.db"
    store = SessionStore(path)
    store.put_instance_sync(Instance(id="keep", name="k", provider="sandbox", gpu="x",
                                     billing=BillingRule(price_per_hour=1)))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is now full
    big = "x" * 200_000
    with pytest.raises(StateError) as err:
        store.put_instance_sync(Instance(id="big", name=big, provider="sandbox", gpu="x",
                                         billing=BillingRule(price_per_hour=1)))
    assert "full" in str(err.value) and "\n" not in str(err.value)
    store.close()
    again = SessionStore(path)
    assert [i.id for i in again.instances_sync()] == ["keep"]


def test_read_only_state_gives_one_line_and_keeps_the_state(tmp_path: Path):
    from gputui.models import BillingRule, Instance

    path = tmp_path / "state.db"
    store = SessionStore(path)
    store.put_instance_sync(Instance(id="keep", name="k", provider="sandbox", gpu="x",
                                     billing=BillingRule(price_per_hour=1)))
    store._conn.execute("PRAGMA query_only = 1")  # what a read-only mount looks like to SQLite
    with pytest.raises(StateError) as err:
        store.update_instance_sync("keep", lambda i: i.model_copy(update={"name": "changed"}))
    assert "readonly" in str(err.value).replace("-", "").replace(" ", "") or "read" in str(err.value)
    assert store.get_instance_sync("keep").name == "k"


CHANGER = """
import sys
from datetime import timedelta
from pathlib import Path
from gputui.store import SessionStore
s = SessionStore(Path(sys.argv[1]))
for n in range(int(sys.argv[2])):
    def change(lease):
        return lease.model_copy(update={"warned": [*lease.warned, 1],
                                        "release_at": lease.release_at + timedelta(seconds=1)})
    s.update_lease_sync("shared", change)
"""


def test_a_thousand_concurrent_lease_changes_from_two_processes(tmp_path: Path):
    path = tmp_path / "state.db"
    store = SessionStore(path)
    start = utcnow()
    store.put_lease_sync(Lease(instance_id="shared", release_at=start))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", CHANGER, str(path), "500"], env=env)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0
    lease = store.get_lease_sync("shared")
    assert len(lease.warned) == 1000
    assert lease.release_at == start + timedelta(seconds=1000)
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"

