"""Host vitals of this machine (the Monitor's `l`, `gputui smi --local`): the same figures the
remote reader prints, read from /proc, the cgroup files and `os.statvfs` in this process — no
process is started per tick.

`LocalVitals.read()` gathers what the remote `awk` gathers (see `vitals`) as the same fields
and hands them to a `VitalsParser`, so CPU share (of the cores a cgroup allows), memory
(cgroup-aware), disk and network rates mean exactly what they mean for an instance. The disks
are the mounts in /proc/self/mounts that hold data (`vitals.data_disks`), measured with
`statvfs` every `DF_EVERY`th reading as `df` measures them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from gputui.models import DiskUse, HostSample
from gputui.sanitize import sanitize
from gputui.services.telemetry.vitals import DF_EVERY, VitalsParser

_CG = "/sys/fs/cgroup"

# File systems that hold no one's data (what `df` leaves out, and what `data_disks` cannot
# tell from a device name alone).
_PSEUDO_TYPES = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "autofs", "fusectl", "configfs", "binfmt_misc", "hugetlbfs",
    "nsfs", "tmpfs", "devtmpfs", "ramfs", "squashfs", "efivarfs", "rpc_pipefs", "selinuxfs",
    "fuse.gvfsd-fuse", "fuse.portal", "overlay_tmp",
})


def _read(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def _first(path: str) -> str | None:
    text = _read(path, 4096)
    if text is None:
        return None
    words = text.split()
    return words[0] if words else None


def _unescape(field: str) -> str:
    """A mount point as /proc/mounts writes it (`\\040` for a space) as it is named."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            try:
                out.append(chr(int(field[i + 1:i + 4], 8)))
                i += 4
                continue
            except ValueError:
                pass
        out.append(field[i])
        i += 1
    return "".join(out)


def proc_fields(root: str = "") -> dict[str, str]:
    """This machine's `V` line fields (see `vitals`), read from `root`/proc and
    `root`/sys/fs/cgroup (`root` for tests: a copied tree)."""
    f: dict[str, str] = {}
    up = _first(root + "/proc/uptime")
    if up is not None:
        f["up"] = up
    stat = _read(root + "/proc/stat") or ""
    online = 0
    for line in stat.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "cpu":
            values = (words[1:9] + ["0"] * 8)[:8]
            f["cpu"] = ",".join(values)
        elif words[0].startswith("cpu") and words[0][3:].isdigit():
            online += 1
    if online:
        f["on"] = str(online)
    load = _read(root + "/proc/loadavg", 4096)
    if load is not None and len(load.split()) >= 3:
        f["load"] = ",".join(load.split()[:3])
    for line in (_read(root + "/proc/meminfo") or "").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "MemTotal:":
            f["mt"] = words[1]
        elif len(words) >= 2 and words[0] == "MemAvailable:":
            f["ma"] = words[1]
    disks = []
    for line in (_read(root + "/proc/diskstats") or "").splitlines():
        words = line.split()
        if len(words) >= 10 and not words[2].startswith(("loop", "ram", "zram", "sr", "fd",
                                                         "nbd")):
            disks.append(f"{words[2]}:{words[5]}:{words[9]}")
    if disks:
        f["dk"] = ",".join(disks)
    nets = []
    for line in (_read(root + "/proc/net/dev") or "").splitlines():
        name, sep, rest = line.partition(":")
        name, numbers = name.strip(), rest.split()
        if sep and name != "lo" and len(numbers) >= 9 and name and " " not in name:
            nets.append(f"{name}:{numbers[0]}:{numbers[8]}")
    if nets:
        f["nk"] = ",".join(nets)
    _cgroup_fields(root + _CG, f)
    return f


def _cgroup_fields(cg: str, f: dict[str, str]) -> None:
    """What the cgroup (v2, else v1) lets this machine's processes use, as the awk reads it."""
    cpu_max = _read(cg + "/cpu.max", 4096)
    if cpu_max is not None and len(cpu_max.split()) >= 2:
        f["cq"], f["cp"] = cpu_max.split()[:2]
    else:
        quota, period = _first(cg + "/cpu/cpu.cfs_quota_us"), _first(cg + "/cpu/cpu.cfs_period_us")
        if quota is not None:
            f["cq"] = quota
        if period is not None:
            f["cp"] = period
    for line in (_read(cg + "/cpu.stat", 65536) or "").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "usage_usec" and words[1].isdigit():
            f["cu"] = str(int(words[1]) * 1000)
    if "cu" not in f:
        usage = _first(cg + "/cpuacct/cpuacct.usage")
        if usage is not None:
            f["cu"] = usage
    for path in (cg + "/cpuset.cpus.effective", cg + "/cpuset/cpuset.effective_cpus"):
        cpus = _first(path)
        if cpus is not None:
            f["cs"] = cpus
            break
    for key, paths in (("ml", ("/memory.max", "/memory/memory.limit_in_bytes")),
                       ("mu", ("/memory.current", "/memory/memory.usage_in_bytes"))):
        for path in paths:
            value = _first(cg + path)
            if value is not None:
                f[key] = value
                break
    for path in (cg + "/memory.stat", cg + "/memory/memory.stat"):
        text = _read(path, 65536)
        if text is None:
            continue
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("inactive_file", "total_inactive_file"):
                f["mi"] = words[1]
        break


def mounted_disks(root: str = "",
                  statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> list[DiskUse]:
    """Every mounted file system that can hold data, measured as `df -kP` measures it (used:
    blocks less free blocks; available: what an ordinary user may still write)."""
    out: list[DiskUse] = []
    seen: set[str] = set()
    for line in (_read(root + "/proc/self/mounts") or "").splitlines():
        words = line.split()
        if len(words) < 3 or words[2] in _PSEUDO_TYPES:
            continue
        mount = _unescape(words[1])
        if mount in seen:
            continue
        seen.add(mount)
        try:
            st = statvfs(root + mount if root else mount)
        except OSError:
            continue  # gone, or not ours to read
        if st.f_blocks <= 0:
            continue
        unit = st.f_frsize or st.f_bsize
        out.append(DiskUse(
            mount=sanitize(mount, 200), filesystem=sanitize(_unescape(words[0]), 200),
            size_kib=st.f_blocks * unit // 1024,
            used_kib=max(0, st.f_blocks - st.f_bfree) * unit // 1024,
            avail_kib=max(0, st.f_bavail) * unit // 1024))
    return out


class LocalVitals:
    """This machine's host vitals, one `read()` a tick (the first reading has no rates: they
    need two). Call it off the event loop: `statvfs` on a hung network mount can block."""

    def __init__(self, root: str = "") -> None:
        self.root = root
        self.parser = VitalsParser()
        self._ticks = 0

    def read(self) -> HostSample | None:
        disks = mounted_disks(self.root) if self._ticks % DF_EVERY == 0 else None
        self._ticks += 1
        return self.parser.feed_fields(proc_fields(self.root), disks)


def read_local_vitals(gap_s: float = 0.5) -> HostSample | None:
    """One reading of this machine with its rates (two readings `gap_s` apart), for
    `gputui smi --local`."""
    reader = LocalVitals()
    if reader.read() is None:
        return None
    time.sleep(gap_s)
    return reader.read()
