"""The result of one remote command."""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass
from typing import Any


# -- results --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunResult:
    exit_status: int  # 128+N when killed by signal N (as a shell reports it), -1 if unknown
    stdout: str
    stderr: str
    signal: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def _exit_status(exit_status: int | None, exit_signal: Any) -> tuple[int, str | None]:
    if exit_status is not None and exit_status >= 0:
        return exit_status, None
    if exit_signal:
        name = exit_signal[0] if isinstance(exit_signal, tuple) else str(exit_signal)
        signum = getattr(_signal, f"SIG{name}", None)
        return (128 + int(signum) if signum is not None else -1), name
    return -1, None
