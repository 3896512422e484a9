"""SSH key files: client key pairs (the sandbox's, Lambda's) and host keys, written 0600."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import asyncssh

__all__ = ["ensure_host_key", "ensure_keypair", "write_private"]


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically, mode 0600 (its folder 0700 when made here)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
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


Stamp = tuple[int, int, int]

# path -> (its stamp, its .pub's stamp, the public line): a key pair that is asked for again
# (the sandbox's, on every call to its daemon) is read and parsed again only when either file
# changed (a new size, mtime or inode), or went.
_PAIRS: dict[str, tuple[Stamp, Stamp, str]] = {}


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def ensure_keypair(path: Path | str, comment: str = "gputui-sandbox") -> tuple[Path, str]:
    """A client key pair at `path` (0600) and `path`.pub; returns (private path, public line)."""
    path = Path(path)
    pub_path = path.with_name(path.name + ".pub")
    key_stamp, pub_stamp = _stamp(path), _stamp(pub_path)
    known = _PAIRS.get(str(path))
    if known is not None and key_stamp is not None and known[:2] == (key_stamp, pub_stamp):
        return path, known[2]
    if key_stamp is not None:
        key = asyncssh.read_private_key(str(path))
    else:
        key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
        write_private(path, key.export_private_key("openssh"))
    public = key.export_public_key("openssh").decode("ascii").strip()
    if not pub_path.exists() or pub_path.read_text(encoding="ascii").strip() != public:
        pub_path.write_text(public + "\n", encoding="ascii")
    read_under = key_stamp
    key_stamp, pub_stamp = _stamp(path), _stamp(pub_path)
    # kept only for the key file as read (not one replaced meanwhile)
    if key_stamp is not None and pub_stamp is not None and read_under in (None, key_stamp):
        _PAIRS[str(path)] = (key_stamp, pub_stamp, public)
    return path, public
