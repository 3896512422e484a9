"""Transfer benchmark (issue 17), reported as ratios against OpenSSH's `scp`, not as timed tests.

    python tests/benchmarks/bench_transfer.py [--files 1000] [--size 256M]

Over one sandbox instance's real SSH link on 127.0.0.1: `gputui push`'s transfer and `pull`'s
(asyncssh SFTP, the instance's link already up) of 1,000 small files and of one large file
(256 MiB by default; `--size 1G` for the issue's 1 GiB), each against OpenSSH's `scp -r` of the
same files to the same instance (a new connection each, as a user runs it), where `scp` is
installed. Also the second push of unchanged files (what `only changed files` saves).
Ratios above 1 mean gputui took longer than scp.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


async def main_async(n_files: int, size: int) -> int:
    from gputui.config import Config
    from gputui.providers.base import CreateRequest
    from gputui.remote.transfer import pull, push
    from gputui.services.hub import Services
    from gputui.store import SessionStore

    work = Path(tempfile.mkdtemp(prefix="gputui-bench-"))
    home = work / "home"
    os.environ["GPUTUI_HOME"] = str(home)
    svc = Services(SessionStore(home / "state.db"), Config(), state_dir=home,
                   sandbox_boot_seconds=0)
    try:
        offer = await svc.find_offer("sandbox", "RTX 4090")
        inst = await svc.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id,
                                                                name="bench"))
        link = await svc.link(inst)
        await link.run("true")
        root = home / "sandbox" / "instances" / inst.id
        small, large = work / "small", work / "large.bin"
        make_small(small, n_files)
        make_large(large, size)
        scp = shutil.which("scp")
        opts: list[str] = []
        if scp and inst.ssh is not None:
            import asyncssh

            key = home / "sandbox" / "platform" / f"{inst.id}.host_key"
            pub = asyncssh.read_private_key(str(key)).export_public_key().decode().strip()
            known = work / "known_hosts"
            known.write_text(f"[127.0.0.1]:{inst.ssh.port} {pub}\n")
            opts = ["-F", "/dev/null", "-o", f"UserKnownHostsFile={known}", "-o",
                    "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-q",
                    "-i", str(inst.ssh.key_path), "-P", str(inst.ssh.port)]

        async def scp_time(args: list[str]) -> float:
            t = time.perf_counter()
            done = await asyncio.to_thread(subprocess.run, [scp, *opts, *args],  # type: ignore[list-item]
                                           capture_output=True, timeout=3600)
            if done.returncode != 0:
                raise SystemExit(f"scp failed: {done.stderr.decode()[-300:]}")
            return time.perf_counter() - t

        rows = []
        for label, src in ((f"{n_files} small files", small),
                           (f"one {size / (1 << 20):.0f} MiB file", large)):
            name = src.name
            t = time.perf_counter()
            s = await push(link, src, f"g-{name}")
            t_push = time.perf_counter() - t
            t = time.perf_counter()
            again = await push(link, src, f"g-{name}")
            t_again = time.perf_counter() - t
            back = work / f"back-{name}"
            t = time.perf_counter()
            await pull(link, f"g-{name}", back)
            t_pull = time.perf_counter() - t
            assert again.files == 0 and s.files == (n_files if src.is_dir() else 1)
            row = {"what": label, "push_s": t_push, "unchanged_push_s": t_again, "pull_s": t_pull}
            if scp and opts:
                row["scp_push_s"] = await scp_time(["-r", str(src), f"root@127.0.0.1:s-{name}"])
                back2 = work / f"scp-back-{name}"
                row["scp_pull_s"] = await scp_time(["-r", f"root@127.0.0.1:s-{name}", str(back2)])
            rows.append(row)
            for d in (root / f"g-{name}", root / f"s-{name}"):
                shutil.rmtree(d, ignore_errors=True) if d.is_dir() else d.unlink(missing_ok=True)
        print(f"{'what':<22} {'push s':>8} {'pull s':>8} {'again s':>8} "
              f"{'push/scp':>9} {'pull/scp':>9}")
        for r in rows:
            ratio_push = f"{r['push_s'] / r['scp_push_s']:.2f}" if "scp_push_s" in r else "n/a"
            ratio_pull = f"{r['pull_s'] / r['scp_pull_s']:.2f}" if "scp_pull_s" in r else "n/a"
            print(f"{r['what']:<22} {r['push_s']:>8.2f} {r['pull_s']:>8.2f} "
                  f"{r['unchanged_push_s']:>8.2f} {ratio_push:>9} {ratio_pull:>9}")
        if not scp:
            print("(OpenSSH's scp is not installed: no ratios)")
        return 0
    finally:
        await svc.close()
        from gputui.providers.sandbox import kill_instance_processes

        for r in (home / "sandbox" / "instances").glob("*"):
            kill_instance_processes(r, grace_s=0.5)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="small files (default 1000)")
    parser.add_argument("--size", default="256M", help="the large file (default 256M; 1G)")
    args = parser.parse_args()
    return asyncio.run(main_async(args.files, parse_size(args.size)))


if __name__ == "__main__":
    sys.exit(main())
