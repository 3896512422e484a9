"""An allocation Slurm has already purged from its lists (MinJobAge), on a cluster WITH
accounting: gputui asks sacct how and when it ended and bills to that. Against a real one-node
Slurm whose MinJobAge is 2 s, with slurmdbd over a private MariaDB; skipped, saying why, where
Slurm, munge, MariaDB, slurmdbd, sshd or root is missing (CI installs them)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from gputui.models import InstanceStatus, utcnow
from gputui.providers.slurm import parse_squeue
from gputui.services.hub import Services
from tests.drill.sshd_host import needs_sshd
from tests.slurm_cluster import (
    SlurmCluster,
    cluster_fixture,
    job_purged,
    needs_accounting,
    refreshed_later,
    rent_seen_running,
    services_fixture,
    unique_cluster,
    until,
)

PRICE = Decimal("3.00")
CLUSTER = unique_cluster("sacct")

cluster = cluster_fixture("slurm-sacct", runners_of=(CLUSTER,), min_job_age=2, accounting=True)
slurm = services_fixture({CLUSTER: str(PRICE)})


def test_sacct_lines_read_as_squeue_lines():
    """sacct's own wording (these lines are Slurm 22.05's, from the cluster below): `CANCELLED
    by UID`, an End of `Unknown` while running, limits as `HH:MM:SS`."""
    fields = "|None|2026-12-02T00:28:39|{end}|00:05:00|1|localhost"
    cancelled = parse_squeue("2|CANCELLED by 0" + fields.format(end="2026-12-02T00:28:41"))
    assert cancelled is not None and cancelled.state == "CANCELLED"
    assert cancelled.end == datetime(2026, 12, 2, 0, 28, 41, tzinfo=UTC)
    assert cancelled.start == datetime(2026, 12, 2, 0, 28, 39, tzinfo=UTC)
    running = parse_squeue("1|RUNNING" + fields.format(end="Unknown"))
    assert running is not None and running.state == "RUNNING" and running.end is None
    assert running.node_count == 1 and running.nodes == "localhost"


def recorded(made: SlurmCluster, job: str) -> tuple[str, datetime, datetime] | None:
    """sacct's (State, Start, End) of the job once its end is recorded, read here on its own."""
    out = made.run("env", "TZ=UTC", "sacct", "-X", "-n", "-P", "-j", job, "-o",
                   "State,Start,End", check=False).stdout.strip().splitlines()
    if not out or out[0].count("|") != 2:
        return None
    state, start, end = out[0].split("|")
    try:
        return (state, datetime.fromisoformat(start).replace(tzinfo=UTC),
                datetime.fromisoformat(end).replace(tzinfo=UTC))
    except ValueError:  # End "Unknown": not ended (or not recorded) yet
        return None


async def cancelled_and_forgotten(svc: Services, made: SlurmCluster, name: str
                                  ) -> tuple[Any, str, tuple[str, datetime, datetime]]:
    """An allocation seen running by gputui, then cancelled outside it (the cluster's admin,
    the renter on the login node), purged by Slurm, its end recorded by sacct: (the instance,
    its job id, sacct's State, Start and End)."""
    inst, job = await rent_seen_running(svc, CLUSTER, 1, 600, name)
    made.run("scancel", job)  # not through gputui
    await until(lambda: job_purged(made, job), 60, "Slurm to forget the cancelled job")
    await until(lambda: recorded(made, job) is not None, 30, "sacct to record the job's end")
    found = recorded(made, job)
    assert found is not None and found[0].startswith("CANCELLED")
    return inst, job, found


@needs_accounting
@needs_sshd
async def test_a_purged_allocation_is_billed_to_the_end_sacct_recorded(slurm, gputui_home: Path):
    """Slurm ended it at its time limit while no gputui ran and forgot it; the accounting
    still knows: the instance reads as ended by its time limit, billed to the very second Slurm
    recorded (Slurm checks limits now and then: often later than the limit gputui last saw),
    not to the moment gputui looked again."""
    svc, made = slurm
    seen, job = await rent_seen_running(svc, CLUSTER, 2, 50, "timed")  # with its limit
    assert seen.ends_by is not None and seen.running_since is not None
    assert 55 <= (seen.ends_by - seen.running_since).total_seconds() <= 65  # --time=1
    inst = seen
    await svc.close()  # no gputui process from here on

    await until(lambda: job_purged(made, job), 240, "Slurm to end the job and forget it")
    await until(lambda: recorded(made, job) is not None, 30, "sacct to record the job's end")
    found = recorded(made, job)
    assert found is not None
    state, start, end = found
    assert state == "TIMEOUT" and end - start >= timedelta(seconds=60)
    looked = utcnow()

    fresh, entry = await refreshed_later(gputui_home, svc.config, inst.id)
    assert fresh.status == InstanceStatus.RELEASED and fresh.end_reason == "timer"
    assert str(fresh.status_detail).startswith(
        "ended by Slurm: its time limit passed (TIMEOUT"), fresh.status_detail
    assert fresh.ended_at == end < looked  # sacct's End, not the moment gputui looked
    seconds = fresh.running_seconds()
    assert seconds == (end - start).total_seconds() and 60 <= seconds <= 120
    assert entry.currency == "CNY" and entry.ended_at == end
    assert abs(entry.compute_cost - 2 * PRICE * Decimal(seconds) / 3600) <= Decimal("0.01")


@needs_accounting
@needs_sshd
async def test_a_release_of_an_allocation_cancelled_and_purged_meanwhile(slurm):
    """Someone else cancelled the allocation and Slurm has already forgotten it when gputui
    releases it: sacct's `CANCELLED by 0` is the evidence it is gone (no STILL BILLING), and
    the bill stops when it was cancelled, not when gputui released it."""
    svc, made = slurm
    inst, job, found = await cancelled_and_forgotten(svc, made, "cancelled")
    end = found[2]
    began = time.monotonic()

    entry = await svc.release(svc.store.get_instance_sync(inst.id), "manual")
    assert time.monotonic() - began < 20  # not waiting out the gone check (30 s) and retries
    assert entry is not None and entry.ended_at == end < utcnow() - timedelta(seconds=1)
    gone = svc.store.get_instance_sync(inst.id)
    assert gone.status == InstanceStatus.RELEASED and gone.ended_at == end
    assert abs(entry.compute_cost - PRICE * Decimal(gone.running_seconds()) / 3600) <= Decimal(
        "0.01")


def _start_again(args: list[str], env: dict[str, str]) -> Any:
    import subprocess

    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@needs_accounting
@needs_sshd
async def test_accounting_that_cannot_be_asked_is_waited_for_not_guessed(slurm):
    """The job was purged and slurmdbd is down: gputui does not guess an end (it would have
    billed to the limit, saying "no accounting"); the instance stays as it was, the refresh
    says why and that it reads again — and once slurmdbd is back, the end sacct recorded is
    the one kept."""
    import pytest

    from gputui.errors import GputuiError

    svc, made = slurm
    inst, job, found = await cancelled_and_forgotten(svc, made, "dbd-down")

    [dbd] = [p for p in made.procs if isinstance(p.args, list) and "slurmdbd" in p.args[0]]
    dbd.terminate()
    dbd.wait(timeout=30)
    with pytest.raises(GputuiError, match=f"no longer lists job {job}.*read again later"):
        await svc.refresh(svc.store.get_instance_sync(inst.id))
    kept = svc.store.get_instance_sync(inst.id)
    assert kept.status == InstanceStatus.RUNNING and kept.ended_at is None  # nothing guessed

    made.procs.append(_start_again(dbd.args, made.env))
    await until(lambda: recorded(made, job) is not None, 60, "slurmdbd to answer again")
    fresh = await svc.refresh(svc.store.get_instance_sync(inst.id))
    assert fresh.status == InstanceStatus.RELEASED and fresh.ended_at == found[2]
