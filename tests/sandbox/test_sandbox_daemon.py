"""The simulated cloud as its own process: reached with OpenSSH while no gputui process runs,
outliving the console that started it, and brought back when it dies."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gputui.sandbox.client import daemon_pid
from tests.conftest import GPUTUI, run_gputui_env

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None,
                               reason="OpenSSH's ssh client is not installed")


def gputui(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUTUI, *args], env=run_gputui_env(home), capture_output=True,
                          text=True, timeout=timeout)


def create(home: Path, name: str = "job") -> dict:
    out = gputui(home, "create", "--gpu", "RTX 4090", "--name", name, "--release-after", "1h",
                 "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def port_of(item: dict) -> int:
    return int(item["ssh"].rsplit(":", 1)[1])


def openssh(home: Path, port: int, command: str) -> subprocess.CompletedProcess[str]:
    """The system's ssh client, with the sandbox's key and gputui's known_hosts (verified)."""
    return subprocess.run(
        ["ssh", "-F", "/dev/null", "-i", str(home / "sandbox" / "client_key"), "-p", str(port),
         "-o", f"UserKnownHostsFile={home / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=20",
         "root@127.0.0.1", command],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def gputui_processes(home: Path) -> list[str]:
    """Command lines of the gputui processes for this home other than the sandbox daemon."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"GPUTUI_HOME={home}".encode() in env.split(b"\0") and "-m gputui" in cmd \
                and "gputui.sandbox" not in cmd:
            found.append(cmd)
    return found


def wait_until(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@needs_ssh
def test_openssh_reaches_an_instance_while_no_gputui_process_runs(gputui_home: Path):
    item = create(gputui_home)
    assert gputui_processes(gputui_home) == []  # the command has exited: only the cloud is up
    pid = daemon_pid(gputui_home / "sandbox")
    assert pid is not None
    out = openssh(gputui_home, port_of(item), "nvidia-smi -L")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("NVIDIA GeForce RTX 4090") == 1
    status = gputui(gputui_home, "sandbox", "status", "--json")
    data = json.loads(status.stdout)
    assert data["running"] and data["pid"] == pid
    [served] = data["instances"]
    assert served["id"] == item["id"] and served["port"] == port_of(item) and served["serving"]


@needs_ssh
def test_a_dead_daemon_is_restarted_by_the_next_use_and_its_instances_come_back(
        gputui_home: Path):
    item = create(gputui_home)
    root = gputui_home / "sandbox"
    first = daemon_pid(root)
    assert first is not None
    os.kill(first, signal.SIGKILL)  # the cloud crashes
    wait_until(lambda: daemon_pid(root) is None, what="the daemon to die")
    assert openssh(gputui_home, port_of(item), "true").returncode != 0  # nobody serves it
    listed = gputui(gputui_home, "instances", "--json")  # the next use
    assert listed.returncode == 0, listed.stderr
    [again] = json.loads(listed.stdout)
    assert again["status"] == "running"
    second = daemon_pid(root)
    assert second is not None and second != first
    out = openssh(gputui_home, port_of(item), "nvidia-smi -L")
    assert out.returncode == 0 and "RTX 4090" in out.stdout, out.stderr


@needs_ssh
def test_the_cloud_outlives_a_console_killed_with_sigkill(gputui_home: Path):
    item = create(gputui_home)
    root = gputui_home / "sandbox"
    pid = daemon_pid(root)
    env = run_gputui_env(gputui_home)
    # A command that uses the sandbox, killed mid-way (as a crashed console would be).
    proc = subprocess.Popen([*GPUTUI, "ssh", item["name"], "--", "sleep 30"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    proc.kill()
    proc.wait()
    assert daemon_pid(root) == pid
    out = openssh(gputui_home, port_of(item), "echo up")
    assert out.returncode == 0 and out.stdout.strip() == "up", out.stderr


def test_stop_and_status_say_what_they_did(gputui_home: Path):
    status = gputui(gputui_home, "sandbox", "status")
    assert status.returncode == 0 and "not running" in status.stdout
    item = create(gputui_home)
    stopped = gputui(gputui_home, "sandbox", "stop", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] is True
    assert daemon_pid(gputui_home / "sandbox") is None
    again = gputui(gputui_home, "sandbox", "stop")
    assert again.returncode == 0 and "not running" in again.stdout
    # the instance still bills and is listed; the next use brings its endpoint back
    listed = json.loads(gputui(gputui_home, "instances", "--json").stdout)
    assert [i["id"] for i in listed] == [item["id"]]
    assert daemon_pid(gputui_home / "sandbox") is not None


def test_serve_refuses_when_a_daemon_runs_already(gputui_home: Path):
    create(gputui_home)
    out = gputui(gputui_home, "sandbox", "serve", timeout=30)
    assert out.returncode == 1 and "already runs" in out.stderr


async def test_a_folder_too_deep_for_a_unix_socket_gets_a_private_one(tmp_path: Path):
    import asyncio

    from gputui.sandbox.client import SandboxClient, socket_path, stop_daemon

    root = tmp_path / ("d" * 60) / ("e" * 60) / "sandbox"
    sock = socket_path(root)
    assert sock.parent != root and len(str(sock)) < 108
    try:
        status = await SandboxClient(root).call("status")
        assert status["root"] == str(root.resolve()) and status["instances"] == []
        assert sock.stat().st_mode & 0o777 == 0o600
        assert sock.parent.stat().st_mode & 0o777 == 0o700
        # a request it cannot read gets one line back, and the daemon stays up
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(b"not json\n")
        await writer.drain()
        reply = json.loads(await reader.readline())
        writer.close()
        assert reply["ok"] is False and "bad request" in reply["error"]
        assert (await SandboxClient(root).call("ping"))["pid"] == status["pid"]
    finally:
        stop_daemon(root)


@needs_ssh
def test_a_daemon_whose_folder_is_removed_powers_off_and_goes(gputui_home: Path):
    item = create(gputui_home)
    started = openssh(gputui_home, port_of(item),
                      "nohup gpu-load --gpus 0 --mem 1G --util 50 --seconds 600 "
                      ">/dev/null 2>&1 & echo $!")
    assert started.returncode == 0, started.stderr
    job = int(started.stdout.split()[-1])
    daemon = daemon_pid(gputui_home / "sandbox")
    assert daemon is not None

    def alive(pid: int) -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")

    shutil.rmtree(gputui_home)  # e.g. a test's temporary home, cleaned up
    wait_until(lambda: not alive(daemon), timeout=30, what="the daemon to stop")
    wait_until(lambda: not alive(job), timeout=30, what="the job to be powered off")
