"""The plain ``nvidia-smi`` table."""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

from gputui.models import GpuInventory, GpuSample, HostInventory, MigDevice, ProcessSample

from .common import (
    _index,
    _int,
    _lines,
    _mib,
    _num,
    _text,
    _timestamp,
    _version,
    _watts,
)
from .mig import guess_mig_profile

# --------------------------------------------------------------------------------------------
# The plain table (`nvidia-smi`)
# --------------------------------------------------------------------------------------------

_TABLE_TIME_RE = re.compile(r"^\s*([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\s*$")
_DRIVER_RE = re.compile(r"(?:Driver|KMD) Version:\s*([0-9][\w.\-]*)")
_CUDA_RE = re.compile(r"CUDA(?: UMD)? Version:\s*([0-9][\w.\-]*|N/A)")
_GPU_LINE1_RE = re.compile(r"^\s*(\d{1,6})\s+(.*?)\s+(On|Off|WDDM|TCC|MCDM|N/A)?\s*$")
_GPU_LINE1_NAME_ONLY_RE = re.compile(r"^\s*(\d{1,6})\s+(.*?)\s*$")
_PWR_RE = re.compile(r"^(\S+)\s*/\s*(\S+)$")
_MEM_USAGE_RE = re.compile(r"^\s*(\S+?)\s*/\s*(\S+?)\s*$")
_PROC_RE = re.compile(
    r"^\|\s*(\d{1,6})\s+"
    r"(?:(N/A|\d+|-)\s+(N/A|\d+|-)\s+)?"
    r"(\d{1,10})\s+"
    r"([A-Z][A-Z+]{0,4}|N/A)\s+"
    r"(.*?)\s+"
    r"(\d+(?:\.\d+)?\s*[KMG]iB|N/A)\s*\|?\s*$"
)
_MIG_ROW_RE = re.compile(
    r"^\|\s*(\d{1,6})\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s*\|"
    r"\s*(\S+?)\s*/\s*(\S+?)\s*\|"
    r"\s*(\d+|N/A)\b"
)


def _cells(line: str) -> list[str]:
    """The cells of a `| a | b | c |` row."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [c.strip() for c in body.split("|")]


def _table_gpu(lines: list[str], timestamp: datetime | None) -> tuple[GpuSample, dict] | None:
    """One GPU's block: 2 rows (old layout) or 3 (with `MIG M.`)."""
    first = _cells(lines[0])
    if len(first) < 2:
        return None
    m = _GPU_LINE1_RE.match(first[0]) or _GPU_LINE1_NAME_ONLY_RE.match(first[0])
    if not m:
        return None
    index = _index(m.group(1))
    if index is None:
        return None
    name = _text(m.group(2))
    bus = first[1].split()
    bus_id = _text(bus[0], 32) if bus else None
    fan = temp = pstate = draw = limit = used = total = util = mig = None
    if len(lines) > 1:
        second = _cells(lines[1])
        if second:
            tokens = second[0].split()
            if len(tokens) >= 3:
                fan = _num(tokens[0])
                temp = _num(tokens[1])
                pstate = _text(tokens[2], 16)
                pm = _PWR_RE.match(" ".join(tokens[3:]))
                if pm:
                    draw, limit = _watts(pm.group(1)), _watts(pm.group(2))
        if len(second) > 1:
            mm = _MEM_USAGE_RE.match(second[1])
            if mm:
                used, total = _mib(mm.group(1)), _mib(mm.group(2))
        if len(second) > 2 and second[2].split():
            util = _num(second[2].split()[0])
    if len(lines) > 2:
        third = _cells(lines[2])
        if len(third) > 2:
            mig = _text(third[2], 32)
    sample = GpuSample(
        index=index,
        name=name,
        timestamp=timestamp,
        utilization_gpu=util,
        memory_used_mib=used,
        memory_total_mib=total,
        temperature_c=temp,
        power_draw_w=draw,
        power_limit_w=limit,
        fan_pct=fan,
        pstate=pstate,
        mig_mode=mig,
    )
    return sample, {"pci_bus_id": bus_id}


def parse_table(
    text: str | bytes, *, tz: tzinfo = UTC
) -> tuple[HostInventory, list[GpuSample], list[ProcessSample]]:
    """The plain `nvidia-smi` table: old (346/390) and new (450+, `MIG M.`) layouts, the 610
    header (`KMD Version` / `CUDA UMD Version`), Windows (`Driver-Model`), the `MIG devices`
    block and the process list. Names may be truncated by nvidia-smi (`GeForce GTX 108...`).
    Never raises; what it cannot read is left out."""
    try:
        return _parse_table(text, tz)
    except Exception:  # noqa: BLE001 - never raise on remote output
        return HostInventory(), [], []


def _parse_table(
    text: str | bytes, tz: tzinfo
) -> tuple[HostInventory, list[GpuSample], list[ProcessSample]]:
    lines = [line for line in _lines(text) if len(line) <= 4096]
    driver = cuda = None
    timestamp = None
    samples: list[GpuSample] = []
    extras: list[dict] = []
    processes: list[ProcessSample] = []
    mig_rows: list[
        tuple[int, int | None, int | None, int, float | None, float | None, int | None]
    ] = []

    section = None  # "gpus", "mig", "procs"
    block: list[str] = []

    def flush() -> None:
        if block:
            got = _table_gpu(block, timestamp)
            if got:
                samples.append(got[0])
                extras.append(got[1])
            block.clear()

    for line in lines:
        stripped = line.strip()
        if timestamp is None and section is None:
            tm = _TABLE_TIME_RE.match(line)
            if tm:
                timestamp = _timestamp(tm.group(1), tz)
                continue
        if driver is None:
            dm = _DRIVER_RE.search(line)
            if dm:
                driver = _version(dm.group(1))
                cm = _CUDA_RE.search(line)
                if cm:
                    cuda = _version(cm.group(1))
                continue
        if stripped.startswith("| Processes"):
            flush()
            section = "procs-head"
            continue
        if stripped.startswith("| MIG devices"):
            flush()
            section = "mig-head"
            continue
        if stripped.startswith("|=") or stripped.startswith("+=") or stripped.startswith("|="):
            if section is None:
                section = "gpus"
            elif section == "procs-head":
                section = "procs"
            elif section == "mig-head":
                section = "mig"
            continue
        if section == "gpus":
            if stripped.startswith("+") or stripped.startswith("|-") or not stripped:
                flush()
                if not stripped:
                    section = "after-gpus"
                continue
            if stripped.startswith("|"):
                block.append(stripped)
                if len(block) > 3:
                    flush()
            continue
        if section == "mig":
            mm = _MIG_ROW_RE.match(stripped)
            if mm:
                mig_rows.append(
                    (
                        int(mm.group(1)),
                        _int(mm.group(2)),
                        _int(mm.group(3)),
                        int(mm.group(4)),
                        _mib(mm.group(5)),
                        _mib(mm.group(6)),
                        _int(mm.group(7)),
                    )
                )
            elif not stripped:
                section = "after-mig"
            continue
        if section == "procs":
            pm = _PROC_RE.match(stripped)
            if pm:
                pid = _int(pm.group(4))
                gpu_index = _index(pm.group(1))
                if pid is not None:
                    processes.append(
                        ProcessSample(
                            pid=pid,
                            gpu_index=gpu_index,
                            name=_text(pm.group(6)),
                            used_memory_mib=_mib(pm.group(7).replace(" ", "")),
                            kind=_text(pm.group(5), 8),
                        )
                    )
            continue
    flush()

    by_index = {s.index: (s, e) for s, e in zip(samples, extras, strict=True)}
    migs: dict[int, list[MigDevice]] = {}
    for gpu_i, gi, ci, dev, used, total, sms in mig_rows:
        parent = by_index.get(gpu_i)
        product = parent[0].name if parent else None
        gpu_total = parent[0].memory_total_mib if parent else None
        migs.setdefault(gpu_i, []).append(
            MigDevice(
                gpu_index=gpu_i,
                gi_id=gi,
                ci_id=ci,
                mig_index=dev,
                memory_used_mib=used,
                memory_total_mib=total,
                profile=guess_mig_profile(product, sms, total, gpu_total),
            )
        )
    gpus = [
        GpuInventory(
            index=s.index,
            name=s.name,
            pci_bus_id=e.get("pci_bus_id"),
            memory_total_mib=s.memory_total_mib,
            power_limit_w=s.power_limit_w,
            mig_mode=s.mig_mode,
            mig_devices=migs.get(s.index, []),
        )
        for s, e in zip(samples, extras, strict=True)
    ]
    inventory = HostInventory(
        driver_version=driver, cuda_version=cuda, gpus=gpus, processes=processes
    )
    return inventory, samples, processes
