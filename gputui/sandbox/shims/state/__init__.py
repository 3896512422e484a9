"""The on-disk format of one sandbox instance, shared by the shims, the SSH server and the
sandbox provider.

Stdlib only (json + dataclasses): the shims import this on every start, and
`nvidia-smi -lms` starts and reads it a lot.

Layout of an instance folder ``root`` (it is also the instance's cwd and HOME)::

    root/
      bin/                      shims, first on PATH (see SHIMS / install_shims)
        nvidia-smi gpu-load shutdown poweroff df ollama
        awk                     sh only: the instance's CPU cgroup in place of the machine's
      .sandbox/
        instance.json           the hardware: GPUs, driver, CUDA (written once)
        disk.json               the rented disk size {"disk_gb": 50.0} (`df` reports it)
        power.json              a scheduled or past power-off (absent: running)
        procs/<pid>.json        one file per live GPU process (gpu-load, later ollama)
        lock                    flock'd while checking free memory + registering
        cgroup/cpu.max          the cores it may use; cgroup/cpu.stat its processes' CPU,
        cgroup/acct             counted at each read by bin/awk (see shims.cgroup)

instance.json::

    {"format": 1, "instance_id": "...", "created_at": "2026-...+00:00",
     "driver_version": "570.124.06", "cuda_version": "12.8",
     "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...",
               "serial": "1652...", "pci_bus_id": "00000000:18:00.0", "vbios_version": "...",
               "memory_total_mib": 81559, "memory_reserved_mib": 900,
               "power_limit_w": 700.0, "tdp_w": 700.0, "idle_power_w": 63.0, ...}]}

power.json (one timestamp; a power-off time in the past means "off since then")::

    {"poweroff_at": "2026-...+00:00", "requested_at": "2026-...+00:00",
     "command": "shutdown -h +30"}

procs/<pid>.json::

    {"pid": 4242, "kind": "gpu-load", "marker": "gpu_load", "name": "python train.py",
     "started_at": 1767225600.5, "ends_at": null, "proc_start": 123456,
     "gpus": {"0": {"memory_mib": 20480, "util": 90.0}}}

``marker`` must occur in ``/proc/<pid>/cmdline`` and ``proc_start`` (field 22 of
``/proc/<pid>/stat``, when recorded) must match, or the record is stale (PID dead or reused)
and is removed by readers. Any long-lived shim can take part the same way (the Ollama
server: ``kind="ollama"``, its own marker, and ``register_process`` again whenever the
models it holds change, which rewrites the file atomically); nvidia-smi then lists it on
each GPU of ``gpus`` and enforce_power()/kill_processes() end it at power-off.

Times: power.json uses ISO-8601 UTC strings, procs/*.json unix seconds.

The modules, by idea: paths (where state lives, the shim table, atomic JSON), hardware (SimGpu,
InstanceSpec), profiles (the GPU models offered, bus ids, UUIDs), processes (GPU process
records, liveness, memory in use), power (power-off scheduling and enforcing), instance
(creating an instance folder, its bin/ shims, reading it back).
"""

from __future__ import annotations

from .hardware import (
    InstanceSpec,
    SimGpu,
)
from .instance import (
    create_instance_dir,
    install_shims,
    load_instance,
)
from .paths import (
    FORMAT_VERSION,
    PACKAGE,
    ROOT_ENV,
    SHIMS,
    SITE_FREE,
    STATE_DIR,
    SandboxStateError,
    instance_file,
    power_file,
    procs_dir,
    root_from_env,
    state_dir,
)
from .power import (
    PowerState,
    cancel_poweroff,
    enforce_power,
    power_on,
    power_state,
    schedule_poweroff,
)
from .processes import (
    GpuUse,
    ProcRecord,
    kill_processes,
    live_processes,
    locked,
    memory_free_mib,
    memory_in_use,
    pid_alive,
    proc_start_time,
    register_process,
    unregister_process,
)
from .profiles import (
    default_reserved_mib,
    gpu_uuid,
)

__all__ = [
    "FORMAT_VERSION",
    "GpuUse",
    "InstanceSpec",
    "PACKAGE",
    "PowerState",
    "ProcRecord",
    "ROOT_ENV",
    "SHIMS",
    "SITE_FREE",
    "STATE_DIR",
    "SandboxStateError",
    "SimGpu",
    "cancel_poweroff",
    "create_instance_dir",
    "default_reserved_mib",
    "enforce_power",
    "gpu_uuid",
    "install_shims",
    "instance_file",
    "kill_processes",
    "live_processes",
    "load_instance",
    "locked",
    "memory_free_mib",
    "memory_in_use",
    "pid_alive",
    "power_file",
    "power_on",
    "power_state",
    "proc_start_time",
    "procs_dir",
    "register_process",
    "root_from_env",
    "schedule_poweroff",
    "state_dir",
    "unregister_process",
]
