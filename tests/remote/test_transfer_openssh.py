"""push / pull against servers other than the sandbox's: the system's OpenSSH sshd (a real
host's SFTP server), and an SFTP server that cannot set attributes on an open file."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from gputui.models import SSHEndpoint
from gputui.remote.hostkeys import KnownHosts
from gputui.remote.ssh import Link
from gputui.remote.transfer import pull, push
from tests.drill.sshd_host import needs_sshd, start_sshd


def make_tree(root: Path) -> dict[str, bytes]:
    files = {"run.sh": b"#!/bin/sh\necho hi\n", "data/big.bin": os.urandom(3 * 1024 * 1024 + 17),
             "data/small.txt": b"small\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "run.sh").chmod(0o755)  # a script stays executable
    (root / "data" / "small.txt").chmod(0o640)
    os.utime(root / "data" / "big.bin", (1_700_000_000, 1_700_000_000))
    return files


def same_files(src: Path, dest: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data, rel
        assert (dest / rel).stat().st_mode & 0o777 == (src / rel).stat().st_mode & 0o777, rel
        assert int((dest / rel).stat().st_mtime) == int((src / rel).stat().st_mtime), rel
    left = [p.name for p in dest.rglob("*") if p.name.endswith(".gputui-part")]
    assert left == []


@needs_sshd
async def test_push_and_pull_with_openssh_sshd_keep_bytes_modes_and_times(tmp_path: Path):
    host = start_sshd(tmp_path, "Subsystem sftp internal-sftp\n")
    known = KnownHosts(tmp_path / "known_hosts")
    known.add("127.0.0.1", host.port, host.host_key)
    link = Link(SSHEndpoint(host="127.0.0.1", port=host.port, key_path=str(host.key)),
                known_hosts=known, name="real-host")
    src, remote, back = tmp_path / "proj", tmp_path / "remote" / "proj", tmp_path / "back"
    files = make_tree(src)
    try:
        sent = await push(link, src, str(remote))
        assert sent.files == 3 and sent.bytes == sum(len(d) for d in files.values())
        same_files(src, remote, files)
        assert (await push(link, src, str(remote))).files == 0  # nothing changed
        came = await pull(link, str(remote), back)
        assert came.files == 3
        for rel, data in files.items():
            assert (back / rel).read_bytes() == data
        # AES-GCM is what this link speaks with OpenSSH (chacha20 costs asyncssh ~2x the time)
        conn = await link.connection()
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
    finally:
        await link.close()
        host.stop()


async def test_a_server_that_cannot_set_attributes_on_a_handle_gets_them_by_path(
        tmp_path: Path):
    """Permissions and times go on the open file, sent with its close; a server that does not
    do that for a handle gets them by path, and the file is complete under its real name."""
    served = tmp_path / "served"
    served.mkdir()
    refused: list[bytes] = []

    class NoFsetstat(asyncssh.SFTPServer):
        def __init__(self, chan: asyncssh.SSHServerChannel) -> None:
            super().__init__(chan, chroot=str(served).encode())

        def fsetstat(self, file_obj: object, attrs: asyncssh.SFTPAttrs) -> None:
            refused.append(b"fsetstat")
            raise asyncssh.SFTPOpUnsupported("fsetstat not supported")

    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "client").write_bytes(client_key.export_private_key("openssh"))
    (tmp_path / "client").chmod(0o600)
    server = await asyncssh.listen(
        "127.0.0.1", 0, server_host_keys=[host_key], sftp_factory=NoFsetstat,
        authorized_client_keys=asyncssh.import_authorized_keys(
            client_key.export_public_key().decode()))
    port = server.sockets[0].getsockname()[1]
    known = KnownHosts(tmp_path / "known_hosts")
    known.add("127.0.0.1", port, host_key)
    link = Link(SSHEndpoint(host="127.0.0.1", port=port, user="u",
                            key_path=str(tmp_path / "client")), known_hosts=known, name="odd",
                agent_path=None)
    src = tmp_path / "proj"
    files = make_tree(src)
    try:
        sent = await push(link, src, "proj", home="/")
    finally:
        await link.close()
        server.close()
        await server.wait_closed()
    assert sent.files == 3 and refused  # the server did refuse, and the push went on
    same_files(src, served / "proj", files)
