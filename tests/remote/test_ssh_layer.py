"""The SSH layer (Link, LinkPool, known hosts) against the sandbox's in-process SSH server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import termios
from collections.abc import Callable
from pathlib import Path

import asyncssh
import pytest

from gputui.models import LinkState, SSHEndpoint
from gputui.remote.hostkeys import (
    HostKeyChanged,
    KnownHosts,
    SSHLayerError,
    UnknownHostKey,
    host_pattern,
)
from gputui.remote.ssh import (
    AuthRefused,
    CommandFailed,
    CommandTimeout,
    Link,
    LinkClosed,
    LinkDown,
    LinkPool,
    LinkUnreachable,
)
from gputui.sandbox.server import (
    InstanceServer,
    ensure_keypair,
    start_instance_server,
)


@pytest.fixture(autouse=True)
def no_user_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may read the developer's ~/.ssh or agent."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


class Env:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "inst"
        (self.root / "bin").mkdir(parents=True)
        self.key_path, self.pub = ensure_keypair(tmp / "keys" / "client")
        self.host_key_path = tmp / "sandbox" / "host_key"
        self.known = KnownHosts(tmp / "state" / "known_hosts")
        self.server: InstanceServer | None = None
        self.servers: list[InstanceServer] = []
        self.links: list[Link] = []
        self.off = False

    async def start(
        self, port: int = 0, host_key_path: Path | None = None, **kw: object
    ) -> InstanceServer:
        kw.setdefault("power_check", lambda root: self.off)
        self.server = await start_instance_server(
            self.root,
            host_key_path=host_key_path or self.host_key_path,
            authorized_keys=[self.pub],
            port=port,
            **kw,  # type: ignore[arg-type]
        )
        self.servers.append(self.server)
        return self.server

    async def stop(self) -> int:
        assert self.server is not None
        port = self.server.port
        await self.server.aclose()
        return port

    def endpoint(self, port: int | None = None) -> SSHEndpoint:
        assert port is not None or self.server is not None
        return SSHEndpoint(host="127.0.0.1", port=port or self.server.port)  # type: ignore[union-attr]

    def link(
        self, port: int | None = None, **kw: object
    ) -> tuple[Link, list[tuple[LinkState, str | None]]]:
        states: list[tuple[LinkState, str | None]] = []
        opts: dict[str, object] = {
            "known_hosts": self.known,
            "client_keys": [str(self.key_path)],
            "agent_path": None,
            "config": None,
            "connect_timeout": 3.0,
            "backoff_initial": 0.02,
            "backoff_max": 0.1,
            "on_state": lambda s, d: states.append((s, d)),
        }
        opts.update(kw)
        link = Link(self.endpoint(port), **opts)  # type: ignore[arg-type]
        self.links.append(link)
        return link, states


@pytest.fixture
async def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    for link in e.links:
        await link.close()
    for server in e.servers:
        await server.aclose()


async def _until(pred: Callable[[], bool], within: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not pred():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def _seq(states: list[tuple[LinkState, str | None]]) -> list[LinkState]:
    out: list[LinkState] = []
    for s, _ in states:
        if not out or out[-1] != s:
            out.append(s)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- host keys ------------------------------------------------------------------------------
async def test_unknown_host_key_is_refused_with_its_fingerprint(env: Env) -> None:
    server = await env.start()
    link, states = env.link()
    with pytest.raises(UnknownHostKey) as err:
        await link.connect()
    exc = err.value
    assert isinstance(exc, SSHLayerError)
    assert (exc.host, exc.port) == ("127.0.0.1", server.port)
    assert exc.fingerprint == server.host_key_fingerprint and exc.fingerprint.startswith("SHA256:")
    assert "\n" not in str(exc) and exc.fingerprint in str(exc)
    assert link.state == LinkState.FAILED and states[-1] == (LinkState.FAILED, str(exc))
    assert env.known.host_keys("127.0.0.1", server.port) == []
    # Trusting exactly the key that was shown lets the next attempt through.
    assert exc.key is not None
    env.known.add(exc.host, exc.port, exc.key)
    assert (await link.run("echo ok")).stdout == "ok\n"
    assert link.state == LinkState.CONNECTED


async def test_accept_new_stores_the_key_0600_and_next_connect_passes(env: Env) -> None:
    server = await env.start()
    link, _ = env.link(accept_new_host_key=True)
    await link.connect()
    assert link.host_key_fingerprint == server.host_key_fingerprint
    assert stat.S_IMODE(env.known.path.stat().st_mode) == 0o600
    text = env.known.path.read_text()
    assert text.startswith(f"[127.0.0.1]:{server.port} ssh-ed25519 ")
    assert len(text.splitlines()) == 1
    await link.close()

    strict, _ = env.link(accept_new_host_key=False)
    assert (await strict.run("echo again")).stdout == "again\n"
    assert len(env.known.path.read_text().splitlines()) == 1


async def test_changed_host_key_is_refused_even_with_accept_new(env: Env) -> None:
    await env.start()
    first, _ = env.link(accept_new_host_key=True)
    await first.connect()
    old_fp = first.host_key_fingerprint
    await first.close()
    port = await env.stop()

    new_server = await env.start(port=port, host_key_path=env.tmp / "sandbox" / "new_host_key")
    assert new_server.host_key_fingerprint != old_fp
    link, states = env.link(accept_new_host_key=True)
    with pytest.raises(HostKeyChanged) as err:
        await link.connect()
    exc = err.value
    assert (exc.expected_fp, exc.got_fp) == (old_fp, new_server.host_key_fingerprint)
    assert "HOST KEY CHANGED" in str(exc) and "\n" not in str(exc)
    assert states[-1][0] == LinkState.FAILED
    assert len(env.known.path.read_text().splitlines()) == 1  # nothing was added


async def test_changed_host_key_type_is_refused(env: Env) -> None:
    await env.start()
    first, _ = env.link(accept_new_host_key=True)
    await first.connect()
    old_fp = first.host_key_fingerprint
    await first.close()
    port = await env.stop()

    rsa_path = env.tmp / "sandbox" / "rsa_host_key"
    rsa_path.write_bytes(
        asyncssh.generate_private_key("ssh-rsa", key_size=2048).export_private_key()
    )
    rsa_path.chmod(0o600)
    new_server = await env.start(port=port, host_key_path=rsa_path)
    link, _ = env.link(accept_new_host_key=True)
    with pytest.raises(HostKeyChanged) as err:
        await link.connect()
    assert (err.value.expected_fp, err.value.got_fp) == (old_fp, new_server.host_key_fingerprint)


async def test_host_key_change_during_reconnect_fails_for_good(env: Env) -> None:
    await env.start()
    link, states = env.link(accept_new_host_key=True)
    await link.connect()
    port = await env.stop()
    await env.start(port=port, host_key_path=env.tmp / "sandbox" / "other_key")
    await _until(lambda: link.state == LinkState.FAILED)
    assert "HOST KEY CHANGED" in (link.detail or "")
    assert isinstance(link.last_error, HostKeyChanged)
    seen = len(states)
    await asyncio.sleep(0.3)
    assert len(states) == seen  # not retried
    with pytest.raises(HostKeyChanged):
        await link.run("true")


def test_known_hosts_file_helpers(tmp_path: Path) -> None:
    kh = KnownHosts(tmp_path / "deep" / "known_hosts")
    key = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    other = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    assert kh.host_keys("h", 22) == []
    kh.add("h", 22, key)
    kh.add("h", 2222, other)
    kh.add("::1", 2200, key)
    assert stat.S_IMODE(kh.path.stat().st_mode) == 0o600
    assert kh.host_keys("h", 22) == [key]
    assert kh.host_keys("h", 2222) == [other]
    assert kh.host_keys("::1", 2200) == [key]
    assert host_pattern("h", 22) == "h" and host_pattern("::1", 2200) == "[::1]:2200"
    assert kh.forget("h", 2222) == 1
    assert kh.host_keys("h", 2222) == [key]  # asyncssh falls back to the port-22 entry
    assert kh.forget("h", 22) == 1 and kh.host_keys("h", 2222) == []
    assert stat.S_IMODE(kh.path.stat().st_mode) == 0o600


def test_known_hosts_edited_by_another_hand_is_read_again(tmp_path: Path) -> None:
    """The file is parsed once and kept while it is unchanged; an entry another process or a
    hand edit adds, replaces or removes counts at the next look (a changed key is refused)."""
    path = tmp_path / "known_hosts"
    mine = KnownHosts(path)
    theirs = KnownHosts(path)  # another process's view of the same file
    key = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    other = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    assert mine.host_keys("h", 2200) == []
    theirs.add("h", 2200, key)
    assert mine.host_keys("h", 2200) == [key]
    theirs.forget("h", 2200)
    theirs.add("h", 2200, other)
    assert mine.host_keys("h", 2200) == [other]
    verifier = mine.verifier(accept_new=True)  # the key on file is not the one presented now
    assert verifier.validate("h", "", 2200, key) is False
    assert isinstance(verifier.error, HostKeyChanged)
    # a hand edit in place (same size, same inode; only its mtime moves): still seen
    line = path.read_text()
    data = other.export_public_key("openssh").decode().split()
    swapped = line.replace(data[1], key.export_public_key("openssh").decode().split()[1])
    assert len(swapped) == len(line)
    stamp = path.stat()
    with open(path, "r+", encoding="utf-8") as fh:
        fh.write(swapped)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1))
    assert mine.host_keys("h", 2200) == [key]
    path.unlink()  # gone: nothing is trusted any more
    assert mine.host_keys("h", 2200) == []


def _add_and_forget(path: str, who: int, rounds: int, line: str) -> None:
    """One process's part: trust a host, forget the one before it, `rounds` times."""
    kh = KnownHosts(Path(path))
    key = asyncssh.import_public_key(line)
    for i in range(rounds):
        kh.add(f"h{who}", 2000 + i, key)
        if i:
            kh.forget(f"h{who}", 2000 + i - 1)


def test_known_hosts_added_and_forgotten_by_processes_at_once(tmp_path: Path) -> None:
    """The console, the daemon and commands add and forget keys at the same moments (a
    release forgets its host while another instance is being reached). None of them fails,
    and no key one adds is lost to another's rewrite of the file (a lost key would ask the
    renter about a host gputui had already trusted)."""
    import multiprocessing

    path = tmp_path / "known_hosts"
    line = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode()
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_add_and_forget, args=(str(path), who, 150, line))
               for who in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]  # no FileNotFoundError on the way
    left = sorted(ln.split()[0] for ln in path.read_text().splitlines())
    assert left == sorted(f"[h{who}]:2149" for who in range(4))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_key_pair_replaced_on_disk_is_read_again(tmp_path: Path) -> None:
    """A key pair asked for again is read from disk again only when its files changed: a key
    replaced (or removed) meanwhile is the one used."""
    path = tmp_path / "keys" / "client"
    first_path, first = ensure_keypair(path)
    assert ensure_keypair(path) == (first_path, first)
    replaced = asyncssh.generate_private_key("ssh-ed25519")
    path.write_bytes(replaced.export_private_key("openssh"))
    _, public = ensure_keypair(path)
    assert public == replaced.export_public_key("openssh").decode().strip() != first
    assert path.with_name("client.pub").read_text().strip() == public
    path.unlink()
    _, fresh = ensure_keypair(path)  # a new pair, written 0600
    assert fresh not in (first, public) and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.with_name("client.pub").read_text().strip() == fresh


# -- connecting -----------------------------------------------------------------------------
async def test_unreachable_port_fails_quickly(env: Env) -> None:
    port = _free_port()
    link, states = env.link(port=port, connect_timeout=1.0)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(LinkUnreachable) as err:
        await link.connect()
    assert loop.time() - t0 < 1.5
    assert f"127.0.0.1:{port}" in str(err.value) and "\n" not in str(err.value)
    assert _seq(states) == [LinkState.CONNECTING, LinkState.FAILED]


async def test_silent_host_fails_within_the_connect_timeout(env: Env) -> None:
    held: list[asyncio.StreamWriter] = []

    async def never_speaks(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    blackhole = await asyncio.start_server(never_speaks, "127.0.0.1", 0)
    port = blackhole.sockets[0].getsockname()[1]
    try:
        link, _ = env.link(port=port, connect_timeout=0.5)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(LinkUnreachable) as err:
            await link.connect()
        assert 0.4 < loop.time() - t0 < 2.0
        assert "within 0.5 s" in str(err.value)
        assert link.state == LinkState.FAILED
    finally:
        for w in held:
            w.close()
        blackhole.close()
        await blackhole.wait_closed()


async def test_refused_login_is_failed_not_retried(env: Env) -> None:
    await env.start()
    intruder, _ = ensure_keypair(env.tmp / "keys" / "intruder")
    link, states = env.link(client_keys=[str(intruder)], accept_new_host_key=True)
    with pytest.raises(AuthRefused) as err:
        await link.connect()
    assert "login refused" in str(err.value)
    assert link.state == LinkState.FAILED and "login refused" in (link.detail or "")
    seen = len(states)
    await asyncio.sleep(0.3)
    assert len(states) == seen


async def test_password_is_refused_by_the_sandbox(env: Env) -> None:
    await env.start()
    link, _ = env.link(client_keys=None, password="hunter2", accept_new_host_key=True)
    with pytest.raises(AuthRefused) as err:
        await link.connect()
    assert "password" in str(err.value)


# -- running --------------------------------------------------------------------------------
async def test_run_returns_status_and_output(env: Env) -> None:
    await env.start()
    link, states = env.link(accept_new_host_key=True)
    r = await link.run("echo out; echo err >&2; exit 4")
    assert (r.exit_status, r.stdout, r.stderr, r.ok) == (4, "out\n", "err\n", False)
    assert (await link.run("cat")).stdout == ""  # stdin is closed, not left hanging
    assert (await link.run("cat", input="fed\n")).stdout == "fed\n"
    assert (await link.run("pwd")).stdout.strip() == str(env.root)
    killed = await link.run("kill -KILL $$")
    assert (killed.exit_status, killed.signal) == (137, "KILL")
    assert _seq(states) == [LinkState.CONNECTING, LinkState.CONNECTED]


async def test_run_timeout_stops_the_command(env: Env) -> None:
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    marker = env.root / "pid"
    with pytest.raises(CommandTimeout) as err:
        await link.run(f"echo $$ > {marker}; exec sleep 30", timeout=0.5)
    assert "0.5 s" in str(err.value)
    pid = int(marker.read_text())
    await _until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))
    assert (await link.run("echo fine")).stdout == "fine\n"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


async def test_stream_lines_ends_on_exit_and_reports_failure(env: Env) -> None:
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    async with link.stream_lines("printf 'a\\nb\\r\\nc'") as lines:
        assert [line async for line in lines] == ["a", "b", "c"]
    with pytest.raises(CommandFailed) as err:
        async for _ in link.stream_lines(
            "echo partial; echo 'no-such-thing: not found' >&2; exit 127"
        ):
            pass
    assert err.value.exit_status == 127 and "not found" in str(err.value)


async def test_leaving_a_stream_stops_the_remote_command(env: Env) -> None:
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    async with link.stream_lines("echo $$; while :; do echo tick; sleep 0.05; done") as lines:
        pid = int(await lines.__anext__())
        assert await lines.__anext__() == "tick"
    await _until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))


# -- the supervisor -------------------------------------------------------------------------
async def test_reconnects_after_server_restart_and_stream_continues(env: Env) -> None:
    await env.start()
    link, states = env.link(accept_new_host_key=True)
    lines: list[str] = []

    async def consume() -> None:
        async with link.stream_lines(
            "i=0; while :; do i=$((i+1)); echo n$i; sleep 0.05; done"
        ) as s:
            async for line in s:
                lines.append(line)

    task = asyncio.create_task(consume())
    try:
        await _until(lambda: len(lines) >= 3)
        port = await env.stop()
        await _until(lambda: link.state == LinkState.RECONNECTING)
        await asyncio.sleep(0.2)  # a few refused attempts while the server is down
        assert "retrying" in (link.detail or "")
        await env.start(port=port)
        before = len(lines)
        await _until(lambda: link.state == LinkState.CONNECTED)
        await _until(lambda: len(lines) >= before + 3)
        assert "n1" in lines[before:]  # the command was started again
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert _seq(states)[:4] == [
        LinkState.CONNECTING,
        LinkState.CONNECTED,
        LinkState.RECONNECTING,
        LinkState.CONNECTED,
    ]
    assert (await link.run("echo after")).stdout == "after\n"


async def test_stream_without_restart_raises_on_drop(env: Env) -> None:
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    got: list[str] = []
    with pytest.raises(LinkDown):
        async with link.stream_lines("while :; do echo x; sleep 0.05; done", restart=False) as s:
            async for line in s:
                got.append(line)
                if len(got) == 2:
                    env.server.disconnect_all()  # type: ignore[union-attr]
    assert len(got) >= 2


async def test_forward_is_recreated_on_the_same_port(env: Env) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
    echo_port = echo_server.sockets[0].getsockname()[1]

    async def roundtrip(port: int, msg: bytes) -> bytes:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(msg)
        data = await asyncio.wait_for(r.read(100), 5)
        w.close()
        return data

    try:
        await env.start()
        link, _ = env.link(accept_new_host_key=True)
        local = await link.forward_local(echo_port)
        assert await link.forward_local(echo_port) == local  # shared, not a second one
        assert await roundtrip(local, b"one") == b"echo:one"
        port = await env.stop()
        await _until(lambda: link.state == LinkState.RECONNECTING)
        await env.start(port=port)
        await _until(lambda: link.state == LinkState.CONNECTED)
        assert link.local_port_for(echo_port) == local
        assert await roundtrip(local, b"two") == b"echo:two"
        await link.close_forward(echo_port)
        assert link.local_port_for(echo_port) is None
    finally:
        echo_server.close()
        await echo_server.wait_closed()


async def test_powered_off_instance_shows_as_reconnecting_with_the_reason(env: Env) -> None:
    await env.start(power_poll_interval=0.05)
    link, _ = env.link(accept_new_host_key=True)
    await link.connect()
    env.off = True
    await _until(lambda: "powered off" in (link.detail or ""))
    assert link.state == LinkState.RECONNECTING
    env.off = False
    await _until(lambda: link.state == LinkState.CONNECTED)


async def test_first_connect_to_a_powered_off_instance_fails(env: Env) -> None:
    env.off = True
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    with pytest.raises(LinkDown) as err:
        await link.connect()
    assert "instance is powered off" in str(err.value)


# -- closing and the pool -------------------------------------------------------------------
async def test_close_is_final(env: Env) -> None:
    await env.start()
    link, states = env.link(accept_new_host_key=True)
    await link.connect()
    await link.close()
    assert states[-1] == (LinkState.UNKNOWN, "closed")
    with pytest.raises(LinkClosed):
        await link.run("true")
    assert [line async for line in link.stream_lines("echo x")] == []
    await link.close()  # idempotent


async def test_pool_shares_one_link_per_instance(env: Env) -> None:
    server = await env.start()
    seen: list[tuple[str, LinkState, str | None]] = []
    pool = LinkPool(
        known_hosts=env.known,
        on_state=lambda iid, s, d: seen.append((iid, s, d)),
        client_keys=[str(env.key_path)],
        agent_path=None,
        config=None,
        accept_new_host_key=True,
        connect_timeout=3.0,
    )
    ep = env.endpoint()
    a = pool.get("i-1", ep)
    assert pool.get("i-1", ep) is a and "i-1" in pool and len(pool) == 1
    assert (await a.run("echo shared")).stdout == "shared\n"
    assert ("i-1", LinkState.CONNECTED, None) in seen
    b = pool.get("i-2", ep)
    assert b is not a
    moved = pool.get("i-1", SSHEndpoint(host="127.0.0.1", port=server.port, user="other"))
    assert moved is not a
    await pool.close_all()
    assert a.closed and b.closed and moved.closed and len(pool) == 0


async def test_interactive_session_with_pipes(env: Env, tmp_path: Path) -> None:
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    script = tmp_path / "in.txt"
    script.write_text("echo from-stdin; echo oops >&2; exit 7\n")
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with script.open("rb") as fin, out_path.open("wb") as fout, err_path.open("wb") as ferr:
        status = await link.interactive(None, stdin=fin, stdout=fout, stderr=ferr)
    assert status == 7
    assert out_path.read_text() == "from-stdin\n" and err_path.read_text() == "oops\n"
    with script.open("rb") as fin, out_path.open("wb") as fout, err_path.open("wb") as ferr:
        assert await link.interactive("exit 3", stdin=fin, stdout=fout, stderr=ferr) == 3


async def test_interactive_session_on_a_terminal(env: Env) -> None:
    await env.start()
    link, _ = env.link(accept_new_host_key=True)
    master, slave = os.openpty()
    term = os.fdopen(slave, "r+b", buffering=0)
    try:
        os.write(master, b"tty >/dev/null && echo ON-A-TTY; echo $((6*7)); exit 9\n")
        before = termios.tcgetattr(slave)
        status = await asyncio.wait_for(
            link.interactive(None, stdin=term, stdout=term, stderr=term), 10
        )
        assert status == 9
        assert termios.tcgetattr(slave) == before  # raw mode undone
        os.set_blocking(master, False)
        out = b""
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(master, 65536):
                out += chunk
        assert b"ON-A-TTY" in out and b"42" in out
    finally:
        term.close()
        os.close(master)
