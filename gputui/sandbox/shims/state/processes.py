"""GPU processes of an instance: one record per live process, liveness, memory in use."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .hardware import SimGpu
from .paths import (
    _read_json,
    _write_json,
    procs_dir,
    state_dir,
)

# --------------------------------------------------------------------------- processes


@dataclass
class GpuUse:
    memory_mib: int
    util: float  # target utilisation, %


@dataclass
class ProcRecord:
    pid: int
    name: str  # process_name as nvidia-smi shows it
    kind: str  # "gpu-load", "ollama", ...
    started_at: float  # unix time
    gpus: dict[int, GpuUse] = field(default_factory=dict)
    marker: str = "gpu_load"  # must occur in /proc/<pid>/cmdline
    ends_at: float | None = None
    proc_start: int | None = None  # /proc/<pid>/stat starttime, guards against PID reuse

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = {str(k): asdict(v) for k, v in self.gpus.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcRecord:
        return cls(
            pid=int(data["pid"]),
            name=str(data.get("name") or "python"),
            kind=str(data.get("kind") or "gpu-load"),
            started_at=float(data["started_at"]),
            gpus={
                int(k): GpuUse(int(v["memory_mib"]), float(v.get("util", 0)))
                for k, v in data.get("gpus", {}).items()
            },
            marker=str(data.get("marker") or ""),
            ends_at=None if data.get("ends_at") is None else float(data["ends_at"]),
            proc_start=None if data.get("proc_start") is None else int(data["proc_start"]),
        )


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks); None where unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rpartition(")")[2].split()[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int, marker: str = "", proc_start: int | None = None) -> bool:
    """A live (non-zombie) process whose cmdline contains ``marker`` and, when given, whose
    start time is ``proc_start``: survives PID reuse after a SIGKILL."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    proc = Path(f"/proc/{pid}")
    if not Path("/proc/self").exists():
        return True  # no procfs (macOS): the signal probe is all we have
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X", "x"):
        return False
    if marker and marker.encode() not in cmdline:
        return False
    if proc_start is not None:
        try:
            if int(fields[19]) != proc_start:
                return False
        except (IndexError, ValueError):
            return False
    return True


def register_process(root: Path, record: ProcRecord) -> Path:
    path = procs_dir(root) / f"{record.pid}.json"
    _write_json(path, record.to_json())
    return path


def unregister_process(root: Path, pid: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        (procs_dir(root) / f"{pid}.json").unlink()


def live_processes(root: Path, *, clean: bool = True) -> list[ProcRecord]:
    """The registered GPU processes that are really alive, oldest first. Stale records
    (dead PID, reused PID, unreadable file) are skipped and, with ``clean``, removed."""
    out: list[ProcRecord] = []
    try:
        entries = list(os.scandir(procs_dir(root)))
    except FileNotFoundError:
        return out
    for entry in entries:
        if not entry.name.endswith(".json") or entry.name.startswith("."):
            continue
        try:
            record = ProcRecord.from_json(_read_json(Path(entry.path)))
        except FileNotFoundError:
            continue  # went away while we looked
        except (OSError, ValueError, KeyError, TypeError):
            record = None
        if record is not None and pid_alive(record.pid, record.marker, record.proc_start):
            out.append(record)
        elif clean:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    out.sort(key=lambda r: (r.started_at, r.pid))
    return out


def kill_processes(root: Path, *, grace_s: float = 2.0) -> list[int]:
    """SIGTERM every live registered process, SIGKILL what is left after ``grace_s``,
    remove all records. Returns the PIDs that were signalled."""
    procs = live_processes(root)
    for record in procs:
        with contextlib.suppress(OSError):
            os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    pending = list(procs)
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = [r for r in pending if pid_alive(r.pid, r.marker, r.proc_start)]
    for record in pending:
        with contextlib.suppress(OSError):
            os.kill(record.pid, signal.SIGKILL)
    for record in procs:
        unregister_process(root, record.pid)
    return [r.pid for r in procs]


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Exclusive lock on the instance (check free memory + register, atomically)."""
    path = state_dir(root) / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def memory_in_use(procs: list[ProcRecord], index: int) -> int:
    return sum(p.gpus[index].memory_mib for p in procs if index in p.gpus)


def memory_free_mib(gpu: SimGpu, procs: list[ProcRecord]) -> int:
    return max(0, gpu.memory_total_mib - gpu.memory_reserved_mib - memory_in_use(procs, gpu.index))
