"""Drill: every path that makes an instance gives it a release timer — the default one, armed
on the instance too — or an explicit, confirmed and badged "no timer"; `reap` releases hosts
added with `add-ssh` like any other."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from gputui.config import Config
from gputui.models import Granularity, InstanceStatus, LeaseState, utcnow
from gputui.providers.base import CreateRequest
from gputui.sandbox.shims.state import power_state
from gputui.services.hosts import add_ssh_host
from gputui.services.hub import Services
from gputui.services.leases import LeaseService
from tests.conftest import GPUTUI, run_gputui_env
from tests.drill.sshd_host import needs_sshd, start_sshd


async def test_added_host_gets_the_default_timer_and_reap_releases_it(services: Services):
    services.config = Config.model_validate({"lease": {"default_release": "45m"}})
    offer = await services.find_offer("sandbox", "4090")
    box = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="box"))
    host_root = services.provider("sandbox").instance_root(box.id)

    inst = await add_ssh_host(services, box.ssh, name="rented", gpu=None,
                              price=Decimal("0.40"), per=Granularity.SECOND)
    lease = services.store.get_lease_sync(inst.id)
    assert lease is not None and lease.release_at is not None and not lease.no_timer_confirmed
    left = lease.remaining()
    assert 44 * 60 < left <= 45 * 60  # config.toml's lease.default_release
    assert lease.on_instance_armed  # `shutdown -h +45` on the host itself
    shown = await services.run(inst, "shutdown --show")
    assert "Shutdown scheduled" in shown.stdout + shown.stderr
    assert power_state(host_root).status == "scheduled"

    await services.store.update_lease(inst.id, lambda le: le.model_copy(
        update={"release_at": utcnow() - timedelta(seconds=5)}))
    result = await LeaseService(services).reap()
    assert "rented" in result.released, result.errors
    assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RELEASED
    assert services.store.get_lease_sync(inst.id).state == LeaseState.FIRED
    assert power_state(host_root).is_off


async def test_create_without_a_lease_still_gets_one(services: Services):
    offer = await services.find_offer("sandbox", "4090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="x"))
    lease = services.store.get_lease_sync(inst.id)
    assert lease is not None and lease.release_at is not None  # the default 2 h
    await services.release(inst, "manual")


@needs_sshd
def test_add_ssh_command_timer_or_confirmed_no_timer(gputui_home: Path, tmp_path: Path):
    env = run_gputui_env(gputui_home)

    def add(host, *extra: str) -> subprocess.CompletedProcess:
        line = f"ssh -p {host.port} -i {host.key} root@127.0.0.1"
        return subprocess.run([*GPUTUI, "add-ssh", line, "--price", "1.10",
                               "--accept-new-host-key", "--json", *extra], env=env,
                              capture_output=True, text=True, timeout=120)

    host = start_sshd(tmp_path)
    try:
        refused = add(host, "--name", "a", "--no-timer")
        assert refused.returncode == 2 and "--yes" in refused.stderr
        timed = add(host, "--name", "timed")
        assert timed.returncode == 0, timed.stderr
        view = json.loads(timed.stdout)
        assert view["release_at"] is not None and view["no_timer"] is False
        assert power_state(host.host).status == "scheduled"  # armed on the host
        listed = subprocess.run([*GPUTUI, "release", "timed"], env=env, capture_output=True,
                                text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
    finally:
        host.stop()
    (tmp_path / "second").mkdir()
    host = start_sshd(tmp_path / "second")  # the first host powered off: another one
    try:
        bare = add(host, "--name", "bare", "--no-timer", "--yes", "--gpu", "A100")
        assert bare.returncode == 0, bare.stderr
        view = json.loads(bare.stdout)
        assert view["release_at"] is None and view["no_timer"] is True  # confirmed, and shown
    finally:
        host.stop()


async def test_console_add_host_dialog_arms_the_default_timer(services: Services):
    from textual.widgets import Input

    from gputui.app import GpuTuiApp
    from gputui.ui.dialogs import AddHostDialog

    offer = await services.find_offer("sandbox", "4090")
    box = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="box"))
    host_root = services.provider("sandbox").instance_root(box.id)
    app = GpuTuiApp(config=services.config, store=services.store, background=False,
                    services=services)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, AddHostDialog)
        dialog.query_one("#line", Input).value = (
            f"ssh -p {box.ssh.port} -i {box.ssh.key_path} root@127.0.0.1")
        dialog.query_one("#price", Input).value = "0.50"
        dialog.query_one("#name", Input).value = "rented"
        dialog.query_one("#gpu", Input).focus()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        for _ in range(200):
            await pilot.pause(0.05)
            added = [i for i in services.store.instances_sync() if i.name == "rented"]
            if added and services.store.get_lease_sync(added[0].id):
                break
        [inst] = [i for i in services.store.instances_sync() if i.name == "rented"]
        lease = services.store.get_lease_sync(inst.id)
        assert lease.release_at is not None and lease.on_instance_armed
        assert power_state(host_root).status == "scheduled"
        await services.release(inst, "manual")
