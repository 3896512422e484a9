"""Shared fixtures for the AutoDL tests and the notification tests, loaded as a pytest plugin by
tests/conftest.py (so no test module imports a fixture: ruff would read that as F811).

- `emu`: the AutoDL emulator with real SSH. Its timings are the quick ones; a module or test
  marked `@pytest.mark.autodl_emu(ssh_delay=0.8, ...)` gets those instead.
- `autodl_services`: the services hub over this test's state with the emulator attached as the
  `autodl` provider. A module or test marked `autodl` gets it as its `services` (the root
  conftest's `services` is the sandbox's hub otherwise).
- `receiver`: a real HTTP receiver for notifications (tests/services/notify_receiver.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.config import Config
from gputui.models import Instance, Lease
from gputui.providers.autodl import AutoDLProvider
from gputui.providers.base import CreateRequest, ProviderContext
from gputui.services.hub import Services
from gputui.store import SessionStore
from tests.providers.autodl_emulator import TEST_TOKEN, AutoDLEmulator
from tests.services.notify_receiver import start_receiver

FAST = dict(token=TEST_TOKEN, env={}, poll_interval=0.05, backoff=0.01, backoff_max=0.05,
            timeout=5.0, max_attempts=4, ssh_first_wait=0.1, ssh_timeout=60, find_interval=0.05,
            stop_timeout=20)
EMU_TIMINGS = dict(creating_s=0.1, starting_s=0.1, ssh_delay=0.2, shutting_s=0.1)
LINKS = {"connect_timeout": 5.0, "backoff_initial": 0.05, "backoff_max": 0.2}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "autodl: `services` is the AutoDL emulator's hub (autodl_services)")
    config.addinivalue_line(
        "markers", "autodl_emu(**timings): the AutoDL emulator's timings for this test")


def attach(svc: Services, emu: AutoDLEmulator, **kw: object) -> AutoDLProvider:
    """The emulator as `svc`'s `autodl` provider, with short polls and retries."""
    ctx = ProviderContext(svc.state_dir, svc.config, svc)
    provider = AutoDLProvider(ctx, base_url=emu.base_url, **{**FAST, **kw})
    svc.providers["autodl"] = provider
    return provider


async def rent(svc: Services, lease: Lease | None = None, name: str = "job") -> Instance:
    offer = await svc.find_offer("autodl", "4090 D")
    req = CreateRequest(offer_id=offer.offer_id, name=name)
    return await svc.create("autodl", offer, req, lease=lease)


@pytest.fixture
async def emu(tmp_path: Path, request: pytest.FixtureRequest):
    marker = request.node.get_closest_marker("autodl_emu")
    timings = {**EMU_TIMINGS, **(marker.kwargs if marker else {})}
    async with AutoDLEmulator(ssh_root=tmp_path / "autodl-boxes", **timings) as e:
        yield e


@pytest.fixture
async def autodl_services(gputui_home: Path, emu: AutoDLEmulator):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                   link_options=dict(LINKS))
    attach(svc, emu)
    yield svc
    await svc.close()


@pytest.fixture
def receiver():
    rec, server = start_receiver()
    yield rec
    rec.release.set()
    server.shutdown()
    server.server_close()
