"""OpenSSH's real sshd on 127.0.0.1 for the drills, its `nvidia-smi` and `shutdown` the sandbox
shims. The shim records the power-off; `go_down_at_power_off` then stops sshd, as a host going
down would, so a release sees the host go away. Skipped where sshd is absent or not root."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from gputui.sandbox.shims.state import create_instance_dir, power_state

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
needs_sshd = pytest.mark.skipif(
    SSHD is None or os.geteuid() != 0,
    reason="OpenSSH's sshd is not installed (apt-get install openssh-server) or not root",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SshdHost:
    port: int
    key: Path
    host: Path  # the instance folder of the shims (power state, GPUs)
    host_key: asyncssh.SSHKey
    proc: subprocess.Popen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def go_down_at_power_off(host: Path, proc: subprocess.Popen) -> None:
    """Stop sshd (no more logins, as on a host shutting down) once the shim records the
    power-off. A daemon thread: it ends with sshd."""

    def watch() -> None:
        while proc.poll() is None:
            if power_state(host).is_off:
                proc.terminate()
                return
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()


def run_sshd(folder: Path, extra: str, *, what: str = "sshd"
             ) -> tuple[int, Path, asyncssh.SSHKey, subprocess.Popen]:
    """OpenSSH's sshd on a free port of 127.0.0.1, root logging in with a fresh key only:
    its keys in `folder`/keys, its config `folder`/sshd_config (the common lines, then `extra`:
    SetEnv and the like). Returns (port, the client's private key file, the host key, sshd)
    once it answers; fails the test, saying `what` did not start, otherwise."""
    assert SSHD is not None
    keys = folder / "keys"
    keys.mkdir(exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    (keys / "host").write_bytes(host_key.export_private_key("openssh"))
    (keys / "host").chmod(0o600)
    client = asyncssh.generate_private_key("ssh-ed25519")
    (keys / "client").write_bytes(client.export_private_key("openssh"))
    (keys / "client").chmod(0o600)
    (keys / "authorized_keys").write_bytes(client.export_public_key("openssh"))
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPermitRootLogin prohibit-password\n{extra}"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"{what} did not start")
        time.sleep(0.05)
    # that probe connection counted against MaxStartups until sshd noticed it closed
    time.sleep(0.2)
    return port, keys / "client", host_key, proc


def start_sshd(tmp_path: Path, extra: str = "", *, gpu_count: int = 1) -> SshdHost:
    host = tmp_path / "host"
    create_instance_dir(host, instance_id="sshd-host", gpu_name="NVIDIA A100-SXM4-80GB",
                        gpu_count=gpu_count, memory_total_mib=81920, power_limit_w=400, tdp_w=400)
    port, client_key, host_key, proc = run_sshd(
        tmp_path, f"SetEnv PATH={host / 'bin'}:/usr/bin:/bin\n{extra}")
    go_down_at_power_off(host, proc)
    return SshdHost(port, client_key, host, host_key, proc)
