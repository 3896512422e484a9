"""`gputui` against the AutoDL emulator, as a user runs it: bad input is one line and exit 2 with
nothing created or billed; `account`; `stop`/`start`; `instances --json` and `costs --json`
say the currency."""

from __future__ import annotations

import asyncio
import json
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.models import InstanceStatus
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env
from tests.providers.autodl_emulator import TEST_TOKEN, AutoDLEmulator
from tests.providers.autodl_fixtures import attach


@pytest.fixture
async def emu(tmp_path: Path):
    async with AutoDLEmulator(ssh_root=tmp_path / "boxes", creating_s=0.1, starting_s=0.1,
                              ssh_delay=0.2, shutting_s=0.1) as e:
        yield e


def env_for(home: Path, emu: AutoDLEmulator, token: str | None = TEST_TOKEN) -> dict[str, str]:
    env = run_gputui_env(home)
    env.pop("AUTODL_TOKEN", None)
    if token is not None:
        env["AUTODL_TOKEN"] = token
    env["AUTODL_API_BASE"] = emu.base_url
    return env


async def gputui(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(subprocess.run, [*GPUTUI, *args], env=env,
                                   capture_output=True, text=True, timeout=120)


def one_line_exit_2(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


async def nothing_made(home: Path, emu: AutoDLEmulator) -> None:
    assert emu.bodies == [] and emu.instances == {}
    listed = await gputui(run_gputui_env(home), "instances", "--all", "--json")
    assert json.loads(listed.stdout) == []


def write_config(home: Path, text: str, mode: int) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "config.toml"
    cfg.write_text(text)
    cfg.chmod(mode)
    return cfg


@pytest.mark.parametrize(("extra", "token", "words"), [
    ([], None, "AUTODL_TOKEN"),
    ([], "wrong-token-0123456789abcdef", "token was refused"),
    (["--gpu", "A100"], TEST_TOKEN, "A100"),
    (["--count", "5"], TEST_TOKEN, "1 to 4 GPUs"),
    (["--disk", "600"], TEST_TOKEN, "at most 530 GB"),
])
async def test_bad_input_is_one_line_exit_2_and_nothing_created(
        gputui_home: Path, emu: AutoDLEmulator, extra: list[str], token: str | None, words: str):
    args = ["create", "--provider", "autodl", "--gpu", "4090D", *extra]
    line = one_line_exit_2(await gputui(env_for(gputui_home, emu, token), *args))
    assert words in line
    if token:
        assert token not in line
    await nothing_made(gputui_home, emu)


async def test_token_in_a_world_readable_config_is_refused(gputui_home: Path,
                                                           emu: AutoDLEmulator):
    cfg = write_config(gputui_home, f'[providers.autodl]\ntoken = "{TEST_TOKEN}"\n'
                                    f'base_url = "{emu.base_url}"\n', 0o644)
    env = env_for(gputui_home, emu, None)
    line = one_line_exit_2(await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D"))
    assert "chmod 600" in line and TEST_TOKEN not in line
    await asyncio.to_thread(cfg.chmod, 0o600)
    out = await gputui(env, "account", "--json")
    assert out.returncode == 0, out.stderr
    await nothing_made(gputui_home, emu)


async def test_account_and_the_minimum_balance(gputui_home: Path, tmp_path: Path):
    async with AutoDLEmulator(balance=Decimal("3.50")) as emu:
        env = env_for(gputui_home, emu)
        out = await gputui(env, "account", "--json")
        [row] = json.loads(out.stdout)
        assert row["balance"] == "3.5" and row["currency"] == "CNY"
        assert row["vouchers"] == "20" and row["lifetime_spend"] == "1024.5"
        human = await gputui(env, "account")
        assert "balance ¥3.50 · vouchers ¥20.00 · lifetime spend ¥1,024.50" in human.stdout
        made = await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D")
        assert made.returncode == 1 and "below the minimum ¥5.00" in made.stderr
        await nothing_made(gputui_home, emu)


async def test_stop_start_and_json_in_yuan(gputui_home: Path, emu: AutoDLEmulator):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(svc, emu)
    try:
        offer = await svc.find_offer("autodl", "4090D")
        inst = await svc.create("autodl", offer, CreateRequest(offer_id=offer.offer_id,
                                                               name="train"))
    finally:
        await svc.close()
    env = env_for(gputui_home, emu)
    out = await gputui(env, "stop", "train")
    assert out.returncode == 0, out.stderr
    assert "wiped in 14 d" in out.stdout and emu.status_of(inst.provider_id) == "shutdown"
    [view] = json.loads((await gputui(env, "instances", "--json")).stdout)
    assert view["status"] == InstanceStatus.STOPPED.value and view["currency"] == "CNY"
    assert "wiped in 14 d" in view["state_detail"]
    out = await gputui(env, "start", "train")
    assert out.returncode == 0, out.stderr
    assert "running, billing ¥1.88/h" in out.stdout
    assert emu.status_of(inst.provider_id) == "running"
    costs = json.loads((await gputui(env, "costs", "--json")).stdout)
    assert set(costs["totals"]) == {"CNY"} and costs["totals"]["CNY"]["currency"] == "CNY"
    assert costs["combined"] is None


async def test_create_and_release_from_the_command_line(gputui_home: Path, emu: AutoDLEmulator):
    env = env_for(gputui_home, emu)
    made = await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--name", "cli",
                        "--release-after", "2h", "--json")
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert view["status"] == "running" and view["currency"] == "CNY"
    assert view["price_per_hour"] == 1.88
    [uuid] = emu.instances
    assert "shutdown -h" in emu.bodies[0]["start_command"]  # the on-instance timer, at boot
    password = emu.password(uuid)
    gone = await gputui(env, "release", "cli")
    assert gone.returncode == 0, gone.stderr
    assert ("CNY" in gone.stdout or "¥" in gone.stdout) and "$" not in gone.stdout
    assert emu.status_of(uuid) in ("releasing", "released")
    everything = made.stdout + made.stderr + gone.stdout + gone.stderr
    assert password not in everything and TEST_TOKEN not in everything


# Every command that needs an SSH link, on a stopped instance: one line, exit 2, nothing changed.
# (A stopped AutoDL instance's snapshot says port 0; it had crashed each of them with exit 70
# and a pydantic ValidationError, `extend` after it had moved the timer.)
NEEDS_A_LINK = [
    ["ssh", "stopped1", "--", "echo", "hi"],
    ["push", "stopped1", "/etc/hostname"],
    ["pull", "stopped1", "results", "out"],
    ["run", "stopped1", "--", "echo", "hi"],
    ["jobs", "stopped1"],
    ["jobs", "stopped1", "add", "--", "echo", "hi"],
    ["jobs", "stopped1", "when-done", "release"],
    ["ollama", "stopped1", "list"],
    ["smi", "stopped1"],
]


async def test_a_stopped_instance_is_one_line_and_exit_2_for_every_command_that_needs_ssh(
        gputui_home: Path, emu: AutoDLEmulator):
    env = env_for(gputui_home, emu)
    made = await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--name",
                        "stopped1", "--release-after", "2h")
    assert made.returncode == 0, made.stderr
    assert (await gputui(env, "stop", "stopped1")).returncode == 0
    [uuid] = emu.instances
    assert emu.status_of(uuid) == "shutdown"
    calls = len(emu.calls)
    [before] = json.loads((await gputui(env, "instances", "--json")).stdout)
    for args in NEEDS_A_LINK:
        line = one_line_exit_2(await gputui(env, *args))
        assert line == "gputui: stopped1 is stopped: `gputui start stopped1` first", (args, line)
    assert not any(path.endswith(("power_on", "power_off", "release"))
                   for _m, path, _s, _c in emu.calls[calls:])  # nothing asked of the platform
    [after] = json.loads((await gputui(env, "instances", "--json")).stdout)
    assert after == before and emu.status_of(uuid) == "shutdown"


async def test_extend_on_a_stopped_instance_moves_the_deadline_once_and_says_when_it_arms(
        gputui_home: Path, emu: AutoDLEmulator):
    """Extending a stopped instance's timer needs no link (its disk is kept until then): the
    deadline moves by exactly what was asked, and the on-instance timer is set at `start`."""
    from datetime import datetime, timedelta

    env = env_for(gputui_home, emu)
    assert (await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--name",
                         "parked", "--release-after", "2h")).returncode == 0
    assert (await gputui(env, "stop", "parked")).returncode == 0
    [view] = json.loads((await gputui(env, "instances", "--json")).stdout)
    at = datetime.fromisoformat(view["release_at"])
    out = await gputui(env, "extend", "parked", "1h")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "layers: console" in out.stdout
    assert "parked is stopped: its on-instance timer is set when it starts" in out.stdout
    assert out.stderr == ""  # no failed SSH attempt reported
    [view] = json.loads((await gputui(env, "instances", "--json")).stdout)
    assert datetime.fromisoformat(view["release_at"]) == at + timedelta(hours=1)
    started = await gputui(env, "start", "parked")
    assert started.returncode == 0, started.stderr
    [uuid] = emu.instances
    epoch = int((at + timedelta(hours=1)).timestamp())
    assert str(epoch) in emu.instances[uuid].start_commands[-1]  # armed at boot for the new time


async def test_an_instance_powered_off_behind_gputuis_back_is_found_stopped(
        gputui_home: Path, emu: AutoDLEmulator):
    """The record still says running; the snapshot has no port. The link refreshes the record
    and says it is stopped (exit 2), rather than a pydantic error."""
    env = env_for(gputui_home, emu)
    assert (await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--name",
                         "offsite")).returncode == 0
    off = await gputui(env, "ssh", "offsite", "--", "shutdown -h now")
    assert off.returncode == 0, off.stderr
    [uuid] = emu.instances
    for _try in range(100):
        if emu.status_of(uuid) == "shutdown":
            break
        await asyncio.sleep(0.05)
    [view] = json.loads((await gputui(env, "instances", "--json")).stdout)
    assert view["status"] == "running"  # (AutoDL is not asked by `instances`)
    line = one_line_exit_2(await gputui(env, "push", "offsite", "/etc/hostname"))
    assert line == "gputui: offsite is stopped: `gputui start offsite` first"
    [view] = json.loads((await gputui(env, "instances", "--json")).stdout)
    assert view["status"] == "stopped"


async def test_ctrl_c_during_create_says_what_may_bill_and_the_next_command_finds_it_running(
        gputui_home: Path, tmp_path: Path):
    """Ctrl-C while AutoDL boots the instance: the instance goes on (and bills) at AutoDL. The
    interrupted create says so, and the next `gputui instances` asks AutoDL at once: running,
    at its rate — not `booting · ¥0.00` until a reap."""
    import signal

    async with AutoDLEmulator(ssh_root=tmp_path / "slow-boxes", creating_s=3.0,
                              starting_s=0.1, ssh_delay=0.2, shutting_s=0.1) as emu:
        env = env_for(gputui_home, emu)
        proc = await asyncio.to_thread(
            subprocess.Popen, [*GPUTUI, "create", "--provider", "autodl", "--gpu", "4090D",
                               "--name", "hasty", "--release-after", "2h"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for _try in range(600):
                if emu.instances:
                    break
                await asyncio.sleep(0.05)
            [uuid] = emu.instances
            await asyncio.sleep(0.3)
            assert emu.status_of(uuid) == "creating"
            proc.send_signal(signal.SIGINT)
            out, err = await asyncio.to_thread(proc.communicate, timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert ("gputui: interrupted: hasty may exist at autodl and bill — run `gputui "
                "instances` (it is reconciled then) or `gputui release hasty`") in err
        for _try in range(200):
            if emu.status_of(uuid) == "running":
                break
            await asyncio.sleep(0.05)
        listed = await gputui(env, "instances", "--json")
        assert listed.returncode == 0, listed.stderr
        [view] = json.loads(listed.stdout)
        assert view["status"] == "running" and view["price_per_hour"] == 1.88
        assert view["currency"] == "CNY" and view["release_at"] is not None
        assert "hasty: its create was interrupted; autodl shows it running, billing ¥1.88/h" \
            in listed.stderr
        again = await gputui(env, "instances", "--json")  # settled: said once
        assert "interrupted" not in again.stderr
        gone = await gputui(env, "release", "hasty")
        assert gone.returncode == 0, gone.stderr
        assert emu.status_of(uuid) in ("releasing", "released")
