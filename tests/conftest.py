"""Shared fixtures. Every test gets its own GPUTUI_HOME so nothing touches the user's files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The AutoDL emulator, its services hub and the notification receiver, shared by many modules.
pytest_plugins = ("tests.providers.autodl_fixtures",)


@pytest.fixture(autouse=True)
def gputui_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "gputui-home"
    monkeypatch.setenv("GPUTUI_HOME", str(home))
    # English unless a test asks for another language (a developer's LANG=zh_CN.UTF-8 would
    # otherwise change every message the tests read).
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    yield home
    from gputui.i18n import set_language

    set_language("en")
    # The simulated cloud this test started (one daemon per GPUTUI_HOME): stop it, then power
    # off the instances it left running, as their folders are going.
    sandbox = home / "sandbox"
    if sandbox.is_dir():
        from gputui.sandbox.client import stop_daemon
        from gputui.sandbox.platform import kill_instance_processes

        stop_daemon(sandbox)
        instances = sandbox / "instances"
        if instances.is_dir():
            for root in instances.iterdir():
                kill_instance_processes(root, grace_s=0.5)


def run_gputui_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["GPUTUI_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


GPUTUI = [sys.executable, "-m", "gputui"]
FAST_LINKS = {"connect_timeout": 5.0, "backoff_initial": 0.05, "backoff_max": 0.2}


@pytest.fixture
def services(request: pytest.FixtureRequest):
    """The services hub this test works with: the sandbox's (`sandbox_services`), or in a module
    or test marked `autodl`, the AutoDL emulator's (`autodl_services`, from
    tests/providers/autodl_fixtures.py)."""
    autodl = request.node.get_closest_marker("autodl") is not None
    return request.getfixturevalue("autodl_services" if autodl else "sandbox_services")


@pytest.fixture
async def sandbox_services(gputui_home: Path):
    """The services hub over this test's own state, with an instantly booting sandbox."""
    from gputui.config import Config
    from gputui.services.hub import Services
    from gputui.store import SessionStore

    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home,
                   sandbox_boot_seconds=0, link_options=dict(FAST_LINKS))
    yield svc
    await svc.close()
