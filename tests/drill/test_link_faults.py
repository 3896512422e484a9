"""Drill: a host that stops answering without closing the connection (no FIN), then comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.models import LinkState
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.store import SessionStore


class FreezableProxy:
    """TCP relay on 127.0.0.1 that can go silent: bytes stop flowing, sockets stay open."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.thawed = asyncio.Event()
        self.thawed.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self.thawed.wait()  # frozen: a black hole, holding the bytes
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    async def close(self) -> None:
        if self.server:
            self.server.close()


@pytest.fixture
async def services(gputui_home: Path):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                   sandbox_boot_seconds=0,
                   link_options={"keepalive_interval": 0.3, "keepalive_count_max": 2,
                                 "connect_timeout": 1.0, "backoff_initial": 0.1,
                                 "backoff_max": 0.3})
    yield svc
    await svc.close()


async def test_silent_host_is_noticed_and_the_link_comes_back(services: Services):
    offer = await services.find_offer("sandbox", "RTX 3090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="nofin"))
    proxy = FreezableProxy(inst.ssh.port)
    port = await proxy.start()
    # the proxy stands in for the host; it presents the same host key
    services.known_hosts.add("127.0.0.1", port, services.known_hosts.host_keys("127.0.0.1", inst.ssh.port)[0])
    via = inst.ssh.model_copy(update={"port": port})
    link = services.links.get(inst.id, via, agent_path=None)
    states: list[LinkState] = []
    services.store.subscribe(lambda e: states.append(e.state) if hasattr(e, "state") else None)
    assert (await link.run("echo up")).stdout.strip() == "up"
    proxy.thawed.clear()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if services.store.link(inst.id)[0] == LinkState.RECONNECTING:
            break
    assert services.store.link(inst.id)[0] == LinkState.RECONNECTING  # noticed within seconds
    proxy.thawed.set()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if services.store.link(inst.id)[0] == LinkState.CONNECTED:
            break
    assert services.store.link(inst.id)[0] == LinkState.CONNECTED
    assert (await link.run("echo again")).stdout.strip() == "again"
    assert LinkState.RECONNECTING in states
    await proxy.close()
