"""Drill: an ssh host is released only on positive evidence that its billing stopped.

A connection dropped before the login is no such evidence: OpenSSH does exactly that under
`MaxStartups` throttling, and so does any listener that accepts and closes. Such a release is
retried with backoff, then raises the STILL BILLING alarm and keeps the instance live.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.models import Granularity, InstanceStatus, Lease, SSHEndpoint, utcnow
from gputui.sandbox.shims.state import power_state
from gputui.services.hub import ServiceError, Services
from gputui.store import Notice, SessionStore
from tests.conftest import GPUTUI, run_gputui_env
from tests.drill.sshd_host import needs_sshd, start_sshd


class AcceptAndClose:
    """A real TCP listener on 127.0.0.1 that accepts every connection and closes it (cleanly,
    once the client has said hello) before any login."""

    async def start(self) -> int:
        self.accepted = 0

        async def close(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.accepted += 1
            await r.readline()
            w.close()

        self.server = await asyncio.start_server(close, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()


async def _add(services: Services, endpoint: SSHEndpoint, name: str, *, overdue: bool = False):
    provider = services.provider("ssh")
    inst = provider.describe(instance_id=f"id-{name}", name=name, endpoint=endpoint, gpu="A100",
                             gpu_count=1, price_per_hour=Decimal("3.00"), per=Granularity.SECOND)
    inst = inst.model_copy(update={"created_at": utcnow() - timedelta(minutes=5),
                                   "running_since": utcnow() - timedelta(minutes=5)})
    await services.store.put_instance(inst)
    at = utcnow() - timedelta(minutes=1) if overdue else utcnow() + timedelta(hours=1)
    await services.store.put_lease(Lease(instance_id=inst.id, release_at=at, armed_for=at))
    return inst


async def test_accept_and_close_listener_is_not_a_release(services: Services):
    listener = AcceptAndClose()
    port = await listener.start()
    notices: list[Notice] = []
    services.store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    try:
        inst = await _add(services, SSHEndpoint(host="127.0.0.1", port=port), "dropper")
        with pytest.raises(ServiceError, match="release failed"):
            await services.release(inst, "manual", attempts=3, backoff=0.01)
    finally:
        await listener.stop()
    kept = services.store.get_instance_sync(inst.id)
    assert kept.status.live and kept.ended_at is None
    assert "STILL BILLING" in (kept.status_detail or "")
    assert services.store.ledger_sync() == []  # no ledger entry: it was never released
    assert any("STILL BILLING" in n.text and n.severity == "error" for n in notices)


def test_release_and_reap_commands_refuse_a_drop_before_login(gputui_home: Path):
    """`gputui release` and `gputui reap` of a host behind an accept-and-close listener."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)
        port = srv.getsockname()[1]
        import threading

        stop = threading.Event()

        def serve() -> None:
            srv.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn.settimeout(5)
                try:
                    conn.recv(256)  # the client's hello; then a clean close
                except OSError:
                    pass
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            services = Services(SessionStore(gputui_home / "state.db"),
                                __import__("gputui.config").config.Config(), state_dir=gputui_home)
            asyncio.run(_add(services, SSHEndpoint(host="127.0.0.1", port=port), "billing",
                             overdue=True))
            env = run_gputui_env(gputui_home)
            rel = subprocess.run([*GPUTUI, "release", "billing"], env=env, capture_output=True,
                                 text=True, timeout=300)
            reap = subprocess.run([*GPUTUI, "reap", "--json"], env=env, capture_output=True,
                                  text=True, timeout=300)
            listed = subprocess.run([*GPUTUI, "instances", "--json"], env=env,
                                    capture_output=True, text=True, timeout=60)
        finally:
            stop.set()
            thread.join(5)
    assert rel.returncode == 1, rel.stdout + rel.stderr
    assert "released" not in rel.stdout and "STILL BILLING" in rel.stderr
    assert reap.returncode == 1 and json.loads(reap.stdout)["released"] == []
    [item] = json.loads(listed.stdout)
    assert item["name"] == "billing" and item["status"] in ("running", "releasing")


@needs_sshd
async def test_sshd_maxstartups_throttling_is_not_a_release(services: Services, tmp_path: Path):
    host = start_sshd(tmp_path, "MaxStartups 1\nLoginGraceTime 120\n")
    held = socket.create_connection(("127.0.0.1", host.port))
    try:
        held.recv(256)  # sshd's banner: the one unauthenticated connection it allows
        services.known_hosts.add("127.0.0.1", host.port, host.host_key)
        endpoint = SSHEndpoint(host="127.0.0.1", port=host.port, key_path=str(host.key))
        inst = await _add(services, endpoint, "throttled")
        with pytest.raises(ServiceError, match="release failed"):
            await services.release(inst, "manual", attempts=2, backoff=0.01)
        assert not power_state(host.host).is_off  # shutdown never ran...
        assert services.store.get_instance_sync(inst.id).status.live  # ...so it still bills
        assert services.store.ledger_sync() == []
        held.close()
        # the throttle lifted: the retry (reap, the console) powers it off and records it
        entry = await services.release(services.store.get_instance_sync(inst.id), "manual",
                                       attempts=6, backoff=0.2)
        assert entry is not None and power_state(host.host).is_off
        assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RELEASED
    finally:
        held.close()
        host.stop()


@needs_sshd
async def test_a_power_off_that_leaves_the_host_up_is_not_a_release(services: Services,
                                                                    tmp_path: Path):
    """`shutdown` said yes (exit 0) but the host keeps answering — a container whose shutdown
    stops nothing, a host that ignored it: the command running is not evidence enough, the
    host must go away after it."""
    host = start_sshd(tmp_path)
    shutdown = host.host / "bin" / "shutdown"
    shutdown.write_text("#!/bin/sh\nexit 0\n")  # accepts, powers nothing off
    shutdown.chmod(0o755)
    try:
        services.known_hosts.add("127.0.0.1", host.port, host.host_key)
        endpoint = SSHEndpoint(host="127.0.0.1", port=host.port, key_path=str(host.key))
        inst = await _add(services, endpoint, "stays-up")
        services.provider("ssh").gone_within_s = 1.0
        with pytest.raises(ServiceError, match="still answers"):
            await services.release(inst, "manual", attempts=2, backoff=0.01)
        assert services.store.get_instance_sync(inst.id).status.live  # still billing
        assert services.store.ledger_sync() == []
    finally:
        host.stop()


async def test_console_clock_backs_off_a_failing_release(services: Services):
    """The console ticks every second: a release that keeps failing is not retried on every
    tick (each try is already four attempts with backoff), and the instance stays live."""
    from gputui.services.leases import LeaseService

    listener = AcceptAndClose()
    port = await listener.start()
    try:
        inst = await _add(services, SSHEndpoint(host="127.0.0.1", port=port), "late",
                          overdue=True)
        clock = LeaseService(services)
        first = await clock.tick()
        assert first.released == [] and first.errors
        tried = listener.accepted
        assert tried >= 1
        for _ in range(5):
            again = await clock.tick()
            assert again.released == [] and "STILL BILLING" in " ".join(again.errors)
        assert listener.accepted == tried  # no new connection: waiting out the backoff
        assert services.store.get_instance_sync(inst.id).status.live
    finally:
        await listener.stop()
