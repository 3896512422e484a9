"""Ollama service: constants and errors shared by its modules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gputui.errors import EXIT_BAD_INPUT, BadInput
from gputui.i18n import shown
from gputui.services.errors import ServiceError

if TYPE_CHECKING:
    from gputui.services.ollama.fit import FitCheck

DEFAULT_PORT = 11434
DEFAULT_CONTEXT = 4096  # Ollama's num_ctx when OLLAMA_CONTEXT_LENGTH is not set
INSTALL_COMMAND = "curl -fsSL https://ollama.com/install.sh | sh"
# AutoDL's academic proxy (GitHub, Hugging Face, ollama.com downloads) is turned on by sourcing
# this file; elsewhere it does not exist and the install runs as it is.
NETWORK_TURBO = "/etc/network_turbo"


def install_run_command(turbo: str = NETWORK_TURBO) -> str:
    """The install as it runs on the instance: with the provider's download proxy where the
    instance has one (`source /etc/network_turbo`, in POSIX sh as `.`)."""
    import shlex

    path = shlex.quote(turbo)
    return f"if [ -f {path} ]; then . {path}; fi; {INSTALL_COMMAND}"
UNIT = "ollama.service"
DROPIN_DIR = "/etc/systemd/system/ollama.service.d"
DROPIN_NAME = "zz-gputui-gpus.conf"  # sorts after override.conf (`systemctl edit`): ours wins
LOG_FILE = "$HOME/.ollama/gputui-serve.log"
PID_FILE = "$HOME/.ollama/gputui-serve.pid"
SHOWN_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "OLLAMA_HOST",
    "OLLAMA_MAX_LOADED_MODELS",
    "OLLAMA_KEEP_ALIVE",
    "OLLAMA_NUM_PARALLEL",
    "OLLAMA_SCHED_SPREAD",
    "OLLAMA_CONTEXT_LENGTH",
)
MIB = 1 << 20
GIB = 1 << 30
GB = 10**9
GPU_OVERHEAD_BYTES = 256 * MIB  # per GPU a model uses: CUDA context and library workspaces
FIT_MARGIN = 0.02  # on weights + KV cache: estimates are estimates
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class OllamaServiceError(ServiceError):
    """A one-line message for the user."""


class OllamaBadInput(OllamaServiceError, BadInput):
    """What was asked cannot be (a GPU the instance does not have, no model named): exit 2."""

    exit_code = EXIT_BAD_INPUT


class FitRefused(OllamaServiceError):
    """A load that would not fit the selected GPUs (ask again with force=True to try anyway)."""

    def __init__(self, fit: FitCheck) -> None:
        super().__init__(str(shown(fit.message)))  # for a person: in the interface language
        self.fit = fit


