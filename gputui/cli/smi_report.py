"""What `gputui smi` and `gputui doctor` print: the snapshot, the checks, their exit codes.
The reading and checking is `gputui.services.smi`'s; this module only prints."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gputui.cli.output import print_json
from gputui.errors import EXIT_ERROR as EXIT_FAIL
from gputui.errors import EXIT_OK, one_line, os_reason
from gputui.i18n import N_, _, shown
from gputui.i18n import Deferred as D
from gputui.nvidia.diagnose import diagnose_nvidia_smi
from gputui.nvidia.nvsmi import NvsmiParseError
from gputui.services.smi import (
    Check,
    Snapshot,
    SnapshotFailed,
    evaluate_checks,
    format_host,
    format_snapshot,
    local_facts,
    read_capture,
    remote_facts,
    snapshot_instance,
    snapshot_json,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gputui.nvidia.diagnose import Diagnosis
    from gputui.services.hub import Services


def _emit(out: IO[str], text: str) -> None:
    out.write(text + "\n")
    out.flush()


def _fail_line(err: IO[str], what: str, diag: Diagnosis) -> None:
    _emit(err, f"gputui: {what}: {diag.line()}")


def _print_snapshot(snap: Snapshot, as_json: bool, out: IO[str]) -> None:
    if as_json:
        print_json(snapshot_json(snap), out)
    else:
        _emit(out, format_snapshot(snap))


def _print_failure(diag: Diagnosis, source: str, what: str, as_json: bool,
                   out: IO[str], err: IO[str]) -> int:
    _fail_line(err, what, diag)
    if as_json:
        print_json({"source": source, "gpus": [], "processes": [],
                    "diagnosis": diag.model_dump()}, out)
    return EXIT_FAIL


async def smi_remote(
    services: Services,
    name: str,
    *,
    as_json: bool = False,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """`gputui smi NAME [--json]`."""
    from gputui.remote.ssh import SSHLayerError
    from gputui.services.hub import ServiceError

    out, err = out or sys.stdout, err or sys.stderr
    inst = services.store.find_instance_sync(name)
    if not inst.status.live:
        raise ServiceError(f"{inst.name} is {inst.status.value}")
    try:
        snap = await snapshot_instance(services, inst)
    except SnapshotFailed as exc:
        return _print_failure(exc.diagnosis, inst.name, f"{inst.name}: nvidia-smi", as_json,
                              out, err)
    except SSHLayerError as exc:
        raise ServiceError(f"{inst.name}: {one_line(exc)}") from None
    _print_snapshot(snap, as_json, out)
    return EXIT_OK


def smi_local(
    *,
    as_json: bool = False,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    nvml: Any = None,
    host_reader: Any = None,
) -> int:
    """`gputui smi --local [--json]`: this machine through NVML, and its host vitals (CPU,
    memory, disks, network) from /proc (`host_reader`: tests give a fixed reading)."""
    from gputui.nvidia.nvml import NvmlUnavailable, read_local
    from gputui.services.telemetry.local_vitals import read_local_vitals

    host_reader = host_reader or read_local_vitals
    out, err = out or sys.stdout, err or sys.stderr
    try:
        reading = read_local(nvml)
    except NvmlUnavailable as exc:
        # the GPUs cannot be read; the host (CPU, memory, disks) still can, and is printed
        _fail_line(err, "NVML unavailable", exc.diagnosis)
        snap = Snapshot("local", host=host_reader())
        if as_json:
            data = snapshot_json(snap)
            data["diagnosis"] = exc.diagnosis.model_dump()
            print_json(data, out)
        elif snap.host is not None:
            _emit(out, "\n".join(format_host(snap)))
        return EXIT_FAIL
    snap = Snapshot("this machine (NVML)", reading.inventory, list(reading.samples),
                    list(reading.processes), list(reading.notes), host=host_reader())
    _print_snapshot(snap, as_json, out)
    return EXIT_OK


def smi_input(
    path: str | Path,
    *,
    as_json: bool = False,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """`gputui smi --input FILE [--json]` (`-` reads stdin)."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        if str(path) == "-":
            text = sys.stdin.read()
        else:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        _emit(err, "gputui: " + _("{path}: cannot read: {reason}").format(
            path=path, reason=shown(os_reason(exc))))
        return EXIT_FAIL
    try:
        snap = read_capture(text, str(path))
    except NvsmiParseError as exc:
        _emit(err, f"gputui: {path}: not an nvidia-smi capture: {exc}")
        return EXIT_FAIL
    if not snap.samples and not snap.processes:
        diag = diagnose_nvidia_smi(text, None)
        if diag is not None:
            return _print_failure(diag, str(path), f"{path}", as_json, out, err)
        _emit(err, f"gputui: {path}: no GPU readings found (CSV with a header, -q -x XML, "
                   "or the nvidia-smi table)")
        return EXIT_FAIL
    _print_snapshot(snap, as_json, out)
    return EXIT_OK


def _print_checks(target: str, checks: Sequence[Check], as_json: bool, out: IO[str]) -> int:
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        print_json({"target": target, "ok": not failed,
                    "checks": [asdict(c) for c in checks]}, out)
    else:
        _emit(out, f"gputui doctor: {shown(target)}")
        for c in checks:
            _emit(out, c.line())
    return EXIT_FAIL if failed else EXIT_OK


def doctor_local(*, as_json: bool = False, out: IO[str] | None = None, **facts_kw: Any) -> int:
    """`gputui doctor [--local] [--json]`."""
    facts = local_facts(**facts_kw)
    return _print_checks(D(N_("this machine")), evaluate_checks(facts), as_json,
                         out or sys.stdout)


async def doctor_remote(
    services: Services, name: str, *, as_json: bool = False, out: IO[str] | None = None
) -> int:
    """`gputui doctor NAME [--json]`: the same checks through SSH."""
    from gputui.remote.ssh import SSHLayerError
    from gputui.services.hub import ServiceError

    inst = services.store.find_instance_sync(name)
    if not inst.status.live:
        raise ServiceError(f"{inst.name} is {inst.status.value}")
    try:
        facts = await remote_facts(services, inst)
    except SSHLayerError as exc:
        raise ServiceError(f"{inst.name}: {one_line(exc)}") from None
    return _print_checks(inst.name, evaluate_checks(facts), as_json, out or sys.stdout)
