"""Drill: secrets stay secret, hostile names stay inert, and only our own key gets in."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.config import ConfigError, load_config
from gputui.models import Granularity
from gputui.providers.base import CreateRequest
from gputui.remote.sshline import parse_ssh_line
from gputui.services.hosts import add_ssh_host
from gputui.services.hub import ServiceError, Services
from tests.conftest import GPUTUI, run_gputui_env

SECRET = "hunter2-Pa55w0rd!"




def everything_on_disk(home: Path) -> bytes:
    blobs = []
    for path in home.rglob("*"):
        if path.is_file() and "instances" not in path.parts:
            blobs.append(path.read_bytes())
    db = home / "state.db"
    if db.exists():
        blobs.append("\n".join(r[0] for r in sqlite3.connect(db).execute(
            "SELECT data FROM instances UNION ALL SELECT data FROM leases "
            "UNION ALL SELECT data FROM ledger")).encode())
    return b"\n".join(blobs)


async def test_a_password_never_reaches_the_state_or_the_error_text(services: Services, gputui_home: Path):
    # the sandbox endpoint takes keys only: a password login is refused
    offer = await services.find_offer("sandbox", "RTX 3090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="s"))
    endpoint = inst.ssh.model_copy(update={"key_path": None})
    with pytest.raises(ServiceError) as err:
        await add_ssh_host(services, endpoint, name="pw", gpu="RTX 3090", price=Decimal(1),
                           per=Granularity.SECOND, password=SECRET)
    assert SECRET not in str(err.value)
    assert SECRET.encode() not in everything_on_disk(gputui_home)
    out = await asyncio.to_thread(subprocess.run, [*GPUTUI, "costs", "--json"],
                                  env=run_gputui_env(gputui_home), capture_output=True, text=True)
    assert SECRET not in out.stdout + out.stderr


def test_a_password_file_readable_by_others_is_refused(gputui_home: Path, tmp_path: Path):
    pw = tmp_path / "pw"
    pw.write_text(SECRET)
    pw.chmod(0o644)
    out = subprocess.run([*GPUTUI, "add-ssh", "ssh -p 1 root@127.0.0.1", "--price", "1",
                          "--password-file", str(pw), "--gpu", "RTX 3090"],
                         env=run_gputui_env(gputui_home), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "chmod 600" in out.stderr and SECRET not in out.stderr


def test_config_with_an_api_key_must_be_private(gputui_home: Path):
    gputui_home.mkdir(parents=True, exist_ok=True)
    cfg = gputui_home / "config.toml"
    cfg.write_text(f'[providers.lambda]\napi_key = "{SECRET}"\n')
    cfg.chmod(0o644)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "chmod 600" in str(err.value) and SECRET not in str(err.value)
    cfg.chmod(0o600)
    assert load_config(cfg).providers.lambda_cloud.api_key == SECRET


async def test_hostile_labels_are_inert(services: Services, gputui_home: Path):
    offer = await services.find_offer("sandbox", "RTX 3090")
    name = "$(touch pwned); `touch pwned2` && rm -rf ~ #"
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name=name))
    from gputui.models import Lease, utcnow
    from gputui.services.leases import LeaseService

    await services.store.put_lease(Lease(instance_id=inst.id, release_at=utcnow().replace(year=2100),
                                         idle_util_pct=5, idle_minutes=30))
    await LeaseService(services).arm(inst)
    root = services.provider("sandbox").instance_root(inst.id)
    assert not (root / "pwned").exists() and not (root / "pwned2").exists()
    assert (root / "bin").is_dir()  # nothing was removed
    listed = await asyncio.to_thread(subprocess.run, [*GPUTUI, "instances", "--json"],
                                     env=run_gputui_env(gputui_home), capture_output=True, text=True)
    assert json.loads(listed.stdout)[0]["name"] == name


@pytest.mark.parametrize("line", [
    "ssh -p 22 root@host; rm -rf /",
    "ssh -o ProxyCommand='nc evil 22' root@host",
    "ssh -J jump root@host",
    "root@host:99999",
    "",
])
def test_malformed_or_dangerous_ssh_lines_are_refused(line: str):
    with pytest.raises(ValueError):
        parse_ssh_line(line)
