"""The `ssh` provider against OpenSSH's real sshd on 127.0.0.1 (skipped where sshd is absent).

The host's `nvidia-smi` and `shutdown` are the sandbox shims on PATH (harmless: shutdown only
records the power-off), so the test powers nothing off.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from pathlib import Path

import asyncssh
import pytest

from gputui.config import Config
from gputui.models import Granularity, InstanceStatus
from gputui.remote.sshline import parse_ssh_line
from gputui.sandbox.shims.state import power_state
from gputui.services.hosts import add_ssh_host
from gputui.services.hub import ServiceError, Services
from gputui.store import SessionStore
from tests.drill.sshd_host import SSHD, free_port, start_sshd

pytestmark = pytest.mark.skipif(
    SSHD is None or os.geteuid() != 0,
    reason="OpenSSH's sshd is not installed (CI installs openssh-server) or not running as root",
)


@pytest.fixture
def sshd(tmp_path: Path):
    host = start_sshd(tmp_path, gpu_count=4)  # goes down at the recorded power-off
    yield {"port": host.port, "key": host.key, "host": host.host, "host_key": host.host_key}
    host.stop()


@pytest.fixture
async def services(gputui_home: Path):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    yield svc
    await svc.close()


async def test_add_run_and_power_off(sshd, services: Services):
    endpoint = parse_ssh_line(f"ssh -p {sshd['port']} -i {sshd['key']} root@127.0.0.1")
    # an unknown host key is never accepted silently
    with pytest.raises(ServiceError, match="unknown host key SHA256:"):
        await add_ssh_host(services, endpoint, name="a100", gpu=None, price=Decimal("6.40"),
                           per=Granularity.MINUTE)
    assert services.store.instances_sync() == []
    inst = await add_ssh_host(services, endpoint, name="a100", gpu=None, price=Decimal("6.40"),
                              per=Granularity.MINUTE, accept_new_host_key=True)
    assert inst.gpu == "A100 80GB SXM4" and inst.gpu_count == 4
    assert inst.status == InstanceStatus.RUNNING and inst.billing.price_per_hour == Decimal("6.40")
    out = await services.run(inst, "echo $((6*7)); nvidia-smi --query-gpu=index --format=csv,noheader")
    assert out.stdout.split() == ["42", "0", "1", "2", "3"]
    assert oct((services.state_dir / "known_hosts").stat().st_mode & 0o777) == "0o600"

    entry = await services.release(inst, "manual")
    assert entry is not None and entry.end_reason == "manual"
    assert power_state(sshd["host"]).is_off  # the shim recorded `shutdown -h now`
    assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RELEASED


async def test_changed_host_key_is_refused(sshd, services: Services):
    endpoint = parse_ssh_line(f"root@127.0.0.1:{sshd['port']}")
    endpoint = endpoint.model_copy(update={"key_path": str(sshd["key"])})
    other = asyncssh.generate_private_key("ssh-ed25519")
    services.known_hosts.add("127.0.0.1", sshd["port"], other)
    with pytest.raises(ServiceError, match="(?i)host key.*changed"):
        await add_ssh_host(services, endpoint, name="x", gpu=None, price=Decimal(1),
                           per=Granularity.SECOND, accept_new_host_key=True)
    assert services.store.instances_sync() == []


async def test_refused_login_and_unreachable_host_are_one_line(sshd, services: Services, tmp_path: Path):
    wrong = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "wrong").write_bytes(wrong.export_private_key("openssh"))
    (tmp_path / "wrong").chmod(0o600)
    endpoint = parse_ssh_line(f"ssh -p {sshd['port']} -i {tmp_path / 'wrong'} root@127.0.0.1")
    with pytest.raises(ServiceError) as err:
        await add_ssh_host(services, endpoint, name="x", gpu=None, price=Decimal(1),
                           per=Granularity.SECOND, accept_new_host_key=True)
    assert "\n" not in str(err.value)
    closed = parse_ssh_line(f"ssh -p {free_port()} root@127.0.0.1")
    started = time.monotonic()
    with pytest.raises(ServiceError):
        await add_ssh_host(services, closed, name="x", gpu=None, price=Decimal(1),
                           per=Granularity.SECOND)
    assert time.monotonic() - started < 12


async def test_console_add_host_asks_once_about_the_host_key(sshd, gputui_home: Path):
    from textual.widgets import Input

    from gputui.app import GpuTuiApp
    from gputui.ui.dialogs import AddHostDialog
    from tests.ui.waits import question

    store = SessionStore(gputui_home / "state.db")
    app = GpuTuiApp(config=Config(), store=store, background=False,
                    services=Services(store, Config(), state_dir=gputui_home))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, AddHostDialog)
        dialog.query_one("#line", Input).value = f"ssh -p {sshd['port']} -i {sshd['key']} root@127.0.0.1"
        dialog.query_one("#price", Input).value = "1.90"
        dialog.query_one("#name", Input).value = "rented"
        dialog.query_one("#gpu", Input).focus()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        assert "SHA256:" in await question(pilot)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        [inst] = store.instances_sync()
        assert inst.name == "rented" and inst.gpu_count == 4 and inst.provider == "ssh"
        assert str(inst.billing.price_per_hour) == "1.90"


async def test_add_host_keeps_the_form_when_the_host_is_unreachable(gputui_home: Path):
    from textual.widgets import Input, Static

    from gputui.app import GpuTuiApp
    from gputui.ui.dialogs import AddHostDialog

    store = SessionStore(gputui_home / "state.db")
    app = GpuTuiApp(config=Config(), store=store, background=False,
                    services=Services(store, Config(), state_dir=gputui_home))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        line = f"ssh -p {free_port()} root@127.0.0.1"
        app.screen.query_one("#line", Input).value = line
        app.screen.query_one("#price", Input).value = "2.50"
        app.screen.query_one("#gpu", Input).focus()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, AddHostDialog)
        assert dialog.query_one("#line", Input).value == line
        assert dialog.query_one("#price", Input).value == "2.50"
        assert str(dialog.query_one("#host-error", Static).render()) != ""
    assert store.instances_sync() == []
