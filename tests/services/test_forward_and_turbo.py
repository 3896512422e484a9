"""`gputui forward` on the sandbox (a tiny HTTP server started on the instance, fetched through
the SSH local forward, Ctrl-C ends it) and the Ollama install's use of AutoDL's academic proxy
(`source /etc/network_turbo` where the file exists)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gputui.providers.base import CreateRequest
from gputui.services.ollama.common import INSTALL_COMMAND, install_run_command
from tests.conftest import run_gputui_env
from tests.providers.test_autodl_images import _fetch_through_forward, _free_port, _stop_server


async def test_forward_reaches_a_server_on_a_sandbox_instance(gputui_home: Path, services):
    offer = await services.find_offer("sandbox", "RTX 4090")
    inst = await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id,
                                                                 name="web"))
    port = _free_port()
    await services.run(inst, f"echo hello-sandbox > hello.txt; nohup python3 -m http.server "
                             f"{port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > srv.pid")
    pid_file = Path((await services.run(inst, "pwd")).stdout.strip()) / "srv.pid"
    try:
        await _fetch_through_forward(run_gputui_env(gputui_home), "web", port, "hello-sandbox")
    finally:
        _stop_server(pid_file)


def test_forward_refuses_a_bad_port_in_one_line(gputui_home: Path):
    from tests.conftest import GPUTUI

    out = subprocess.run([*GPUTUI, "forward", "web", "99999"], env=run_gputui_env(gputui_home),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "PORT: give a port between 1 and 65535, not '99999'" in out.stderr


def _run_install(tmp_path: Path, turbo: Path) -> str:
    """The install command as it runs on an instance, with a stand-in `curl` that reports the
    proxy it was given and an empty install script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    curl = bin_dir / "curl"
    curl.write_text('#!/bin/sh\necho "proxy=${http_proxy:-none}" >&2\necho "exit 0"\n')
    curl.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(["/bin/sh", "-c", install_run_command(str(turbo))], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stderr


def test_the_ollama_install_uses_network_turbo_where_it_exists(tmp_path: Path):
    turbo = tmp_path / "network_turbo"
    assert "proxy=none" in _run_install(tmp_path, turbo)  # not AutoDL: runs as it is
    turbo.write_text("export http_proxy=http://172.20.0.113:12798\n")
    assert "proxy=http://172.20.0.113:12798" in _run_install(tmp_path, turbo)
    assert install_run_command().startswith("if [ -f /etc/network_turbo ]; then . "
                                            "/etc/network_turbo; fi; ")
    assert install_run_command().endswith(INSTALL_COMMAND)
