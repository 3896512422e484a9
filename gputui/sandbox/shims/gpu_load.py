"""`gpu-load`: a real, long-lived process that "uses" simulated GPUs.

    gpu-load [--gpus 0,1|all] [--mem 20G] [--util 90] [--seconds 600] [--name NAME]

Prints its PID on stdout, registers itself in .sandbox/procs/<pid>.json (so nvidia-smi shows
it in --query-compute-apps and the table, and counts its memory and utilisation), then
sleeps until --seconds pass, the instance powers off, or it gets SIGTERM/SIGINT/SIGHUP; it
removes its record on the way out. A SIGKILLed one leaves a record that readers see is
stale and remove.

``--mem`` is per GPU (20G = 20GiB = 20480 MiB, 512M, plain numbers are MiB).
``--gpus`` counts within CUDA_VISIBLE_DEVICES when that is set, as CUDA programs do.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from .state import (
    GpuUse,
    InstanceSpec,
    ProcRecord,
    SandboxStateError,
    SimGpu,
    enforce_power,
    live_processes,
    load_instance,
    locked,
    memory_free_mib,
    power_file,
    power_state,
    proc_start_time,
    procs_dir,
    register_process,
    root_from_env,
    unregister_process,
)

MARKER = "gpu_load"  # in our /proc/<pid>/cmdline: "... -m gputui.sandbox.shims.gpu_load"
TICK_S = 0.5
_UNITS = {
    "": 1,
    "m": 1,
    "mb": 1,
    "mib": 1,
    "g": 1024,
    "gb": 1024,
    "gib": 1024,
    "t": 1024 * 1024,
    "tb": 1024 * 1024,
    "tib": 1024 * 1024,
    "k": 1 / 1024,
    "kb": 1 / 1024,
    "kib": 1 / 1024,
}


class LoadError(Exception):
    pass


def parse_mem(text: str) -> int:
    """'20G' / '20GiB' / '512M' / '1.5g' / '2048' (MiB) -> MiB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"invalid memory size {text!r} (use e.g. 20G, 512M)")
    mib = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if mib <= 0:
        raise argparse.ArgumentTypeError("memory size must be positive")
    return max(1, int(round(mib)))


def _util(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid utilisation {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError("utilisation must be between 0 and 100")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-load", description="Occupy simulated GPUs.")
    p.add_argument("--gpus", default="0", help="comma-separated GPU indexes, or 'all' (default 0)")
    p.add_argument(
        "--mem", type=parse_mem, default=1024, help="memory per GPU, e.g. 20G (default 1G)"
    )
    p.add_argument("--util", type=_util, default=100.0, help="target utilisation %% (default 100)")
    p.add_argument("--seconds", type=float, default=None, help="exit after this long")
    p.add_argument("--name", default="python train.py", help="process name nvidia-smi shows")
    return p


def visible_gpus(spec: InstanceSpec, env: str | None) -> list[SimGpu]:
    """The GPUs a CUDA program sees, in CUDA_VISIBLE_DEVICES order (None: all of them).
    Like CUDA, the list stops at the first entry that names no GPU."""
    if env is None:
        return list(spec.gpus)
    out: list[SimGpu] = []
    for item in (s.strip() for s in env.split(",")):
        match = None
        for gpu in spec.gpus:
            if (item.isdigit() and int(item) == gpu.index) or (
                item.startswith("GPU-") and gpu.uuid.startswith(item)
            ):
                match = gpu
        if match is None or match in out:
            break
        out.append(match)
    return out


def choose_gpus(spec: InstanceSpec, wanted: str, env: str | None) -> list[SimGpu]:
    visible = visible_gpus(spec, env)
    if not visible:
        raise LoadError("RuntimeError: CUDA error: no CUDA-capable device is detected")
    if wanted.strip().lower() == "all":
        return visible
    chosen: list[SimGpu] = []
    for item in (s.strip() for s in wanted.split(",") if s.strip()):
        if not item.isdigit() or int(item) >= len(visible):
            raise LoadError("RuntimeError: CUDA error: invalid device ordinal")
        gpu = visible[int(item)]
        if gpu not in chosen:
            chosen.append(gpu)
    if not chosen:
        raise LoadError("RuntimeError: CUDA error: invalid device ordinal")
    return chosen


def _gib(mib: float) -> str:
    return f"{mib / 1024:.2f} GiB"


def start(root: Path, args: argparse.Namespace) -> ProcRecord:
    spec = load_instance(root)
    if enforce_power(root).is_off:
        raise LoadError("gpu-load: this sandbox instance is powered off")
    gpus = choose_gpus(spec, args.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    pid = os.getpid()
    now = time.time()
    with locked(root):
        procs = live_processes(root)
        visible = visible_gpus(spec, os.environ.get("CUDA_VISIBLE_DEVICES"))
        for gpu in gpus:
            logical = visible.index(gpu)  # the CUDA device ordinal the program used
            free = memory_free_mib(gpu, procs)
            if args.mem > free:
                capacity = gpu.memory_total_mib - gpu.memory_reserved_mib
                raise LoadError(
                    "torch.OutOfMemoryError: CUDA out of memory. "
                    f"Tried to allocate {_gib(args.mem)}. GPU {logical} has a total capacity "
                    f"of {_gib(capacity)} of which {_gib(free)} is free. "
                    f"Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes "
                    "is reserved by PyTorch but unallocated."
                )
        record = ProcRecord(
            pid=pid,
            name=args.name,
            kind="gpu-load",
            started_at=now,
            gpus={g.index: GpuUse(args.mem, args.util) for g in gpus},
            marker=MARKER,
            ends_at=None if args.seconds is None else now + args.seconds,
            proc_start=proc_start_time(pid),
        )
        register_process(root, record)
    return record


class _Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise _Signalled(signum)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = root_from_env()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _raise)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # respect nohup
        signal.signal(signal.SIGHUP, _raise)
    record: ProcRecord | None = None
    try:
        record = start(root, args)
        sys.stdout.write(f"{record.pid}\n")
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        own = procs_dir(root) / f"{record.pid}.json"
        pfile = power_file(root)
        while True:
            wait = TICK_S
            if record.ends_at is not None:
                wait = max(0.0, min(wait, record.ends_at - time.time()))
            time.sleep(wait)
            now = time.time()
            if record.ends_at is not None and now >= record.ends_at:
                return 0
            if not own.exists():  # removed by enforce_power / kill_processes
                return 0
            if pfile.exists() and power_state(root, now).is_off:
                return 0
    except _Signalled as exc:
        if record is not None:
            unregister_process(root, record.pid)
            record = None
        # Die of the signal itself, so the shell reports it as a real process would.
        signal.signal(exc.signum, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), exc.signum)
        return 128 + exc.signum
    except LoadError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    except SandboxStateError as exc:
        sys.stderr.write(f"gpu-load: {exc}\n")
        return 1
    finally:
        if record is not None:
            unregister_process(root, record.pid)


if __name__ == "__main__":
    sys.exit(main())
