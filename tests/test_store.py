"""The session store: durable, shared safely between processes, never overwriting what it can't read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.models import BillingRule, GpuSample, Instance, Lease, LedgerEntry
from gputui.store import (
    SCHEMA_VERSION,
    GpuHistory,
    InstanceChanged,
    LeaseChanged,
    SessionStore,
    StateError,
    TelemetryChanged,
)

from .conftest import REPO


def make_instance(iid: str, name: str = "job") -> Instance:
    return Instance(
        id=iid, name=name, provider="sandbox", gpu="GeForce RTX 4090",
        billing=BillingRule(price_per_hour=Decimal("0.40")),
    )


def test_state_survives_close_and_reopen(tmp_path: Path):
    path = tmp_path / "state.db"
    s = SessionStore(path)
    s.put_instance_sync(make_instance("a", "train"))
    s.put_lease_sync(Lease(instance_id="a"))
    s.close()
    s2 = SessionStore(path)
    assert [i.name for i in s2.instances_sync()] == ["train"]
    assert s2.get_lease_sync("a") is not None
    assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_async_face_and_events(tmp_path: Path):
    s = await SessionStore.open(tmp_path / "state.db")
    seen: list[object] = []
    s.subscribe(seen.append)
    await s.put_instance(make_instance("a"))
    await s.put_lease(Lease(instance_id="a"))
    assert InstanceChanged("a") in seen and LeaseChanged("a") in seen
    got = await s.get_instance("a")
    assert got is not None and got.gpu == "GeForce RTX 4090"


def test_version_moves_on_every_commit_here_or_elsewhere(tmp_path: Path):
    """`version_now` is what a reader keeps its last read under: it stays while nothing is
    committed, and moves on a commit by this store or by another connection (process)."""
    path = tmp_path / "state.db"
    s = SessionStore(path)
    other = SessionStore(path)
    try:
        first = s.version_now()
        assert first is not None and s.version_now() == first
        s.put_instance_sync(make_instance("a"))
        second = s.version_now()
        assert second not in (None, first)
        s.instances_sync()  # reading changes nothing
        assert s.version_now() == second
        other.put_lease_sync(Lease(instance_id="a"))
        third = s.version_now()
        assert third not in (None, second)
        assert s.version_now() == third
    finally:
        other.close()
        s.close()


def test_corrupt_file_is_refused_and_left_untouched(tmp_path: Path):
    path = tmp_path / "state.db"
    garbage = b"this is not a database\n" * 100
    path.write_bytes(garbage)
    with pytest.raises(StateError, match="left untouched"):
        SessionStore(path)
    assert path.read_bytes() == garbage


def test_truncated_database_is_refused(tmp_path: Path):
    path = tmp_path / "state.db"
    s = SessionStore(path)
    for n in range(50):
        s.put_instance_sync(make_instance(f"i{n}"))
    s.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    before = path.read_bytes()
    with pytest.raises(StateError):
        SessionStore(path).instances_sync()
    assert path.read_bytes() == before


def test_newer_schema_is_refused(tmp_path: Path):
    path = tmp_path / "state.db"
    s = SessionStore(path)
    s._conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    s.close()
    with pytest.raises(StateError, match="newer gputui"):
        SessionStore(path)


def test_invalid_row_gives_a_clear_error(tmp_path: Path):
    path = tmp_path / "state.db"
    s = SessionStore(path)
    s._conn.execute("INSERT INTO instances(id, data, live, updated) VALUES ('x', '{\"id\": 1}', 1, 0)")
    # listing skips it and says why; reading that one row names it
    assert s.instances_sync() == []
    assert "instance x: field" in s.unreadable["instance x"]
    with pytest.raises(StateError, match="instance x: field"):
        s.get_instance_sync("x")


WRITER = textwrap.dedent(
    """
    import sys
    from decimal import Decimal
    from pathlib import Path
    from gputui.models import BillingRule, Instance
    from gputui.store import SessionStore
    s = SessionStore(Path(sys.argv[1]))
    mode = sys.argv[2]
    tag = sys.argv[3]
    n = int(sys.argv[4])
    if mode == "put":
        for i in range(n):
            s.put_instance_sync(Instance(id=f"{tag}{i}", name="w", provider="sandbox", gpu="x",
                                billing=BillingRule(price_per_hour=Decimal(1))))
            print(f"{tag}{i}", flush=True)
    else:
        for i in range(n):
            def bump(inst):
                inst.billed_running_seconds += 1
                return inst
            s.update_instance_sync("shared", bump)
    """
)


def _writer(path: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), *args],
        stdout=subprocess.PIPE, text=True, env=env,
    )


def test_writer_killed_with_sigkill_loses_no_committed_change(tmp_path: Path):
    path = tmp_path / "state.db"
    SessionStore(path).close()
    proc = _writer(path, "put", "k", "100000")
    committed: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while len(committed) < 200 and time.monotonic() < deadline:
        committed.append(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    s = SessionStore(path)
    ids = {i.id for i in s.instances_sync()}
    assert len(committed) >= 200
    assert set(committed) <= ids


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path):
    path = tmp_path / "state.db"
    s = SessionStore(path)
    s.put_instance_sync(make_instance("shared"))
    procs = [_writer(path, "bump", "x", "150") for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    assert s.get_instance_sync("shared").billed_running_seconds == 300


def test_changes_from_another_process_are_published(tmp_path: Path):
    path = tmp_path / "state.db"
    s = SessionStore(path)
    seen: list[object] = []
    s.subscribe(seen.append)
    proc = _writer(path, "put", "ext", "3")
    proc.wait(timeout=60)
    events = s.poll_external()
    assert InstanceChanged("ext0") in events and InstanceChanged("ext2") in seen
    assert s.poll_external() == []  # only once


def test_ledger_entry_is_written_once(tmp_path: Path):
    s = SessionStore(tmp_path / "state.db")
    inst = make_instance("a")
    s.put_instance_sync(inst)
    from gputui.models import utcnow

    entry = LedgerEntry.from_instance(inst, "manual", utcnow())
    assert s.end_instance_sync("a", entry, inst) is True
    assert s.end_instance_sync("a", entry, inst) is False
    assert len(s.ledger_sync()) == 1
    assert s.instances_sync(live_only=True) == []


def test_telemetry_is_bounded_and_in_memory(tmp_path: Path):
    s = SessionStore(tmp_path / "state.db", history=10)
    seen: list[object] = []
    s.subscribe(seen.append)
    for n in range(25):
        s.add_samples("a", [GpuSample(index=0, utilization_gpu=n), GpuSample(index=1)])
    tel = s.telemetry("a")
    assert len(tel.history[0]) == 10
    assert tel.history[0].last("util") == [float(n) for n in range(15, 25)]
    assert tel.history[1].last("util", 3) == [None, None, None]  # not reported
    assert tel.latest()[0].utilization_gpu == 24
    assert TelemetryChanged("a") in seen
    assert s._query("SELECT count(*) FROM changes")[0][0] == 0  # nothing written to disk


def test_gpu_history_keeps_the_newest_readings_in_order():
    h = GpuHistory(4)
    assert len(h) == 0 and h.last("util") == []
    for n in range(10):
        h.append(GpuSample(index=0, utilization_gpu=float(n), memory_used_mib=n * 10.0,
                           memory_total_mib=100.0, power_draw_w=None if n == 8 else 100.0 + n))
    assert len(h) == 4
    assert h.last("util") == [6.0, 7.0, 8.0, 9.0]  # wrapped round the ring, oldest first
    assert h.last("util", 2) == [8.0, 9.0]
    assert h.last("util", 99) == [6.0, 7.0, 8.0, 9.0]
    assert h.last("mem_pct", 1) == [90.0]  # used / total, as the memory sparkline draws it
    assert h.last("power_w") == [106.0, 107.0, None, 109.0]  # N/A stays a gap, not a zero


def test_inventory_and_hints_live_in_the_store(tmp_path: Path):
    from gputui.models import GpuInventory, Hint, HostInventory

    s = SessionStore(tmp_path / "state.db")
    seen: list[object] = []
    s.subscribe(seen.append)
    inv = HostInventory(driver_version="570.124.06", gpus=[GpuInventory(index=0, name="L40S")])
    s.set_inventory("a", inv)
    s.set_inventory("a", inv.model_copy())  # the same again: no redraw
    assert s.telemetry("a").inventory == inv and seen == [TelemetryChanged("a")]
    s.set_hints("a", [Hint("thermal", "GPU 0 at 88 °C", gpu_index=0)])
    assert [h.short for h in s.telemetry("a").hints] == ["hot"]
