"""Host vitals beside the GPUs: the remote reader and the pure parser of what it prints.

One long-lived command per instance (`vitals_command`), like the nvidia-smi stream: a POSIX
`sh` loop that, every interval, has one `awk` read /proc (stat, loadavg, meminfo, diskstats,
net/dev, uptime) and the cgroup files that say what the container may use (cpu.max or
cfs_quota, cpuset, memory.max or limit_in_bytes), and prints one line::

    V up=12.34 cpu=u,n,s,i,w,q,sq,st on=8 load=0.5,0.4,0.3 mt=<kB> ma=<kB> cq=<quota> cp=<period>
      cu=<cgroup CPU ns> cs=<cpuset> ml=<limit B> mu=<usage B> mi=<inactive file B>
      dk=sda:<sectors read>:<sectors written>,... nk=eth0:<rx B>:<tx B>,...

and, at the start and every tenth tick, the disks (`df -kP`, one `D <row>` line each) before
it. Only sh, awk, df and sleep are needed (no python3 on the instance). The counters are
turned into rates here (`VitalsParser`), so everything that decides what a figure means is
tested against captured text.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from gputui.models import DiskUse, HostSample
from gputui.sanitize import sanitize

# Every tenth tick the disks are read again (`df` is a process; disks fill in minutes).
DF_EVERY = 10

_CG = "/sys/fs/cgroup"
_FILES = (
    "/proc/uptime /proc/stat /proc/loadavg /proc/meminfo /proc/diskstats /proc/net/dev "
    f"{_CG}/cpu.max {_CG}/cpu.stat {_CG}/cpuset.cpus.effective {_CG}/memory.max "
    f"{_CG}/memory.current {_CG}/memory.stat {_CG}/cpu/cpu.cfs_quota_us "
    f"{_CG}/cpu/cpu.cfs_period_us {_CG}/cpuacct/cpuacct.usage "
    f"{_CG}/cpuset/cpuset.effective_cpus {_CG}/memory/memory.limit_in_bytes "
    f"{_CG}/memory/memory.usage_in_bytes {_CG}/memory/memory.stat"
)

# One line per tick from whichever of the files this host has (v1 or v2 cgroups, or none).
_AWK = r"""
function base(p) { sub(/.*\//, "", p); return p }
FILENAME == "/proc/uptime" { up = $1; next }
FILENAME == "/proc/stat" {
  if ($1 == "cpu") cpu = $2 "," $3 "," $4 "," $5 "," $6 "," $7 "," $8 "," ($9 == "" ? 0 : $9)
  else if ($1 ~ /^cpu[0-9]/) on++
  next
}
FILENAME == "/proc/loadavg" { load = $1 "," $2 "," $3; next }
FILENAME == "/proc/meminfo" {
  if ($1 == "MemTotal:") mt = $2; else if ($1 == "MemAvailable:") ma = $2
  next
}
FILENAME == "/proc/diskstats" {
  if ($3 !~ /^(loop|ram|zram|sr|fd|nbd)/) dk = dk (dk == "" ? "" : ",") $3 ":" $6 ":" $10
  next
}
FILENAME == "/proc/net/dev" {
  if (index($0, ":") == 0) next
  line = $0; sub(/^[ \t]*/, "", line); n = index(line, ":")
  name = substr(line, 1, n - 1); split(substr(line, n + 1), f, " ")
  if (name != "lo") nk = nk (nk == "" ? "" : ",") name ":" f[1] ":" f[9]
  next
}
{ b = base(FILENAME) }
b == "cpu.max" { cq = $1; cp = $2; next }
b == "cpu.cfs_quota_us" { cq = $1; next }
b == "cpu.cfs_period_us" { cp = $1; next }
# usage_usec in ns, as text: mawk prints a product over 2^31 as 1.23457e+14, six digits
b == "cpu.stat" { if ($1 == "usage_usec") cu = $2 "000"; next }
b == "cpuacct.usage" { cu = $1; next }
b == "cpuset.cpus.effective" || b == "cpuset.effective_cpus" { cs = $1; next }
b == "memory.max" || b == "memory.limit_in_bytes" { ml = $1; next }
b == "memory.current" || b == "memory.usage_in_bytes" { mu = $1; next }
b == "memory.stat" {
  if ($1 == "inactive_file" || $1 == "total_inactive_file") mi = $2
  next
}
END {
  printf "V up=%s cpu=%s on=%s load=%s mt=%s ma=%s cq=%s cp=%s cu=%s cs=%s ml=%s mu=%s mi=%s",
    up, cpu, on, load, mt, ma, cq, cp, cu, cs, ml, mu, mi
  printf " dk=%s nk=%s\n", dk, nk
}
"""

_SCRIPT = (
    'i=${1:-1}; c=${2:-0}; n=0; F=""\n'
    f"for f in {_FILES}; do [ -r \"$f\" ] && F=\"$F $f\"; done\n"
    "while :; do\n"
    f"  if [ $((n % {DF_EVERY})) -eq 0 ]; then\n"
    "    df -kP 2>/dev/null | awk 'NR > 1 { print \"D \" $0 }' || exit 0\n"
    "  fi\n"
    f"  awk {shlex.quote(_AWK)} $F || exit 0\n"
    "  n=$((n + 1)); [ \"$c\" -gt 0 ] && [ \"$n\" -ge \"$c\" ] && exit 0\n"
    "  sleep \"$i\" || exit 0\n"
    "done\n"
)


def vitals_command(interval_ms: int, ticks: int = 0) -> str:
    """The remote command: prints a `V` line every `interval_ms` until its output closes
    (or, with `ticks`, that many lines and exits 0)."""
    seconds = max(0.1, interval_ms / 1000)
    return (f"LC_ALL=C exec sh -c {shlex.quote(_SCRIPT)} gputui-vitals "
            f"{shlex.quote(f'{seconds:g}')} {max(0, int(ticks))}")


def read_vitals(text: str) -> HostSample | None:
    """The last reading in a bounded run's output (`vitals_command(ms, ticks=2)`)."""
    parser = VitalsParser()
    last = None
    for line in text.splitlines():
        sample = parser.feed(line)
        if sample is not None:
            last = sample
    return last


def vitals_json(host: HostSample | None) -> dict[str, object] | None:
    """The vitals for `--json` and exports: the model's fields and each disk's use in %."""
    if host is None:
        return None
    data: dict[str, object] = host.model_dump()
    data["mem_pct"] = host.mem_pct
    data["disks"] = [dict(d.model_dump(), used_pct=d.used_pct) for d in host.disks]
    return data


# ------------------------------------------------------------------------------------------
# Parsing
# ------------------------------------------------------------------------------------------

# Partitions are counted in their disk already; LVM/RAID devices (dm-, md) sit on disks too.
_PARTITION = re.compile(r"^((sd|vd|xvd|hd)[a-z]+\d+|(nvme\d+n\d+|mmcblk\d+)p\d+|dm-\d+|md\d+)$")
# Virtual links that repeat what a real interface carries.
_VIRTUAL_NET = ("veth", "docker", "br-", "virbr", "cni", "flannel", "cali", "vxlan", "tunl",
                "ifb")
# Mounts that are not where a renter's data goes.
_PSEUDO_FS = {"tmpfs", "devtmpfs", "udev", "shm", "none", "proc", "sysfs", "cgroup", "cgroup2",
              "overlay_tmp", "efivarfs", "squashfs"}
_PSEUDO_MOUNT = ("/proc", "/sys", "/dev", "/run", "/boot", "/snap", "/etc/", "/usr/",
                 "/var/lib/docker", "/var/lib/kubelet", "/mnt/sandboxing")
_SECTOR = 512
_NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge number


def _float(text: str | None) -> float | None:
    if text is None or text == "" or text == "max":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # NaN is no reading


def cpuset_count(text: str | None) -> int | None:
    """How many CPUs a cpuset list names ("0-3,8" -> 5)."""
    if not text:
        return None
    total = 0
    try:
        for part in text.split(","):
            if not part:
                continue
            if "-" in part:
                low, high = part.split("-", 1)
                if int(high) < int(low):
                    return None
                total += int(high) - int(low) + 1
            else:
                int(part)
                total += 1
    except ValueError:
        return None
    return total or None


def parse_df_row(row: str) -> DiskUse | None:
    """One `df -kP` row (header and malformed rows: None). A mount point with spaces keeps
    them (the numbers are the fields 2-4 from the left)."""
    parts = row.split()
    if len(parts) < 6 or not parts[1].isdigit() or not parts[2].isdigit() \
            or not parts[3].isdigit():
        return None
    mount = sanitize(row.split(None, 5)[5], 200)  # remote text: shown on screens and hints
    return DiskUse(mount=mount, filesystem=sanitize(parts[0], 200), size_kib=int(parts[1]),
                   used_kib=int(parts[2]), avail_kib=int(parts[3]))


def data_disks(disks: list[DiskUse]) -> list[DiskUse]:
    """The disks a renter's data lands on: `/` and data mounts, not pseudo file systems or
    files bind-mounted into a container; one mount per device (the shortest path)."""
    kept: dict[str, DiskUse] = {}
    for d in disks:
        if d.size_kib <= 0 or (d.filesystem or "") in _PSEUDO_FS:
            continue
        if d.mount != "/" and (d.mount.startswith(_PSEUDO_MOUNT)
                               or d.mount in {p.rstrip("/") for p in _PSEUDO_MOUNT}):
            continue
        key = d.filesystem or d.mount
        if key in ("overlay", "rootfs"):
            key = d.mount  # every container's overlay is named the same
        old = kept.get(key)
        if old is None or (d.mount == "/" or len(d.mount) < len(old.mount)) and old.mount != "/":
            kept[key] = d
    return sorted(kept.values(), key=lambda d: (d.mount != "/", d.mount))


@dataclass
class _Counters:
    up: float
    cpu: tuple[float, ...] | None
    cgroup_ns: float | None
    disk: tuple[float, float] | None
    net: tuple[float, float] | None


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in line.split()[1:]:
        key, sep, value = word.partition("=")
        if sep:
            out[key] = value
    return out


def _disk_totals(text: str) -> tuple[float, float] | None:
    if not text:
        return None
    read = written = 0.0
    seen = False
    for entry in text.split(","):
        parts = entry.split(":")
        if len(parts) != 3 or _PARTITION.match(parts[0]):
            continue
        r, w = _float(parts[1]), _float(parts[2])
        if r is None or w is None:
            continue
        read, written, seen = read + r * _SECTOR, written + w * _SECTOR, True
    return (read, written) if seen else None


def _net_totals(text: str) -> tuple[float, float] | None:
    if not text:
        return None
    rx = tx = 0.0
    seen = False
    for entry in text.split(","):
        parts = entry.split(":")
        if len(parts) != 3 or parts[0].startswith(_VIRTUAL_NET):
            continue
        r, t = _float(parts[1]), _float(parts[2])
        if r is None or t is None:
            continue
        rx, tx, seen = rx + r, tx + t, True
    return (rx, tx) if seen else None


def _rate(now: float | None, before: float | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0 or now < before:
        return None  # a counter that went back (a reboot, a wrap) is no rate
    return (now - before) / seconds


class VitalsParser:
    """Feed the reader's lines one by one; a `V` line gives a `HostSample` (rates from the
    previous `V` line; the first sample has none), anything else None. Lines it cannot read
    are counted in `skipped`."""

    def __init__(self) -> None:
        self._last: _Counters | None = None
        self._disks: list[DiskUse] = []
        self._pending: list[DiskUse] | None = None
        self.skipped = 0

    def feed(self, line: str) -> HostSample | None:
        line = line.strip()
        if line.startswith("D "):
            disk = parse_df_row(line[2:])
            if disk is None:
                self.skipped += 1
                return None
            if self._pending is None:
                self._pending = []
            self._pending.append(disk)
            return None
        if not line.startswith("V "):
            if line:
                self.skipped += 1
            return None
        if self._pending is not None:
            self._disks, self._pending = data_disks(self._pending), None
        return self.feed_fields(_fields(line))

    def feed_fields(self, fields: dict[str, str],
                    disks: list[DiskUse] | None = None) -> HostSample | None:
        """One reading as the `V` line's fields (`up`, `cpu`, `on`, ...: what this machine's
        reader, `LocalVitals`, gathers from /proc itself), with the disks when read anew."""
        if disks is not None:
            self._disks = data_disks(disks)
        try:
            return self._sample(fields)
        except (ValueError, TypeError, ArithmeticError):
            self.skipped += 1
            return None

    def _sample(self, f: dict[str, str]) -> HostSample | None:
        up = _float(f.get("up"))
        if up is None:
            self.skipped += 1
            return None
        cpu_text = f.get("cpu", "")
        values = [_float(x) for x in cpu_text.split(",")] if cpu_text else []
        read = tuple(v for v in values if v is not None)
        cpu = read if len(read) == len(values) >= 5 else None
        online = _float(f.get("on"))
        quota, period = _float(f.get("cq")), _float(f.get("cp"))
        cores: float | None = online
        limited = False
        if quota is not None and period and quota > 0:
            cores, limited = quota / period, True
        allowed = cpuset_count(f.get("cs"))
        if allowed is not None and (cores is None or allowed < cores):
            limited = limited or (online is None or allowed < online)
            cores = float(allowed)
        now = _Counters(up=up, cpu=cpu, cgroup_ns=_float(f.get("cu")),
                        disk=_disk_totals(f.get("dk", "")), net=_net_totals(f.get("nk", "")))
        last, self._last = self._last, now
        cpu_pct = iowait = None
        read_bps = write_bps = rx_bps = tx_bps = None
        seconds = now.up - last.up if last is not None else 0.0
        if last is not None and seconds > 0:
            if limited and now.cgroup_ns is not None and last.cgroup_ns is not None \
                    and cores and now.cgroup_ns >= last.cgroup_ns:
                used = (now.cgroup_ns - last.cgroup_ns) / 1e9
                cpu_pct = min(100.0, used / seconds / cores * 100)
            if now.cpu is not None and last.cpu is not None:
                delta = [a - b for a, b in zip(now.cpu, last.cpu, strict=False)]
                total = sum(delta)
                if total > 0 and all(d >= 0 for d in delta):
                    idle = delta[3] + delta[4]
                    iowait = delta[4] / total * 100
                    if cpu_pct is None:
                        cpu_pct = (total - idle) / total * 100
            if now.disk is not None and last.disk is not None:
                read_bps = _rate(now.disk[0], last.disk[0], seconds)
                write_bps = _rate(now.disk[1], last.disk[1], seconds)
            if now.net is not None and last.net is not None:
                rx_bps = _rate(now.net[0], last.net[0], seconds)
                tx_bps = _rate(now.net[1], last.net[1], seconds)
        load = [_float(x) for x in f.get("load", "").split(",")] if f.get("load") else []
        load += [None] * (3 - len(load))
        mem_total_kib, mem_avail_kib = _float(f.get("mt")), _float(f.get("ma"))
        mem_total = mem_total_kib / 1024 if mem_total_kib is not None else None
        mem_used = (mem_total_kib - mem_avail_kib) / 1024 \
            if mem_total_kib is not None and mem_avail_kib is not None else None
        mem_limited = False
        limit, usage = _float(f.get("ml")), _float(f.get("mu"))
        if limit is not None and 0 < limit < _NO_LIMIT and usage is not None \
                and (mem_total_kib is None or limit < mem_total_kib * 1024):
            inactive = _float(f.get("mi")) or 0.0
            mem_total = limit / 1048576
            mem_used = max(0.0, usage - inactive) / 1048576
            mem_limited = True
        return HostSample(
            cpu_pct=cpu_pct, cpu_cores=cores, cpu_limited=limited, iowait_pct=iowait,
            load1=load[0], load5=load[1], load15=load[2],
            mem_used_mib=mem_used, mem_total_mib=mem_total, mem_limited=mem_limited,
            disk_read_bps=read_bps, disk_write_bps=write_bps, net_rx_bps=rx_bps,
            net_tx_bps=tx_bps, disks=list(self._disks),
        )
