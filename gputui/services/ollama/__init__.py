"""Ollama on a rented instance: server status, models, pulls, loads, and the GPUs it may use.

How it talks to the instance:

- One shell probe over the instance's shared SSH link finds the server: the systemd unit
  `ollama.service` when there is one (its MainPID and `Environment=`), else the process we
  started (`~/.ollama/gputui-serve.pid`), else any `ollama serve` process. The server's own
  environment (`/proc/PID/environ`) gives `OLLAMA_HOST` — so the port it listens on —,
  `CUDA_VISIBLE_DEVICES` and the other `OLLAMA_*` settings. No `OLLAMA_HOST`: 127.0.0.1:11434.
  (Sandbox instances share one machine, so there the probe only takes the server of the same
  instance, and the sandbox's `ollama serve` puts its own port in `OLLAMA_HOST`.)
- HTTP goes through an SSH local port forward to that port, with the official `ollama` client
  (see `gputui.remote.ollama_client`), always with a timeout. The link re-creates the forward
  after a reconnect; the client follows the forward's local port.
- GPU selection restarts the server with `CUDA_VISIBLE_DEVICES` set to GPU UUIDs (indices can
  differ between nvidia-smi and CUDA's default order): a systemd drop-in of our own
  (`Environment=`, daemon-reload, restart) where Ollama runs under systemd, else stopping the
  process and starting `nohup env CUDA_VISIBLE_DEVICES=... ollama serve` with its log in
  `~/.ollama/gputui-serve.log`. A restart unloads the running models: callers say so first
  (`restart_warning`).
- Fit check before a pull or load: the model's weights (its size once installed, else the
  catalog's Q4_K_M estimate), its KV cache at the server's context (from `/api/show`'s shape,
  or the catalog's), the compute graph and a CUDA context per GPU, against the free memory of
  the selected GPUs as nvidia-smi reports it (so models already loaded are counted).
- After a load, placement is verified from nvidia-smi's compute processes.

The commands, pure functions (`probe_script`, `systemd_dropin`, `systemd_apply_commands`,
`nohup_start_command`, `stop_process_command`, `check_fit`) are kept apart from the I/O so
they can be checked exactly.
"""

from gputui.remote.ollama_client import InstalledModel, PullProgress, RunningModel
from gputui.services.ollama.common import (
    DEFAULT_PORT,
    DROPIN_DIR,
    DROPIN_NAME,
    INSTALL_COMMAND,
    SHOWN_ENV,
    FitRefused,
    OllamaBadInput,
    OllamaServiceError,
)
from gputui.services.ollama.fit import (
    FitCheck,
    FitVerdict,
    ModelEstimate,
    check_fit,
    estimate_model,
)
from gputui.services.ollama.gpus import (
    GpuInfo,
    cuda_visible_value,
    gpu_words,
    parse_gpu_rows,
    parse_gpu_selection,
    selection_of,
)
from gputui.services.ollama.probe import (
    ServerProbe,
    compute_apps_query,
    gpu_query_command,
    parse_probe,
    probe_script,
)
from gputui.services.ollama.service import (
    LoadResult,
    OllamaService,
    OllamaStatus,
    PlacementReport,
    ProgressCallback,
    placement_report,
    service_for,
)
from gputui.services.ollama.systemd import (
    nohup_start_command,
    restart_warning,
    stop_process_command,
    systemd_apply_commands,
    systemd_dropin,
    systemd_start_commands,
)

__all__ = [
    "DEFAULT_PORT",
    "DROPIN_DIR",
    "DROPIN_NAME",
    "FitCheck",
    "FitRefused",
    "FitVerdict",
    "GpuInfo",
    "INSTALL_COMMAND",
    "InstalledModel",
    "LoadResult",
    "ModelEstimate",
    "OllamaService",
    "OllamaBadInput",
    "OllamaServiceError",
    "OllamaStatus",
    "PlacementReport",
    "ProgressCallback",
    "PullProgress",
    "RunningModel",
    "SHOWN_ENV",
    "ServerProbe",
    "check_fit",
    "compute_apps_query",
    "cuda_visible_value",
    "estimate_model",
    "gpu_query_command",
    "gpu_words",
    "nohup_start_command",
    "parse_gpu_rows",
    "parse_gpu_selection",
    "parse_probe",
    "placement_report",
    "probe_script",
    "restart_warning",
    "selection_of",
    "service_for",
    "stop_process_command",
    "systemd_apply_commands",
    "systemd_dropin",
    "systemd_start_commands",
]
