"""Jobs on a Slurm allocation go through Slurm: each queued run is a job step of the allocation
(`srun --jobid=JOB`), started by the queue runner on the login node, with Slurm's GPU binding
and exit codes. Against a real one-node Slurm cluster on 127.0.0.1 (no accounting here, so
`squeue --steps` and the step's exit code are the truth). Skipped, saying why, where Slurm,
munge, sshd or root is missing."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.models import InstanceStatus, Lease, utcnow
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.jobs import JobService, JobSpec
from tests.drill.sshd_host import needs_sshd
from tests.slurm_cluster import (
    Login,
    SlurmCluster,
    cluster_fixture,
    needs_slurm,
    services_fixture,
    unique_cluster,
    until,
)

pytestmark = [needs_slurm, needs_sshd]

PRICE = Decimal("2.10")
# unique to this run: its runners' folders, ~/.gputui/slurm/CLUSTER, are removed afterwards
CLUSTER = unique_cluster("jobsq")

cluster = cluster_fixture("slurmjobs", runners_of=(CLUSTER,))
slurm = services_fixture({CLUSTER: str(PRICE)})


async def _rent(svc: Services, count: int, name: str):
    offer = await svc.find_offer("slurm", "h100", region=CLUSTER)
    request = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=name)
    lease = Lease(instance_id="pending", release_at=utcnow() + timedelta(hours=1))
    inst = await svc.create("slurm", offer, request, lease=lease)
    assert inst.status == InstanceStatus.RUNNING
    return inst, inst.provider_id.partition(":")[2]


def _write_config(home: Path, login: Login) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    config.write_text(f'[providers.slurm.{CLUSTER}]\nlogin = "{login.line()}"\n'
                      f'price_per_gpu_hour = {PRICE}\ncurrency = "CNY"\ncpus_per_gpu = 1\n'
                      'mem_per_gpu_mb = 256\n', encoding="utf-8")
    config.chmod(0o600)


def _steps(made: SlurmCluster) -> list[str]:
    """`squeue --steps`: `STEPID NAME` lines (the allocation's own batch step left out)."""
    out = made.run("squeue", "--steps", "-h", "-o", "%i %j").stdout.split("\n")
    return [line.strip() for line in out if line.strip() and ".batch" not in line]


async def test_runs_are_steps_of_the_allocation_with_slurms_exit_codes(slurm):
    svc, made = slurm
    inst, job = await _rent(svc, 2, "trainer")
    jobs = JobService(svc)
    ids = await jobs.add(inst, [
        JobSpec("echo step $SLURM_JOB_ID.$SLURM_STEP_ID gpus $SLURM_STEP_GPUS; sleep 4",
                name="ok"),
        JobSpec("echo half $SLURM_STEP_GPUS; echo broke >&2; exit 7", name="bad", gpus=(1,)),
    ])
    assert ids == ["1", "2"]
    # the first run is a job step of the allocation while it runs, named for the run
    await until(lambda: any(s.endswith(" gputui-run-1") for s in _steps(made)), 30,
                "the run's step in squeue")
    step = next(s for s in _steps(made) if s.endswith(" gputui-run-1")).split()[0]
    assert step.startswith(f"{job}.") and step.split(".")[1].isdigit()
    running = await jobs.view(inst)
    assert [(j.id, j.status) for j in running.jobs] == [("1", "running"), ("2", "queued")]

    view = await jobs.wait(inst, every=0.5)
    ok, bad = view.jobs
    assert (ok.status, ok.exit_code) == ("succeeded", 0)
    # Slurm bound both GPUs to the whole-allocation run; one to the run that asked for one
    assert (bad.status, bad.exit_code) == ("failed", 7)
    log = await jobs.log_tail(inst, "1")
    assert log == [f"step {step} gpus 0,1"]
    bad_log = await jobs.log_tail(inst, "2")
    # the run's own lines, in order; srun's words may come before them (srun writes both)
    own = [line for line in bad_log if not line.startswith("srun: ")]
    assert own[:2] == ["half 0", "broke"] or own[:2] == ["half 1", "broke"], bad_log
    assert any("Exited with exit code 7" in line for line in bad_log)  # srun's own word
    # each run's cost: the allocation's rate, times its share of the GPUs, over its time
    assert ok.currency == "CNY" and ok.cost is not None
    assert float(ok.cost) == pytest.approx(float(2 * PRICE) * (ok.seconds() or 0) / 3600,
                                           abs=0.01)
    assert _steps(made) == []  # nothing of ours left running in the allocation
    assert svc.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING


async def test_a_cancelled_run_is_a_cancelled_step(slurm):
    svc, made = slurm
    inst, job = await _rent(svc, 1, "long")
    jobs = JobService(svc)
    [run_id] = await jobs.add(inst, [JobSpec("sleep 300", name="long")])
    await until(lambda: any(s.endswith(f" gputui-run-{run_id}") for s in _steps(made)), 30,
                "the step")
    assert await jobs.cancel(inst, run_id) == "running"
    view = await jobs.wait(inst, every=0.5)
    assert view.jobs[0].status == "cancelled"
    assert _steps(made) == []  # Slurm ended the step


async def test_when_done_release_scancels_the_allocation_verified(slurm):
    svc, made = slurm
    inst, job = await _rent(svc, 1, "oneshot")
    jobs = JobService(svc)
    await jobs.set_when_done(inst, "release")
    await jobs.add(inst, [JobSpec("echo done", name="short")])
    outcome = None
    deadline = time.monotonic() + 60
    while outcome is None:
        assert time.monotonic() < deadline, "the queue's end was never acted on"
        outcome = await jobs.finish(inst, force=True)
        if outcome is None:
            await asyncio.sleep(0.5)
    assert outcome == "released"
    state = made.run("squeue", "--states=all", "-h", "-j", job, "-o", "%T").stdout.strip()
    assert state == "CANCELLED"  # scancel, and Slurm shows it ended
    ended = svc.store.get_instance_sync(inst.id)
    assert ended.status == InstanceStatus.RELEASED and ended.end_reason == "done"
    entry = next(e for e in svc.store.ledger_sync() if e.instance_id == inst.id)
    assert entry.currency == "CNY" and entry.end_reason == "done"


def test_gputui_run_rents_an_allocation_runs_a_step_and_releases(cluster, gputui_home: Path):
    import json
    import subprocess

    from gputui.remote.hostkeys import KnownHosts
    from tests.conftest import GPUTUI, run_gputui_env

    made, login = cluster
    _write_config(gputui_home, login)
    KnownHosts(gputui_home / "known_hosts").add("127.0.0.1", login.port, login.host_key)

    def gputui(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, timeout=180,
                              env=run_gputui_env(gputui_home), stdin=subprocess.DEVNULL)

    out = gputui("run", "--provider", "slurm", "--gpu", "h100", "--release-after", "10m",
                 "--label", "probe", "--", "echo on step $SLURM_JOB_ID.$SLURM_STEP_ID; exit 3")
    assert out.returncode == 3, out.stderr  # the step's exit code is the command's
    [line] = [ln for ln in out.stdout.split("\n") if ln.startswith("on step ")]
    job, step = line.removeprefix("on step ").split(".")
    assert job.isdigit() and step.isdigit()
    assert "job 1 failed (exit 3)" in out.stderr
    [inst] = json.loads(gputui("instances", "--all", "--json").stdout)
    assert inst["status"] == "released"  # rented for the run, released after it
    assert made.run("squeue", "--states=all", "-h", "-j", job, "-o", "%T").stdout.strip() \
        == "CANCELLED"
    [cost] = json.loads(gputui("costs", "--runs", "--json").stdout)
    assert (cost["label"], cost["status"], cost["exit_code"], cost["currency"]) == (
        "probe", "failed", 3, "CNY")


def test_an_unknown_login_node_is_one_line_and_slurm_trust_pins_it(cluster,
                                                                 gputui_home: Path):
    import subprocess

    from tests.conftest import GPUTUI, run_gputui_env

    made, login = cluster
    _write_config(gputui_home, login)

    def gputui(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, timeout=120,
                              env=run_gputui_env(gputui_home), stdin=subprocess.DEVNULL)

    rent = ("create", "--provider", "slurm", "--gpu", "h100", "--release-after", "1h",
            "--name", "trusted", "--json")
    # never seen: nothing is asked of the cluster, and the line says what to do
    out = gputui(*rent)
    assert out.returncode != 0
    [line] = out.stderr.strip().split("\n")
    assert f"slurm {CLUSTER}: the login node 127.0.0.1:{login.port} is not trusted yet " \
        "(host key SHA256:" in line and f"`gputui slurm trust {CLUSTER}`" in line, line
    assert "Traceback" not in out.stderr

    # not a terminal and no --yes: the fingerprint is shown, nothing is pinned (exit 2)
    out = gputui("slurm", "trust", CLUSTER)
    assert out.returncode == 2, out.stderr
    shown, refused = out.stderr.strip().split("\n")
    fingerprint = shown.rpartition(" ")[2]
    assert fingerprint.startswith("SHA256:")
    assert f"root@127.0.0.1:{login.port}" in shown
    assert refused.endswith(f"then run `gputui slurm trust {CLUSTER} --yes`")
    known = gputui_home / "known_hosts"
    assert not known.exists() or f":{login.port}]" not in known.read_text()

    out = gputui("slurm", "trust", CLUSTER, "--yes")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(f"is trusted ({fingerprint})")
    assert f"[127.0.0.1]:{login.port} " in known.read_text()
    again = gputui("slurm", "trust", CLUSTER)
    assert again.returncode == 0 and "trusted already" in again.stdout
    out = gputui(*rent)  # the cluster answers now
    assert out.returncode == 0, out.stderr
    assert gputui("release", "trusted").returncode == 0

    out = gputui("slurm", "trust", "nope")
    assert out.returncode == 2
    assert out.stderr.strip() == ("gputui: slurm trust: no cluster 'nope' in config.toml "
                                  f"([providers.slurm.NAME]; configured: {CLUSTER})")
