"""The one session store: the single source of truth for everything the screens show.

- Durable state (instances, leases, the ledger) lives in SQLite (stdlib sqlite3, WAL, one short
  transaction per change). A second process (`gputui reap` from cron, a headless command) can
  work on the same file at once: read-modify-write changes run inside `BEGIN IMMEDIATE`.
- Telemetry lives in memory only: per instance, the latest reading per GPU, a bounded history
  of the figures the screens chart (flat float arrays), processes, the host's inventory and the
  hints — everything the Monitor draws, so screens read the store and nothing else.
- Every change is published as a typed event. Services write here; screens subscribe.
  Changes made by another process are noticed through a change log table (`poll_external`).
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gputui.errors import GputuiError, NotFound
from gputui.i18n import N_, Deferred, _
from gputui.models import (
    GpuSample,
    Hint,
    HostInventory,
    HostSample,
    Instance,
    Lease,
    LedgerEntry,
    LinkState,
    ProcessSample,
    utcnow,
)

SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
HISTORY = 300  # samples kept per GPU (5 min at 1 s)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


async def _to_thread(fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    import asyncio  # imported here: plain commands read the store without an event loop

    return await asyncio.to_thread(fn, *args, **kwargs)


class StateError(GputuiError):
    """The state file cannot be used; said in one line. The file is never overwritten."""


_FULL_CODES = {"SQLITE_FULL"}
_READONLY_PREFIX = "SQLITE_READONLY"


def write_blocked(path: Path, exc: BaseException | None = None) -> str | None:
    """Why the state folder will not take writes — "the disk is full", "the folder is
    read-only" — or None when that is not the trouble (the error is something else)."""
    import errno
    import os

    name = getattr(exc, "sqlite_errorname", "") or ""
    err_no = getattr(exc, "errno", None)
    if name in _FULL_CODES or err_no in (errno.ENOSPC, errno.EDQUOT):
        return _("the disk is full")
    if name.startswith(_READONLY_PREFIX) or err_no == errno.EROFS:
        return _("the folder is read-only")
    folder = path.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY or not os.access(folder, os.W_OK):
        return _("the folder is read-only")
    if st.f_bavail == 0 or (st.f_favail == 0 and st.f_files):
        return _("the disk is full")
    return None


# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceChanged:
    instance_id: str


@dataclass(frozen=True)
class LeaseChanged:
    instance_id: str


@dataclass(frozen=True)
class LedgerChanged:
    instance_id: str


@dataclass(frozen=True)
class TelemetryChanged:
    instance_id: str


@dataclass(frozen=True)
class LinkChanged:
    instance_id: str
    state: LinkState
    detail: str | None = None


@dataclass(frozen=True)
class QueueChanged:
    """What this process knows of an instance's jobs queue changed (services/queuewatch.py)."""

    instance_id: str


@dataclass(frozen=True)
class Notice:
    """Something a service wants the user to see (a warning, a budget alert...)."""

    text: str  # in the interface's language, as the person sees it
    severity: str = "information"  # information | warning | error
    bell: bool = False
    instance_id: str | None = None
    english: str | None = None  # the same in English, for a log (None: `text` is English)

    @property
    def log_text(self) -> str:
        """The notice for a log: English, whatever the interface's language."""
        return self.english if self.english is not None else self.text


Event = (InstanceChanged | LeaseChanged | LedgerChanged | TelemetryChanged | LinkChanged
         | QueueChanged | Notice)

_TABLE_EVENT: dict[str, type] = {
    "instances": InstanceChanged,
    "leases": LeaseChanged,
    "ledger": LedgerChanged,
}


# --- telemetry ------------------------------------------------------------------------------


class GpuHistory:
    """One GPU's last `size` readings of utilisation (%), memory in use (% of total) and power
    draw (W), as three fixed float arrays used as a ring (NaN where the GPU did not say).

    Eight bytes a figure: 512 GPUs × 300 readings is under 4 MiB, where keeping the sample
    objects took ~240 MiB that the garbage collector had to walk again and again."""

    FIELDS = ("util", "mem_pct", "power_w")

    def __init__(self, size: int = HISTORY) -> None:
        self.size = max(1, size)
        self._count = 0  # readings ever added; the next one goes to _count % size
        self._data = {f: array("d", [math.nan]) * self.size for f in self.FIELDS}

    def __len__(self) -> int:
        return min(self._count, self.size)

    def append(self, s: GpuSample) -> None:
        at = self._count % self.size
        mem = (s.memory_used_mib / s.memory_total_mib * 100
               if s.memory_used_mib is not None and s.memory_total_mib else None)
        for name, value in (("util", s.utilization_gpu), ("mem_pct", mem),
                            ("power_w", s.power_draw_w)):
            self._data[name][at] = math.nan if value is None else value
        self._count += 1

    def last(self, name: str, n: int | None = None) -> list[float | None]:
        """The newest `n` (default: all kept) values of one field, oldest first."""
        data = self._data[name]
        k = len(self) if n is None else max(0, min(n, len(self)))
        end = self._count % self.size
        start = end - k
        if start >= 0:
            values: Sequence[float] = data[start:end]
        else:
            values = data[start:] + data[:end]
        return [None if v != v else v for v in values]  # NaN -> None


@dataclass
class InstanceTelemetry:
    gpus: dict[int, GpuSample] = field(default_factory=dict)  # the latest reading per GPU
    history: dict[int, GpuHistory] = field(default_factory=dict)
    processes: list[ProcessSample] = field(default_factory=list)
    inventory: HostInventory | None = None  # `nvidia-smi -q -x` (or NVML), once per connection
    hints: tuple[Hint, ...] = ()  # what the latest readings suggest looking at
    updated: float | None = None  # monotonic time of the last sample
    skipped_lines: int = 0
    diagnosis: str | None = None
    host: HostSample | None = None  # CPU, memory, disks, network beside the GPUs (latest)
    host_updated: float | None = None  # monotonic time of `host`
    host_cpu: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def latest(self) -> list[GpuSample]:
        return [s for _, s in sorted(self.gpus.items())]


# --- the store -------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY, data TEXT NOT NULL, live INTEGER NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    instance_id TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, instance_id TEXT NOT NULL UNIQUE,
    data TEXT NOT NULL, ended REAL NOT NULL);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, key TEXT NOT NULL,
    pid INTEGER NOT NULL);
"""


# Added later: made in state files of any age (CREATE ... IF NOT EXISTS), no schema change.
_RUN_COSTS = """CREATE TABLE IF NOT EXISTS run_costs (
    instance_id TEXT NOT NULL, job_id TEXT NOT NULL, data TEXT NOT NULL, ended REAL NOT NULL,
    PRIMARY KEY (instance_id, job_id))"""

# Notifications sent (or being sent) to the renter's phone or chat, one row per event key: the
# first process to claim a key sends it; the others leave it. No URL, title or body is kept.
_NOTIFICATIONS = """CREATE TABLE IF NOT EXISTS notifications (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, instance_id TEXT, state TEXT NOT NULL,
    owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, expires REAL NOT NULL,
    detail TEXT, created REAL NOT NULL, updated REAL NOT NULL)"""

# State files open in this process (resolved path -> how many stores), see `_connect`.
_OPEN_PATHS: dict[str, int] = {}
_OPEN_LOCK = threading.Lock()


def _claim_alive(row: Any, now: float, host: str) -> bool:
    """A claims row (owner, host, pid, expires) still in force: not expired, and its process
    is there (checked where it is on this host)."""
    import os

    if row[3] <= now:
        return False
    if row[1] == host:
        try:
            os.kill(int(row[2]), 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
    return True


class InstanceNotFound(NotFound, LookupError):
    """A name or id that matches no instance (or several): the user's input, not a failure."""


class SessionStore:
    """Open with `SessionStore.open(path)` (async) or `SessionStore(path)` (sync code)."""

    def __init__(self, path: Path, *, history: int = HISTORY) -> None:
        self.path = Path(path)
        # why writes are refused ("the disk is full", "the folder is read-only"), or None
        self.read_only: str | None = None
        self._lock = threading.RLock()
        self._conn = self._connect()
        self._writes = 0  # transactions this store committed (for `version_now`)
        self._wal = (self.read_only is None
                     and str(self._query("PRAGMA journal_mode")[0][0]).lower() == "wal")
        self._listeners: list[Callable[[Event], None]] = []
        self._telemetry: dict[str, InstanceTelemetry] = {}
        self._links: dict[str, tuple[LinkState, str | None]] = {}
        self._history = history
        self._key = str(self.path.resolve())
        with _OPEN_LOCK:
            _OPEN_PATHS[self._key] = _OPEN_PATHS.get(self._key, 0) + 1
        # rows that could not be read ("instance ID" -> why), reported and skipped
        self.unreadable: dict[str, str] = {}
        self._unreadable_version: dict[str, object] = {}
        self._last_change = self._max_change()
        import os

        self._pid = os.getpid()

    # -- opening ------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path, **kw: int) -> SessionStore:
        return await _to_thread(cls, path, **kw)

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        key = str(path.resolve())
        with _OPEN_LOCK:
            open_here = _OPEN_PATHS.get(key, 0) > 0
        if open_here:
            # Already open in this process (checked then). Reading it with a plain file handle
            # now would be harmful: closing any descriptor of a file drops every POSIX lock this
            # process holds on it — SQLite's shared lock included — and another process could
            # then checkpoint and delete the WAL under the open connection.
            pass
        elif path.exists() and path.stat().st_size > 0:
            try:
                with path.open("rb") as fh:
                    head = fh.read(16)
            except OSError as exc:
                raise StateError(_("{path}: cannot read the state file: {error}").format(
                    path=path, error=exc.strerror)) from None
            if head != SQLITE_MAGIC:
                raise StateError(_(
                    "{path}: not a gputui state database (corrupt?); it was left untouched — "
                    "move it aside to start afresh").format(path=path))
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                import os

                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
            except OSError as exc:
                why = write_blocked(path, exc) or exc.strerror
                raise StateError(_("{path}: cannot create the state file: {why}").format(
                    path=path, why=why)) from None
        try:
            conn = sqlite3.connect(
                path, timeout=15, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA busy_timeout = 15000")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("PRAGMA synchronous = NORMAL")
            row = None
            with contextlib.suppress(sqlite3.OperationalError):
                row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                conn.close()
                raise StateError(_(
                    "{path}: written by a newer gputui (schema {schema}, this one knows "
                    "{known}); it was left untouched — upgrade gputui").format(
                        path=path, schema=row[0], known=SCHEMA_VERSION))
            if row is None:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            conn.execute(_RUN_COSTS)
            conn.execute(_NOTIFICATIONS)
            conn.execute("SELECT count(*) FROM instances").fetchone()
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(Exception):
                conn.close()
            reason = write_blocked(path, exc)
            if reason is None:
                raise StateError(_(
                    "{path}: the state database is unreadable ({error}); it was left "
                    "untouched").format(path=path, error=exc)) from None
            # The file is fine; the disk or the folder will not take writes. Reading works:
            # commands that only read go on, every write is refused saying why.
            conn = self._connect_read_only(reason)
        return conn

    def _connect_read_only(self, reason: str) -> sqlite3.Connection:
        from urllib.parse import quote

        path = self.path
        uri = "file:" + quote(str(path.resolve()))
        last: Exception | None = None
        # mode=ro reads a WAL database when its -shm can be used; immutable=1 reads the file
        # as it is without locks or side files (nothing can write to that disk now anyway)
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                conn = sqlite3.connect(uri + query, uri=True, timeout=15, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("SELECT count(*) FROM instances").fetchone()
            except sqlite3.DatabaseError as exc:
                last = exc
                continue
            self.read_only = reason
            return conn
        raise StateError(_("{path}: {reason}, and the state cannot be read either ({error}); "
                           "it was left untouched").format(path=path, reason=reason, error=last))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        with _OPEN_LOCK:
            left = _OPEN_PATHS.get(self._key, 0) - 1
            if left > 0:
                _OPEN_PATHS[self._key] = left
            else:
                _OPEN_PATHS.pop(self._key, None)

    # -- low level ----------------------------------------------------------------------------

    def _write_error(self, exc: Exception) -> StateError:
        why = write_blocked(self.path, exc)
        if why is not None:
            return StateError(_("{path}: cannot save the change: {why}; nothing was "
                                "changed").format(path=self.path, why=why))
        return StateError(_("{path}: cannot write state: {error}").format(path=self.path,
                                                                          error=exc))

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self.read_only is not None:
            raise StateError(_("{path}: cannot save the change: {why}; nothing was "
                               "changed").format(path=self.path, why=self.read_only))
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise self._write_error(exc) from None
            try:
                yield conn
                conn.execute("COMMIT")
                self._writes += 1
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.DatabaseError):
                    conn.execute("ROLLBACK")
                raise self._write_error(exc) from None
            except BaseException:
                with contextlib.suppress(sqlite3.DatabaseError):
                    conn.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                raise StateError(_("{path}: cannot read state: {error}").format(
                    path=self.path, error=exc)) from None

    def version_now(self) -> tuple[int, int] | None:
        """A stamp of the whole database that changes whenever anything is committed to it —
        here (`_writes`) or by another connection or process (SQLite's `data_version`) — so a
        reader can keep what it read under a stamp until the stamp moves. Cheap enough for the
        event loop (no disk read in WAL mode) and never waits: None when the connection is
        busy in another thread, the database is not in WAL mode or is open read-only, or the
        stamp cannot be read (then read as usual)."""
        if not self._wal or not self._lock.acquire(blocking=False):
            return None
        try:
            row = self._conn.execute("PRAGMA data_version").fetchone()
        except sqlite3.DatabaseError:
            return None
        finally:
            self._lock.release()
        return (self._writes, int(row[0]))

    def _load(self, model: type[M], data: str, what: str) -> M:
        try:
            return model.model_validate_json(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise StateError(_("{path}: {what}: field '{where}': {problem}").format(
                path=self.path, what=what, where=where, problem=err["msg"])) from None

    def _load_rows(self, model: type[M], rows: list[tuple[str, str]], what: str) -> list[M]:
        """Every row that can be read. A row that cannot (a status this version does not know,
        a hand edit, a newer field) is reported once, left untouched, and skipped, so one bad
        row never blocks the others: they are still listed, reaped and released."""
        out: list[M] = []
        for key, data in rows:
            try:
                out.append(self._load(model, data, f"{what} {key}"))
            except StateError as exc:
                self._unreadable(f"{what} {key}", str(exc))
        return out

    def _unreadable(self, key: str, message: str, version: object = None) -> None:
        with self._lock:
            seen = key in self.unreadable and self._unreadable_version.get(key) == version
            self.unreadable[key] = message
            self._unreadable_version[key] = version
        if not seen:
            self.notify(Deferred(N_("{problem} — skipped and left untouched"), problem=message),
                        "error")

    def report_unreadable(self, key: str, message: str, version: object = None) -> None:
        """A record kept beside the database (a jobs queue's when-done record) that cannot be
        read: reported like an unreadable row, once — again only when it has changed (another
        `version`: its size and time) and still cannot be read."""
        self._unreadable(key, message, version)

    def readable_again(self, key: str) -> None:
        """A record reported unreadable can be read now (fixed, or written anew)."""
        with self._lock:
            self.unreadable.pop(key, None)
            self._unreadable_version.pop(key, None)

    def _log_change(self, conn: sqlite3.Connection, table: str, key: str) -> None:
        conn.execute(
            "INSERT INTO changes(tbl, key, pid) VALUES (?, ?, ?)", (table, key, self._pid)
        )

    def _max_change(self) -> int:
        row = self._query("SELECT coalesce(max(seq), 0) FROM changes")
        return int(row[0][0])

    # -- events -------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def emit(self, event: Event) -> None:
        for listener in list(self._listeners):
            listener(event)

    def poll_external(self) -> list[Event]:
        """Publish changes that another process committed since the last look."""
        rows = self._query(
            "SELECT seq, tbl, key, pid FROM changes WHERE seq > ? ORDER BY seq",
            (self._last_change,),
        )
        events: list[Event] = []
        seen: set[tuple[str, str]] = set()
        for seq, table, key, pid in rows:
            self._last_change = max(self._last_change, seq)
            if pid == self._pid or (table, key) in seen:
                continue
            seen.add((table, key))
            events.append(_TABLE_EVENT[table](key))
        for ev in events:
            self.emit(ev)
        return events

    # -- instances (sync core) -----------------------------------------------------------------

    def put_instance_sync(self, inst: Instance) -> Instance:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO instances(id, data, live, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET data=excluded.data, live=excluded.live, "
                "updated=excluded.updated",
                (inst.id, inst.model_dump_json(), int(inst.status.live), time.time()),
            )
            self._log_change(conn, "instances", inst.id)
        self.emit(InstanceChanged(inst.id))
        return inst

    def update_instance_sync(self, instance_id: str, change: Callable[[Instance], Instance | None]) -> Instance:
        """Read, change and write one instance in one transaction (safe across processes)."""
        with self._tx() as conn:
            row = conn.execute("SELECT data FROM instances WHERE id=?", (instance_id,)).fetchone()
            if row is None:
                raise KeyError(instance_id)
            inst = self._load(Instance, row[0], f"instance {instance_id}")
            new = change(inst) or inst
            conn.execute(
                "UPDATE instances SET data=?, live=?, updated=? WHERE id=?",
                (new.model_dump_json(), int(new.status.live), time.time(), instance_id),
            )
            self._log_change(conn, "instances", instance_id)
        self.emit(InstanceChanged(instance_id))
        return new

    def get_instance_sync(self, instance_id: str) -> Instance | None:
        rows = self._query("SELECT data FROM instances WHERE id=?", (instance_id,))
        return self._load(Instance, rows[0][0], f"instance {instance_id}") if rows else None

    def instances_sync(self, *, live_only: bool = False) -> list[Instance]:
        sql = "SELECT id, data FROM instances"
        if live_only:
            sql += " WHERE live=1"
        rows = self._query(sql)
        out = self._load_rows(Instance, rows, "instance")
        out.sort(key=lambda i: i.created_at)
        return out

    def find_instance_sync(self, name_or_id: str) -> Instance:
        """By id, or by name among live instances (then among all)."""
        items = self.instances_sync()
        for inst in items:
            if inst.id == name_or_id:
                return inst
        for pool in ([i for i in items if i.status.live], items):
            named = [i for i in pool if i.name == name_or_id]
            if len(named) == 1:
                return named[0]
            if len(named) > 1:
                ids = ", ".join(i.id for i in named)
                raise InstanceNotFound(_("several instances are named {name}: use an id "
                                         "({ids})").format(name=repr(name_or_id), ids=ids))
        raise InstanceNotFound(_("no instance named {name} (see `gputui instances`)").format(
            name=repr(name_or_id)))

    # -- leases ----------------------------------------------------------------------------------

    def put_lease_sync(self, lease: Lease) -> Lease:
        lease = lease.model_copy(update={"updated_at": utcnow()})
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO leases(instance_id, data, updated) VALUES (?, ?, ?) "
                "ON CONFLICT(instance_id) DO UPDATE SET data=excluded.data, updated=excluded.updated",
                (lease.instance_id, lease.model_dump_json(), time.time()),
            )
            self._log_change(conn, "leases", lease.instance_id)
        self.emit(LeaseChanged(lease.instance_id))
        return lease

    def update_lease_sync(self, instance_id: str, change: Callable[[Lease], Lease | None]) -> Lease:
        with self._tx() as conn:
            row = conn.execute(
                "SELECT data FROM leases WHERE instance_id=?", (instance_id,)
            ).fetchone()
            if row is None:
                raise KeyError(instance_id)
            lease = self._load(Lease, row[0], f"lease {instance_id}")
            new = (change(lease) or lease).model_copy(update={"updated_at": utcnow()})
            conn.execute(
                "UPDATE leases SET data=?, updated=? WHERE instance_id=?",
                (new.model_dump_json(), time.time(), instance_id),
            )
            self._log_change(conn, "leases", instance_id)
        self.emit(LeaseChanged(instance_id))
        return new

    def get_lease_sync(self, instance_id: str) -> Lease | None:
        rows = self._query("SELECT data FROM leases WHERE instance_id=?", (instance_id,))
        return self._load(Lease, rows[0][0], f"lease {instance_id}") if rows else None

    def leases_sync(self) -> list[Lease]:
        rows = self._query("SELECT instance_id, data FROM leases")
        return self._load_rows(Lease, rows, "lease")

    # -- ledger ------------------------------------------------------------------------------------

    def end_instance_sync(self, instance_id: str, entry: LedgerEntry, ended: Instance) -> bool:
        """Mark an instance ended and write its ledger entry, atomically and only once.

        Returns False when another process already recorded the end.
        """
        with self._tx() as conn:
            exists = conn.execute(
                "SELECT 1 FROM ledger WHERE instance_id=?", (instance_id,)
            ).fetchone()
            if exists:
                return False
            conn.execute(
                "INSERT INTO ledger(instance_id, data, ended) VALUES (?, ?, ?)",
                (instance_id, entry.model_dump_json(), entry.ended_at.timestamp()),
            )
            conn.execute(
                "UPDATE instances SET data=?, live=0, updated=? WHERE id=?",
                (ended.model_dump_json(), time.time(), instance_id),
            )
            self._log_change(conn, "ledger", instance_id)
            self._log_change(conn, "instances", instance_id)
        self.emit(LedgerChanged(instance_id))
        self.emit(InstanceChanged(instance_id))
        return True

    def amend_ledger_sync(self, entry: LedgerEntry, ended: Instance) -> None:
        """Correct an ended instance's ledger entry (one written off that turns out to have run)."""
        with self._tx() as conn:
            conn.execute("UPDATE ledger SET data=?, ended=? WHERE instance_id=?",
                         (entry.model_dump_json(), entry.ended_at.timestamp(), entry.instance_id))
            conn.execute("UPDATE instances SET data=?, live=0, updated=? WHERE id=?",
                         (ended.model_dump_json(), time.time(), ended.id))
            self._log_change(conn, "ledger", entry.instance_id)
            self._log_change(conn, "instances", ended.id)
        self.emit(LedgerChanged(entry.instance_id))
        self.emit(InstanceChanged(ended.id))

    def ledger_sync(self) -> list[LedgerEntry]:
        rows = self._query("SELECT instance_id, data FROM ledger ORDER BY ended")
        return self._load_rows(LedgerEntry, rows, "ledger entry")

    # -- release claims (two processes never release one instance at once) ----------------------

    def claim_release_sync(self, instance_id: str, owner: str, ttl_s: float = 300.0) -> bool:
        """Claim the right to release an instance. False while another owner's claim is fresh
        (the console and the daemon each tick over the same leases). A claim lapses after
        `ttl_s` (its holder crashed), or at once if its holder's process on this host is gone."""
        import socket

        host = socket.gethostname()
        now = time.time()
        with self._tx() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS claims (instance_id TEXT PRIMARY KEY, "
                         "owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, "
                         "expires REAL NOT NULL)")
            row = conn.execute("SELECT owner, host, pid, expires FROM claims WHERE instance_id=?",
                               (instance_id,)).fetchone()
            if row is not None and row[0] != owner and _claim_alive(row, now, host):
                return False
            conn.execute("INSERT INTO claims(instance_id, owner, host, pid, expires) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT(instance_id) DO UPDATE SET "
                         "owner=excluded.owner, host=excluded.host, pid=excluded.pid, "
                         "expires=excluded.expires",
                         (instance_id, owner, host, self._pid, now + ttl_s))
        return True

    def claim_held_sync(self, instance_id: str) -> bool:
        """Whether a claim on `instance_id` is held now by a process that is still there."""
        import socket

        with self._lock:
            try:
                row = self._conn.execute("SELECT owner, host, pid, expires FROM claims "
                                         "WHERE instance_id=?", (instance_id,)).fetchone()
            except sqlite3.OperationalError:  # no claims table yet: nothing was ever claimed
                return False
        return row is not None and _claim_alive(row, time.time(), socket.gethostname())

    def drop_claim_sync(self, instance_id: str, owner: str) -> None:
        with self._tx() as conn:
            with contextlib.suppress(sqlite3.OperationalError):  # no claims table yet
                conn.execute("DELETE FROM claims WHERE instance_id=? AND owner=?",
                             (instance_id, owner))

    # -- notifications (sent once across processes) ---------------------------------------------

    def claim_notification_sync(self, key: str, kind: str, instance_id: str | None, owner: str,
                                ttl_s: float = 900.0) -> bool:
        """Claim the right to send the notification `key`, as releases are claimed: True for
        the first claimer only. A claim whose holder crashed before saying it was sent (its
        process on this host is gone, or `ttl_s` passed) can be taken over; a sent (or given
        up) one never is."""
        import os
        import socket

        host = socket.gethostname()
        now = time.time()
        with self._tx() as conn:
            row = conn.execute("SELECT state, owner, host, pid, expires FROM notifications "
                               "WHERE key=?", (key,)).fetchone()
            if row is not None:
                state, holder, holder_host, pid, expires = row
                if state != "claimed" or holder == owner:
                    return False
                if expires > now:
                    alive = True
                    if holder_host == host:
                        try:
                            os.kill(int(pid), 0)
                        except ProcessLookupError:
                            alive = False
                        except OSError:
                            pass
                    if alive:
                        return False
            conn.execute(
                "INSERT INTO notifications(key, kind, instance_id, state, owner, host, pid, "
                "expires, detail, created, updated) VALUES (?, ?, ?, 'claimed', ?, ?, ?, ?, NULL, "
                "?, ?) ON CONFLICT(key) DO UPDATE SET state='claimed', owner=excluded.owner, "
                "host=excluded.host, pid=excluded.pid, expires=excluded.expires, "
                "updated=excluded.updated",
                (key, kind, instance_id, owner, host, self._pid, now + ttl_s, now, now))
        return True

    def finish_notification_sync(self, key: str, state: str, detail: str | None = None) -> None:
        """Record how a claimed notification went: "sent", "partial" or "failed" (with a
        masked detail: never a URL's secret)."""
        with self._tx() as conn:
            conn.execute("UPDATE notifications SET state=?, detail=?, updated=? WHERE key=?",
                         (state, detail, time.time(), key))

    def notifications_sync(self, instance_id: str | None = None) -> list[dict]:
        """The notifications recorded (oldest first): key, kind, instance_id, state, detail."""
        sql = "SELECT key, kind, instance_id, state, detail, created FROM notifications"
        args: tuple = ()
        if instance_id is not None:
            sql += " WHERE instance_id=?"
            args = (instance_id,)
        rows = self._query(sql + " ORDER BY created, key", args)
        return [{"key": r[0], "kind": r[1], "instance_id": r[2], "state": r[3], "detail": r[4],
                 "created": r[5]} for r in rows]

    # -- per-run costs (jobs): a breakdown of an instance's cost, never added to it ----------------

    def record_run_cost_sync(self, instance_id: str, job_id: str, data: dict,
                             ended: float) -> bool:
        """Record a finished run's cost once (False when it was recorded already)."""
        import json

        with self._tx() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO run_costs(instance_id, job_id, data, ended) "
                "VALUES (?, ?, ?, ?)", (instance_id, job_id, json.dumps(data), ended))
            if cur.rowcount:
                self._log_change(conn, "ledger", instance_id)
        if cur.rowcount:
            self.emit(LedgerChanged(instance_id))
        return bool(cur.rowcount)

    def run_costs_sync(self, instance_id: str | None = None) -> list[dict]:
        import json

        if instance_id is None:
            rows = self._query("SELECT data FROM run_costs ORDER BY ended")
        else:
            rows = self._query("SELECT data FROM run_costs WHERE instance_id=? ORDER BY ended",
                               (instance_id,))
        return [json.loads(r[0]) for r in rows]

    # -- async face --------------------------------------------------------------------------------

    async def put_instance(self, inst: Instance) -> Instance:
        return await _to_thread(self.put_instance_sync, inst)

    async def update_instance(
        self, instance_id: str, change: Callable[[Instance], Instance | None]
    ) -> Instance:
        return await _to_thread(self.update_instance_sync, instance_id, change)

    async def get_instance(self, instance_id: str) -> Instance | None:
        return await _to_thread(self.get_instance_sync, instance_id)

    async def instances(self, *, live_only: bool = False) -> list[Instance]:
        return await _to_thread(self.instances_sync, live_only=live_only)

    async def put_lease(self, lease: Lease) -> Lease:
        return await _to_thread(self.put_lease_sync, lease)

    async def update_lease(self, instance_id: str, change: Callable[[Lease], Lease | None]) -> Lease:
        return await _to_thread(self.update_lease_sync, instance_id, change)

    async def get_lease(self, instance_id: str) -> Lease | None:
        return await _to_thread(self.get_lease_sync, instance_id)

    async def leases(self) -> list[Lease]:
        return await _to_thread(self.leases_sync)

    async def end_instance(self, instance_id: str, entry: LedgerEntry, ended: Instance) -> bool:
        return await _to_thread(self.end_instance_sync, instance_id, entry, ended)

    async def amend_ledger(self, entry: LedgerEntry, ended: Instance) -> None:
        await _to_thread(self.amend_ledger_sync, entry, ended)

    async def ledger(self) -> list[LedgerEntry]:
        return await _to_thread(self.ledger_sync)

    async def claim_release(self, instance_id: str, owner: str, ttl_s: float = 300.0) -> bool:
        return await _to_thread(self.claim_release_sync, instance_id, owner, ttl_s)

    async def drop_claim(self, instance_id: str, owner: str) -> None:
        await _to_thread(self.drop_claim_sync, instance_id, owner)

    # -- telemetry and links (memory only) ---------------------------------------------------------

    def telemetry(self, instance_id: str) -> InstanceTelemetry:
        tel = self._telemetry.get(instance_id)
        if tel is None:
            tel = self._telemetry[instance_id] = InstanceTelemetry()
        return tel

    def add_samples(self, instance_id: str, samples: list[GpuSample]) -> None:
        tel = self.telemetry(instance_id)
        for s in samples:
            tel.gpus[s.index] = s
            hist = tel.history.get(s.index)
            if hist is None:
                hist = tel.history[s.index] = GpuHistory(self._history)
            hist.append(s)
        tel.updated = time.monotonic()
        tel.diagnosis = None
        self.emit(TelemetryChanged(instance_id))

    def set_processes(self, instance_id: str, processes: list[ProcessSample]) -> None:
        self.telemetry(instance_id).processes = list(processes)
        self.emit(TelemetryChanged(instance_id))

    def set_inventory(self, instance_id: str, inventory: HostInventory | None) -> None:
        tel = self.telemetry(instance_id)
        if tel.inventory != inventory:
            tel.inventory = inventory
            self.emit(TelemetryChanged(instance_id))

    def set_host(self, instance_id: str, sample: HostSample, *, quiet: bool = False) -> None:
        """The latest host vitals; `quiet`: the next GPU tick tells the screens."""
        tel = self.telemetry(instance_id)
        tel.host = sample
        tel.host_updated = time.monotonic()
        tel.host_cpu.append(sample.cpu_pct)
        if not quiet:
            self.emit(TelemetryChanged(instance_id))

    def set_hints(self, instance_id: str, hints: Sequence[Hint]) -> None:
        """Quietly: hints change with samples, whose `add_samples` tells the screens."""
        self.telemetry(instance_id).hints = tuple(hints)

    def set_diagnosis(self, instance_id: str, text: str | None) -> None:
        self.telemetry(instance_id).diagnosis = text
        self.emit(TelemetryChanged(instance_id))

    def set_link(self, instance_id: str, state: LinkState, detail: str | None = None) -> None:
        if self._links.get(instance_id) == (state, detail):
            return
        self._links[instance_id] = (state, detail)
        self.emit(LinkChanged(instance_id, state, detail))

    def link(self, instance_id: str) -> tuple[LinkState, str | None]:
        return self._links.get(instance_id, (LinkState.UNKNOWN, None))

    def notify(self, text: str, severity: str = "information", *, bell: bool = False,
               instance_id: str | None = None) -> None:
        """Tell the user (a toast in the console, a line on stderr for a command). The text is
        sanitised here: notices quote remote output and API bodies. A `Deferred` text is shown
        in the interface's language (translated now, as it is shown) and kept in English for
        a log (`Notice.log_text`)."""
        from gputui.format import stored_text
        from gputui.sanitize import sanitize

        english = sanitize(text, 1000)
        shown_text = sanitize(stored_text(text), 1000) if isinstance(text, Deferred) else english
        self.emit(Notice(shown_text, severity, bell, instance_id,
                         None if shown_text == english else english))

