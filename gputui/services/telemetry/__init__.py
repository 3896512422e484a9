"""Live GPU telemetry: one long-lived nvidia-smi stream per instance, written to the store.

`TelemetryService(services, store)` lives on the App (not on a screen), so streams survive
screen switches. Per watched instance it runs two asyncio tasks it owns:

- the *stream*: `nvidia-smi --query-gpu=... --format=csv,nounits -lms N` over the instance's
  one shared SSH link (`Services.link`), read line by line; the lines of one tick are batched
  and written with `store.add_samples` (one `TelemetryChanged` per tick, not per GPU). The
  link restarts the command by itself after a reconnect; if nvidia-smi fails, its output and
  exit status become a `Diagnosis` (`store.set_diagnosis`) and the stream is retried with
  backoff, so a fixed machine resumes on its own.
- the *slow loop*: compute processes (`--query-compute-apps`, their users from `ps`) every
  `process_interval` seconds (`store.set_processes`), and the `nvidia-smi -q -x` inventory
  (driver, CUDA, MIG devices, ECC, PCIe, power limit) once per connection.

- the *host reader*: one long-lived `sh`/`awk` loop (`vitals.vitals_command`) printing the
  host's CPU (of the cores the container may use), load, memory (cgroup-aware), disk and
  network counters every interval and `df` every tenth; parsed by `vitals.VitalsParser` into
  `HostSample`s (`store.set_host`), with the hints "data loading is the bottleneck" (GPUs
  idle while the CPUs are saturated or wait on I/O) and "disk nearly full".

The interval is one setting for every stream (0.5-10 s); changing it restarts the streams.
Hints (one GPU busy while its peers idle, memory held without work, a GPU stuck under 50 %,
memory nearly full, thermal or power throttling) are worked out after every tick.

`start_local()` watches this machine through NVML (instance id `LOCAL_ID`) the same way.

Nothing here raises into the caller's loop: every failure becomes a diagnosis or a note.
"""

from gputui.models import Hint
from gputui.services.telemetry.base import (
    INTERVAL_STEPS,
    LOCAL_ID,
    MAX_INTERVAL,
    MIN_INTERVAL,
    clamp_interval,
    diagnosis_text,
    ssh_diagnosis,
    step_interval,
)
from gputui.services.telemetry.hints import (
    HintRules,
    evaluate_hints,
)
from gputui.services.telemetry.hints import (
    _Trend as _Trend,  # the tests read it
)
from gputui.services.telemetry.processes import (
    read_processes,
)
from gputui.services.telemetry.stream import (
    KillResult,
    TelemetryService,
    WatchStatus,
    session_telemetry,
)
from gputui.services.telemetry.stream import (
    _Watch as _Watch,  # the tests read it
)

__all__ = [
    "Hint",
    "HintRules",
    "INTERVAL_STEPS",
    "KillResult",
    "LOCAL_ID",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "TelemetryService",
    "WatchStatus",
    "clamp_interval",
    "diagnosis_text",
    "evaluate_hints",
    "parse_gpu_selection",
    "read_processes",
    "session_telemetry",
    "ssh_diagnosis",
    "step_interval",
]
