"""`df`: the sandbox instance's own disk, the size it was rented with, not the host's.

A sandbox instance's disk is its folder (its HOME and working directory). Its size is the
`disk_gb` it was rented with (`.sandbox/disk.json`, written by the sandbox platform); what is
used is what the folder holds (its files' allocated blocks, hard links once). Every path asked
about is on that one disk, shown mounted on `/` as a container's overlay root is.

The usual options are understood (-h -H -k -m -P -T -a -l, --total and their long forms);
an instance made before disk sizes were recorded gets the host's `df`.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from .state.paths import root_from_env, state_dir

USAGE = "Usage: df [OPTION]... [FILE]...\n"
_SHORT = {"h": "human", "H": "si", "k": "k", "m": "m", "P": "posix", "T": "type", "a": "all",
          "l": "local"}
_LONG = {"--human-readable": "human", "--si": "si", "--portability": "posix",
         "--print-type": "type", "--all": "all", "--local": "local", "--total": "total",
         "--kilobytes": "k"}


def disk_file(root: Path) -> Path:
    return state_dir(root) / "disk.json"


def write_disk_size(root: Path, disk_gb: float) -> None:
    """Record the instance's rented disk size (the platform calls this)."""
    path = disk_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"disk_gb": float(disk_gb)}) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def rented_bytes(root: Path) -> int | None:
    try:
        data = json.loads(disk_file(root).read_text(encoding="utf-8"))
        value = float(data["disk_gb"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(value * 1e9) if value > 0 else None


def used_bytes(root: Path) -> int:
    """The folder's allocated blocks (as `du` counts them), hard links once, no symlinks
    followed."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def _human(n: int, base: int) -> str:
    """As coreutils prints -h/-H: one decimal under 10, rounded up."""
    if n < base:
        return str(n)
    value = float(n)
    for unit in "KMGTPE":
        value /= base
        if value < base or unit == "E":
            if value < 10:
                return f"{math.ceil(value * 10) / 10:.1f}{unit}"
            return f"{math.ceil(value)}{unit}"
    return str(n)  # not reached


def _real_df(argv: list[str]) -> int:
    """The host's df (an instance without a recorded size)."""
    own = str(root_from_env() / "bin")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or os.path.realpath(folder) == os.path.realpath(own):
            continue
        candidate = os.path.join(folder, "df")
        if os.access(candidate, os.X_OK):
            os.execv(candidate, ["df", *argv])
    sys.stderr.write("df: no df to run\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts: set[str] = set()
    files: list[str] = []
    only_files = False
    for arg in argv:
        if only_files or arg == "-" or not arg.startswith("-"):
            files.append(arg)
        elif arg == "--":
            only_files = True
        elif arg == "--help":
            sys.stdout.write(USAGE + "Show the instance disk's size, use and free space.\n")
            return 0
        elif arg.startswith("--"):
            name = arg.split("=", 1)[0]
            if name not in _LONG:
                sys.stderr.write(f"df: unrecognized option '{arg}'\n{USAGE}")
                return 1
            opts.add(_LONG[name])
        else:
            for ch in arg[1:]:
                if ch not in _SHORT:
                    sys.stderr.write(f"df: invalid option -- '{ch}'\n{USAGE}")
                    return 1
                opts.add(_SHORT[ch])
    root = root_from_env()
    size = rented_bytes(root)
    if size is None:
        return _real_df(argv)
    status = 0
    for name in files:
        if not os.path.exists(name):
            sys.stderr.write(f"df: {name}: No such file or directory\n")
            status = 1
    if files and status and all(not os.path.exists(n) for n in files):
        return status
    used = used_bytes(root)
    avail = max(0, size - used)
    pct = f"{math.ceil(used * 100 / (used + avail)) if used + avail else 0}%"
    if "human" in opts or "si" in opts:
        base = 1000 if "si" in opts and "human" not in opts else 1024
        head = ["Size", "Used", "Avail", "Use%"]
        nums = [_human(size, base), _human(used, base), _human(avail, base), pct]
    else:
        unit = 1048576 if "m" in opts and "k" not in opts else 1024
        label = "1M-blocks" if unit == 1048576 else \
            ("1024-blocks" if "posix" in opts else "1K-blocks")
        head = [label, "Used", "Available", "Capacity" if "posix" in opts else "Use%"]
        nums = [str(-(-size // unit)), str(-(-used // unit)), str(avail // unit), pct]
    rows = [["Filesystem", *(["Type"] if "type" in opts else []), *head, "Mounted on"]]
    rows.append(["overlay", *(["overlay"] if "type" in opts else []), *nums, "/"])
    if "total" in opts:
        rows.append(["total", *(["-"] if "type" in opts else []), *nums[:-1], pct, "-"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        cells = [r[0].ljust(widths[0])]
        start = 1
        if "type" in opts:
            cells.append(r[1].ljust(widths[1]))
            start = 2
        cells += [r[i].rjust(widths[i]) for i in range(start, len(r) - 1)]
        sys.stdout.write(" ".join(cells) + " " + r[-1] + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
