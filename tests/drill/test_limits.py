"""Drill: absurd durations, hours and config values are one-line refusals naming the field
(exit 2), never an internal error (exit 70), and never leave an instance without its timer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], env=run_gputui_env(home), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("args", "field"), [
    (["create", "--gpu", "4090", "--release-after", "99999999999d"], "--release-after"),
    (["create", "--gpu", "4090", "--release-after", "9" * 400 + "m"], "--release-after"),
    (["create", "--gpu", "4090", "--release-after", "0s"], "--release-after"),
    (["create", "--gpu", "4090", "--idle", "99999999999d@5%"], "--idle"),
    (["create", "--gpu", "4090", "--release-at", "9999-12-31T23:59:59"], "--release-at"),
    (["create", "--gpu", "4090", "--release-at", "9999-12-31T23:59:59+14:00"], "--release-at"),
    (["cost", "4090", "--hours", "1e308"], "hours"),
])
def test_bad_flags_are_refused_by_name(gputui_home: Path, args: list[str], field: str):
    done = gputui(gputui_home, *args)
    assert done.returncode == 2, done.stderr
    assert field in done.stderr and "internal error" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    if args[0] == "create":
        assert SessionStore(gputui_home / "state.db").instances_sync() == []


def test_extend_has_the_same_cap_as_create(gputui_home: Path):
    made = gputui(gputui_home, "create", "--gpu", "4090", "--name", "ext", "--release-after", "1h",
                  "--json")
    assert made.returncode == 0, made.stderr
    before = json.loads(made.stdout)["release_at"]
    try:
        for args in (["9999999d"], ["300000d"], ["99999999999d"], ["367d"],
                     ["--to", "9999-12-31T23:59:59"]):
            done = gputui(gputui_home, "extend", "ext", *args)
            assert done.returncode == 2, (args, done.stderr)
            assert ("extend" in done.stderr or "--to" in done.stderr), done.stderr
            assert "internal error" not in done.stderr
        [item] = json.loads(gputui(gputui_home, "instances", "--json").stdout)
        assert item["release_at"] == before  # nothing moved
        assert gputui(gputui_home, "extend", "ext", "2h").returncode == 0
    finally:
        gputui(gputui_home, "release", "ext")


@pytest.mark.parametrize(("line", "field"), [
    ('[lease]\ndefault_release = "99999999999d"\n', "lease.default_release"),
    ('[lease]\ndefault_release = "0s"\n', "lease.default_release"),
    ('[lease]\ndefault_release = "400d"\n', "lease.default_release"),
    ('[lease]\nwarn_minutes = [-5, 99999999999999999]\n', "lease.warn_minutes"),
    ('[lease]\nwarn_minutes = [10, 0]\n', "lease.warn_minutes"),
])
def test_bad_config_is_named_by_every_command(gputui_home: Path, line: str, field: str):
    gputui_home.mkdir(parents=True, exist_ok=True)
    (gputui_home / "config.toml").write_text(line)
    for args in (["config", "check"], ["instances"], ["create", "--gpu", "4090"], ["reap"],
                 ["costs"]):
        done = gputui(gputui_home, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert field in done.stderr and "internal error" not in done.stderr, (args, done.stderr)


async def test_configured_warnings_are_the_ones_given(services):
    from datetime import timedelta

    from gputui.config import Config
    from gputui.models import Lease, utcnow
    from gputui.providers.base import CreateRequest
    from gputui.services.leases import LeaseService

    services.config = Config.model_validate({"lease": {"warn_minutes": [30]}})
    offer = await services.find_offer("sandbox", "4090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="w"),
                                 lease=Lease(instance_id="x",
                                             release_at=utcnow() + timedelta(minutes=20)))
    result = await LeaseService(services).tick()
    assert result.warned == [inst.name]  # 20 min left: the 30-minute warning, as configured
    await services.release(inst, "manual")
