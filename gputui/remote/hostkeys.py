"""Known host keys, kept in one OpenSSH-format file in the state directory.

Policy (the same as OpenSSH's `StrictHostKeyChecking=accept-new` at best):

- a host we have never seen raises `UnknownHostKey` (with its SHA256 fingerprint) unless the
  caller said `accept_new=True`, in which case its key is appended to the file;
- a host whose key differs from the one on file raises `HostKeyChanged` and is never accepted.

Matching is asyncssh's (`asyncssh.import_known_hosts`); asyncssh asks `HostKeyVerifier` only
about a key that is not already trusted for the host.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import asyncssh

from gputui.errors import GputuiError
from gputui.i18n import N_, Deferred

__all__ = [
    "SSHLayerError",
    "UnknownHostKey",
    "HostKeyChanged",
    "HostKeyRejected",
    "KnownHosts",
    "HostKeyStore",
    "HostKeyVerifier",
    "host_pattern",
    "fingerprint",
]

DEFAULT_PORT = 22


class SSHLayerError(GputuiError):
    """Base of every error the SSH layer raises; `str()` is one line meant for the user
    (GputuiError makes it one line)."""


class UnknownHostKey(SSHLayerError):
    """The host is not in known hosts; `fingerprint` is what to show the user."""

    def __init__(self, host: str, port: int, fingerprint: str, key: asyncssh.SSHKey | None = None):
        self.host = host
        self.port = port
        self.fingerprint = fingerprint
        self.key = key  # the key seen: trust exactly this one with KnownHosts.add()
        super().__init__(Deferred(
            N_("unknown host key for {where} ({fingerprint}); accept it to connect (console "
               "prompt or --accept-new-host-key)"),
            where=_where(host, port), fingerprint=fingerprint))


class HostKeyChanged(SSHLayerError):
    """The host presented a different key than the one on file. Never accepted."""

    def __init__(self, host: str, port: int, expected_fp: str, got_fp: str,
                 user: str | None = None):
        self.host = host
        self.port = port
        self.expected_fp = expected_fp
        self.got_fp = got_fp
        where = _where(host, port)
        super().__init__(Deferred(
            N_("HOST KEY CHANGED for {where}: expected {expected}, got {got}; refusing to "
               "connect (possible man-in-the-middle, or the host was reinstalled: remove its "
               "entry from known hosts only if you know why it changed)"),
            where=f"{user}@{where}" if user else where, expected=expected_fp, got=got_fp))


class HostKeyRejected(SSHLayerError):
    """The host key could not be verified for another reason (revoked, undecodable)."""


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def host_pattern(host: str, port: int) -> str:
    """The known_hosts name for host/port, as OpenSSH writes it."""
    return host if port == DEFAULT_PORT else f"[{host}]:{port}"


def fingerprint(key: asyncssh.SSHKey) -> str:
    """`SHA256:...`, as `ssh-keygen -l` prints it."""
    return key.get_fingerprint("sha256")


class KnownHosts:
    """One known_hosts file (created 0600; its folder 0700 when we create it)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        # The file as last parsed, with the stat it was read under: every connection, and the
        # sandbox's every `prepare`, matches against it, so it is parsed again only when the
        # file changed (here, or by another process or a hand edit: a new size, mtime or inode).
        self._parsed: tuple[tuple[int, int, int], asyncssh.SSHKnownHosts] | None = None

    # -- reading -----------------------------------------------------------------------------
    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> asyncssh.SSHKnownHosts:
        stamp = self._stamp()
        cached = self._parsed
        if stamp is not None and cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        parsed = asyncssh.import_known_hosts(text)
        # kept only when the file did not change while it was read
        self._parsed = (stamp, parsed) if stamp is not None and stamp == self._stamp() else None
        return parsed

    def match(
        self, host: str, addr: str = "", port: int | None = None
    ) -> tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]]:
        """(trusted host keys, CA keys, revoked keys) for host/addr/port, asyncssh's matching.

        This is the signature asyncssh wants for a `known_hosts` callable.
        """
        port = None if port in (None, DEFAULT_PORT) else port
        result = self._load().match(host, addr, port)
        return list(result[0]), list(result[1]), list(result[2])

    def host_keys(
        self, host: str, port: int = DEFAULT_PORT, addr: str = ""
    ) -> list[asyncssh.SSHKey]:
        return self.match(host, addr, port)[0]

    # -- writing -----------------------------------------------------------------------------
    def _ensure_file(self) -> None:
        if not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
        with contextlib.suppress(OSError):
            if self.path.stat().st_mode & 0o077:
                os.chmod(self.path, 0o600)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The file to ourselves: the console, the daemon and commands add and forget keys at
        the same moments (a release forgets its host while another process connects)."""
        import fcntl

        self.path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # the lock goes with it

    def add(self, host: str, port: int, key: asyncssh.SSHKey) -> None:
        """Trust `key` for host:port (appended in one write, under the file's lock)."""
        data = key.export_public_key("openssh").decode("ascii").split()
        line = f"{host_pattern(host, port)} {data[0]} {data[1]}\n"
        self._parsed = None
        with self._locked():
            self._ensure_file()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line.encode("ascii"))
            finally:
                os.close(fd)

    def forget(self, host: str, port: int = DEFAULT_PORT) -> int:
        """Remove the entries written for exactly host:port; returns how many were removed.
        Read, filtered and replaced under the file's lock: a key another process adds
        meanwhile is kept, and two forgetting at once do not take each other's file."""
        if not self.path.exists():
            return 0
        with self._locked():
            return self._forget(host, port)

    def _forget(self, host: str, port: int) -> int:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        except FileNotFoundError:
            return 0
        pattern = host_pattern(host, port)
        keep: list[str] = []
        removed = 0
        for line in lines:
            fields = line.split()
            if fields and not fields[0].startswith(("#", "@")) and pattern in fields[0].split(","):
                removed += 1
                continue
            keep.append(line)
        if removed:
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.writelines(keep)
            self._parsed = None
            os.replace(tmp, self.path)
        return removed

    def verifier(self, accept_new: bool = False) -> HostKeyVerifier:
        return HostKeyVerifier(self, accept_new=accept_new)


HostKeyStore = KnownHosts  # the name the provider layer uses


class HostKeyVerifier:
    """The policy for one connection attempt.

    Pass `verifier.known_hosts` as asyncssh's `known_hosts=` and call `verifier.validate` from
    `SSHClient.validate_host_public_key`. After a failed connect, `verifier.error` says why.
    """

    def __init__(self, store: KnownHosts, accept_new: bool = False):
        self.store = store
        self.accept_new = accept_new
        self.error: SSHLayerError | None = None
        self.accepted: asyncssh.SSHKey | None = None

    def known_hosts(
        self, host: str, addr: str, port: int | None
    ) -> tuple[Sequence[asyncssh.SSHKey], Sequence[asyncssh.SSHKey], Sequence[asyncssh.SSHKey]]:
        return self.store.match(host, addr, port)

    def validate(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called by asyncssh for a key that is not trusted for this host."""
        got = fingerprint(key)
        trusted = self.store.host_keys(host, port, addr)
        if trusted:
            self.error = HostKeyChanged(host, port, fingerprint(trusted[0]), got)
            return False
        if self.accept_new:
            self.store.add(host, port, key)
            self.accepted = key
            return True
        self.error = UnknownHostKey(host, port, got, key)
        return False
