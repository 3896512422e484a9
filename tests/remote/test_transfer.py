"""push / pull over SFTP on a sandbox instance's real SSH link: ignore rules, only changed files,
temporary names, resume after a drop, and OpenSSH's own sftp/scp against the sandbox."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gputui.errors import BadInput
from gputui.providers.base import CreateRequest
from gputui.remote import transfer
from gputui.remote.transfer import IgnoreRules, RemotePathError, pull, push, remote_relpath
from gputui.services.hub import Services


async def rent(svc: Services, name: str = "box"):
    offer = await svc.find_offer("sandbox", "RTX 4090")
    req = CreateRequest(offer_id=offer.offer_id, gpu_count=1, name=svc.free_name(name))
    return await svc.create("sandbox", offer, req)


def make_project(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "train.py").write_text("print('train')\n")
    (root / "src" / "pkg" / "train.py").chmod(0o755)  # a script stays executable
    (root / "README.md").write_text("hello\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "src" / "__pycache__").mkdir()
    (root / "src" / "__pycache__" / "x.pyc").write_bytes(b"\0" * 10)
    (root / "node_modules" / "a").mkdir(parents=True)
    (root / "node_modules" / "a" / "i.js").write_text("x")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (root / "logs").mkdir()
    (root / "logs" / "old.log").write_text("old")
    (root / "notes.tmp").write_text("tmp")
    (root / ".gitignore").write_text("logs/\n*.tmp\n")


def instance_root(svc: Services, inst) -> Path:
    return svc.state_dir / "sandbox" / "instances" / inst.id


def test_ignore_rules_follow_gitignore_basics():
    rules = IgnoreRules(["# c", "*.log", "!keep.log", "build/", "/top.txt", "a/**/z", ""])
    assert rules.ignored("x/y.log", False)
    assert not rules.ignored("keep.log", False)
    assert rules.ignored("build", True) and not rules.ignored("build", False)
    assert rules.ignored("top.txt", False) and not rules.ignored("sub/top.txt", False)
    assert rules.ignored("a/b/c/z", False) and rules.ignored("a/z", False)
    for name in (".git", "__pycache__", ".venv", "node_modules"):
        assert rules.ignored(f"deep/{name}", True)


def test_remote_paths_stay_in_home_when_asked():
    home = "/home/u"
    assert remote_relpath("~/results", home) == "results"
    assert remote_relpath("/home/u/results/a", home) == "results/a"
    assert remote_relpath("$HOME/r", home) == "r"
    assert remote_relpath("/workspace/x", home) == "/workspace/x"
    with pytest.raises(RemotePathError):
        remote_relpath("/etc/passwd", home, inside_home=True)
    with pytest.raises(RemotePathError):
        remote_relpath("../other", home)


async def test_push_then_pull_round_trip_only_changed(services: Services, tmp_path: Path):
    inst = await rent(services)
    link = await services.link(inst)
    proj = tmp_path / "proj"
    make_project(proj)
    seen: list[int] = []
    first = await push(link, proj, "~/proj", progress=lambda p: seen.append(p.bytes_done))
    root = instance_root(services, inst)
    assert (root / "proj" / "src" / "pkg" / "train.py").read_text() == "print('train')\n"
    assert (root / "proj" / "data" / "big.bin").read_bytes() == (proj / "data" / "big.bin").read_bytes()
    for gone in (".git", "src/__pycache__", "node_modules", "logs", "notes.tmp"):
        assert not (root / "proj" / gone).exists(), gone
    assert first.files == 4 and first.skipped == 0  # train.py, README.md, big.bin, .gitignore
    assert first.bytes == sum(f.stat().st_size for f in (root / "proj").rglob("*") if f.is_file())
    assert seen and seen[-1] == first.bytes
    assert not list(root.rglob("*.gputui-part"))
    assert (root / "proj" / "src" / "pkg" / "train.py").stat().st_mode & 0o777 == 0o755
    assert (root / "proj" / "README.md").stat().st_mode & 0o111 == 0
    # the remote keeps the local modification time, so nothing moves the second time
    again = await push(link, proj, "~/proj")
    assert again.files == 0 and again.skipped == 4
    (proj / "README.md").write_text("changed!\n")
    third = await push(link, proj, "~/proj")
    assert third.files == 1 and third.paths == ["proj/README.md"]
    # --checksum: same size and mtime but different content is still sent
    st = (proj / "README.md").stat()
    (root / "proj" / "README.md").write_text("CHANGED!\n")
    os.utime(root / "proj" / "README.md", (st.st_atime, st.st_mtime))
    assert (await push(link, proj, "~/proj")).files == 0
    assert (await push(link, proj, "~/proj", checksum=True)).files == 1
    assert (root / "proj" / "README.md").read_text() == "changed!\n"
    # pull back into a new folder; then only what changed on the instance
    back = tmp_path / "back"
    got = await pull(link, "proj", back)
    assert (back / "data" / "big.bin").read_bytes() == (proj / "data" / "big.bin").read_bytes()
    assert got.files == 4
    assert (back / "src" / "pkg" / "train.py").stat().st_mode & 0o777 == 0o755
    (root / "proj" / "out.txt").write_text("result")
    again = await pull(link, f"{root}/proj", back)  # the shell's absolute path works too
    assert again.files == 1 and (back / "out.txt").read_text() == "result"


async def test_bad_paths_are_bad_input(services: Services, tmp_path: Path):
    inst = await rent(services)
    link = await services.link(inst)
    with pytest.raises(BadInput, match="no such file"):
        await push(link, tmp_path / "missing", "~/x")
    with pytest.raises(BadInput, match="no such file"):
        await pull(link, "nothing-here", tmp_path / "x")
    with pytest.raises(BadInput, match="outside"):
        await pull(link, "/etc", tmp_path / "x", inside_home=True)
    assert not (tmp_path / "x").exists()


async def test_interrupted_push_resumes_from_the_partial_file(services: Services, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    inst = await rent(services)
    link = await services.link(inst)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(8 * 1024 * 1024))
    root = instance_root(services, inst)
    monkeypatch.setattr(transfer, "IN_FLIGHT", 1)
    monkeypatch.setattr(transfer, "PROGRESS_EVERY", 0)
    cut = asyncio.Event()

    def progress(p: transfer.TransferProgress) -> None:
        if p.bytes_done >= 3 * 1024 * 1024 and not cut.is_set():
            cut.set()
            conn = link._conn
            assert conn is not None
            conn.abort()  # the connection drops mid-file

    summary = await push(link, big, "~/big.bin", progress=progress)
    assert cut.is_set()
    assert (root / "big.bin").read_bytes() == big.read_bytes()
    assert summary.resumed == 1
    assert summary.bytes < 2 * big.stat().st_size  # not started again from zero
    assert not list(root.glob("*.gputui-part"))


async def test_a_partial_file_never_has_the_real_name_and_is_resumed(services: Services,
                                                                     tmp_path: Path):
    inst = await rent(services)
    link = await services.link(inst)
    src = tmp_path / "model.pt"
    data = os.urandom(2 * 1024 * 1024)
    src.write_bytes(data)
    st = src.stat()
    root = instance_root(services, inst)
    # what an interrupted transfer leaves: the first half under the temporary name
    part = root / transfer._part_name("model.pt", len(data), int(st.st_mtime))
    part.write_bytes(data[: len(data) // 2])
    summary = await push(link, src, "model.pt")
    assert summary.resumed == 1 and summary.bytes == len(data) - len(data) // 2
    assert (root / "model.pt").read_bytes() == data and not part.exists()
    # and pulling: a local partial is continued the same way
    dest = tmp_path / "home"
    dest.mkdir()
    local_part = dest / transfer._part_name("model.pt", len(data), int(st.st_mtime))
    local_part.write_bytes(data[:1000])
    got = await pull(link, "model.pt", dest)
    assert got.resumed == 1 and got.bytes == len(data) - 1000
    assert (dest / "model.pt").read_bytes() == data and not local_part.exists()


@pytest.mark.skipif(shutil.which("sftp") is None or shutil.which("scp") is None,
                    reason="OpenSSH's sftp/scp not installed")
async def test_openssh_sftp_and_scp_reach_the_sandbox(services: Services, tmp_path: Path):
    inst = await rent(services)
    await services.link(inst)  # serves it, and records its host key
    assert inst.ssh is not None
    known = tmp_path / "known_hosts"
    key = (services.state_dir / "sandbox" / "platform" / f"{inst.id}.host_key")
    import asyncssh

    pub = asyncssh.read_private_key(str(key)).export_public_key().decode().strip()
    known.write_text(f"[127.0.0.1]:{inst.ssh.port} {pub}\n")
    opts = ["-F", "/dev/null", "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-i", str(inst.ssh.key_path)]
    (tmp_path / "up.txt").write_text("via scp\n")
    scp = await asyncio.to_thread(subprocess.run, ["scp", *opts, "-P", str(inst.ssh.port),
                                  str(tmp_path / "up.txt"), "root@127.0.0.1:up.txt"],
                                  capture_output=True, text=True, timeout=60)
    assert scp.returncode == 0, scp.stderr
    root = instance_root(services, inst)
    assert (root / "up.txt").read_text() == "via scp\n"
    sftp = await asyncio.to_thread(subprocess.run, ["sftp", *opts, "-P", str(inst.ssh.port), "-b", "-",
                                   "root@127.0.0.1"], input="get up.txt down.txt\nls /\n",
                                   capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert sftp.returncode == 0, sftp.stderr
    assert (tmp_path / "down.txt").read_text() == "via scp\n"


async def test_a_hostile_sftp_server_cannot_name_a_file_outside_the_copy(tmp_path: Path):
    """Names in a listing come from the instance: one with a slash, or `..`, would lead a pull
    out of its folder, so it is never listed (a real asyncssh server that lies in readdir)."""
    import asyncssh

    served = tmp_path / "remote"
    (served / "res").mkdir(parents=True)
    (served / "res" / "ok.txt").write_text("ok\n")

    class Hostile(asyncssh.SFTPServer):
        def __init__(self, chan):
            super().__init__(chan, chroot=str(served).encode())

        async def scandir(self, path):
            async for name in super().scandir(path):
                yield name
            lie = asyncssh.SFTPAttrs(type=asyncssh.FILEXFER_TYPE_REGULAR, size=3,
                                     permissions=0o100644, mtime=0)  # S_IFREG: v3 says so
            for bad_name in (b"../../escape", b"sub/../../x", b"..", b"nul\x00x"):
                yield asyncssh.SFTPName(bad_name, attrs=lie)

    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.listen(
        "127.0.0.1", 0, server_host_keys=[host_key], sftp_factory=Hostile,
        authorized_client_keys=asyncssh.import_authorized_keys(
            client_key.export_public_key().decode()))
    port = server.sockets[0].getsockname()[1]
    try:
        known = asyncssh.import_known_hosts(
            f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
        async with asyncssh.connect("127.0.0.1", port, username="u", client_keys=[client_key],
                                    known_hosts=known, config=None, agent_path=None) as conn:
            async with conn.start_sftp_client() as sftp:
                listing = await transfer._remote_files(sftp, "res", None, follow_links=True)
    finally:
        server.close()
        await server.wait_closed()
    assert not listing.is_file and [e.rel for e in listing.files] == ["ok.txt"]
    assert listing.not_copied == []


def unreadable_target(tmp_path: Path) -> Path:
    """A file outside the instance that this user cannot read: one with no permissions, or,
    for root (who reads those), a kernel file that refuses even root."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"not yours")
    secret.chmod(0)
    for path in (secret, Path("/proc/sys/vm/drop_caches")):
        try:
            with path.open("rb") as fh:
                fh.read(1)
        except PermissionError:
            return path
    pytest.skip("no file here that this user cannot read")


async def test_pull_copies_links_as_what_they_point_to(services: Services, tmp_path: Path):
    """A run writes ckpt/…, and links to it from the folder asked for: the links come home as
    the files and folders they point to, and the summary counts them."""
    inst = await rent(services)
    link = await services.link(inst)
    root = instance_root(services, inst)
    (root / "ckpt" / "step_3").mkdir(parents=True)
    (root / "ckpt" / "final.pt").write_bytes(b"weights" * 1000)
    (root / "ckpt" / "step_3" / "model.pt").write_bytes(b"step3")
    (root / "out2" / "logs").mkdir(parents=True)
    (root / "out2" / "logs" / "train.log").write_text("loss 0.1\n")
    os.symlink("../ckpt/final.pt", root / "out2" / "final.pt")
    os.symlink("../ckpt/step_3", root / "out2" / "best")  # a link to a folder
    os.symlink(str(root / "ckpt" / "final.pt"), root / "out2" / "abs.pt")  # absolute
    os.symlink("final.pt", root / "out2" / "again.pt")  # a link to a link
    dest = tmp_path / "res"
    got = await pull(link, "out2", dest)
    assert (dest / "final.pt").read_bytes() == b"weights" * 1000
    assert not (dest / "final.pt").is_symlink()
    assert (dest / "best" / "model.pt").read_bytes() == b"step3"
    assert (dest / "abs.pt").read_bytes() == b"weights" * 1000
    assert (dest / "again.pt").read_bytes() == b"weights" * 1000
    assert (dest / "logs" / "train.log").read_text() == "loss 0.1\n"
    assert got.files == 5 and got.links == 4 and got.not_copied == []
    summary = got.as_dict()
    assert summary["links"] == 4 and summary["not_copied"] == []
    # unchanged the second time, links included
    again = await pull(link, "out2", dest)
    assert again.files == 0 and again.skipped == 5 and again.skipped_links == 4
    # the folder asked for may itself be a link, and so may a single file
    os.symlink("out2", root / "latest")
    assert (await pull(link, "latest", tmp_path / "latest")).files == 5
    one = await pull(link, "out2/final.pt", tmp_path / "one.pt")
    assert one.links == 1 and (tmp_path / "one.pt").read_bytes() == b"weights" * 1000


async def test_pull_names_each_entry_that_cannot_come_and_brings_the_rest(
        services: Services, tmp_path: Path):
    inst = await rent(services)
    link = await services.link(inst)
    root = instance_root(services, inst)
    out = root / "out"
    (out / "sub").mkdir(parents=True)
    (out / "good.txt").write_text("good\n")
    os.symlink("../ckpt/missing.pt", out / "dangling.pt")
    os.symlink("..", out / "sub" / "up")  # a folder that contains the link: a cycle
    os.symlink("loop.pt", out / "loop.pt")  # a link to itself
    secret = unreadable_target(tmp_path)
    os.symlink(str(secret), out / "escape.bin")  # out of the instance, to what cannot be read
    os.mkfifo(out / "pipe")
    dest = tmp_path / "res"
    got = await pull(link, "out", dest)
    assert (dest / "good.txt").read_text() == "good\n"
    assert got.files == 1
    why = dict(got.not_copied)
    assert set(why) == {"out/dangling.pt", "out/sub/up", "out/loop.pt", "out/escape.bin",
                        "out/pipe"}, why
    assert "../ckpt/missing.pt" in why["out/dangling.pt"]
    assert "does not exist" in why["out/dangling.pt"]
    assert "cycle" in why["out/sub/up"]
    assert "cannot be followed" in why["out/loop.pt"]
    assert str(secret) in why["out/escape.bin"] and "ermission denied" in why["out/escape.bin"]
    assert "FIFO" in why["out/pipe"]
    for name in ("dangling.pt", "loop.pt", "escape.bin", "pipe", "sub/up"):
        assert not (dest / name).exists(), name
    assert not list(dest.rglob("*.gputui-part"))
    assert [d["path"] for d in got.as_dict()["not_copied"]] == sorted(why)
    # a link to a folder higher up that leads back into the pulled folder: a cycle too
    os.remove(out / "sub" / "up")
    os.symlink("../..", out / "sub" / "top")
    got = await pull(link, "out", tmp_path / "res2")
    assert "cycle" in dict(got.not_copied)["out/sub/top"]
    # the folder asked for is a dangling link: said so, nothing written
    os.symlink("nowhere", root / "gone")
    with pytest.raises(BadInput, match="a link to nowhere, which does not exist"):
        await pull(link, "gone", tmp_path / "gone")
    assert not (tmp_path / "gone").exists()


async def test_pulled_files_take_the_local_umask_never_world_writable(services: Services,
                                                                       tmp_path: Path):
    inst = await rent(services)
    link = await services.link(inst)
    root = instance_root(services, inst)
    (root / "res").mkdir()
    for name, mode in (("open.txt", 0o666), ("tool.sh", 0o777), ("mine.txt", 0o600)):
        (root / "res" / name).write_text(name)
        (root / "res" / name).chmod(mode)
    (root / "res" / "sub").mkdir(mode=0o777)
    (root / "res" / "sub" / "deep.txt").write_text("deep")
    (root / "res" / "sub" / "deep.txt").chmod(0o666)
    old = os.umask(0o077)
    try:
        got = await pull(link, "res", tmp_path / "strict")
    finally:
        os.umask(old)
    assert got.files == 4
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "strict").rglob("*")}
    assert modes == {"open.txt": 0o600, "tool.sh": 0o700, "mine.txt": 0o600, "sub": 0o700,
                     "deep.txt": 0o600}
    assert (tmp_path / "strict").stat().st_mode & 0o077 == 0  # the folder made here too
    old = os.umask(0)
    try:
        await pull(link, "res", tmp_path / "loose")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "loose").rglob("*")}
    assert modes == {"open.txt": 0o664, "tool.sh": 0o775, "mine.txt": 0o600, "sub": 0o775,
                     "deep.txt": 0o664}  # never writable by everyone, even with umask 0
    assert (tmp_path / "loose").stat().st_mode & 0o002 == 0
    assert transfer.pulled_mode(0o666, 0) & 0o002 == 0
    old = os.umask(0o027)
    try:
        assert transfer.local_umask() == 0o027
    finally:
        os.umask(old)
