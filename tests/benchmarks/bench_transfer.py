"""Transfer benchmark (issues 17, 27), reported as ratios against OpenSSH's `scp`, not as timed tests.

    python tests/benchmarks/bench_transfer.py [--files 1000] [--size 256M] [--repeat 3]
                                              [--server both|sandbox|sshd] [--quick]

Against two servers in the same run, each on 127.0.0.1: a sandbox instance's SSH server
(asyncssh's) and the system's OpenSSH `sshd` (a real host's server, started here as the drills
start it, with its own SFTP subsystem; skipped where sshd is missing or this is not root).
For each: `gputui push`'s transfer and `pull`'s (asyncssh SFTP, the link already up) of 1,000
small files and of one large file (256 MiB by default; `--size 1G` for 1 GiB), each against
OpenSSH's `scp -r` of the same files to the same server (a new connection each, as a user runs
it). The two are timed alternately `--repeat` times and the best of each is kept (the machine
may be shared); also the second push of unchanged files (what `only changed files` saves).
Every copy that came back is compared with the original, byte for byte.
Ratios above 1 mean gputui took longer than scp. `--quick`: 200 files, 64 MiB, 2 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def make_small(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"d{i // 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04d}.txt").write_bytes(os.urandom(512 + (i * 37) % 3500))


def make_large(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with path.open("wb") as fh:
        left = size
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)


def same_tree(a: Path, b: Path) -> bool:
    """Whether `b` holds exactly `a`'s files with the same bytes."""
    if a.is_file():
        return b.is_file() and filecmp.cmp(a, b, shallow=False)
    names_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    names_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return names_a == names_b and all(filecmp.cmp(a / n, b / n, shallow=False) for n in names_a)


@dataclass
class Server:
    """One server to measure against: a gputui link to it and `scp`'s options for it."""
    name: str
    link: Any
    scp_opts: list[str]
    cleanup: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)


def scp_options(port: int, key: Path, host_key_line: str, known: Path) -> list[str]:
    known.write_text(f"[127.0.0.1]:{port} {host_key_line}\n")
    return ["-F", "/dev/null", "-o", f"UserKnownHostsFile={known}", "-o",
            "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-q",
            "-i", str(key), "-P", str(port)]


async def sandbox_server(work: Path) -> Server:
    import asyncssh

    from gputui.config import Config
    from gputui.providers.base import CreateRequest
    from gputui.providers.sandbox import kill_instance_processes
    from gputui.services.hub import Services
    from gputui.store import SessionStore

    home = work / "home"
    os.environ["GPUTUI_HOME"] = str(home)
    svc = Services(SessionStore(home / "state.db"), Config(), state_dir=home,
                   sandbox_boot_seconds=0)

    async def close() -> None:
        await svc.close()
        for r in (home / "sandbox" / "instances").glob("*"):
            kill_instance_processes(r, grace_s=0.5)

    server = Server("sandbox", None, [], [close])
    offer = await svc.find_offer("sandbox", "RTX 4090")
    inst = await svc.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id,
                                                            name="bench"))
    server.link = await svc.link(inst)
    await server.link.run("true")
    assert inst.ssh is not None and inst.ssh.key_path is not None
    key = home / "sandbox" / "platform" / f"{inst.id}.host_key"
    pub = asyncssh.read_private_key(str(key)).export_public_key().decode().strip()
    server.scp_opts = scp_options(inst.ssh.port, Path(inst.ssh.key_path), pub,
                                  work / "known_hosts.sandbox")
    return server


async def sshd_server(work: Path) -> Server | None:
    from tests.drill.sshd_host import SSHD, start_sshd

    if SSHD is None or os.geteuid() != 0:
        print("(OpenSSH's sshd is not installed or this is not root: the sandbox only)")
        return None
    from gputui.models import SSHEndpoint
    from gputui.remote.hostkeys import KnownHosts
    from gputui.remote.ssh import Link

    place = work / "sshd"
    place.mkdir()
    host = start_sshd(place, "Subsystem sftp internal-sftp\n")
    known = KnownHosts(place / "known_hosts")
    known.add("127.0.0.1", host.port, host.host_key)
    link = Link(SSHEndpoint(host="127.0.0.1", port=host.port, key_path=str(host.key)),
                known_hosts=known, name="sshd")

    async def close() -> None:
        await link.close()
        host.stop()

    server = Server("sshd", link, [], [close])
    await link.run("true")
    pub = host.host_key.export_public_key().decode().strip()
    server.scp_opts = scp_options(host.port, host.key, pub, place / "known_hosts.scp")
    return server


async def measure(server: Server, work: Path, sources: list[tuple[str, Path, int]],
                  repeat: int) -> list[dict[str, Any]]:
    from gputui.remote.transfer import pull, push

    link = server.link
    scp = shutil.which("scp")
    base = f"gputui-bench-{os.getpid()}"  # under the remote home; removed after each round

    async def remote_clean() -> None:
        await link.run(f"rm -rf -- {base}", timeout=600)

    async def scp_time(args: list[str]) -> float:
        assert scp is not None
        t = time.perf_counter()
        done = await asyncio.to_thread(subprocess.run, [scp, *server.scp_opts, *args],
                                       capture_output=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"scp failed: {done.stderr.decode()[-300:]}")
        return time.perf_counter() - t

    rows = []
    await link.run(f"mkdir -p -- {base}")
    conn = await link.connection()
    print(f"{server.name}: {conn.get_extra_info('server_version')}, gputui's cipher "
          f"{conn.get_extra_info('send_cipher')}", flush=True)
    for label, src, count in sources:
        name = src.name
        row: dict[str, Any] = {"server": server.name, "what": label}
        best: dict[str, float] = {}

        def keep(key: str, seconds: float, best: dict[str, float] = best) -> None:
            best[key] = min(seconds, best.get(key, seconds))

        for _ in range(repeat):
            back, scp_back = work / f"back-{name}", work / f"scp-back-{name}"
            for p in (back, scp_back):
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
            await link.run(f"mkdir -p -- {base}")
            if scp:
                keep("scp_push_s", await scp_time(["-r", str(src),
                                                   f"root@127.0.0.1:{base}/s-{name}"]))
            t = time.perf_counter()
            sent = await push(link, src, f"{base}/g-{name}")
            keep("push_s", time.perf_counter() - t)
            t = time.perf_counter()
            again = await push(link, src, f"{base}/g-{name}")
            keep("unchanged_push_s", time.perf_counter() - t)
            if scp:
                keep("scp_pull_s", await scp_time(["-r", f"root@127.0.0.1:{base}/s-{name}",
                                                   str(scp_back)]))
            t = time.perf_counter()
            came = await pull(link, f"{base}/g-{name}", back)
            keep("pull_s", time.perf_counter() - t)
            if sent.files != count or again.files != 0 or came.files != count:
                raise SystemExit(f"{server.name}, {label}: pushed {sent.files}, again "
                                 f"{again.files}, pulled {came.files}; expected {count}, 0, "
                                 f"{count}")
            # what went there and came back is the original, byte for byte
            if not same_tree(src, back) or (scp and not same_tree(src, scp_back)):
                raise SystemExit(f"{server.name}, {label}: a copy differs from the original")
            await remote_clean()
        row.update(best)
        rows.append(row)
    return rows


def ratio(r: dict[str, Any], key: str) -> str:
    return f"{r[key + '_s'] / r['scp_' + key + '_s']:.2f}" if f"scp_{key}_s" in r else "n/a"


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'server':<8} {'what':<22} {'push s':>7} {'scp s':>7} {'ratio':>6}   "
          f"{'pull s':>7} {'scp s':>7} {'ratio':>6}   {'again s':>7}")
    for r in rows:
        scp_push = f"{r['scp_push_s']:.2f}" if "scp_push_s" in r else "n/a"
        scp_pull = f"{r['scp_pull_s']:.2f}" if "scp_pull_s" in r else "n/a"
        print(f"{r['server']:<8} {r['what']:<22} {r['push_s']:>7.2f} {scp_push:>7} "
              f"{ratio(r, 'push'):>6}   {r['pull_s']:>7.2f} {scp_pull:>7} {ratio(r, 'pull'):>6}"
              f"   {r['unchanged_push_s']:>7.2f}")


async def main_async(n_files: int, size: int, repeat: int, which: str) -> int:
    work = Path(tempfile.mkdtemp(prefix="gputui-bench-"))
    servers: list[Server] = []
    try:
        small, large = work / "small", work / "large.bin"
        make_small(small, n_files)
        make_large(large, size)
        sources = [(f"{n_files} small files", small, n_files),
                   (f"one {size / (1 << 20):.0f} MiB file", large, 1)]
        if which in ("both", "sandbox"):
            servers.append(await sandbox_server(work))
        if which in ("both", "sshd"):
            found = await sshd_server(work)
            if found is not None:
                servers.append(found)
        rows = []
        for server in servers:
            rows += await measure(server, work, sources, repeat)
        print(f"best of {repeat}; ratio = gputui / scp (above 1: gputui took longer)")
        print_table(rows)
        if not shutil.which("scp"):
            print("(OpenSSH's scp is not installed: no ratios)")
        return 0
    finally:
        for server in servers:
            for step in server.cleanup:
                done = step()
                if done is not None:
                    await done
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=None, help="small files (default 1000)")
    parser.add_argument("--size", default=None, help="the large file (default 256M; 1G)")
    parser.add_argument("--repeat", type=int, default=None, help="rounds, best kept (default 3)")
    parser.add_argument("--server", choices=("both", "sandbox", "sshd"), default="both")
    parser.add_argument("--quick", action="store_true",
                        help="200 files, 64 MiB, 2 rounds (flags given still win)")
    args = parser.parse_args()
    files = args.files if args.files is not None else (200 if args.quick else 1000)
    size = parse_size(args.size if args.size is not None else ("64M" if args.quick else "256M"))
    repeat = args.repeat if args.repeat is not None else (2 if args.quick else 3)
    return asyncio.run(main_async(files, size, max(1, repeat), args.server))


if __name__ == "__main__":
    sys.exit(main())
