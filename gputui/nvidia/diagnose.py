"""Turn a failed `nvidia-smi` (or NVML) into a problem and a fix a person can act on.

The monitor shows these instead of a traceback. Matching is on nvidia-smi's own messages
first and its exit status second (nvidia-smi's exit status is NVML's error code: 9 driver not
loaded, 12 library not found, 18 driver/library mismatch, 255 unknown error, ...).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from gputui.i18n import N_, _
from gputui.nvidia.nvsmi import sanitize

__all__ = ["DIAGNOSES", "Diagnosis", "diagnose_nvidia_smi"]


class Diagnosis(BaseModel):
    """What went wrong (`problem`), what to do (`fix`) and a stable `code` for tests and UI."""

    model_config = ConfigDict(frozen=True)

    problem: str
    fix: str
    code: str
    detail: str | None = None  # the tool's own message, sanitised, where it helps

    # `problem` and `fix` stay English (JSON, logs); people read them in their language.
    @property
    def problem_text(self) -> str:
        """`problem` in the interface language."""
        return _(self.problem)

    @property
    def fix_text(self) -> str:
        """`fix` in the interface language."""
        return _(self.fix)

    def line(self) -> str:
        """The one-line form for people, in the interface language (in English, the same as
        `gputui.services.telemetry.diagnosis_text`, which the store keeps)."""
        text = _("{problem} Fix: {fix}").format(problem=self.problem_text, fix=self.fix_text)
        if self.detail:
            text += _(" (said: {detail})").format(detail=self.detail)
        return text


#: Every diagnosis this module (and `gputui.nvidia.nvml`) can give, by code.
DIAGNOSES: dict[str, Diagnosis] = {
    d.code: d
    for d in (
        Diagnosis(
            code="nvidia-smi-missing",
            problem=N_("nvidia-smi is not installed on this machine (command not found)."),
            fix=N_(
                "Install the NVIDIA driver (e.g. `sudo apt install nvidia-driver-550` or "
                "`sudo ubuntu-drivers install`), then reboot. In a container, run it with "
                "`--gpus all` and the NVIDIA Container Toolkit so the host's driver tools are "
                "mounted in. A machine without an NVIDIA GPU cannot be monitored."
                " If nvidia-smi works but PyTorch says CUDA is unavailable, the installed torch is a "
                "CPU-only build: reinstall it from the CUDA wheel index "
                "(pip install torch --index-url https://download.pytorch.org/whl/cu124)."
            ),
        ),
        Diagnosis(
            code="driver-not-loaded",
            problem=N_("nvidia-smi cannot talk to the NVIDIA driver: the kernel module is not loaded."),
            fix=N_(
                "Load or reinstall the driver: `sudo modprobe nvidia`; if that fails, reinstall "
                "the driver package and reboot (a kernel or driver upgrade without a reboot, or "
                "Secure Boot refusing an unsigned module, are the usual causes)."
            ),
        ),
        Diagnosis(
            code="driver-library-mismatch",
            problem=N_(
                "NVML driver/library version mismatch: the driver packages were upgraded but the "
                "old kernel module is still loaded."
            ),
            fix=N_(
                "Reboot the machine (or unload and reload the nvidia kernel modules with nothing "
                "using the GPU). To stop it recurring, hold the driver packages back from "
                "unattended upgrades."
            ),
        ),
        Diagnosis(
            code="nvml-unknown-error",
            problem=N_(
                "NVML failed with 'Unknown Error'. Inside a container this usually means the "
                "container lost access to the GPU device files."
            ),
            fix=N_(
                "Restart the container: a `systemctl daemon-reload` on the host (or a cgroup "
                "change) removes the /dev/nvidia* device mounts from running containers. Start "
                "containers with `--gpus all` through the NVIDIA Container Toolkit (with the "
                "nvidia-ctk CDI spec, or explicit --device /dev/nvidia* entries, so they "
                "survive); outside a container, reboot."
            ),
        ),
        Diagnosis(
            code="no-devices",
            problem=N_("The NVIDIA driver is running but no GPU is visible (No devices were found)."),
            fix=N_(
                "In a container, pass the GPUs in (`docker run --gpus all`, NVIDIA Container "
                "Toolkit installed); check CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES; on a "
                "VM, check the GPU is attached (`lspci | grep -i nvidia`)."
                " If nvidia-smi works but PyTorch says CUDA is unavailable, the installed torch is a "
                "CPU-only build: reinstall it from the CUDA wheel index "
                "(pip install torch --index-url https://download.pytorch.org/whl/cu124)."
            ),
        ),
        Diagnosis(
            code="permission-denied",
            problem=N_("Permission denied: this user may not use the NVIDIA devices or tools."),
            fix=N_(
                "Check /dev/nvidia* permissions (the user usually needs the `video` group, or run "
                "as root); in a container, make sure the devices are passed in with `--gpus all`."
            ),
        ),
        Diagnosis(
            code="gpu-lost",
            problem=N_("A GPU has fallen off the bus or needs a reset."),
            fix=N_(
                "Stop using this instance: reboot it, or release it and report the machine to the "
                "provider (hardware or power fault; see `dmesg | grep -i xid`)."
            ),
        ),
        Diagnosis(
            code="nvml-library-missing",
            problem=N_("The NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver here."),
            fix=N_(
                "Install the NVIDIA driver (it ships libnvidia-ml). In a container, run with "
                "`--gpus all` and the NVIDIA Container Toolkit, which mounts it from the host. "
                "On a machine without an NVIDIA GPU, monitor a remote instance instead."
            ),
        ),
        Diagnosis(
            code="nvml-function-missing",
            problem=N_("The installed driver's NVML lacks a function this program asked for."),
            fix=N_(
                "Upgrade the NVIDIA driver, or install an nvidia-ml-py version matching it "
                "(`pip install 'nvidia-ml-py<VERSION'`)."
            ),
        ),
        Diagnosis(
            code="nvidia-smi-failed",
            problem=N_("nvidia-smi failed."),
            fix=N_(
                "Run `nvidia-smi` on the machine to see the full message; a reboot after driver "
                "updates fixes most cases."
            ),
        ),
    )
}


def _with_detail(code: str, output: str) -> Diagnosis:
    detail = sanitize(" ".join(output.split()), 300) or None
    return DIAGNOSES[code].model_copy(update={"detail": detail})


# (pattern, code) in priority order; patterns are matched case-insensitively.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), code)
    for p, code in (
        (r"version mismatch", "driver-library-mismatch"),
        (
            r"couldn'?t communicate with the nvidia driver|driver not loaded|"
            r"nvidia kernel module.*not loaded",
            "driver-not-loaded",
        ),
        (
            r"nvidia-smi: (?:command )?not found|command not found|"
            r"nvidia-smi: no such file or directory|not recognized as an internal or external",
            "nvidia-smi-missing",
        ),
        (r"no devices were found|no devices found|no gpu to monitor", "no-devices"),
        (
            r"insufficient permissions|permission denied|operation not permitted|no permission",
            "permission-denied",
        ),
        (
            r"fallen off the bus|gpu is lost|gpu requires (?:reset|restart)|"
            r"unable to determine the device handle",
            "gpu-lost",
        ),
        (
            r"nvml shared library not found|couldn'?t find libnvidia-ml|"
            r"libnvidia-ml\.so\S*: cannot open",
            "nvml-library-missing",
        ),
        (r"function not found", "nvml-function-missing"),
        (r"failed to initialize nvml: unknown error|\bunknown error", "nvml-unknown-error"),
    )
)

_EXIT_CODES = {
    127: "nvidia-smi-missing",  # the shell: command not found
    126: "permission-denied",  # the shell: found but not executable
    4: "permission-denied",  # NVML_ERROR_NO_PERMISSION
    6: "no-devices",  # NVML_ERROR_NOT_FOUND ("No devices were found")
    9: "driver-not-loaded",  # NVML_ERROR_DRIVER_NOT_LOADED
    12: "nvml-library-missing",  # NVML_ERROR_LIBRARY_NOT_FOUND
    13: "nvml-function-missing",  # NVML_ERROR_FUNCTION_NOT_FOUND
    15: "gpu-lost",  # NVML_ERROR_GPU_IS_LOST
    18: "driver-library-mismatch",  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    255: "nvml-unknown-error",  # NVML_ERROR_UNKNOWN (999), reported as 255
}


def diagnose_nvidia_smi(output: str | bytes, exit_code: int | None) -> Diagnosis | None:
    """The diagnosis for a run of nvidia-smi, given its output (stdout and stderr together)
    and exit status (None where unknown, e.g. a stream that is still running).

    None when nothing is wrong: exit 0, or no exit status and no error message. A failure it
    does not recognise gives the generic `nvidia-smi-failed`, with the message as detail.
    Table rows and CSV lines are not searched, so a process or GPU name cannot fake an error.
    """
    if exit_code == 0:
        return None
    if isinstance(output, bytes):
        output = output.decode("utf-8", errors="replace")
    text = output[-8192:] if len(output) > 8192 else output
    messages = "\n".join(
        line
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("|", "+")) and ", " not in line
    )
    for pattern, code in _RULES:
        if pattern.search(messages):
            return _with_detail(code, messages)
    if exit_code is None:
        return None
    for pattern, code in _RULES:  # it failed: the whole output may say why
        if pattern.search(text):
            return _with_detail(code, text)
    return _with_detail(_EXIT_CODES.get(exit_code, "nvidia-smi-failed"), messages or text)
