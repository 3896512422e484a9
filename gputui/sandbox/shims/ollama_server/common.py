"""Constants and small helpers of the simulated Ollama server (durations, sizes, times)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

MARKER = "ollama_server"  # in our /proc/<pid>/cmdline (python -m ...sandbox.shims.ollama_server)
MIB = 1 << 20
GIB = 1 << 30
GPU_OVERHEAD_BYTES = 256 * MIB  # per GPU a model uses: CUDA context, cuBLAS workspace
DEFAULT_CONTEXT = 4096
DEFAULT_KEEP_ALIVE_S = 300.0
FOREVER_S = 292 * 365 * 86400.0  # Go's maximum duration, as Ollama reports "forever"
DEFAULT_RAM_GIB = 16.0
TICK_S = 0.25
REGISTRY = "registry.ollama.ai"



# --------------------------------------------------------------------------- helpers


def parse_duration(value: Any, default: float) -> float:
    """keep_alive: a number of seconds, or a Go duration ("5m", "1h30m", "-1", "0").
    Negative means forever."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        for unit in ("ns", "us", "µs", "ms", "s", "m", "h"):
            if text.startswith(unit, i) and number:
                total += float(number) * units[unit]
                number = ""
                i += len(unit)
                break
        else:
            raise ValueError(f"time: invalid duration {value!r}")
    if number:
        raise ValueError(f"time: missing unit in duration {value!r}")
    return sign * total


def human_gib(n: float) -> str:
    """Ollama's HumanBytes2 (binary units), as in its memory errors: '25.7 GiB'."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.1f} MiB"


def _now_local() -> datetime:
    return datetime.now().astimezone()


def _iso(dt: datetime) -> str:
    return dt.isoformat()
