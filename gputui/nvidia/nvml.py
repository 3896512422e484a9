"""Local GPUs through NVML (nvidia-ml-py, module `pynvml`), as the same models nvidia-smi gives.

`read_local()` returns a `LocalReading` or raises `NvmlUnavailable`, whose `.diagnosis` says
what is wrong and how to fix it (no NVIDIA driver, driver not loaded, version mismatch, ...).
No exception but `NvmlUnavailable` leaves `read_local`. pynvml is imported inside the functions, so importing
this module never touches the library.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, Field, SkipValidation

from gputui.errors import GputuiError
from gputui.i18n import N_, _
from gputui.i18n import Deferred as D
from gputui.models import GpuInventory, GpuSample, HostInventory, MigDevice, ProcessSample
from gputui.nvidia.diagnose import DIAGNOSES, Diagnosis
from gputui.nvidia.nvsmi import guess_mig_profile, sanitize

__all__ = ["LocalReading", "NvmlUnavailable", "diagnosis_for_nvml_error", "read_local"]

T = TypeVar("T")
_MIB = 1024 * 1024


class LocalReading(BaseModel):
    """One reading of this machine's GPUs."""

    inventory: HostInventory
    samples: list[GpuSample] = Field(default_factory=list)
    processes: list[ProcessSample] = Field(default_factory=list)
    # what could not be read, e.g. processes: Deferred text (English in JSON; `shown()` for
    # people), kept as it is by pydantic
    notes: list[SkipValidation[str]] = Field(default_factory=list)


class NvmlUnavailable(GputuiError):
    """NVML cannot be used here; `.diagnosis` says why and what to do."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(_("{problem} {fix}").format(problem=diagnosis.problem_text,
                                                     fix=diagnosis.fix_text))
        self.diagnosis = diagnosis


# NVML error codes (stable across releases; the constants are in pynvml too).
_CODE_DIAGNOSIS = {
    12: "nvml-library-missing",  # NVML_ERROR_LIBRARY_NOT_FOUND
    9: "driver-not-loaded",  # NVML_ERROR_DRIVER_NOT_LOADED
    18: "driver-library-mismatch",  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    13: "nvml-function-missing",  # NVML_ERROR_FUNCTION_NOT_FOUND
    4: "permission-denied",  # NVML_ERROR_NO_PERMISSION
    15: "gpu-lost",  # NVML_ERROR_GPU_IS_LOST
    16: "gpu-lost",  # NVML_ERROR_RESET_REQUIRED
    6: "no-devices",  # NVML_ERROR_NOT_FOUND
    999: "nvml-unknown-error",  # NVML_ERROR_UNKNOWN
}
# Errors that mean the whole library or device is unusable, not one missing value.
_FATAL = {9, 12, 15, 16, 18, 1}  # ..., NVML_ERROR_UNINITIALIZED (1)
# Every other error on one value ("not supported", "no permission", "function not found",
# "unknown", ...) makes that value None.


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def diagnosis_for_nvml_error(exc: BaseException) -> Diagnosis:
    """The diagnosis for an NVML error (a `pynvml.NVMLError`; other exceptions, such as the
    bindings' own version-mismatch error, map to the closest one). Never raises."""
    code = _error_code(exc)
    key = _CODE_DIAGNOSIS.get(code) if code is not None else None
    if key is None:
        name = type(exc).__name__
        if "LibraryMismatch" in name or "FunctionNotFound" in name:
            key = "nvml-function-missing"
        elif "LibraryNotFound" in name or isinstance(exc, OSError):
            key = "nvml-library-missing"
        else:
            key = "nvidia-smi-failed"
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - pynvml's __str__ may call into the library
        message = ""
    detail = sanitize(f"NVML: {message}" if message else f"NVML error {code}", 200)
    base = DIAGNOSES[key]
    if key == "nvidia-smi-failed":
        base = base.model_copy(
            update={
                "problem": N_("NVML failed."),
                "fix": N_("Check the NVIDIA driver; reboot after driver updates. Run nvidia-smi "
                          "to see the full message."),
            }
        )
    return base.model_copy(update={"detail": detail})


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:  # the dependency is missing from this environment
        raise NvmlUnavailable(
            DIAGNOSES["nvml-library-missing"].model_copy(
                update={
                    "problem": N_("The nvidia-ml-py package (pynvml) is not installed."),
                    "fix": "pip install nvidia-ml-py",
                    "detail": sanitize(str(exc), 200),
                }
            )
        ) from None
    return pynvml


def read_local(nvml: ModuleType | None = None) -> LocalReading:
    """Read every local GPU once through NVML.

    Raises `NvmlUnavailable` (with a diagnosis) when NVML cannot be used at all. A value one
    GPU does not support is None; processes that cannot be listed leave a note.
    `nvml` replaces the `pynvml` module (for tests)."""
    nv = nvml if nvml is not None else _import_pynvml()
    error_type: type[BaseException] = getattr(nv, "NVMLError", Exception)
    # pynvml's own "bindings newer than the library" error is not an NVMLError.
    nvml_errors: tuple[type[BaseException], ...] = (error_type, OSError) + tuple(
        t
        for t in (getattr(nv, "NVMLLibraryMismatchError", None),)
        if isinstance(t, type) and issubclass(t, BaseException)
    )
    try:
        nv.nvmlInit()
    except nvml_errors as exc:
        raise NvmlUnavailable(diagnosis_for_nvml_error(exc)) from None
    try:
        return _read(nv, error_type)
    except NvmlUnavailable:
        raise
    except nvml_errors as exc:
        raise NvmlUnavailable(diagnosis_for_nvml_error(exc)) from None
    except Exception as exc:  # noqa: BLE001 - e.g. bindings that do not fit this driver
        # Not an NVML error: keep the cause for logs, show the diagnosis.
        raise NvmlUnavailable(diagnosis_for_nvml_error(exc)) from exc
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting down must not hide the reading
            pass


def _read(nv: ModuleType, error_type: type[BaseException]) -> LocalReading:
    notes: list[str] = []  # Deferred text

    def opt(fn: Callable[..., T], *args: Any) -> T | None:
        """fn(*args), or None where this GPU/driver cannot give the value."""
        try:
            return fn(*args)
        except error_type as exc:
            code = _error_code(exc)
            if code in _FATAL:
                raise
            return None
        except (AttributeError, TypeError, ValueError, OSError):
            return None

    def text(value: Any, limit: int = 256) -> str | None:
        if value is None:
            return None
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        cleaned = sanitize(value, limit)
        return cleaned or None

    driver = text(opt(nv.nvmlSystemGetDriverVersion), 32)
    cuda_raw = None
    for fn_name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        fn = getattr(nv, fn_name, None)
        if fn is not None and cuda_raw is None:
            cuda_raw = opt(fn)
    cuda = (
        f"{cuda_raw // 1000}.{(cuda_raw % 1000) // 10}"
        if isinstance(cuda_raw, int) and cuda_raw > 0
        else None
    )

    count = nv.nvmlDeviceGetCount()
    if not count:
        raise NvmlUnavailable(DIAGNOSES["no-devices"].model_copy(update={"detail": "NVML: 0 GPUs"}))

    now = datetime.now(UTC)
    gpus: list[GpuInventory] = []
    samples: list[GpuSample] = []
    processes: list[ProcessSample] = []
    mig_enabled = getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1)

    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except error_type as exc:
            if _error_code(exc) in _FATAL:
                raise
            notes.append(D(N_("GPU {index}: {note}"), index=index,
                           note=diagnosis_for_nvml_error(exc).detail))
            continue
        name = text(opt(nv.nvmlDeviceGetName, handle))
        uuid = text(opt(nv.nvmlDeviceGetUUID, handle), 96)
        mem = opt(nv.nvmlDeviceGetMemoryInfo, handle)
        used = mem.used / _MIB if mem is not None else None
        total = mem.total / _MIB if mem is not None else None
        util = opt(nv.nvmlDeviceGetUtilizationRates, handle)
        temp = opt(nv.nvmlDeviceGetTemperature, handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        power_mw = opt(nv.nvmlDeviceGetPowerUsage, handle)
        limit_mw = opt(nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        if limit_mw is None:
            limit_mw = opt(nv.nvmlDeviceGetPowerManagementLimit, handle)
        fan = opt(nv.nvmlDeviceGetFanSpeed, handle)
        sm_clock = opt(nv.nvmlDeviceGetClockInfo, handle, getattr(nv, "NVML_CLOCK_SM", 1))
        pstate = opt(nv.nvmlDeviceGetPerformanceState, handle)
        mig_modes = opt(nv.nvmlDeviceGetMigMode, handle)
        mig_mode = None
        if mig_modes:
            mig_mode = "Enabled" if mig_modes[0] == mig_enabled else "Disabled"
        ecc = opt(nv.nvmlDeviceGetEccMode, handle)
        pci = opt(nv.nvmlDeviceGetPciInfo, handle)
        bus_id = None
        if pci is not None:
            bus_id = text(getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None), 32)

        sample = GpuSample(
            index=index,
            uuid=uuid,
            name=name,
            timestamp=now,
            utilization_gpu=float(util.gpu) if util is not None else None,
            utilization_memory=float(util.memory) if util is not None else None,
            memory_used_mib=used,
            memory_total_mib=total,
            temperature_c=float(temp) if temp is not None else None,
            power_draw_w=power_mw / 1000 if power_mw is not None else None,
            power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
            fan_pct=float(fan) if fan is not None else None,
            sm_clock_mhz=float(sm_clock) if sm_clock is not None else None,
            pstate=f"P{pstate}" if isinstance(pstate, int) and 0 <= pstate <= 15 else None,
            mig_mode=mig_mode,
        )
        samples.append(sample)
        gpus.append(
            GpuInventory(
                index=index,
                name=name,
                uuid=uuid,
                serial=text(opt(nv.nvmlDeviceGetSerial, handle), 64),
                pci_bus_id=bus_id,
                memory_total_mib=total,
                power_limit_w=sample.power_limit_w,
                ecc_mode=("Enabled" if ecc[0] else "Disabled") if ecc else None,
                mig_mode=mig_mode,
                pcie_gen=opt(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                pcie_width=opt(nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
                vbios=text(opt(nv.nvmlDeviceGetVbiosVersion, handle), 64),
                mig_devices=_mig_devices(nv, handle, index, name, total, opt, text)
                if mig_mode == "Enabled"
                else [],
            )
        )
        procs, note = _compute_processes(nv, handle, error_type)
        if note:
            notes.append(D(N_("GPU {index}: {note}"), index=index, note=note))
        for proc in procs:
            pid = getattr(proc, "pid", None)
            if not isinstance(pid, int):
                continue
            mem_bytes = getattr(proc, "usedGpuMemory", None)
            processes.append(
                ProcessSample(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_index=index,
                    name=text(opt(nv.nvmlSystemGetProcessName, pid)),
                    used_memory_mib=mem_bytes / _MIB if isinstance(mem_bytes, int) else None,
                    kind="C",
                )
            )

    inventory = HostInventory(
        driver_version=driver, cuda_version=cuda, gpus=gpus, processes=processes
    )
    return LocalReading(inventory=inventory, samples=samples, processes=processes, notes=notes)


def _compute_processes(
    nv: ModuleType, handle: Any, error_type: type[BaseException]
) -> tuple[list[Any], str | None]:
    """The compute processes, trying the newest NVML entry point first (`_v3`, then `_v2`):
    bindings newer than the driver raise FunctionNotFound for the newer ones."""
    last: BaseException | None = None
    for name in (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
    ):
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            return list(fn(handle) or []), None
        except error_type as exc:
            last = exc
            if _error_code(exc) in (13,):  # function not found: try the older one
                continue
            if _error_code(exc) in _FATAL:
                raise
            break
        except Exception as exc:  # noqa: BLE001 - e.g. pynvml's NVMLLibraryMismatchError
            last = exc
            continue
    if last is None:
        return [], D(N_("process list not available"))
    return [], D(N_("process list not available ({detail})"),
                 detail=sanitize(diagnosis_for_nvml_error(last).detail or "", 160))


def _mig_devices(
    nv: ModuleType,
    handle: Any,
    index: int,
    product: str | None,
    gpu_total: float | None,
    opt: Callable[..., Any],
    text: Callable[..., str | None],
) -> list[MigDevice]:
    count = opt(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    out: list[MigDevice] = []
    for mig_index in range(int(count)):
        mig = opt(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, mig_index)
        if mig is None:
            continue
        mem = opt(nv.nvmlDeviceGetMemoryInfo, mig)
        attrs = opt(nv.nvmlDeviceGetAttributes, mig)
        total = mem.total / _MIB if mem is not None else None
        sms = getattr(attrs, "multiprocessorCount", None) if attrs is not None else None
        name = text(opt(nv.nvmlDeviceGetName, mig))  # "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
        profile = None
        if name and " MIG " in name:
            profile = name.rsplit(" MIG ", 1)[1].strip() or None
        out.append(
            MigDevice(
                gpu_index=index,
                gi_id=opt(nv.nvmlDeviceGetGpuInstanceId, mig),
                ci_id=opt(nv.nvmlDeviceGetComputeInstanceId, mig),
                mig_index=len(out),
                profile=profile or guess_mig_profile(product, sms, total, gpu_total),
                memory_used_mib=mem.used / _MIB if mem is not None else None,
                memory_total_mib=total,
                uuid=text(opt(nv.nvmlDeviceGetUUID, mig), 96),
            )
        )
    return out
