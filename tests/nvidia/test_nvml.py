"""Local NVML source and the nvidia-smi diagnoses.

On a machine without an NVIDIA driver (CI, this one) `read_local` must fail with the
"library not found" diagnosis. The reading itself is exercised against a small stand-in for
the `pynvml` module that raises real `pynvml.NVMLError`s.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gputui.nvidia.diagnose import DIAGNOSES, Diagnosis, diagnose_nvidia_smi
from gputui.nvidia.nvml import LocalReading, NvmlUnavailable, diagnosis_for_nvml_error, read_local
from tests.shared import capture_text

fixture_text = capture_text


def _nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# The real library on this machine
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(_nvml_library_present(), reason="libnvidia-ml.so.1 is installed here")
def test_read_local_without_driver_gives_library_not_found() -> None:
    with pytest.raises(NvmlUnavailable) as info:
        read_local()
    diag = info.value.diagnosis
    assert diag.code == "nvml-library-missing"
    assert "libnvidia-ml" in diag.problem and "driver" in diag.fix.lower()
    assert diag.detail == "NVML: NVML Shared Library Not Found"
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no NVML traceback
    assert "Traceback" not in str(info.value)


# --------------------------------------------------------------------------------------------
# Error mapping, with real NVMLError instances
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "nvml-library-missing"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver-not-loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver-library-mismatch"),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "nvml-function-missing"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "permission-denied"),
        (pynvml.NVML_ERROR_GPU_IS_LOST, "gpu-lost"),
        (pynvml.NVML_ERROR_UNKNOWN, "nvml-unknown-error"),
        (pynvml.NVML_ERROR_NOT_FOUND, "no-devices"),
        (pynvml.NVML_ERROR_TIMEOUT, "nvidia-smi-failed"),
    ],
)
def test_nvml_error_mapping(code: int, expected: str) -> None:
    exc = pynvml.NVMLError(code)
    assert isinstance(exc, pynvml.NVMLError) and exc.value == code
    diag = diagnosis_for_nvml_error(exc)
    assert isinstance(diag, Diagnosis)
    assert diag.code == expected
    assert diag.problem and diag.fix and diag.detail and diag.detail.startswith("NVML")


def test_driver_not_loaded_subclass_and_message() -> None:
    exc = pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert type(exc).__name__ == "NVMLError_DriverNotLoaded"
    diag = diagnosis_for_nvml_error(exc)
    assert diag.detail == "NVML: Driver Not Loaded"
    assert "modprobe" in diag.fix


def test_bindings_mismatch_error_maps_to_function_missing() -> None:
    exc = pynvml.NVMLLibraryMismatchError("Unversioned function called ...")
    assert diagnosis_for_nvml_error(exc).code == "nvml-function-missing"


# --------------------------------------------------------------------------------------------
# read_local against a stand-in module
# --------------------------------------------------------------------------------------------


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml(SimpleNamespace):
    """The few pynvml functions read_local uses, with two GPUs; errors are real NVMLErrors."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __init__(self, **overrides: Any) -> None:
        super().__init__()
        self.shutdowns = 0
        self.init_error: int | None = None
        self.count = 2
        self.lost_at: int | None = None
        for key, value in overrides.items():
            setattr(self, key, value)

    def _call(self, fn: str, handle: Any) -> None:
        if self.lost_at is not None and handle == self.lost_at and fn == "temp":
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _err(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return ["NVIDIA H100 80GB HBM3", "Evil\x1b[2J GPU"][h]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=1024 * 1024 * 19818, total=1024 * 1024 * 81559)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        if h == 1:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=97, memory=11)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._call("temp", h)
        return 59

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 631950  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return 650000

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return 0

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return [0, 0]

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:0{h}:00.0")

    def nvmlDeviceGetSerial(self, h: int) -> str:
        raise _err(pynvml.NVML_ERROR_NO_PERMISSION)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return 16

    def nvmlDeviceGetVbiosVersion(self, h: int) -> str:
        return "96.00.A5.00.01"

    # The driver is older than the bindings: _v3 is missing, _v2 works.
    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: int) -> list[Any]:
        raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: int) -> list[Any]:
        if h == 1:
            return []
        return [
            SimpleNamespace(pid=11345, usedGpuMemory=1024 * 1024 * 15690),
            SimpleNamespace(pid=4242, usedGpuMemory=None),  # WDDM: not available
        ]

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid == 4242:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return "./gpu_burn"


def test_read_local_with_stand_in() -> None:
    nv = FakeNvml()
    reading = read_local(nv)  # type: ignore[arg-type]
    assert isinstance(reading, LocalReading)
    assert nv.shutdowns == 1
    inv = reading.inventory
    assert inv.driver_version == "550.54.15" and inv.cuda_version == "12.4"
    first, second = reading.samples
    assert first.name == "NVIDIA H100 80GB HBM3" and first.uuid == "GPU-0"
    assert first.power_draw_w == 631.95 and first.power_limit_w == 700  # mW -> W
    assert first.memory_used_mib == 19818 and first.memory_total_mib == 81559
    assert first.utilization_gpu == 97 and first.temperature_c == 59
    assert first.fan_pct is None  # NOT_SUPPORTED
    assert first.sm_clock_mhz == 1980 and first.pstate == "P0" and first.mig_mode == "Disabled"
    assert first.timestamp is not None and first.timestamp.tzinfo is not None
    assert second.utilization_gpu is None and second.name == "Evil GPU"  # sanitised
    assert inv.gpus[0].serial is None  # NO_PERMISSION on one value
    assert inv.gpus[0].ecc_mode == "Enabled" and inv.gpus[0].pcie_gen == 5
    assert inv.gpus[1].pci_bus_id == "00000000:01:00.0"
    # _v3 raised FunctionNotFound, _v2 answered.
    assert [(p.pid, p.name, p.used_memory_mib, p.gpu_index) for p in reading.processes] == [
        (11345, "./gpu_burn", 15690, 0),
        (4242, None, None, 0),
    ]
    assert reading.notes == []


def test_read_local_unexpected_failure_is_still_a_diagnosis() -> None:
    nv = FakeNvml()

    def broken(*args: Any) -> Any:
        raise RuntimeError("ctypes went wrong")

    nv.nvmlDeviceGetClockInfo = broken
    with pytest.raises(NvmlUnavailable) as info:
        read_local(nv)  # type: ignore[arg-type]
    assert info.value.diagnosis.code == "nvidia-smi-failed"
    assert info.value.diagnosis.problem == "NVML failed."
    assert "ctypes went wrong" in (info.value.diagnosis.detail or "")
    assert nv.shutdowns == 1


def test_read_local_without_any_process_function() -> None:
    nv = FakeNvml()

    def missing(h: int) -> list[Any]:
        raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    nv.nvmlDeviceGetComputeRunningProcesses_v2 = missing
    reading = read_local(nv)  # type: ignore[arg-type]
    assert reading.processes == [] and len(reading.samples) == 2
    assert reading.notes and "process list not available" in reading.notes[0]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver-not-loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver-library-mismatch"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "permission-denied"),
        (pynvml.NVML_ERROR_UNKNOWN, "nvml-unknown-error"),
    ],
)
def test_read_local_init_failures(code: int, expected: str) -> None:
    nv = FakeNvml(init_error=code)
    with pytest.raises(NvmlUnavailable) as info:
        read_local(nv)  # type: ignore[arg-type]
    assert info.value.diagnosis.code == expected
    assert info.value.__cause__ is None


def test_read_local_no_devices_and_lost_gpu() -> None:
    nv = FakeNvml(count=0)
    with pytest.raises(NvmlUnavailable) as info:
        read_local(nv)  # type: ignore[arg-type]
    assert info.value.diagnosis.code == "no-devices" and nv.shutdowns == 1
    nv = FakeNvml(lost_at=1)
    with pytest.raises(NvmlUnavailable) as info:
        read_local(nv)  # type: ignore[arg-type]
    assert info.value.diagnosis.code == "gpu-lost" and nv.shutdowns == 1


# --------------------------------------------------------------------------------------------
# diagnose_nvidia_smi against the issue excerpts and common shell failures
# --------------------------------------------------------------------------------------------


def test_issue_excerpt_driver_not_loaded() -> None:
    text = fixture_text("issue-excerpt__lyulyul-shine-cluster-50__driver-not-loaded.txt")
    diag = diagnose_nvidia_smi(text, 9)
    assert diag is not None and diag.code == "driver-not-loaded"
    assert "reboot" in diag.fix.lower() and "couldn't communicate" in (diag.detail or "")
    assert diagnose_nvidia_smi(text, None) == diag  # the message alone is enough
    assert diagnose_nvidia_smi("", 9).code == "driver-not-loaded"  # type: ignore[union-attr]


def test_issue_excerpt_version_mismatch() -> None:
    text = fixture_text("issue-excerpt__mozilla-translations-1167__nvml-version-mismatch.txt")
    diag = diagnose_nvidia_smi(text, 18)
    assert diag is not None and diag.code == "driver-library-mismatch"
    assert "reboot" in diag.fix.lower()
    assert "550.144" in (diag.detail or "")
    assert diagnose_nvidia_smi("", 18).code == "driver-library-mismatch"  # type: ignore[union-attr]


def test_issue_excerpt_unknown_error_in_container() -> None:
    text = fixture_text("issue-excerpt__nvidia-container-toolkit-1227__nvml-unknown-error.txt")
    diag = diagnose_nvidia_smi(text, 255)
    assert diag is not None and diag.code == "nvml-unknown-error"
    assert "daemon-reload" in diag.fix and "container" in diag.fix.lower()
    assert "restart the container" in diag.fix.lower()


@pytest.mark.parametrize(
    ("output", "exit_code", "expected"),
    [
        ("bash: nvidia-smi: command not found", 127, "nvidia-smi-missing"),
        ("sh: 1: nvidia-smi: not found", 127, "nvidia-smi-missing"),
        ("", 127, "nvidia-smi-missing"),
        ("No devices were found", 6, "no-devices"),
        ("Failed to initialize NVML: Insufficient Permissions", 4, "permission-denied"),
        ("bash: /usr/bin/nvidia-smi: Permission denied", 126, "permission-denied"),
        (
            "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error",
            15,
            "gpu-lost",
        ),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.",
            12,
            "nvml-library-missing",
        ),
        ("something odd", 3, "nvidia-smi-failed"),
    ],
)
def test_shell_failures(output: str, exit_code: int, expected: str) -> None:
    diag = diagnose_nvidia_smi(output, exit_code)
    assert diag is not None and diag.code == expected
    assert diag.code in DIAGNOSES


def test_success_is_not_a_problem() -> None:
    table = "|    0   N/A  N/A   1234   C   permission denied unknown error   10MiB |"
    assert diagnose_nvidia_smi(table, 0) is None
    assert diagnose_nvidia_smi(table, None) is None  # a process name cannot fake an error
    assert diagnose_nvidia_smi("0, GPU-1, [Unknown Error], 5", None) is None  # a CSV value
    assert diagnose_nvidia_smi("", None) is None


def test_cpu_only_pytorch_note_where_it_applies() -> None:
    assert "CPU-only" in DIAGNOSES["no-devices"].fix
    assert "CPU-only" in DIAGNOSES["nvidia-smi-missing"].fix
    assert "--gpus all" in DIAGNOSES["no-devices"].fix


def test_diagnosis_detail_is_sanitised() -> None:
    diag = diagnose_nvidia_smi("Failed to initialize NVML: Unknown Error\x1b]0;pwn\x07\x1b[2J", 255)
    assert (
        diag is not None and "\x1b" not in (diag.detail or "") and "\x07" not in (diag.detail or "")
    )
