"""Drill: a host that goes silent without closing the connection (its sshd session stopped
with SIGSTOP, or every byte black-holed) is noticed within seconds — keepalives sized to the
telemetry interval — and the link reconnects once it answers again."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from decimal import Decimal
from pathlib import Path

from gputui.config import Config
from gputui.models import Granularity, LinkState, SSHEndpoint
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services, keepalive_for
from gputui.store import SessionStore
from tests.drill.sshd_host import needs_sshd, start_sshd
from tests.drill.test_link_faults import FreezableProxy


async def _until(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.05)
    return cond()


def test_keepalives_follow_the_telemetry_interval():
    def silent_for(interval: float) -> float:  # seconds of silence before the link is down
        ka = keepalive_for(interval)
        return ka["keepalive_interval"] * (ka["keepalive_count_max"] + 1)

    assert silent_for(1.0) <= 10  # the default 1 s telemetry: seconds, not a minute
    assert silent_for(10.0) <= 30
    assert silent_for(0.5) <= silent_for(1.0) <= silent_for(5.0) <= silent_for(10.0)


async def test_black_holed_host_is_noticed_in_seconds(gputui_home: Path):
    # the production link settings (no test overrides), but a short connect timeout
    services = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                        sandbox_boot_seconds=0, link_options={"connect_timeout": 2.0,
                                                              "backoff_initial": 0.1,
                                                              "backoff_max": 0.5})
    try:
        offer = await services.find_offer("sandbox", "RTX 3090")
        inst = await services.create("sandbox", offer,
                                     CreateRequest(offer_id=offer.offer_id, name="hole"))
        proxy = FreezableProxy(inst.ssh.port)
        port = await proxy.start()
        key = services.known_hosts.host_keys("127.0.0.1", inst.ssh.port)[0]
        services.known_hosts.add("127.0.0.1", port, key)
        link = services.links.get(inst.id, inst.ssh.model_copy(update={"port": port}),
                                  agent_path=None)
        assert (await link.run("echo up")).stdout.strip() == "up"
        proxy.thawed.clear()
        # today's 15 s × 3 keepalives took about a minute; this is a few seconds
        assert await _until(lambda: services.store.link(inst.id)[0] == LinkState.RECONNECTING, 25)
        proxy.thawed.set()
        assert await _until(lambda: services.store.link(inst.id)[0] == LinkState.CONNECTED, 25)
        assert (await link.run("echo back")).stdout.strip() == "back"
        await proxy.close()
        await services.release(inst, "manual")
    finally:
        await services.close()


@needs_sshd
async def test_sshd_session_stopped_with_sigstop(gputui_home: Path, tmp_path: Path):
    host = start_sshd(tmp_path)
    services = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                        link_options={"connect_timeout": 2.0, "backoff_initial": 0.1,
                                      "backoff_max": 0.5})
    stopped: list[int] = []
    try:
        services.known_hosts.add("127.0.0.1", host.port, host.host_key)
        provider = services.provider("ssh")
        inst = provider.describe(
            instance_id="frozen1", name="frozen",
            endpoint=SSHEndpoint(host="127.0.0.1", port=host.port, key_path=str(host.key)),
            gpu="A100", gpu_count=1, price_per_hour=Decimal(1), per=Granularity.SECOND)
        await services.store.put_instance(inst)
        link = await services.link(inst)
        assert (await link.run("echo up")).stdout.strip() == "up"
        # the per-connection sshd processes are the listener's children: freeze them all
        with open(f"/proc/{host.proc.pid}/task/{host.proc.pid}/children") as fh:  # noqa: ASYNC230
            children = fh.read().split()
        for pid in map(int, children):
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        assert stopped
        assert await _until(lambda: services.store.link(inst.id)[0] == LinkState.RECONNECTING, 25)
        assert await _until(lambda: services.store.link(inst.id)[0] == LinkState.CONNECTED, 25)
        assert (await link.run("echo back")).stdout.strip() == "back"  # a fresh session
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        await services.close()
        host.stop()
