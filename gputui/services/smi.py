"""The headless GPU commands: `gputui smi` (a one-shot snapshot, like gpustat) and
`gputui doctor` (what is wrong and how to fix it).

Plain functions returning exit codes; `gputui.cli` parses the arguments and calls them:

- `smi_remote(services, NAME, as_json=...)` (async): an instance's GPUs and processes over SSH;
- `smi_local(as_json=...)`: this machine through NVML; without NVML, one diagnosis line and
  exit 1 (never a traceback);
- `smi_input(PATH, as_json=...)`: a saved capture (CSV with header, `-q -x` XML, the table);
- `doctor_local(as_json=...)` and `doctor_remote(services, NAME, as_json=...)` (async): the
  seed guides' checklist, one line per check: ok / warn / fail, and a fix.

Exit codes: 0 fine, 1 a failure (nvidia-smi or NVML unusable, a failed check). Instance and
SSH problems raise `gputui.services.hub.ServiceError` (the CLI prints it and exits 1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.errors import GputuiError
from gputui.i18n import N_, _, shown
from gputui.i18n import Deferred as D
from gputui.models import GpuSample, HostInventory, HostSample, Instance, ProcessSample
from gputui.nvidia.diagnose import DIAGNOSES, Diagnosis, diagnose_nvidia_smi
from gputui.nvidia.nvsmi import (
    NvsmiParseError,
    assign_gpu_indices,
    parse_compute_apps_csv,
    parse_query_gpu_csv,
    parse_table,
    parse_xml,
    query_gpu_command,
    sanitize,
    xml_samples,
)
from gputui.services.telemetry import read_processes
from gputui.services.telemetry.hints import snapshot_host_hints
from gputui.services.telemetry.vitals import read_vitals, vitals_command, vitals_json

if TYPE_CHECKING:
    from gputui.services.hub import Services

__all__ = [
    "Check",
    "Snapshot",
    "evaluate_checks",
    "format_host",
    "format_snapshot",
    "local_facts",
    "remote_facts",
    "snapshot_instance",
    "snapshot_json",
]



# --------------------------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    source: str
    inventory: HostInventory = field(default_factory=HostInventory)
    samples: list[GpuSample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # Deferred text: English in JSON
    host: HostSample | None = None  # CPU, memory, disks, network (an instance: two readings)


class SnapshotFailed(GputuiError):
    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(diagnosis.line())
        self.diagnosis = diagnosis


_GPU_KEYS = (
    "index", "name", "uuid", "utilization_gpu", "utilization_memory", "memory_used_mib",
    "memory_total_mib", "temperature_c", "power_draw_w", "power_limit_w", "fan_pct",
    "sm_clock_mhz", "pstate", "mig_mode",
)


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """`{"gpus": [...], "processes": [...]}` plus the source, versions and notes; a value
    the source says is N/A is null."""
    inv = {g.index: g for g in snap.inventory.gpus}
    gpus = []
    for s in snap.samples:
        d: dict[str, Any] = {k: s.raw(k) for k in _GPU_KEYS}  # out-of-range values as reported
        d["out_of_range"] = sorted(s.out_of_range)
        d["timestamp"] = s.timestamp.isoformat() if s.timestamp else None
        g = inv.get(s.index)
        if g is not None:
            d["name"] = d["name"] or g.name
            d["uuid"] = d["uuid"] or g.uuid
            d["memory_total_mib"] = d["memory_total_mib"] or g.memory_total_mib
            d["power_limit_w"] = d["power_limit_w"] or g.power_limit_w
            d["mig_devices"] = [json.loads(m.model_dump_json()) for m in g.mig_devices]
        else:
            d["mig_devices"] = []
        gpus.append(d)
    processes = [
        {
            "pid": p.pid,
            "gpu_index": p.gpu_index,
            "gpu_uuid": p.gpu_uuid,
            "used_memory_mib": p.used_memory_mib,
            "name": p.name,
            "user": p.user,
        }
        for p in snap.processes
    ]
    return {
        "source": snap.source,
        "driver_version": snap.inventory.driver_version,
        "cuda_version": snap.inventory.cuda_version,
        "gpus": gpus,
        "processes": processes,
        "host": vitals_json(snap.host),
        # what the host's vitals say beside the GPUs: data loading the bottleneck, a disk full
        "hints": [{"code": h.code, "severity": h.severity, "text": str(h.text)}
                  for h in snapshot_host_hints(snap.host, snap.samples)],
        "notes": list(snap.notes),
    }


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "N/A" if value is None else fmt.format(value)


# NVIDIA's names (MIG, GPU instance, compute instance): the same in every language
_MIG_LINE = "    MIG {profile} (GI {gi}, CI {ci}) {used} / {total} MiB"


def format_snapshot(snap: Snapshot) -> str:
    """gpustat-like text: a header line, one line per GPU with its processes."""
    inv = snap.inventory
    head = snap.source
    if inv.driver_version:
        head += "  " + _("driver {version}").format(version=inv.driver_version)
    if inv.cuda_version:
        head += f"  CUDA {inv.cuda_version}"
    lines = [head]
    by_gpu: dict[int | None, list[ProcessSample]] = {}
    for p in snap.processes:
        by_gpu.setdefault(p.gpu_index, []).append(p)
    width = max((len(s.name or "") for s in snap.samples), default=8)
    migs = {g.index: g.mig_devices for g in inv.gpus}
    for s in snap.samples:
        procs = " ".join(
            f"{(p.user + ':') if p.user else ''}{_short_cmd(p.name)}/{p.pid}"
            f"({_num(p.used_memory_mib)}M)"
            for p in by_gpu.get(s.index, [])
        )
        power = f"{_num(s.power_draw_w)} / {_num(s.power_limit_w)} W"
        lines.append(
            f"[{s.index}] {(s.name or '?'):<{width}} | {_num(s.temperature_c):>3}°C, "
            f"{_num(s.utilization_gpu):>3} % | {_num(s.memory_used_mib):>6} / "
            f"{_num(s.memory_total_mib):>6} MiB | {power:>13} | {procs}".rstrip(" |")
        )
        for m in migs.get(s.index, []):
            lines.append(_MIG_LINE.format(
                profile=m.profile or "?", gi=_num(m.gi_id), ci=_num(m.ci_id),
                used=_num(m.memory_used_mib), total=_num(m.memory_total_mib)))
    orphans = by_gpu.get(None, [])
    for p in orphans:
        lines.append("    " + _("process {pid} {command} ({memory}M)").format(
            pid=p.pid, command=_short_cmd(p.name), memory=_num(p.used_memory_mib)))
    if not snap.samples:
        lines.append(_("no GPUs"))
    lines.extend(format_host(snap))
    for note in snap.notes:
        lines.append(_("note: {note}").format(note=_shown(note)))
    return "\n".join(lines)


def format_host(snap: Snapshot) -> list[str]:
    """The host's vitals line and what they say (the bottleneck hint, a disk nearly full)."""
    if snap.host is None:
        return []
    return [_host_line(snap.host)] + ["⚑ " + str(shown(h.text))
                                      for h in snapshot_host_hints(snap.host, snap.samples)]


def _host_line(host: HostSample) -> str:
    """The host's vitals on one line: CPU, load, RAM, disk and network rates, each disk."""
    def gib(mib: float | None) -> str:
        return "?" if mib is None else f"{mib / 1024:.1f}"

    def rate(bps: float | None) -> str:
        return "?" if bps is None else f"{bps / 1e6:.1f} MB/s"

    parts = [_("CPU {pct} of {cores} cores").format(
        pct=f"{host.cpu_pct:.0f}%" if host.cpu_pct is not None else "?",
        cores=f"{host.cpu_cores:g}" if host.cpu_cores else "?")]
    if host.iowait_pct is not None:
        parts.append(_("I/O wait {pct}").format(pct=f"{host.iowait_pct:.0f}%"))
    if host.load1 is not None:
        parts.append(_("load {values}").format(values=" ".join(
            f"{v:.2f}" for v in (host.load1, host.load5, host.load15) if v is not None)))
    parts.append(_("RAM {used} GiB").format(
        used=f"{gib(host.mem_used_mib)}/{gib(host.mem_total_mib)}"))
    parts.append(_("disk read {read} write {write}").format(read=rate(host.disk_read_bps),
                                                            write=rate(host.disk_write_bps)))
    parts.append(_("network in {rx} out {tx}").format(rx=rate(host.net_rx_bps),
                                                      tx=rate(host.net_tx_bps)))
    disks = ", ".join(_("{mount} {pct} ({free} GiB free)").format(
        mount=d.mount, pct=f"{d.used_pct:.0f}%" if d.used_pct is not None else "?",
        free=f"{d.avail_kib / 1048576:.1f}") for d in host.disks)
    if disks:
        parts.append(_("disks") + " " + disks)
    return _("host: {vitals}").format(vitals=" · ".join(parts))


def _short_cmd(name: str | None, limit: int = 40) -> str:
    if not name:
        return "?"
    first = name.split()[0] if name.split() else name
    base = os.path.basename(first) or first
    rest = name[len(first):].strip()
    text = f"{base} {rest}".strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def snapshot_instance(services: Services, inst: Instance) -> Snapshot:
    """One reading of an instance's GPUs, processes and inventory over its SSH link.

    Raises SnapshotFailed (with a diagnosis) when nvidia-smi fails there, and the SSH layer's
    errors when the instance cannot be reached."""
    from gputui.providers.base import ProviderError
    from gputui.services.hub import ServiceError

    link = await services.link(inst)
    try:  # an instance over several machines (a multi-node Slurm allocation): each one's GPUs
        nodes = await services.provider(inst.provider).node_links(inst)
    except ProviderError as exc:
        raise ServiceError(str(exc)) from None
    samples: list[GpuSample] = []
    per = max(1, inst.gpu_count // len(nodes)) if nodes else 0
    for k, (_node, node_link) in enumerate(nodes or [("", link)]):
        result = await node_link.run(query_gpu_command(None), timeout=60)
        if result.exit_status != 0:
            diag = diagnose_nvidia_smi(result.stdout + "\n" + result.stderr, result.exit_status)
            raise SnapshotFailed(diag or DIAGNOSES["nvidia-smi-failed"])
        samples += [g.model_copy(update={"index": g.index + k * per}) if k else g
                    for g in parse_query_gpu_csv(result.stdout)]
    snap = Snapshot(inst.name, samples=samples)
    if nodes:
        snap.notes.append(D(N_("{n} nodes ({names}), one reading a node; processes, inventory "
                               "and host vitals are the first node's"), n=len(nodes),
                            names=", ".join(name for name, _l in nodes)))
    try:
        xml = await link.run("nvidia-smi -q -x", timeout=60)
        if xml.exit_status == 0:
            snap.inventory = parse_xml(xml.stdout)
    except NvsmiParseError:
        snap.notes.append(D(N_("nvidia-smi -q -x gave no readable report (no versions, no "
                               "MIG)")))
    uuids = {s.uuid: s.index for s in samples if s.uuid}
    procs, why = await read_processes(link, uuids, timeout=60)
    if procs is None:
        snap.notes.append(D(N_("processes not available: {why}"), why=why))
    else:
        snap.processes = procs
    vitals = await link.run(vitals_command(500, ticks=2), timeout=30)
    snap.host = read_vitals(vitals.stdout) if vitals.exit_status == 0 else None
    if snap.host is None:
        snap.notes.append(D(N_("host vitals not available (the instance has no sh, awk or "
                               "/proc)")))
    return snap


def read_capture(text: str, source: str) -> Snapshot:
    """A saved capture: `-q -x` XML, the plain table, or `--query-gpu` CSV (with header)."""
    head = text.lstrip()[:200]
    if head.startswith("<"):
        inv = parse_xml(text)
        samples = xml_samples(text)
        return Snapshot(source, inv, samples, list(inv.processes))
    if "NVIDIA-SMI" in text or head.startswith(("+--", "|")) or "Driver Version" in text:
        inv, samples, procs = parse_table(text)
        return Snapshot(source, inv, samples, assign_gpu_indices(procs, samples))
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.replace(" ", "").lower().startswith("pid,"):
        return Snapshot(source, processes=parse_compute_apps_csv(text))
    return Snapshot(source, samples=parse_query_gpu_csv(text))


# --------------------------------------------------------------------------------------------
# Doctor
# --------------------------------------------------------------------------------------------


# The doctor's checks, by the name JSON keeps; shown translated (technical names stay).
CHECK_NAMES = {"driver": N_("driver"), "container": N_("container"),
               "leftover processes": N_("leftover processes")}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    message: str
    fix: str | None = None

    def line(self) -> str:
        """The check for people: its name, a diagnosis's problem and fix in the interface
        language (the JSON keeps them in English)."""
        status = self.status.upper() if self.status != "ok" else "ok"
        name = _(CHECK_NAMES.get(self.name, self.name))
        text = f"{status:<4}  {name}: {_shown(self.message)}"
        if self.fix and self.status != "ok":
            text += _(" — fix: {fix}").format(fix=_shown(self.fix))
        return text


def _shown(message: str) -> str:
    """A check's message or fix in the interface language (JSON keeps the English)."""
    return message.translated() if isinstance(message, D) else _(message)


@dataclass(frozen=True)
class OwnProcess:
    """A GPU process gputui started or manages, which holds memory on purpose: the Ollama
    server with the models it loaded, or a queue run the jobs runner started and that is still
    running. Never a leftover."""

    kind: str  # "ollama" | "job"
    job_id: str = ""
    job_name: str = ""

    def label(self) -> D:
        if self.kind == "job":
            if self.job_name:
                return D(N_("gputui queue run {id}: {name}, running"), id=self.job_id,
                         name=self.job_name)
            return D(N_("gputui queue run {id}, running"), id=self.job_id)
        return D(N_("gputui's Ollama, holding the models it loaded"))


def own_process(pid: int, environ: Mapping[str, str], cmdline: str,
                job_status: str | None) -> OwnProcess | None:
    """What gputui knows `pid` to be, from its environment and command line: a run of the
    queue (the runner puts GPUTUI_JOB_ID in each run's environment) while that run is running
    — a process that outlived its run is a leftover —, or Ollama."""
    job = (environ.get("GPUTUI_JOB_ID") or "").strip()
    if job:
        if job_status != "running":
            return None
        return OwnProcess("job", sanitize(job, 20), sanitize(environ.get("GPUTUI_JOB_NAME")
                                                             or "", 40))
    if "ollama" in cmdline.lower():
        return OwnProcess("ollama")
    return None


_STATUS = re.compile(r'"status":\s*"([a-z]+)"')


def _job_status(state_json: str) -> str | None:
    m = _STATUS.search(state_json)
    return m.group(1) if m else None


def _local_own(pids: list[int], root: Path) -> dict[int, OwnProcess]:
    """`own_process` for this machine's GPU processes, from /proc (unreadable ones: unknown)."""
    out: dict[int, OwnProcess] = {}
    for pid in pids:
        proc = root / "proc" / str(pid)
        try:
            raw_env = (proc / "environ").read_bytes()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace")
        except OSError:
            continue
        environ = dict(kv.partition("=")[::2] for kv in raw_env.decode(
            "utf-8", "replace").split("\0") if "=" in kv)
        status = None
        job_dir = environ.get("GPUTUI_JOB_DIR")
        if environ.get("GPUTUI_JOB_ID") and job_dir:
            try:
                status = _job_status((Path(job_dir) / "state.json").read_text(
                    encoding="utf-8", errors="replace"))
            except OSError:
                status = None
        own = own_process(pid, environ, cmdline, status)
        if own is not None:
            out[pid] = own
    return out


@dataclass
class Facts:
    """What the checks look at, gathered locally or over SSH."""

    where: str
    remote: bool = False
    nvml_gpus: int | None = None  # local only: GPUs NVML sees
    nvml_names: list[str] = field(default_factory=list)
    nvml_diagnosis: Diagnosis | None = None
    nvml_checked: bool = False
    driver_version: str | None = None
    cuda_version: str | None = None
    smi_path: str | None = None
    smi_rc: int | None = None
    smi_output: str = ""
    samples: list[GpuSample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)
    env: dict[str, str | None] = field(default_factory=dict)
    container: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    torch: dict[str, Any] | None = None  # the probe's answer; None: could not run it
    own: dict[int, OwnProcess] = field(default_factory=dict)  # GPU processes that are gputui's


TORCH_PROBE = r"""
import json, warnings
try:
    import torch
except ImportError:
    print(json.dumps({"installed": False})); raise SystemExit(0)
except Exception as e:
    print(json.dumps({"installed": True, "error": str(e)[:300]})); raise SystemExit(0)
r = {"installed": True, "version": str(torch.__version__), "cuda": torch.version.cuda}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        r["available"] = bool(torch.cuda.is_available())
        r["count"] = int(torch.cuda.device_count()) if r["available"] else 0
    except Exception as e:
        r["available"] = False
        r["error"] = str(e)[:300]
r["warnings"] = [str(w.message)[:300] for w in caught][:3]
print(json.dumps(r))
""".strip()

_DOCKERENV, _CONTAINERENV, _CGROUP, _CONTAINER_VAR = "dockerenv", "containerenv", "cgroup", "container"
_CONTAINER_CGROUP = re.compile(r"docker|kubepods|containerd|libpod|lxc")
_MARK = "@@gputui "


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)
    return tuple(int(p) for p in parts[:2]) if parts else None


def _parse_probe(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def local_facts(
    *,
    nvml: Any = None,
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., Any] = subprocess.run,
    root: Path = Path("/"),
) -> Facts:
    """Gather the facts on this machine (nothing here raises)."""
    from gputui.nvidia.nvml import NvmlUnavailable, read_local

    env = os.environ if env is None else env
    facts = Facts("this machine", nvml_checked=True)
    try:
        reading = read_local(nvml)
    except NvmlUnavailable as exc:
        facts.nvml_diagnosis = exc.diagnosis
    else:
        facts.nvml_gpus = len(reading.samples)
        facts.nvml_names = [s.name or "?" for s in reading.samples]
        facts.driver_version = reading.inventory.driver_version
        facts.cuda_version = reading.inventory.cuda_version
        facts.samples = list(reading.samples)
        facts.processes = list(reading.processes)
    facts.smi_path = which("nvidia-smi")
    if facts.smi_path:
        try:
            done = run([facts.smi_path], capture_output=True, text=True, timeout=30,
                       errors="replace")
            facts.smi_rc = done.returncode
            facts.smi_output = (done.stdout or "") + (done.stderr or "")
        except (OSError, subprocess.SubprocessError) as exc:
            facts.smi_rc = 127 if isinstance(exc, FileNotFoundError) else -1
            facts.smi_output = str(exc)
        if facts.smi_rc == 0:
            inv, samples, procs = parse_table(facts.smi_output)
            facts.driver_version = facts.driver_version or inv.driver_version
            facts.cuda_version = facts.cuda_version or inv.cuda_version
            if not facts.samples:
                facts.samples = samples
                facts.processes = assign_gpu_indices(procs, samples)
    facts.own = _local_own(sorted({p.pid for p in facts.processes if p.pid > 0}), root)
    facts.env = {k: env.get(k) for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")}
    # the signs of a container, by their names (the remote script prints the same words)
    for sign, path in (_DOCKERENV, root / ".dockerenv"), (_CONTAINERENV,
                                                        root / "run" / ".containerenv"):
        if path.exists():
            facts.container.append(sign)
    try:
        cgroup = (root / "proc" / "1" / "cgroup").read_text(encoding="utf-8", errors="replace")
        if _CONTAINER_CGROUP.search(cgroup):
            facts.container.append(_CGROUP)
    except OSError:
        pass
    if env.get(_CONTAINER_VAR):
        facts.container.append(f"{_CONTAINER_VAR}={env.get(_CONTAINER_VAR)}")
    try:
        facts.devices = sorted(p.name for p in (root / "dev").iterdir()
                               if p.name.startswith("nvidia"))
    except OSError:
        facts.devices = []
    if importlib.util.find_spec("torch") is None:
        facts.torch = {"installed": False}
    else:
        try:
            done = run([sys.executable, "-c", TORCH_PROBE], capture_output=True, text=True,
                       timeout=120, errors="replace")
            facts.torch = _parse_probe(done.stdout) or {
                "installed": True, "error": sanitize(done.stderr.strip()[-300:], 300)}
        except (OSError, subprocess.SubprocessError) as exc:
            facts.torch = {"installed": True, "error": sanitize(str(exc), 300)}
    return facts


def _remote_script() -> str:
    probe = shlex.quote(TORCH_PROBE)
    m = _MARK
    return "\n".join([
        f"echo '{m}smi_path'; command -v nvidia-smi 2>/dev/null",
        f"echo '{m}smi'; nvidia-smi 2>&1; echo \"{m}smi_rc $?\"",
        f"echo '{m}env'",
        'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"',
        'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}"',
        f"echo '{m}container'",
        "[ -e /.dockerenv ] && echo dockerenv",
        "[ -e /run/.containerenv ] && echo containerenv",
        "grep -qsE 'docker|kubepods|containerd|libpod|lxc' /proc/1/cgroup && echo cgroup",
        f"echo '{m}dev'; ls /dev 2>/dev/null | grep '^nvidia'",
        # each GPU process: the queue run it belongs to (the runner's GPUTUI_JOB_* in its
        # environment, and that run's status), and its command line (Ollama's own)
        f"echo '{m}own'",
        "for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do "
        "case \"$p\" in ''|*[!0-9]*) continue ;; esac; "
        "e=$(tr '\\0\\t' '\\n ' < /proc/$p/environ 2>/dev/null); "
        "j=$(printf '%s\\n' \"$e\" | sed -n 's/^GPUTUI_JOB_ID=//p' | head -n 1); "
        "n=$(printf '%s\\n' \"$e\" | sed -n 's/^GPUTUI_JOB_NAME=//p' | head -n 1); "
        "d=$(printf '%s\\n' \"$e\" | sed -n 's/^GPUTUI_JOB_DIR=//p' | head -n 1); "
        "s=; [ -n \"$j\" ] && [ -r \"$d/state.json\" ] && "
        "s=$(sed -n 's/.*\"status\": *\"\\([a-z]*\\)\".*/\\1/p' \"$d/state.json\" | head -n 1); "
        "c=$(tr '\\0\\t' '  ' < /proc/$p/cmdline 2>/dev/null | cut -c1-200); "
        "printf '%s\\t%s\\t%s\\t%s\\t%s\\n' \"$p\" \"$j\" \"$n\" \"$s\" \"$c\"; done",
        f"echo '{m}torch'",
        "for py in python3 python; do if command -v $py >/dev/null 2>&1; then "
        f"$py -c {probe} 2>&1 | tail -n 5; break; fi; done",
        f"echo '{m}end'",
    ])


def parse_remote(where: str, stdout: str) -> Facts:
    """The facts from the remote script's output."""
    sections: dict[str, list[str]] = {}
    current = None
    rc = None
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            word = line[len(_MARK):].strip()
            if word.startswith("smi_rc"):
                parts = word.split()
                rc = int(parts[1]) if len(parts) > 1 and parts[1].lstrip("-").isdigit() else None
                current = None
                continue
            current = word
            sections[current] = []
            continue
        if current is not None:
            sections[current].append(line)
    facts = Facts(where, remote=True)
    path = "\n".join(sections.get("smi_path", [])).strip()
    facts.smi_path = sanitize(path, 200) or None
    facts.smi_output = "\n".join(sections.get("smi", []))
    facts.smi_rc = rc
    if facts.smi_path is None and rc is None:
        facts.smi_rc = 127
    if facts.smi_rc == 0:
        inv, samples, procs = parse_table(facts.smi_output)
        facts.driver_version, facts.cuda_version = inv.driver_version, inv.cuda_version
        facts.samples = samples
        facts.processes = assign_gpu_indices(procs, samples)
    for line in sections.get("env", []):
        key, _sep, value = line.partition("=")
        if key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
            facts.env[key] = None if value == "<unset>" else sanitize(value, 200)
    facts.container = [sanitize(x, 40) for x in sections.get("container", []) if x.strip()]
    facts.devices = [sanitize(x, 40) for x in sections.get("dev", []) if x.strip()]
    for line in sections.get("own", []):
        pid, job, name, status, cmdline = (line.split("\t", 4) + [""] * 5)[:5]
        if not pid.isdigit():
            continue
        own = own_process(int(pid), {"GPUTUI_JOB_ID": job, "GPUTUI_JOB_NAME": name}, cmdline,
                          status or None)
        if own is not None:
            facts.own[int(pid)] = own
    torch_lines = "\n".join(sections.get("torch", []))
    facts.torch = _parse_probe(torch_lines) if torch_lines.strip() else {"installed": False,
                                                                          "no_python": True}
    if facts.torch is None:
        facts.torch = {"installed": True, "error": sanitize(torch_lines.strip()[-300:], 300)}
    return facts


async def remote_facts(services: Services, inst: Instance) -> Facts:
    link = await services.link(inst)
    result = await link.run(_remote_script(), timeout=180)
    return parse_remote(inst.name, result.stdout)


def evaluate_checks(facts: Facts) -> list[Check]:
    """The checklist, most basic first."""
    checks: list[Check] = []
    smi_ok = facts.smi_rc == 0
    smi_diag: Diagnosis | None = None

    if facts.nvml_checked:
        if facts.nvml_diagnosis is None:
            names = ", ".join(sorted(set(facts.nvml_names))) or "?"
            checks.append(Check("nvml", "ok", D(N_("NVML sees {n} GPU(s): {names}"),
                                                n=facts.nvml_gpus, names=names)))
        else:
            d = facts.nvml_diagnosis
            problem = D(d.problem)
            checks.append(Check("nvml", "fail", D(N_("{problem} ({detail})"), problem=problem,
                                                  detail=d.detail) if d.detail else problem,
                                d.fix))

    if not facts.smi_path and facts.smi_rc in (None, 127):
        smi_diag = DIAGNOSES["nvidia-smi-missing"]
        checks.append(Check("nvidia-smi", "fail", smi_diag.problem, smi_diag.fix))
    elif smi_ok:
        checks.append(Check("nvidia-smi", "ok",
                            D(N_("{path} ran fine (exit 0), {n} GPU(s)"),
                              path=facts.smi_path or "nvidia-smi", n=len(facts.samples))))
    else:
        smi_diag = diagnose_nvidia_smi(facts.smi_output, facts.smi_rc if facts.smi_rc is not None
                                       else 1) or DIAGNOSES["nvidia-smi-failed"]
        said = D(N_(" (said: {detail})"), detail=smi_diag.detail) if smi_diag.detail else ""
        checks.append(Check("nvidia-smi", "fail",
                            D(N_("exit status {rc}: {problem}{said}"), rc=facts.smi_rc,
                              problem=D(smi_diag.problem), said=said), smi_diag.fix))

    # Driver and CUDA versions.
    if facts.driver_version or facts.cuda_version:
        checks.append(Check("driver", "ok", D(N_("driver {driver}, CUDA {cuda} (driver API)"),
                                              driver=facts.driver_version or "?",
                                              cuda=facts.cuda_version or "?")))
    else:
        checks.append(Check("driver", "fail" if not smi_ok else "warn",
                            D(N_("driver and CUDA versions unknown (no working driver found)")),
                            D(N_("install the NVIDIA driver (see the nvidia-smi check above)"))))

    # CUDA_VISIBLE_DEVICES.
    checks.append(_visible_devices_check(facts))

    # Containers.
    checks.append(_container_check(facts, smi_ok or bool(facts.nvml_gpus)))

    # PyTorch.
    checks.append(_torch_check(facts))

    # Leftover processes holding memory.
    checks.append(_leftover_check(facts))
    return checks


def _visible_devices_check(facts: Facts) -> Check:
    value = facts.env.get("CUDA_VISIBLE_DEVICES")
    count = len(facts.samples) or facts.nvml_gpus or 0
    if value is None:
        return Check("CUDA_VISIBLE_DEVICES", "ok", D(N_("not set: programs see every GPU")))
    stripped = value.strip()
    if stripped in ("", "-1", "none", "None", "NoDevFiles"):
        return Check("CUDA_VISIBLE_DEVICES", "warn",
                     D(N_("set to {value}: CUDA programs see no GPU at all"), value=repr(value)),
                     D(N_("unset it (`unset CUDA_VISIBLE_DEVICES`) or list the GPUs to use, "
                          "e.g. 0,1")))
    bad = []
    for part in stripped.split(","):
        part = part.strip()
        if part.isdigit() and count and int(part) >= count:
            bad.append(part)
    if bad:
        return Check("CUDA_VISIBLE_DEVICES", "warn",
                     D(N_("set to {value} but this machine has {n} GPU(s): {bad} do not exist "
                          "(CUDA stops at the first bad entry)"),
                       value=repr(value), n=count, bad=", ".join(bad)),
                     D(N_("use indexes 0..{last} or GPU UUIDs"), last=count - 1))
    return Check("CUDA_VISIBLE_DEVICES", "ok",
                 D(N_("set to {value}: programs see only those GPUs"), value=repr(value)))


def _container_check(facts: Facts, gpus_work: bool) -> Check:
    nv_env = facts.env.get("NVIDIA_VISIBLE_DEVICES")
    has_dev = any(re.fullmatch(r"nvidia\d+", d) for d in facts.devices)
    if facts.container:
        where = ", ".join(facts.container)
        if gpus_work:
            return Check("container", "ok",
                         D(N_("in a container ({where}); the GPUs are visible"), where=where))
        if not has_dev:
            fix = D(N_("start it with `docker run --gpus all` (NVIDIA Container Toolkit "
                       "installed on the host) or the platform's GPU option"))
            if nv_env is not None:
                fix = D(N_("{fix}; NVIDIA_VISIBLE_DEVICES is set to {value}"), fix=fix,
                        value=repr(nv_env))
            return Check("container", "fail",
                         D(N_("in a container ({where}) without /dev/nvidia* devices: the GPUs "
                              "were not passed in"), where=where),
                         fix)
        return Check("container", "fail",
                     D(N_("in a container ({where}) with /dev/nvidia* devices but no working "
                          "driver tools"), where=where),
                     DIAGNOSES["nvml-unknown-error"].fix)
    if not gpus_work and not has_dev:
        return Check("container", "warn",
                     D(N_("not a container, and no /dev/nvidia* device files: the driver is not "
                          "loaded or there is no NVIDIA GPU")),
                     DIAGNOSES["driver-not-loaded"].fix)
    return Check("container", "ok", D(N_("not in a container")))


def _torch_check(facts: Facts) -> Check:
    t = facts.torch or {}
    if not t.get("installed"):
        if t.get("no_python"):
            return Check("pytorch", "ok", D(N_("no Python here (nothing to check)")))
        return Check("pytorch", "ok", D(N_("PyTorch is not installed here (nothing to check)")))
    if t.get("version") is None:
        return Check("pytorch", "warn", D(N_("PyTorch is installed but did not import: {error}"),
                                          error=t.get("error", "?")),
                     D(N_("reinstall it: pip install --force-reinstall torch")))
    version = t["version"]
    cuda = t.get("cuda")
    if cuda is None:
        return Check("pytorch", "fail" if (facts.samples or facts.nvml_gpus) else "warn",
                     D(N_("PyTorch {version} is a CPU-only build (torch.version.cuda is None): "
                          "it cannot use the GPU"), version=version),
                     D(N_("pip install --force-reinstall torch --index-url "
                          "https://download.pytorch.org/whl/cu124 (pick the CUDA version the "
                          "driver supports)")))
    if t.get("available"):
        return Check("pytorch", "ok",
                     D(N_("PyTorch {version} (CUDA {cuda}) sees {n} GPU(s)"), version=version,
                       cuda=cuda, n=t.get("count", "?")))
    said = " ".join([*t.get("warnings", []), t.get("error") or ""]).strip()
    driver_cuda = _version_tuple(facts.cuda_version)
    torch_cuda = _version_tuple(cuda)
    too_old = "too old" in said.lower() or "insufficient" in said.lower() or (
        driver_cuda is not None and torch_cuda is not None and driver_cuda < torch_cuda)
    if too_old:
        return Check("pytorch", "fail",
                     D(N_("CUDA driver version is insufficient for CUDA runtime version: "
                          "PyTorch {version} needs CUDA {cuda}, the driver supports {supported}"),
                       version=version, cuda=cuda,
                       supported=facts.cuda_version or D(N_("an older CUDA"))),
                     D(N_("upgrade the NVIDIA driver, or install a torch built for the driver's "
                          "CUDA (e.g. --index-url https://download.pytorch.org/whl/cu118)")))
    cannot = D(N_("PyTorch {version} (CUDA {cuda}) cannot see a GPU"), version=version, cuda=cuda)
    return Check("pytorch", "fail",
                 D(N_("{problem}: {said}"), problem=cannot, said=sanitize(said, 200))
                 if said else cannot,
                 D(N_("fix the driver checks above first; check CUDA_VISIBLE_DEVICES; in a "
                      "container pass the GPUs in with --gpus all")))


def _own(p: ProcessSample, facts: Facts) -> OwnProcess | None:
    """gputui's own process, by what the machine said of it, else by its name (Ollama's
    server and runners are named ollama: a /proc that could not be read still says that)."""
    return facts.own.get(p.pid) or own_process(p.pid, {}, p.name or "", None)


def _leftover_check(facts: Facts) -> Check:
    util = {s.index: s.utilization_gpu for s in facts.samples}
    idle = [
        p for p in facts.processes
        if (p.used_memory_mib or 0) >= 256 and p.gpu_index is not None
        and util.get(p.gpu_index) is not None and (util.get(p.gpu_index) or 0) <= 1
    ]
    # what gputui started or manages holds memory on purpose: named as such, never a leftover
    own = [(p, o) for p in idle if (o := _own(p, facts)) is not None]
    leftovers = [p for p in idle if _own(p, facts) is None]
    if not facts.samples:
        return Check("leftover processes", "ok", D(N_("no GPU readings to check")))
    # each one's label shows in the interface language (JSON keeps the English)
    mine = D("; ".join(f"{{p{i}}}" for i in range(len(own[:5]))), **{
        f"p{i}": D(N_("PID {pid} ({what}) {mib} MiB on GPU {gpu}"), pid=p.pid, what=o.label(),
                   mib=f"{p.used_memory_mib or 0:.0f}", gpu=p.gpu_index)
        for i, (p, o) in enumerate(own[:5])})
    if not leftovers:
        if own:
            return Check("leftover processes", "ok",
                         D(N_("no leftover process: the memory on idle GPUs is gputui's own — "
                              "{processes}"), processes=mine))
        n = len(facts.processes)
        return Check("leftover processes", "ok",
                     D(N_("no idle process holds GPU memory ({n} GPU process)") if n == 1 else
                       N_("no idle process holds GPU memory ({n} GPU processes)"), n=n))
    desc = ", ".join(
        f"PID {p.pid} ({_short_cmd(p.name, 30)}) {p.used_memory_mib or 0:.0f} MiB on GPU "
        f"{p.gpu_index}" for p in leftovers[:5])
    pids = " ".join(str(p.pid) for p in leftovers[:5])
    how = (f"gputui ssh {shlex.quote(facts.where)} -- kill {pids}" if facts.remote
           else f"kill {pids}")
    message = D(N_("memory held on idle GPUs: {processes} — finished or hung jobs?"),
                processes=desc)
    if own:
        message = D(N_("{message} (not leftovers, gputui's own: {processes})"), message=message,
                    processes=mine)
    return Check("leftover processes", "warn", message,
                 D(N_("if they are leftovers, kill them: `{command}` (or k in the Monitor)"),
                   command=how))
