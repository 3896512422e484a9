"""SSH key files: client key pairs (the sandbox's, Lambda's) and host keys, written 0600."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

__all__ = ["ensure_host_key", "ensure_keypair", "write_private"]


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically, mode 0600 (its folder 0700 when made here)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def ensure_host_key(path: Path | str, comment: str = "gputui-sandbox-host") -> asyncssh.SSHKey:
    """Load the host key at `path`, generating an Ed25519 one (mode 0600) the first time."""
    path = Path(path)
    if path.exists():
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    write_private(path, key.export_private_key("openssh"))
    return key


def ensure_keypair(path: Path | str, comment: str = "gputui-sandbox") -> tuple[Path, str]:
    """A client key pair at `path` (0600) and `path`.pub; returns (private path, public line)."""
    path = Path(path)
    if path.exists():
        key = asyncssh.read_private_key(str(path))
    else:
        key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
        write_private(path, key.export_private_key("openssh"))
    public = key.export_public_key("openssh").decode("ascii").strip()
    pub_path = path.with_name(path.name + ".pub")
    if not pub_path.exists() or pub_path.read_text(encoding="ascii").strip() != public:
        pub_path.write_text(public + "\n", encoding="ascii")
    return path, public
