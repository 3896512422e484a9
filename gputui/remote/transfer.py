"""Files to and from an instance over SFTP, on the instance's existing SSH link.

- Ignore rules: `.git`, `__pycache__`, `.venv`, `node_modules` always; then `.gputuiignore` in
  the folder pushed, else its `.gitignore` (the common subset of gitignore's syntax: `#`
  comments, `!` negation, a trailing `/` for folders only, a leading or inner `/` anchoring the
  pattern to the folder, `*`, `?`, `[...]` and `**`).
- Only changed files move: size and modification time (whole seconds, as SFTP keeps them), or
  with `checksum=True` size and SHA-256 (the remote side hashed with `sha256sum`).
- Every file is written under a temporary name beside its target (`.NAME.SIZE-MTIME.gputui-part`)
  and renamed when complete, so an interrupted transfer never leaves a half file under the real
  name; the next transfer of the same file resumes from the partial file's length.
- A dropped link is waited out (the link reconnects by itself) and the file resumes; a full
  disk on either side stops the transfer with that reason and keeps the partial file.
- A pull brings home files: a symbolic link on the instance (to a file or a folder) is copied as
  what it points to; a link that leads nowhere, a link to a folder that contains it (a cycle), a
  file that cannot be read or one that is no file (a socket, a FIFO, a device) does not come,
  and the summary names each such entry and why (`not_copied`) while the rest comes home.
- A pulled file takes the remote's permission bits less the local umask (as scp does without
  `-p`), never writable by everyone.

Remote paths: relative paths (and `~/...`) are taken from the instance's home, which is where
an SFTP session starts on OpenSSH and on the sandbox (chrooted to the instance folder).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import posixpath
import re
import stat as statmod
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from gputui.errors import BadInput, GputuiError, os_reason
from gputui.i18n import N_, Deferred
from gputui.remote.ssh import Link, LinkClosed, SSHLayerError

__all__ = [
    "ALWAYS_IGNORED",
    "DiskFull",
    "IgnoreRules",
    "TransferError",
    "TransferProgress",
    "TransferSummary",
    "pull",
    "push",
    "remote_home",
    "remote_relpath",
]

ALWAYS_IGNORED = (".git", "__pycache__", ".venv", "node_modules")
PART_SUFFIX = ".gputui-part"
BLOCK = 1024 * 1024
IN_FLIGHT = 8  # outstanding block requests per file
FILES_AT_ONCE = 16  # files moving at the same time
RETRIES = 8  # reconnects waited out per transfer
PROGRESS_EVERY = 0.1  # seconds between progress reports


class TransferError(GputuiError):
    """A transfer failed; one line saying why."""


class DiskFull(TransferError):
    """No space left on one side; the partial file is kept for resuming."""


class RemotePathError(BadInput):
    """A remote path that is not allowed here (outside the instance's home)."""


@dataclass
class TransferProgress:
    files_total: int
    bytes_total: int
    files_done: int = 0
    bytes_done: int = 0
    current: str = ""


@dataclass
class TransferSummary:
    direction: str  # "push" | "pull"
    source: str
    target: str
    files: int = 0  # sent (changed or new)
    bytes: int = 0  # bytes moved (resumed bytes not counted twice)
    skipped: int = 0  # unchanged, not sent
    ignored: int = 0  # left out by the ignore rules
    resumed: int = 0  # files continued from a partial file
    seconds: float = 0.0
    paths: list[str] = field(default_factory=list)
    # a pull: of `files` and `skipped`, how many were reached through a symbolic link
    links: int = 0
    skipped_links: int = 0
    # a pull: entries asked for that did not come home, (path under the source, why)
    not_copied: list[tuple[str, str]] = field(default_factory=list)
    # a push: what the ignore rules left out (folders end in /), relative to the source
    ignored_paths: list[str] = field(default_factory=list)
    ignore_file: str | None = None  # a push: the folder's ignore file read (None: none)
    dry_run: bool = False  # nothing was moved: `files`, `bytes` and `paths` are what would be
    sources: list[str] = field(default_factory=list)  # a push: what moved (or would), by source

    def as_dict(self) -> dict[str, Any]:
        return {"direction": self.direction, "source": self.source, "target": self.target,
                "files": self.files, "bytes": self.bytes, "skipped": self.skipped,
                "ignored": self.ignored, "resumed": self.resumed,
                "links": self.links, "skipped_links": self.skipped_links,
                "not_copied": [{"path": p, "why": str(why)} for p, why in self.not_copied],
                "ignored_paths": list(self.ignored_paths), "dry_run": self.dry_run,
                "paths": list(self.paths), "seconds": round(self.seconds, 3)}


ProgressCallback = Callable[[TransferProgress], None]


# -- ignore rules ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    anchored: bool


def _glob_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


class IgnoreRules:
    """What a push leaves out: the fixed names, then the folder's ignore file."""

    def __init__(self, lines: Iterable[str] = (), *, source: str | None = None) -> None:
        self.source = source
        self.rules: list[_Rule] = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            line = line.removeprefix("\\")
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line
            line = line.lstrip("/")
            regex = re.compile(_glob_regex(line) + r"\Z")
            self.rules.append(_Rule(regex, negate, dir_only, anchored))

    @classmethod
    def for_folder(cls, root: Path) -> IgnoreRules:
        for name in (".gputuiignore", ".gitignore"):
            path = root / name
            if path.is_file():
                try:
                    return cls(path.read_text(encoding="utf-8", errors="replace").splitlines(),
                               source=name)
                except OSError:
                    continue
        return cls()

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether `rel` (a POSIX path relative to the root) is left out."""
        name = rel.rsplit("/", 1)[-1]
        if name in ALWAYS_IGNORED or name.endswith(PART_SUFFIX):
            return True
        result = False
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            target = rel if rule.anchored else name
            if rule.regex.match(target):
                result = not rule.negate
        return result


# -- paths -----------------------------------------------------------------------------------
async def remote_home(link: Link) -> str:
    """The instance's home folder as its shell sees it."""
    result = await link.run('printf %s "$HOME"', timeout=30)
    home = result.stdout.strip()
    if result.exit_status != 0 or not home.startswith("/"):
        raise TransferError(Deferred(N_("{name}: cannot tell the instance's home folder"),
                                     name=link.name))
    return home.rstrip("/") or "/"


def remote_relpath(path: str, home: str, *, inside_home: bool = False) -> str:
    """A remote path for SFTP: relative to the home where it is inside it (`~/x`, `x`,
    `$HOME/x`), else absolute. With `inside_home`, a path outside the home is refused."""
    text = path.strip()
    if not text:
        raise RemotePathError(Deferred(N_("the remote path is empty")))
    if text == "~" or text.startswith("~/"):
        text = text[2:] if len(text) > 1 else ""
    elif text.startswith("$HOME"):
        text = text[5:].lstrip("/")
    if text.startswith("/"):
        norm = posixpath.normpath(text)
        if norm == home or norm.startswith(home.rstrip("/") + "/"):
            return posixpath.relpath(norm, home)
        if inside_home:
            raise RemotePathError(Deferred(N_("{path}: outside the instance's home ({home})"),
                                           path=path, home=home))
        return norm
    norm = posixpath.normpath(text) if text else "."
    if norm == ".." or norm.startswith("../"):
        raise RemotePathError(Deferred(N_("{path}: outside the instance's home ({home})"),
                                       path=path, home=home))
    return norm


def _part_name(name: str, size: int, mtime: int) -> str:
    tag = f".{size}-{mtime}{PART_SUFFIX}"
    base = name[: 250 - len(tag)]
    return f".{base}{tag}"


def _mtime(value: float | None) -> int:
    return int(value or 0)


def _is_no_space(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, (asyncssh.SFTPNoSpaceOnFilesystem, asyncssh.SFTPQuotaExceeded)):
        return True
    reason = str(getattr(exc, "reason", "") or exc).lower()
    return "no space" in reason or "quota" in reason


def _reason(exc: BaseException) -> str:
    """What went wrong with a file: SFTP's reason (the server's words) or the system's."""
    if isinstance(exc, OSError) and not isinstance(exc, asyncssh.Error):
        return os_reason(exc)
    return str(getattr(exc, "reason", None) or exc)


def local_umask() -> int:
    """This process's umask, read without changing it where the system tells it (Linux); else
    set and put back at once (restrictive for that instant)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask & 0o777


def pulled_mode(remote_mode: int, umask: int) -> int:
    """A pulled file's permission bits: the remote's less the local umask (as scp without
    `-p`), always readable and writable by its owner here, never writable by everyone."""
    return ((remote_mode & 0o777 & ~umask) | 0o600) & ~0o002


def _make_dirs(path: Path) -> None:
    """`path` and the folders above it that are missing, as `mkdir -p` under the umask, but
    never writable by everyone (a umask of 0 included)."""
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o775)


class _EntryFailed(TransferError):
    """One remote file could not be read; the others go on. `why`: the reason alone."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


_LINK_ERRORS = (asyncssh.DisconnectError, asyncssh.ChannelOpenError, asyncssh.SFTPConnectionLost,
                ConnectionError, SSHLayerError, asyncssh.SFTPNoConnection)


# -- the SFTP session, reopened after a drop -------------------------------------------------
class _Session:
    def __init__(self, link: Link, wait_s: float) -> None:
        self.link = link
        self.wait_s = wait_s
        self._sftp: asyncssh.SFTPClient | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self.reconnects = 0

    async def get(self) -> asyncssh.SFTPClient:
        async with self._lock:
            if self._sftp is not None and self._conn is not None and not self._conn.is_closed():
                return self._sftp
            conn = await self.link._connection(self.wait_s)  # waits through a reconnect
            try:
                self._sftp = await conn.start_sftp_client()
            except (asyncssh.Error, OSError) as exc:
                raise TransferError(Deferred(N_("{name}: SFTP is not available: {reason}"),
                                             name=self.link.name, reason=str(exc))) from None
            self._conn = conn
            return self._sftp

    async def dropped(self, exc: BaseException) -> None:
        """After a link error: forget the session; give up when the link is closed for good."""
        if isinstance(exc, LinkClosed) or self.link.closed:
            raise TransferError(Deferred(N_("{name}: link closed during the transfer"),
                                         name=self.link.name)) from None
        self.reconnects += 1
        if self.reconnects > RETRIES:
            raise TransferError(Deferred(
                N_("{name}: the link kept dropping ({reason}); run the same command again to "
                   "resume"), name=self.link.name, reason=str(exc))) from None
        async with self._lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.exit()
            self._sftp = None
        await asyncio.sleep(min(2.0, 0.1 * self.reconnects))

    async def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.exit()
                await self._sftp.wait_closed()
            self._sftp = None


async def _retrying(session: _Session, op: Callable[[asyncssh.SFTPClient], Any]) -> Any:
    while True:
        sftp = await session.get()
        try:
            return await op(sftp)
        except _LINK_ERRORS as exc:
            await session.dropped(exc)


# -- listings --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Entry:
    rel: str
    size: int
    mtime: int
    mode: int = 0o644  # permission bits, kept on both sides (a script stays executable)
    linked: bool = False  # a pull: reached through a symbolic link on the instance
    link: str | None = None  # a pull: the entry is itself a link, to this target


def _local_files(root: Path, rules: IgnoreRules | None,
                 left_out: list[str] | None = None) -> tuple[list[_Entry], int]:
    """Files under `root` (or `root` itself), relative POSIX paths; and the count ignored (their
    paths appended to `left_out`, folders ending in /)."""
    if root.is_file():
        st = root.stat()
        return [_Entry("", st.st_size, _mtime(st.st_mtime), st.st_mode & 0o777)], 0
    files: list[_Entry] = []
    ignored = 0
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        base = "" if base == "." else base + "/"
        keep = []
        for d in sorted(dirnames):
            if rules is not None and rules.ignored(base + d, True):
                ignored += 1
                if left_out is not None:
                    left_out.append(base + d + "/")
            elif not os.path.islink(os.path.join(dirpath, d)):
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = base + name
            full = os.path.join(dirpath, name)
            if rules is not None and rules.ignored(rel, False):
                ignored += 1
                if left_out is not None:
                    left_out.append(rel)
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            if statmod.S_ISREG(st.st_mode):
                files.append(_Entry(rel, st.st_size, _mtime(st.st_mtime), st.st_mode & 0o777))
    return files, ignored


async def _remote_stat(sftp: asyncssh.SFTPClient, path: str) -> asyncssh.SFTPAttrs | None:
    try:
        return await sftp.stat(path)
    except asyncssh.SFTPNoSuchFile:
        return None


MAX_LINK_DEPTH = 40  # folder links followed on one path when the instance cannot tell real paths


@dataclass
class _Listing:
    files: list[_Entry]
    ignored: int
    is_file: bool
    not_copied: list[tuple[str, str]] = field(default_factory=list)  # (rel, why)


async def _readlink(sftp: asyncssh.SFTPClient, path: str) -> str:
    """Where a link points, as written on the instance ("?" when it cannot be read)."""
    try:
        target = await sftp.readlink(path)
    except asyncssh.SFTPError:
        return "?"
    return target if isinstance(target, str) else os.fsdecode(target)


async def _realpath(sftp: asyncssh.SFTPClient, path: str) -> str | None:
    try:
        real = await sftp.realpath(path)
    except asyncssh.SFTPError:
        return None
    return real if isinstance(real, str) else os.fsdecode(real)


def _kind_word(attrs: asyncssh.SFTPAttrs) -> Deferred:
    kind = attrs.type
    mode = attrs.permissions or 0
    if kind == asyncssh.FILEXFER_TYPE_SOCKET or statmod.S_ISSOCK(mode):
        return Deferred(N_("a socket"))
    if kind == asyncssh.FILEXFER_TYPE_FIFO or statmod.S_ISFIFO(mode):
        return Deferred(N_("a FIFO"))
    if kind in (asyncssh.FILEXFER_TYPE_CHAR_DEVICE, asyncssh.FILEXFER_TYPE_BLOCK_DEVICE) or \
            statmod.S_ISCHR(mode) or statmod.S_ISBLK(mode):
        return Deferred(N_("a device"))
    return Deferred(N_("a special file"))


def _not_a_file(attrs: asyncssh.SFTPAttrs, link: str | None) -> Deferred:
    if link is not None:
        return Deferred(N_("a link to {target}, which is not a file or folder ({kind})"),
                        target=link, kind=_kind_word(attrs))
    return Deferred(N_("not a file or folder ({kind})"), kind=_kind_word(attrs))


def _contains(outer: str, inner: str) -> bool:
    """Whether the real path `inner` is `outer` or inside it."""
    outer = outer.rstrip("/") or "/"
    return inner == outer or inner.startswith(outer if outer == "/" else outer + "/")


async def _remote_files(sftp: asyncssh.SFTPClient, root: str, rules: IgnoreRules | None,
                        *, follow_links: bool = False) -> _Listing:
    """Files under the remote `root` (or `root` itself). With `follow_links` (a pull), a link
    is listed as what it points to; entries that cannot come are in `not_copied`."""
    attrs = await _remote_stat(sftp, root)
    if attrs is None:
        return _Listing([], 0, False)
    link: str | None = None
    if attrs.type != asyncssh.FILEXFER_TYPE_DIRECTORY:
        if follow_links:
            with contextlib.suppress(asyncssh.SFTPError):
                if (await sftp.lstat(root)).type == asyncssh.FILEXFER_TYPE_SYMLINK:
                    link = await _readlink(sftp, root)
            if attrs.type != asyncssh.FILEXFER_TYPE_REGULAR:
                return _Listing([], 0, True, [("", _not_a_file(attrs, link))])
        return _Listing([_Entry("", attrs.size or 0, _mtime(attrs.mtime),
                                (attrs.permissions or 0o644) & 0o777,
                                linked=link is not None, link=link)], 0, True)
    listing = _Listing([], 0, False)
    # each folder to read: (path under root, real paths of the folders that lead to it — None
    # where the instance cannot tell —, reached through a link, folder links on the way)
    root_real = await _realpath(sftp, root) if follow_links else None
    todo: list[tuple[str, tuple[str | None, ...], bool, int]] = [("", (root_real,), False, 0)]
    while todo:
        rel_dir, chain, linked, depth = todo.pop()
        path = posixpath.join(root, rel_dir) if rel_dir else root
        try:
            names = [entry async for entry in sftp.scandir(path)]
        except (asyncssh.SFTPPermissionDenied, asyncssh.SFTPFailure,
                asyncssh.SFTPNoSuchFile) as exc:
            if not follow_links:
                raise
            listing.not_copied.append((rel_dir or ".", Deferred(
                N_("the folder cannot be read: {reason}"), reason=_reason(exc))))
            continue
        for entry in names:
            name = entry.filename if isinstance(entry.filename, str) else entry.filename.decode()
            if name in (".", "..") or "/" in name or "\x00" in name:
                continue  # never a name that leads out of the copy (a hostile SFTP server)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            attrs = entry.attrs
            link = None
            if attrs.type == asyncssh.FILEXFER_TYPE_SYMLINK:
                if not follow_links:
                    continue
                if rules is not None and rules.ignored(rel, False) and rules.ignored(rel, True):
                    listing.ignored += 1
                    continue
                full = posixpath.join(root, rel)
                link = await _readlink(sftp, full)
                try:
                    attrs = await sftp.stat(full)
                except asyncssh.SFTPNoSuchFile:
                    listing.not_copied.append((rel, Deferred(
                        N_("a link to {target}, which does not exist"), target=link)))
                    continue
                except asyncssh.SFTPError as exc:
                    listing.not_copied.append((rel, Deferred(
                        N_("a link to {target} that cannot be followed: {reason}"),
                        target=link, reason=_reason(exc))))
                    continue
            kind = attrs.type
            is_dir = kind == asyncssh.FILEXFER_TYPE_DIRECTORY
            if rules is not None and rules.ignored(rel, is_dir):
                listing.ignored += 1
                continue
            if is_dir:
                parent = chain[-1]
                if link is None:
                    real = posixpath.join(parent, name) if parent is not None else None
                    todo.append((rel, (*chain, real), linked, depth))
                    continue
                real = await _realpath(sftp, posixpath.join(root, rel))
                if real is not None and any(c is not None and _contains(real, c)
                                            for c in chain):
                    listing.not_copied.append((rel, Deferred(
                        N_("a link to {target}, a folder that contains the link: a cycle, "
                           "not followed"), target=link)))
                    continue
                if depth >= MAX_LINK_DEPTH:
                    listing.not_copied.append((rel, Deferred(
                        N_("a link to {target}: more than {count} links to folders on the way "
                           "(a cycle?), not followed"), target=link, count=MAX_LINK_DEPTH)))
                    continue
                todo.append((rel, (*chain, real), True, depth + 1))
            elif kind == asyncssh.FILEXFER_TYPE_REGULAR:
                listing.files.append(_Entry(rel, attrs.size or 0, _mtime(attrs.mtime),
                                            (attrs.permissions or 0o644) & 0o777,
                                            linked=linked or link is not None, link=link))
            elif follow_links:
                listing.not_copied.append((rel, _not_a_file(attrs, link)))
    listing.files.sort(key=lambda e: e.rel)
    listing.not_copied.sort(key=lambda p: p[0])
    return listing


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


async def _remote_sha256(link: Link, paths: list[str]) -> dict[str, str]:
    """SHA-256 of remote files (paths as SFTP sees them, relative to home), by `sha256sum`."""
    out: dict[str, str] = {}
    for i in range(0, len(paths), 500):
        batch = paths[i:i + 500]
        result = await link.run("xargs -0 sha256sum -- 2>/dev/null", timeout=600,
                                input="\0".join(batch) + "\0")
        for line in result.stdout.splitlines():
            digest, _, name = line.partition("  ")
            if len(digest) == 64:
                out[name.removeprefix("*")] = digest
    return out


# -- the copies ------------------------------------------------------------------------------
async def _set_and_close(sftp: asyncssh.SFTPClient, fh: asyncssh.SFTPClientFile, path: str,
                         attrs: asyncssh.SFTPAttrs) -> None:
    """Set a written file's permissions and times on its handle and close it, both requests
    sent at once (a server answers the requests on one handle in order, as SFTP requires): one
    round trip per file, not two. A server without attributes on a handle: by path."""
    set_done, close_done = await asyncio.gather(fh.setstat(attrs), fh.close(),
                                                return_exceptions=True)
    if isinstance(close_done, BaseException):
        raise close_done
    if isinstance(set_done, asyncssh.SFTPOpUnsupported):
        await sftp.setstat(path, attrs)
    elif isinstance(set_done, BaseException):
        raise set_done


class _Mover:
    def __init__(self, link: Link, progress: ProgressCallback | None, summary: TransferSummary,
                 totals: TransferProgress) -> None:
        self.session = _Session(link, wait_s=max(30.0, link.connect_timeout * 3))
        self.link = link
        self.progress = progress
        self.summary = summary
        self.totals = totals
        self._last_report = 0.0
        self.made_dirs: set[str] = set()
        self.umask = 0o022  # a pull: the local umask, read once when it starts

    def report(self, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if force or now - self._last_report >= PROGRESS_EVERY:
            self._last_report = now
            self.progress(self.totals)

    def moved(self, n: int) -> None:
        self.totals.bytes_done += n
        self.summary.bytes += n
        self.report()

    # push one file --------------------------------------------------------------------------
    async def put(self, local: Path, remote: str, size: int, mtime: int,
                  known_part: int | None = None, mode: int = 0o644) -> None:
        """`known_part`: the partial file's length from the listing (0: none), which saves a
        round trip per file; after a drop it is looked at again."""
        rdir, name = posixpath.split(remote)
        part = posixpath.join(rdir, _part_name(name, size, mtime))
        self.totals.current = remote
        tries = 0

        async def op(sftp: asyncssh.SFTPClient) -> None:
            nonlocal tries
            tries += 1
            if rdir and rdir not in self.made_dirs:
                await sftp.makedirs(rdir, exist_ok=True)
                self.made_dirs.add(rdir)
            if known_part is not None and tries == 1:
                offset = known_part if known_part <= size else 0
            else:
                attrs = await _remote_stat(sftp, part)
                offset = (attrs.size or 0) if attrs is not None and (attrs.size or 0) <= size else 0
            if offset:
                self.summary.resumed += 1
            attrs = asyncssh.SFTPAttrs(permissions=mode, atime=mtime, mtime=mtime)
            fh = await sftp.open(part, "r+b" if offset else "wb")
            try:
                await self._pump_up(local, fh, offset, size)
            except BaseException:
                with contextlib.suppress(Exception):
                    await fh.close()
                raise
            await _set_and_close(sftp, fh, part, attrs)
            try:
                await sftp.posix_rename(part, remote)
            except asyncssh.SFTPOpUnsupported:
                with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                    await sftp.remove(remote)
                await sftp.rename(part, remote)

        try:
            await _retrying(self.session, op)
        except (asyncssh.SFTPError, OSError) as exc:
            if _is_no_space(exc):
                raise DiskFull(Deferred(
                    N_("the instance's disk is full writing {path}; the partial file is kept — "
                       "free space and run the same command to resume"), path=remote)) from None
            raise TransferError(Deferred(N_("{path}: {reason}"), path=remote,
                                         reason=_reason(exc))) from None

    async def _pump_up(self, local: Path, fh: asyncssh.SFTPClientFile, offset: int,
                       size: int) -> None:
        sem = asyncio.Semaphore(IN_FLIGHT)
        tasks: set[asyncio.Task[None]] = set()
        failed: list[BaseException] = []

        async def write(data: bytes, at: int) -> None:
            try:
                await fh.write(data, at)
                self.moved(len(data))
            except BaseException as exc:  # reported after the loop
                failed.append(exc)
            finally:
                sem.release()

        with local.open("rb") as src:
            src.seek(offset)
            at = offset
            while at < size and not failed:
                data = src.read(min(BLOCK, size - at))
                if not data:
                    break
                await sem.acquire()
                task = asyncio.ensure_future(write(data, at))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                at += len(data)
            if tasks:
                await asyncio.gather(*tasks)
        if failed:
            raise failed[0]

    # pull one file --------------------------------------------------------------------------
    async def get(self, remote: str, local: Path, size: int, mtime: int,
                  mode: int = 0o644) -> None:
        part = local.with_name(_part_name(local.name, size, mtime))
        self.totals.current = remote

        async def op(sftp: asyncssh.SFTPClient) -> None:
            _make_dirs(part.parent)
            offset = part.stat().st_size if part.exists() else 0
            if offset > size:
                offset = 0
            if offset:
                self.summary.resumed += 1
            async with sftp.open(remote, "rb") as fh:  # first: one that cannot be read leaves
                fd = os.open(part,                       # no partial file behind
                             os.O_WRONLY | os.O_CREAT | (0 if offset else os.O_TRUNC), 0o600)
                try:
                    await self._pump_down(fh, fd, offset, size)
                finally:
                    os.close(fd)
            os.chmod(part, pulled_mode(mode, self.umask))
            os.utime(part, (mtime, mtime))
            os.replace(part, local)

        try:
            await _retrying(self.session, op)
        except asyncssh.SFTPNoSuchFile:
            raise _EntryFailed(Deferred(N_("it went away on the instance while it was copied"))
                               ) from None
        except (asyncssh.SFTPError, OSError) as exc:
            if _is_no_space(exc):
                raise DiskFull(Deferred(
                    N_("the local disk is full writing {path}; the partial file is kept — free "
                       "space and run the same command to resume"), path=local)) from None
            if isinstance(exc, asyncssh.SFTPError):  # the instance's side: this file only
                raise _EntryFailed(Deferred(N_("it cannot be read: {reason}"),
                                            reason=_reason(exc))) from None
            raise TransferError(Deferred(N_("{path}: {reason}"), path=local,
                                         reason=_reason(exc))) from None

    async def _pump_down(self, fh: asyncssh.SFTPClientFile, fd: int, offset: int,
                         size: int) -> None:
        """Read blocks in parallel; write them in order, so the partial file is always a
        prefix (what resuming relies on)."""
        at = offset
        pending: list[tuple[int, asyncio.Task[bytes]]] = []
        next_read = offset
        try:
            while at < size:
                while next_read < size and len(pending) < IN_FLIGHT:
                    n = min(BLOCK, size - next_read)
                    pending.append((next_read, asyncio.ensure_future(fh.read(n, next_read))))
                    next_read += n
                start, task = pending.pop(0)
                data = await task
                if not data:
                    raise _EntryFailed(Deferred(N_("the remote file got shorter while it was read")))
                os.pwrite(fd, data, start)
                at = start + len(data)
                self.moved(len(data))
                if len(data) < min(BLOCK, size - start):  # a short read: read the rest again
                    for _, t in pending:
                        t.cancel()
                    await asyncio.gather(*(t for _, t in pending), return_exceptions=True)
                    pending, next_read = [], at
        finally:
            for _, t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*(t for _, t in pending), return_exceptions=True)

    async def close(self) -> None:
        await self.session.close()


async def _run_all(jobs: list[Callable[[], Any]], mover: _Mover) -> None:
    queue = list(reversed(jobs))

    async def worker() -> None:
        while queue:
            job = queue.pop()
            came = await job()
            mover.totals.files_done += 1
            if came is not False:  # False: that file did not come (a pull says why)
                mover.summary.files += 1
            mover.report()

    workers = [asyncio.ensure_future(worker()) for _ in range(min(FILES_AT_ONCE, len(jobs)))]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise


# -- public ----------------------------------------------------------------------------------
async def push(link: Link, local: Path | str, remote: str, *, checksum: bool = False,
               progress: ProgressCallback | None = None, home: str | None = None,
               dry_run: bool = False) -> TransferSummary:
    """Send `local` (a file or folder) to `remote` on the instance; only what changed.
    `dry_run`: only compare — the summary says what would move (`paths`, `files`, `bytes`);
    nothing is written on the instance."""
    local = Path(local)
    if not local.exists():
        raise BadInput(Deferred(N_("{path}: no such file or folder"), path=local))
    started = time.monotonic()
    home = home or await remote_home(link)
    target = remote_relpath(remote, home)
    rules = IgnoreRules.for_folder(local) if local.is_dir() else None
    left_out: list[str] = []
    files, ignored = await asyncio.to_thread(_local_files, local, rules, left_out)
    summary = TransferSummary("push", str(local), target, ignored=ignored,
                              ignored_paths=left_out, dry_run=dry_run,
                              ignore_file=rules.source if rules is not None else None)
    totals = TransferProgress(len(files), sum(f.size for f in files))
    mover = _Mover(link, progress, summary, totals)
    try:
        async def listing(sftp: asyncssh.SFTPClient) -> tuple[list[_Entry], bool, bool]:
            attrs = await _remote_stat(sftp, target)
            is_dir = attrs is not None and attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY
            if local.is_file():
                return [], attrs is not None, is_dir
            return (await _remote_files(sftp, target, None)).files, attrs is not None, is_dir

        existing, _exists, target_is_dir = await _retrying(mover.session, listing)
        if local.is_file():
            dest = posixpath.join(target, local.name) if target_is_dir else target
            pairs = [(files[0], local, dest)]
            async def stat_dest(sftp: asyncssh.SFTPClient) -> asyncssh.SFTPAttrs | None:
                return await _remote_stat(sftp, dest)
            attrs = await _retrying(mover.session, stat_dest)
            have = {"": _Entry("", attrs.size or 0, _mtime(attrs.mtime))} if attrs else {}
        else:
            pairs = [(f, local / f.rel, posixpath.join(target, f.rel)) for f in files]
            have = {e.rel: e for e in existing}
        changed = []
        for entry, src, dest in pairs:
            old = have.get(entry.rel)
            if old is None or old.size != entry.size:
                changed.append((entry, src, dest))
            elif not checksum and old.mtime != entry.mtime:
                changed.append((entry, src, dest))
            elif checksum:
                changed.append((entry, src, dest))  # decided below by the digests
        if checksum and changed:
            same_size = [(e, s, d) for e, s, d in changed if have.get(e.rel) is not None]
            digests = await _remote_sha256(link, [d for _e, _s, d in same_size])
            unchanged = set()
            for e, s, d in same_size:
                if digests.get(d) == await asyncio.to_thread(_sha256, s):
                    unchanged.add(e.rel)
            changed = [c for c in changed if c[0].rel not in unchanged]
        summary.skipped = len(pairs) - len(changed)
        totals.files_total = len(changed)
        totals.bytes_total = sum(e.size for e, _s, _d in changed)
        summary.sources = [e.rel or local.name for e, _s, _d in changed]
        if dry_run:
            summary.files = len(changed)
            summary.bytes = totals.bytes_total
            summary.paths = [d for _e, _s, d in changed]
            summary.seconds = time.monotonic() - started
            return summary
        mover.report(force=True)
        if not local.is_file():
            mover.made_dirs.update(posixpath.dirname(posixpath.join(target, e.rel))
                                   for e in existing)
            parts = {posixpath.join(target, e.rel): e.size for e in existing
                     if e.rel.endswith(PART_SUFFIX)}

            def known(e: _Entry, d: str) -> int | None:
                rdir, name = posixpath.split(d)
                return parts.get(posixpath.join(rdir, _part_name(name, e.size, e.mtime)), 0)
        else:
            def known(e: _Entry, d: str) -> int | None:
                return None
        await _run_all([
            (lambda e=e, s=s, d=d: mover.put(s, d, e.size, e.mtime, known(e, d), e.mode))  # type: ignore[misc]
            for e, s, d in changed
        ], mover)
        summary.paths = [d for _e, _s, d in changed]
    finally:
        await mover.close()
    summary.seconds = time.monotonic() - started
    mover.report(force=True)
    return summary


async def pull(link: Link, remote: str, local: Path | str | None = None, *, checksum: bool = False,
               progress: ProgressCallback | None = None, home: str | None = None,
               inside_home: bool = False) -> TransferSummary:
    """Bring `remote` (a file or folder) home; only what changed. `local` is the copy (a file
    into an existing folder goes inside it); None: `./<name of remote>`. Links on the
    instance come as what they point to; what cannot come is in the summary's `not_copied`
    (the rest comes all the same)."""
    local = Path(local) if local is not None else None
    started = time.monotonic()
    home = home or await remote_home(link)
    source = remote_relpath(remote, home, inside_home=inside_home)
    rules = IgnoreRules()  # only the fixed names: results are often git-ignored
    summary = TransferSummary("pull", source, str(local or "."))
    totals = TransferProgress(0, 0)
    mover = _Mover(link, progress, summary, totals)
    mover.umask = local_umask()
    try:
        async def listing(sftp: asyncssh.SFTPClient) -> _Listing:
            return await _remote_files(sftp, source, rules, follow_links=True)

        found = await _retrying(mover.session, listing)
        entries, is_file = found.files, found.is_file
        summary.ignored = found.ignored
        if not entries and not is_file and not found.not_copied:
            async def dangling(sftp: asyncssh.SFTPClient) -> str | None:
                """None: it exists; "": nothing there; else the target of a dangling link."""
                if await _remote_stat(sftp, source) is not None:
                    return None
                try:
                    attrs = await sftp.lstat(source)
                except asyncssh.SFTPNoSuchFile:
                    return ""
                if attrs.type != asyncssh.FILEXFER_TYPE_SYMLINK:
                    return ""
                return await _readlink(sftp, source)

            target = await _retrying(mover.session, dangling)
            if target == "":
                raise BadInput(Deferred(N_("{path}: no such file or folder on the instance"),
                                        path=remote))
            if target is not None:
                raise BadInput(Deferred(N_("{path}: a link to {target}, which does not exist on "
                                           "the instance"), path=remote, target=target))

        def where(rel: str) -> str:
            return source if rel in ("", ".") else posixpath.join(source, rel)

        summary.not_copied = [(where(rel), why) for rel, why in found.not_copied]
        name = posixpath.basename(source.rstrip("/")) or "home"
        if local is None:
            dest_root = Path.cwd() / name
        elif is_file and local.is_dir():
            dest_root = local / name
        else:
            dest_root = local
        if is_file:
            pairs = [(e, source, dest_root) for e in entries]
        else:
            pairs = [(e, posixpath.join(source, e.rel), dest_root / e.rel) for e in entries]
        summary.target = str(dest_root)
        changed = []
        for entry, src, dest in pairs:
            try:
                st = dest.stat()
            except OSError:
                changed.append((entry, src, dest))
                continue
            if st.st_size != entry.size:
                changed.append((entry, src, dest))
            elif checksum:
                changed.append((entry, src, dest))
            elif _mtime(st.st_mtime) != entry.mtime:
                changed.append((entry, src, dest))
        if checksum and changed:
            same = [(e, s, d) for e, s, d in changed if d.exists()]
            digests = await _remote_sha256(link, [s for _e, s, _d in same])
            unchanged = set()
            for e, s, d in same:
                if digests.get(s) == await asyncio.to_thread(_sha256, d):
                    unchanged.add(e.rel)
            changed = [c for c in changed if c[0].rel not in unchanged]
        summary.skipped = len(pairs) - len(changed)
        moving = {e.rel for e, _s, _d in changed}
        summary.skipped_links = sum(1 for e, _s, _d in pairs if e.linked and e.rel not in moving)
        totals.files_total = len(changed)
        totals.bytes_total = sum(e.size for e, _s, _d in changed)
        mover.report(force=True)
        came: list[Path] = []

        async def fetch(e: _Entry, s: str, d: Path) -> bool:
            try:
                await mover.get(s, d, e.size, e.mtime, e.mode)
            except _EntryFailed as exc:
                why: str = exc.why
                if e.link is not None:
                    why = Deferred(N_("a link to {target}: {reason}"), target=e.link,
                                   reason=exc.why)
                summary.not_copied.append((where(e.rel), why))
                return False
            came.append(d)
            if e.linked:
                summary.links += 1
            return True

        await _run_all([
            (lambda e=e, s=s, d=d: fetch(e, s, d))  # type: ignore[misc]
            for e, s, d in changed
        ], mover)
        summary.paths = [str(d) for _e, _s, d in changed if d in set(came)]
        summary.not_copied.sort(key=lambda p: p[0])
    finally:
        await mover.close()
    summary.seconds = time.monotonic() - started
    mover.report(force=True)
    return summary
