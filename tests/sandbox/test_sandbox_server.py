"""The sandbox's SSH server, driven by a plain asyncssh client (no ~/.ssh, explicit host key)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
import types
from pathlib import Path

import asyncssh
import pytest

from gputui.sandbox import server as sandbox_server
from gputui.sandbox.server import (
    POWERED_OFF_MESSAGE,
    InstanceServer,
    ensure_host_key,
    ensure_keypair,
    instance_powered_off,
    start_instance_server,
)


class Sandbox:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "inst"
        (self.root / "bin").mkdir(parents=True)
        shim = self.root / "bin" / "hello-shim"
        shim.write_text('#!/bin/sh\necho "shim says $1"\n')
        shim.chmod(0o755)
        self.key_path, self.pub = ensure_keypair(tmp / "keys" / "client")
        self.host_key_path = tmp / "state" / "host_key"
        self.off = False
        self.servers: list[InstanceServer] = []

    async def start(self, **kw: object) -> InstanceServer:
        kw.setdefault("power_check", lambda root: self.off)
        server = await start_instance_server(
            self.root,
            host_key_path=self.host_key_path,
            authorized_keys=[self.pub],
            **kw,  # type: ignore[arg-type]
        )
        self.servers.append(server)
        return server

    def known_hosts(
        self,
    ) -> tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]]:
        host_key = asyncssh.read_private_key(str(self.host_key_path))
        return ([host_key.convert_to_public()], [], [])

    async def connect(self, server: InstanceServer, **kw: object) -> asyncssh.SSHClientConnection:
        opts: dict[str, object] = {
            "known_hosts": self.known_hosts(),
            "config": None,
            "agent_path": None,
            "client_keys": [str(self.key_path)],
            "username": "root",
            "connect_timeout": 5,
        }
        opts.update(kw)
        return await asyncssh.connect("127.0.0.1", server.port, **opts)  # type: ignore[arg-type]


@pytest.fixture
async def sandbox(tmp_path: Path):
    sb = Sandbox(tmp_path)
    yield sb
    for server in sb.servers:
        await server.aclose()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie nobody reaped yet is dead too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


async def _wait_gone(pid: int, within: float = 6.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        if _gone(pid):
            return True
        await asyncio.sleep(0.05)
    return _gone(pid)


async def test_echo_pwd_exit_status_and_path(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    async with await sandbox.connect(server) as conn:
        r = await conn.run("echo hi")
        assert r.stdout == "hi\n" and r.exit_status == 0
        r = await conn.run("pwd; echo $HOME")
        assert r.stdout.split() == [str(sandbox.root), str(sandbox.root)]
        r = await conn.run("exit 3")
        assert r.exit_status == 3
        r = await conn.run("echo out; echo err >&2; exit 1")
        assert (r.stdout, r.stderr, r.exit_status) == ("out\n", "err\n", 1)
        r = await conn.run("echo $PATH | cut -d: -f1; hello-shim there")
        assert r.stdout.splitlines() == [str(sandbox.root / "bin"), "shim says there"]
        r = await conn.run("cat", input="piped in\n")
        assert r.stdout == "piped in\n"
        r = await conn.run("kill -TERM $$")
        assert r.exit_signal is not None and r.exit_signal[0] == "TERM"


async def test_large_output_arrives_whole(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    async with await sandbox.connect(server) as conn:
        r = await conn.run("i=0; while [ $i -lt 20000 ]; do echo line$i; i=$((i+1)); done")
        lines = r.stdout.splitlines()
        assert len(lines) == 20000 and lines[-1] == "line19999"


async def test_host_key_is_generated_once_and_private(sandbox: Sandbox) -> None:
    first = await sandbox.start()
    fp = first.host_key_fingerprint
    await first.aclose()
    assert stat.S_IMODE(sandbox.host_key_path.stat().st_mode) == 0o600
    second = await sandbox.start()
    assert second.host_key_fingerprint == fp
    assert fp.startswith("SHA256:")
    # and the client key pair the sandbox uses
    assert stat.S_IMODE(sandbox.key_path.stat().st_mode) == 0o600
    assert sandbox.key_path.with_name("client.pub").read_text().strip() == sandbox.pub
    assert ensure_keypair(sandbox.key_path) == (sandbox.key_path, sandbox.pub)
    assert ensure_host_key(sandbox.host_key_path).get_fingerprint("sha256") == fp


async def test_password_auth_is_refused(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    with pytest.raises(asyncssh.PermissionDenied):
        await sandbox.connect(server, client_keys=None, password="root")


async def test_wrong_key_is_refused(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    other, _ = ensure_keypair(sandbox.tmp / "keys" / "intruder")
    with pytest.raises(asyncssh.PermissionDenied):
        await sandbox.connect(server, client_keys=[str(other)])


async def test_authorized_keys_file(sandbox: Sandbox) -> None:
    path = sandbox.tmp / "authorized_keys"
    path.write_text(f"# the sandbox client\n{sandbox.pub}\n")
    server = await start_instance_server(
        sandbox.root,
        host_key_path=sandbox.host_key_path,
        authorized_keys=path,
        power_check=lambda root: False,
    )
    sandbox.servers.append(server)
    async with await sandbox.connect(server) as conn:
        assert (await conn.run("echo ok")).stdout == "ok\n"


async def test_listens_on_loopback_only(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    assert server.host == "127.0.0.1"
    acceptor = server._acceptor
    assert acceptor is not None
    addresses = acceptor.get_addresses()
    assert addresses and all(addr[0] == "127.0.0.1" for addr in addresses)
    # From another local address of this machine, nothing answers on that port.
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("192.0.2.1", 9))  # no packet is sent; picks the outgoing interface
        own_ip = s.getsockname()[0]
        s.close()
    except OSError:
        own_ip = "127.0.0.1"
    if own_ip.startswith("127."):
        return
    with pytest.raises(OSError):
        _, writer = await asyncio.wait_for(asyncio.open_connection(own_ip, server.port), 2)
        writer.close()


async def test_command_killed_when_client_disconnects(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    conn = await sandbox.connect(server)
    proc = await conn.create_process("sleep 300 & echo $$ $!; wait")
    shell_pid, child_pid = map(int, (await asyncio.wait_for(proc.stdout.readline(), 5)).split())
    assert not _gone(shell_pid) and not _gone(child_pid)
    conn.close()
    await conn.wait_closed()
    assert await _wait_gone(shell_pid), "the session's shell survived the disconnect"
    assert await _wait_gone(child_pid), "the session's child survived the disconnect"


async def test_closing_the_channel_stops_a_stream(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    async with await sandbox.connect(server) as conn:
        proc = await conn.create_process("echo $$; while :; do echo tick; sleep 0.05; done")
        pid = int(await asyncio.wait_for(proc.stdout.readline(), 5))
        assert (await asyncio.wait_for(proc.stdout.readline(), 5)).strip() == "tick"
        proc.close()
        assert await _wait_gone(pid)
        # the connection is still good for more
        assert (await conn.run("echo still")).stdout == "still\n"


async def test_interactive_shell_on_a_pty(sandbox: Sandbox) -> None:
    server = await sandbox.start()
    async with await sandbox.connect(server) as conn:
        proc = await conn.create_process(term_type="xterm", term_size=(80, 24))
        proc.stdin.write("tty >/dev/null && echo IS-A-TTY; echo $((6*7)); stty size; exit 5\n")
        result = await asyncio.wait_for(proc.wait(), 10)
        out = result.stdout
        assert "IS-A-TTY" in out and "42" in out and "24 80" in out
        assert result.exit_status == 5


async def test_forward_to_loopback_works_and_elsewhere_is_refused(sandbox: Sandbox) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
    echo_port = echo_server.sockets[0].getsockname()[1]
    server = await sandbox.start()
    try:
        async with await sandbox.connect(server) as conn:
            for target in ("127.0.0.1", "localhost"):
                reader, writer = await conn.open_connection(target, echo_port)
                writer.write(b"ping")
                assert await asyncio.wait_for(reader.read(100), 5) == b"echo:ping"
                writer.close()
            listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", echo_port)
            r, w = await asyncio.open_connection("127.0.0.1", listener.get_port())
            w.write(b"via -L")
            assert await asyncio.wait_for(r.read(100), 5) == b"echo:via -L"
            w.close()
            listener.close()
            for target in ("192.0.2.1", "example.com", "10.0.0.1"):
                with pytest.raises(asyncssh.ChannelOpenError) as err:
                    await conn.open_connection(target, echo_port)
                assert "only 127.0.0.1" in err.value.reason
            with pytest.raises(asyncssh.ChannelListenError):
                await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", echo_port)
    finally:
        echo_server.close()
        await echo_server.wait_closed()


async def test_powered_off_instance_refuses_connections(sandbox: Sandbox) -> None:
    sandbox.off = True
    server = await sandbox.start()
    with pytest.raises(asyncssh.DisconnectError) as err:
        await sandbox.connect(server)
    assert POWERED_OFF_MESSAGE in err.value.reason


async def test_power_off_drops_open_connections(sandbox: Sandbox) -> None:
    server = await sandbox.start(power_poll_interval=0.1)
    conn = await sandbox.connect(server)
    proc = await conn.create_process("echo $$; sleep 300")
    pid = int(await asyncio.wait_for(proc.stdout.readline(), 5))
    sandbox.off = True
    await asyncio.wait_for(conn.wait_closed(), 5)
    assert await _wait_gone(pid)
    with pytest.raises(asyncssh.DisconnectError):
        await sandbox.connect(server)


def test_power_state_from_the_shims_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    status = {"value": "running"}

    class PowerState:
        def __init__(self, s: str):
            self.status = s

        @property
        def is_off(self) -> bool:
            return self.status == "off"

    fake = types.ModuleType(sandbox_server._SHIM_STATE_MODULE)
    fake.enforce_power = lambda root, now=None: calls.append("enforce")  # type: ignore[attr-defined]
    fake.power_state = lambda root, now=None: PowerState(status["value"])  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, sandbox_server._SHIM_STATE_MODULE, fake)
    assert instance_powered_off(tmp_path) is False
    status["value"] = "scheduled"
    assert instance_powered_off(tmp_path) is False
    status["value"] = "off"
    assert instance_powered_off(tmp_path) is True
    assert calls == ["enforce"] * 3


def test_looks_off_reads_common_shapes() -> None:
    looks_off = sandbox_server._looks_off
    assert looks_off(types.SimpleNamespace(status="off"))
    assert not looks_off(types.SimpleNamespace(status="scheduled"))
    assert looks_off(types.SimpleNamespace(off=True, status="running"))
    assert looks_off("off") and not looks_off("running")
