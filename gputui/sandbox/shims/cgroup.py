"""The instance's own CPU cgroup: what a rented container reads at /sys/fs/cgroup.

A rented GPU box is usually a container on a shared machine. Its `/proc/stat` is the whole
machine's, so a monitoring reader (gputui's host vitals, `vitals.py`) takes the container's CPU
from its cgroup: `cpu.max` (the cores it may use) and `cpu.stat` (`usage_usec`, the CPU time of
everything in it). A sandbox instance is a folder on this machine, so the machine's own cgroup
files would count everything on it (another instance's training run, a compiler, CI) as this
instance's CPU — an idle instance on a busy machine would look saturated.

So the instance gets its own, kept under ``.sandbox/cgroup/``:

- ``cpu.max``: ``<cores × 100000> 100000``, the cores this machine lets its processes use
  (written when the shims are installed);
- ``cpu.stat``: ``usage_usec``, ``user_usec``, ``system_usec`` of the instance's processes (every
  process whose environment names this instance, `GPUTUI_SANDBOX_ROOT`, as the SSH server sets
  it for each session), counted again each time it is read.

The count is a cgroup's: it only grows. A process that ends takes its time with it from
`/proc`, so the accountant keeps what it saw last of each process (``.sandbox/cgroup/acct``)
and adds the time of each one that is gone to the instance's total — unless its parent, still
running in the instance, has it now in its own children's time (`cutime`/`cstime`, once it has
waited for it). The simulation's own `nvidia-smi` and `df` (Python here, next to nothing on a
real box) are left out. Processes that start and end between two reads and whose parent is outside the
instance are missed: a second's worth at most, where the reader reads every second.

Only ``awk`` reads these: the ``bin/awk`` wrapper (`shim_text`) sees an awk given the machine's
CPU cgroup files (as the vitals reader gives it), counts the instance's CPU (one ``grep`` over
``/proc/*/environ``, one awk reading the instance's ``/proc/PID/stat``), and passes the
instance's ``cpu.max`` and ``cpu.stat`` in place of the machine's CPU files (v1 or v2). Every
other awk runs untouched. This module is stdlib only: the platform imports it to install the
wrapper; nothing here runs per read but sh, grep, awk and mv.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

CGROUP_DIR = "cgroup"  # under the instance's state folder (.sandbox/)
PERIOD_US = 100_000  # cpu.max's period, as the kernel's default
USER_HZ = 100  # /proc/PID/stat counts clock ticks of 1/100 s on every Linux architecture

# The machine's CPU cgroup files (v2, then v1) that the instance's own replace.
MACHINE_CPU_FILES = (
    "/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/*",
    "/sys/fs/cgroup/cpuacct/*", "/sys/fs/cgroup/cpu,cpuacct/*",
)

# Reads the instance's processes (their /proc/PID/environ paths, as grep lists them) and the
# last state (`state`); writes the new state and cpu.stat (`stat`) beside them as
# "<name>.<tag>.new", which the wrapper renames into place. State lines: "U <usage ticks>",
# "D <user ticks> <system ticks>" of the processes gone, and "P <pid>:<starttime> <ppid> <user>
# <system>" per process seen (its own time and its waited-for children's). Numbers are printed
# with %.0f: mawk's %d stops at 2^31.
ACCOUNTANT = r"""
BEGIN {
  while ((getline line < state) > 0) {
    n = split(line, f, " ")
    if (f[1] == "U") last = f[2] + 0
    else if (f[1] == "D" && n >= 3) { deadu = f[2] + 0; deads = f[3] + 0 }
    else if (f[1] == "P" && n >= 5) { wpar[f[2]] = f[3]; wu[f[2]] = f[4] + 0; ws[f[2]] = f[5] + 0 }
  }
  close(state)
}
{
  # a line: /proc/PID/environ of a process of the instance; its stat is read beside it
  # ("pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields are
  # taken after the last ") "; there, field k is the stat's field k + 2)
  file = $0; sub(/environ$/, "stat", file)
  got = (getline s < file); close(file)
  if (got <= 0) next  # gone since grep saw it
  pid = s; sub(/ .*/, "", pid); i = 0; rest = s
  while ((j = index(rest, ") ")) > 0) { i += j + 1; rest = substr(rest, j + 2) }
  if (i == 0) next
  n = split(substr(s, i + 1), f, " ")
  if (n < 20 || f[12] !~ /^[0-9]+$/) next
  # the simulation's own GPU tools (a real nvidia-smi or df costs next to nothing)
  cmd = file; sub(/stat$/, "cmdline", cmd); c = ""
  getline c < cmd; close(cmd)
  if (c ~ /gputui[.]sandbox[.]shims[.](nvidia_smi|df)/) next
  key = pid ":" f[20]
  par[key] = f[2]; u[key] = f[12] + f[14]; sy[key] = f[13] + f[15]; alive[pid] = 1
}
END {
  # a process gone since the last read: its time is added, unless its parent still runs in
  # the instance (then it is in the parent's children's time once the parent waited for it)
  for (k in wpar) if (!(k in par) && !(wpar[k] in alive)) { deadu += wu[k]; deads += ws[k] }
  tu = deadu; ts = deads
  for (k in par) { tu += u[k]; ts += sy[k] }
  total = tu + ts
  if (total < last) total = last
  out = state "." tag ".new"
  printf "U %.0f\nD %.0f %.0f\n", total, deadu, deads > out
  for (k in par) printf "P %s %s %.0f %.0f\n", k, par[k], u[k], sy[k] > out
  close(out)
  us = 1000000 / hz
  printf "usage_usec %.0f\nuser_usec %.0f\nsystem_usec %.0f\n", total * us, tu * us, ts * us > stat "." tag ".new"
  close(stat "." tag ".new")
}
"""


def cgroup_dir(state: Path) -> Path:
    return Path(state) / CGROUP_DIR


def machine_cores() -> int:
    """The cores this machine lets its processes use (its affinity: a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def real_awk(skip: Path) -> str | None:
    """The machine's awk, not a wrapper in `skip` (an instance's bin/)."""
    folders = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
               if p and Path(p).resolve() != Path(skip).resolve()]
    return shutil.which("awk", path=os.pathsep.join(folders + ["/usr/bin", "/bin"]))


def write_cpu_max(state: Path, cores: int) -> Path:
    """The cores the instance may use, as cgroup v2's cpu.max says it."""
    folder = cgroup_dir(state)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cpu.max"
    tmp = folder / f".cpu.max.{os.getpid()}.tmp"
    tmp.write_text(f"{cores * PERIOD_US} {PERIOD_US}\n", encoding="ascii")
    os.replace(tmp, path)
    return path


def shim_text(root: Path, state: Path, awk: str, root_env: str) -> str:
    """The instance's bin/awk: a /bin/sh wrapper (no Python per read)."""
    q = shlex.quote
    cg = cgroup_dir(state)
    machine = "|".join(MACHINE_CPU_FILES)
    return (
        "#!/bin/sh\n"
        "# gputui sandbox shim `awk` (generated by install_shims; do not edit)\n"
        "# An awk given /sys/fs/cgroup files reads this instance's own CPU cgroup (cpu.max,\n"
        "# cpu.stat: its processes' CPU) in place of the machine's; see gputui.sandbox.shims.cgroup\n"
        f"A={q(awk)}\n"
        'case " $* " in *" /sys/fs/cgroup/"*) ;; *) exec "$A" "$@" ;; esac\n'
        f"R={q(str(root))}\n"
        f"C={q(str(cg))}\n"
        '[ -r "$C/cpu.max" ] || exec "$A" "$@"\n'
        # the machine's CPU files out; nothing else changes for an awk that reads none
        "n=$# m=\n"
        "for a do\n"
        f'  case $a in {machine}) m=1 ;; *) set -- "$@" "$a" ;; esac\n'
        "done\n"
        "shift $n\n"
        '[ -n "$m" ] || exec "$A" "$@"\n'
        f'grep -lzxF "{root_env}=$R" /proc/[0-9]*/environ 2>/dev/null |'
        f' "$A" -v state="$C/acct" -v stat="$C/cpu.stat" -v tag=$$ -v hz={USER_HZ}'
        f" {q(ACCOUNTANT)} 2>/dev/null &&\n"
        '  mv -f "$C/acct.$$.new" "$C/acct" 2>/dev/null &&\n'
        '  mv -f "$C/cpu.stat.$$.new" "$C/cpu.stat" 2>/dev/null ||\n'
        '  rm -f "$C/acct.$$.new" "$C/cpu.stat.$$.new" 2>/dev/null\n'
        '[ -r "$C/cpu.stat" ] && set -- "$@" "$C/cpu.stat"\n'
        'exec "$A" "$@" "$C/cpu.max"\n'
    )
