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

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gputui.models import Instance
from gputui.remote.ollama_client import (
    InstalledModel,
    ModelInfo,
    OllamaClient,
    OllamaError,
    OllamaNotFound,
    PullProgress,
    RunningModel,
    normalize_name,
    parse_host,
)
from gputui.services.hub import ServiceError, Services

__all__ = [
    "DEFAULT_PORT",
    "DROPIN_DIR",
    "DROPIN_NAME",
    "INSTALL_COMMAND",
    "FitCheck",
    "FitRefused",
    "GpuInfo",
    "InstalledModel",
    "LoadResult",
    "OllamaService",
    "OllamaServiceError",
    "OllamaStatus",
    "PlacementReport",
    "PullProgress",
    "RunningModel",
    "ServerProbe",
    "check_fit",
    "cuda_visible_value",
    "nohup_start_command",
    "ollama_command",
    "parse_gpu_rows",
    "parse_probe",
    "probe_script",
    "restart_warning",
    "service_for",
    "selection_of",
    "stop_process_command",
    "systemd_apply_commands",
    "systemd_dropin",
]

DEFAULT_PORT = 11434
DEFAULT_CONTEXT = 4096  # Ollama's num_ctx when OLLAMA_CONTEXT_LENGTH is not set
INSTALL_COMMAND = "curl -fsSL https://ollama.com/install.sh | sh"
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


class FitRefused(OllamaServiceError):
    """A load that would not fit the selected GPUs (ask again with force=True to try anyway)."""

    def __init__(self, fit: FitCheck) -> None:
        super().__init__(fit.message)
        self.fit = fit


# --------------------------------------------------------------------------- the probe


def probe_script(*, client_version: bool = True) -> str:
    """One shell script that finds the Ollama server and prints `key=value` lines
    (`client_version`: also ask the installed `ollama` its version when no server runs).

    It never spells the server's command line (`ollama` then ` serve`) in its own text, so it
    cannot find itself in /proc.
    """
    script = _PROBE if client_version else _PROBE.rpartition("elif")[0] + "fi\n"
    return script


_PROBE = r"""sv=serve
echo "uid=$(id -u 2>/dev/null)"
echo "home=$HOME"
b=$(command -v ollama 2>/dev/null)
echo "bin=$b"
echo "login_host=$OLLAMA_HOST"
is_srv() {
  [ -r "/proc/$1/cmdline" ] || return 1
  c=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)
  case "$c" in *[o]llama*" $sv"*) ;; *) return 1 ;; esac
  st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
  [ "$st" != Z ]
}
pid=
if command -v systemctl >/dev/null 2>&1 && systemctl cat ollama.service >/dev/null 2>&1; then
  echo "unit=ollama.service"
  echo "unit_active=$(systemctl is-active ollama.service 2>/dev/null)"
  p=$(systemctl show -p MainPID --value ollama.service 2>/dev/null)
  echo "unit_pid=$p"
  for kv in $(systemctl show -p Environment --value ollama.service 2>/dev/null); do
    echo "unit_env=$kv"
  done
  [ -f /etc/systemd/system/ollama.service.d/zz-gputui-gpus.conf ] && echo "dropin=1"
  case "$p" in ''|0|*[!0-9]*) ;; *) is_srv "$p" && pid=$p ;; esac
fi
if [ -z "$pid" ] && [ -r "$HOME/.ollama/gputui-serve.pid" ]; then
  p=$(cat "$HOME/.ollama/gputui-serve.pid" 2>/dev/null)
  case "$p" in ''|*[!0-9]*) ;; *) is_srv "$p" && pid=$p ;; esac
fi
if [ -z "$pid" ]; then
  if printf 'x\0' | grep -qxz x 2>/dev/null; then
    cands=$(grep -lsxz -e "$sv" /proc/[0-9]*/cmdline 2>/dev/null)
  else
    cands=$(ls -d /proc/[0-9]*/cmdline 2>/dev/null)
  fi
  for f in $cands; do
    d=${f%/cmdline}
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    is_srv "$p" || continue
    if [ -n "$GPUTUI_SANDBOX_ROOT" ]; then
      tr '\0' '\n' < "$d/environ" 2>/dev/null \
        | grep -qxF "GPUTUI_SANDBOX_ROOT=$GPUTUI_SANDBOX_ROOT" || continue
    fi
    pid=$p
    break
  done
fi
if [ -n "$pid" ]; then
  echo "pid=$pid"
  if [ -r "/proc/$pid/environ" ]; then
    echo "env_readable=1"
    tr '\0' '\n' < "/proc/$pid/environ" \
      | grep -E '^(OLLAMA_[A-Z0-9_]+|CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER)=' | sed 's/^/env=/'
  fi
elif [ -n "$b" ]; then
  echo "client_version=$("$b" --version 2>&1 | sed -n 's/.*version is //p' | tail -n 1)"
fi
"""


GPU_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "memory.free")


def gpu_query_command() -> str:
    return f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits"


def compute_apps_query() -> str:
    return (
        "nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_gpu_memory "
        "--format=csv,noheader,nounits"
    )


def _clean(text: str, limit: int = 256) -> str:
    from gputui.nvidia.nvsmi import sanitize

    return sanitize(text, limit)


@dataclass(frozen=True)
class ServerProbe:
    """What the probe found on the instance."""

    binary: str | None = None
    uid: int | None = None
    home: str | None = None
    unit: str | None = None
    unit_active: str | None = None
    unit_pid: int | None = None
    unit_env: dict[str, str] = field(default_factory=dict)
    dropin: bool = False
    pid: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # from /proc/PID/environ
    env_readable: bool = False
    client_version: str | None = None
    login_host: str | None = None

    @property
    def installed(self) -> bool:
        return bool(self.binary) or self.unit is not None

    @property
    def managed_by(self) -> Literal["systemd", "process"] | None:
        if self.unit is not None and (self.unit_active == "active" or self.pid is None):
            return "systemd"
        if self.pid is not None or self.binary:
            return "process"
        return None

    @property
    def running(self) -> bool:
        return self.pid is not None or (self.unit is not None and self.unit_active == "active")

    @property
    def server_env(self) -> dict[str, str]:
        """The server's settings: the unit's Environment= overlaid by the live process's."""
        merged = dict(self.unit_env) if self.managed_by == "systemd" else {}
        merged.update(self.env)
        return merged


def parse_probe(text: str) -> ServerProbe:
    values: dict[str, str] = {}
    env: dict[str, str] = {}
    unit_env: dict[str, str] = {}
    for raw in text.splitlines():
        key, sep, value = raw.partition("=")
        if not sep:
            continue
        key = key.strip()
        if key in ("env", "unit_env"):
            name, sep2, val = value.partition("=")
            if sep2 and _ENV_NAME.match(name):
                (env if key == "env" else unit_env)[name] = _clean(val.strip().strip('"'), 512)
            continue
        values[key] = _clean(value.strip(), 512)

    def num(key: str) -> int | None:
        v = values.get(key, "")
        return int(v) if v.isdigit() else None

    unit_pid = num("unit_pid")
    return ServerProbe(
        binary=values.get("bin") or None,
        uid=num("uid"),
        home=values.get("home") or None,
        unit=values.get("unit") or None,
        unit_active=values.get("unit_active") or None,
        unit_pid=unit_pid if unit_pid else None,
        unit_env=unit_env,
        dropin=values.get("dropin") == "1",
        pid=num("pid"),
        env=env,
        env_readable=values.get("env_readable") == "1",
        client_version=values.get("client_version") or None,
        login_host=values.get("login_host") or None,
    )


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str | None
    name: str | None
    memory_total_mib: float | None
    memory_used_mib: float | None
    memory_free_mib: float | None

    @property
    def short_name(self) -> str:
        from gputui.format import short_gpu

        return short_gpu(self.name) if self.name else "GPU"

    @property
    def free_bytes(self) -> int:
        return int((self.memory_free_mib or 0) * MIB)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "uuid": self.uuid, "name": self.name,
            "memory_total_mib": self.memory_total_mib, "memory_used_mib": self.memory_used_mib,
            "memory_free_mib": self.memory_free_mib,
        }


def _num(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value >= 0 else None  # NaN, negatives: unknown


def parse_gpu_rows(text: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free
    --format=csv,noheader,nounits` -> GpuInfo (odd lines skipped)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        name = ", ".join(cells[2:-3])
        uuid = cells[1] if cells[1].startswith(("GPU-", "MIG-")) else None
        out.append(GpuInfo(
            index=int(cells[0]), uuid=_clean(uuid, 96) if uuid else None,
            name=_clean(name, 96) or None, memory_total_mib=_num(cells[-3]),
            memory_used_mib=_num(cells[-2]), memory_free_mib=_num(cells[-1]),
        ))
    return out


def selection_of(value: str | None, gpus: Sequence[GpuInfo]) -> list[int]:
    """The GPU indices a CUDA_VISIBLE_DEVICES value lets a program use, in its order (None:
    all). Entries are indices or (prefixes of) GPU UUIDs; like CUDA, the list stops at the
    first entry that names no GPU."""
    if value is None:
        return [g.index for g in gpus]
    out: list[int] = []
    for item in (s.strip() for s in value.split(",")):
        match = None
        for gpu in gpus:
            if (item.isdigit() and int(item) == gpu.index) or (
                item.startswith(("GPU-", "MIG-")) and gpu.uuid and gpu.uuid.startswith(item)
            ):
                match = gpu.index
        if match is None or match in out:
            break
        out.append(match)
    return out


def cuda_visible_value(gpus: Sequence[GpuInfo], indices: Sequence[int]) -> str:
    """CUDA_VISIBLE_DEVICES naming `indices` by UUID (unambiguous whatever CUDA's device order);
    by index only where a GPU reports no UUID."""
    by_index = {g.index: g for g in gpus}
    out = []
    for index in indices:
        gpu = by_index.get(index)
        if gpu is None:
            known = ", ".join(str(i) for i in sorted(by_index)) or "none"
            raise OllamaServiceError(f"no GPU {index} on this instance (GPUs: {known})")
        out.append(gpu.uuid or str(index))
    return ",".join(out)


def parse_gpu_list(text: str) -> list[int] | None:
    """'0,1' / '1' / 'all' -> indices (None: all GPUs)."""
    text = text.strip().lower()
    if text in ("all", "*", ""):
        return None
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part.isdigit():
            raise OllamaServiceError(f"not a GPU index: {part!r} (give e.g. 0,1 or all)")
        if int(part) not in out:
            out.append(int(part))
    return out


# --------------------------------------------------------------------------- restarting


def _check_env_value(name: str, value: str) -> None:
    if not _ENV_NAME.match(name):
        raise OllamaServiceError(f"not an environment variable name: {name!r}")
    if any(c in value for c in "\"\\\n\r") or "$" in value:
        raise OllamaServiceError(f"{name}: value {value!r} has characters systemd would mangle")


def systemd_dropin(env: Mapping[str, str]) -> str:
    """The drop-in gputui writes for ollama.service: one `Environment=` line per variable."""
    lines = [
        "# Written by gputui: the GPUs Ollama may use.",
        f"# To undo: rm {DROPIN_DIR}/{DROPIN_NAME} && systemctl daemon-reload "
        "&& systemctl restart ollama",
        "[Service]",
    ]
    for name, value in env.items():
        _check_env_value(name, value)
        lines.append(f'Environment="{name}={value}"')
    return "\n".join(lines) + "\n"


def systemd_apply_commands(
    dropin: str | None, *, sudo: bool = False, unit: str = UNIT, dropin_dir: str = DROPIN_DIR
) -> list[str]:
    """The commands, in order, that put `dropin` in place (None: remove ours) and restart."""
    s = "sudo -n " if sudo else ""
    path = shlex.quote(f"{dropin_dir}/{DROPIN_NAME}")
    if dropin is None:
        cmds = [f"{s}rm -f {path}"]
    else:
        cmds = [
            f"{s}mkdir -p {shlex.quote(dropin_dir)}",
            f"printf '%s' {shlex.quote(dropin)} | {s}tee {path} > /dev/null",
        ]
    cmds += [f"{s}systemctl daemon-reload", f"{s}systemctl restart {shlex.quote(unit)}"]
    return cmds


def systemd_start_commands(*, sudo: bool = False, unit: str = UNIT) -> list[str]:
    return [f"{'sudo -n ' if sudo else ''}systemctl start {shlex.quote(unit)}"]


def stop_process_command(pid: int, *, grace_s: float = 10.0, sudo: bool = False) -> str:
    """SIGTERM `pid`, wait until it is gone (a zombie counts as gone), SIGKILL after
    `grace_s`."""
    s = "sudo -n " if sudo else ""
    ticks = max(1, int(grace_s * 10))
    return (
        f"p={int(pid)}; {s}kill $p 2>/dev/null; i=0; "
        "while kill -0 $p 2>/dev/null && [ \"$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' "
        "/proc/$p/status 2>/dev/null)\" != Z ]; do "
        f"i=$((i+1)); if [ $i -ge {ticks} ]; then {s}kill -9 $p 2>/dev/null; break; fi; "
        "sleep 0.1; done"
    )


def nohup_start_command(binary: str, env: Mapping[str, str | None]) -> str:
    """Start `binary serve` detached (nohup, own log, stdin from /dev/null): `env` values are
    set, None values unset. Prints the new PID (also kept in ~/.ollama/gputui-serve.pid)."""
    parts = ["nohup", "env"]
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise OllamaServiceError(f"not an environment variable name: {name!r}")
        if value is None:
            parts += ["-u", name]
    for name, value in env.items():
        if value is not None:
            parts.append(f"{name}={shlex.quote(value)}")
    parts += [shlex.quote(binary), "serve"]
    return (
        'mkdir -p "$HOME/.ollama"; cd "$HOME" || exit 1; '
        f'{" ".join(parts)} >> "{LOG_FILE}" 2>&1 < /dev/null & '
        f'echo $! > "{PID_FILE}"; echo $!'
    )


def restart_warning(running: Sequence[RunningModel]) -> str:
    if not running:
        return "Restarting Ollama: no model is loaded, nothing is lost."
    names = ", ".join(m.name for m in running)
    return f"Restarting Ollama unloads the running models ({names}); load them again afterwards."


# --------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    weights: int | None  # bytes
    kv: int
    graph: int
    context: int
    parallel: int
    source: str  # "installed" | "catalog" | "unknown"

    @property
    def weights_kv(self) -> int:
        return int(((self.weights or 0) + self.kv) * (1 + FIT_MARGIN))

    @property
    def fixed_per_gpu(self) -> int:
        return self.graph + GPU_OVERHEAD_BYTES

    @property
    def one_gpu(self) -> int:
        return self.weights_kv + self.fixed_per_gpu


def _gb(n: float) -> str:
    """Memory and model sizes, GiB like every GPU figure (format.format_gib)."""
    from gputui.format import format_gib

    return format_gib(n)


def _human(n: float) -> str:
    from gputui.format import format_gib

    return format_gib(n) if n >= 2**30 else f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{int(n)} B"


def _catalog_tag(catalog_name: str) -> str:
    """'Qwen2.5-7B' -> 'qwen2.5:7b'; 'Llama-3.1-70B' -> 'llama3.1:70b'."""
    base, _, size = catalog_name.lower().rpartition("-")
    return f"{base.replace('llama-', 'llama')}:{size}"


def estimate_model(
    name: str,
    *,
    installed: InstalledModel | None,
    info: ModelInfo | None,
    context: int,
    parallel: int,
) -> ModelEstimate:
    """Weights + KV cache + graph for `name` at `context` tokens x `parallel` sequences: from
    the server when it knows the model, else from the catalog's estimator."""
    from gputui.catalog.errors import FitError
    from gputui.catalog.fit import estimate_fit, get_model

    catalog = None
    with contextlib.suppress(FitError):
        catalog = get_model(name)
    weights = installed.size if installed is not None else None
    source = "installed" if weights is not None else "unknown"
    kv = info.kv_bytes(context, parallel) if info is not None else None
    embedding = info.embedding if info is not None else None
    if catalog is not None:
        ctx = min(context, catalog.max_context or context)
        if weights is None:
            with contextlib.suppress(FitError):
                est = estimate_fit(catalog, "inference", "q4_k_m", context=ctx)
                weights = next(p.bytes for p in est.parts if p.name == "weights")
                source = "catalog"
        if kv is None:
            kv = int(catalog.kv_bytes_per_token(2) * ctx * parallel)
        if embedding is None:
            embedding = catalog.hidden
    graph = context * parallel * embedding * 8 if embedding else 512 * MIB
    return ModelEstimate(name, weights, kv or 0, graph, context, parallel, source)


FitVerdict = Literal["loaded", "fits", "spread", "spill", "unknown"]


@dataclass(frozen=True)
class FitCheck:
    model: str
    verdict: FitVerdict
    message: str
    estimate: ModelEstimate | None = None
    selected: tuple[int, ...] = ()
    gpu: int | None = None  # where it goes when it fits on one
    free_bytes: int = 0  # on the selected GPUs
    would_fit: tuple[str, ...] = ()  # models that would fit the selection instead
    better_selection: tuple[int, ...] | None = None  # GPUs that would hold it

    @property
    def ok(self) -> bool:
        return self.verdict in ("loaded", "fits", "spread", "unknown")

    def as_dict(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "model": self.model, "verdict": self.verdict, "ok": self.ok, "message": self.message,
            "need_bytes": est.one_gpu if est else None,
            "weights_bytes": est.weights if est else None,
            "kv_bytes": est.kv if est else None,
            "context": est.context if est else None,
            "selected": list(self.selected), "gpu": self.gpu, "free_bytes": self.free_bytes,
            "would_fit": list(self.would_fit),
            "better_selection": None if self.better_selection is None
            else list(self.better_selection),
        }


def _fits(est: ModelEstimate, gpus: Sequence[GpuInfo]) -> tuple[str, int | None] | None:
    """('fits', gpu) on the one GPU with most free memory, ('spread', None) over all, else None."""
    if not gpus:
        return None
    best = max(gpus, key=lambda g: g.free_bytes)
    if best.free_bytes >= est.one_gpu:
        return "fits", best.index
    room = sum(max(0, g.free_bytes - est.fixed_per_gpu) for g in gpus)
    if len(gpus) > 1 and room >= est.weights_kv:
        return "spread", None
    return None


def check_fit(
    est: ModelEstimate,
    gpus: Sequence[GpuInfo],
    selected: Sequence[int],
    *,
    loaded: bool = False,
    candidates: Sequence[ModelEstimate] = (),
) -> FitCheck:
    """Will `est` fit the `selected` GPUs' free memory (as Ollama would place it)?"""
    chosen = [g for g in gpus if g.index in selected]
    free = sum(g.free_bytes for g in chosen)
    if len(chosen) == 1:
        where = f"GPU {chosen[0].index} ({chosen[0].short_name})"
    else:
        where = "GPUs " + ",".join(str(g.index) for g in chosen)
    if loaded:
        return FitCheck(est.model, "loaded", f"{est.model} is loaded already", est,
                        tuple(selected), free_bytes=free)
    if est.weights is None:
        return FitCheck(est.model, "unknown",
                        f"{est.model}: size unknown until it is pulled; no fit check", est,
                        tuple(selected), free_bytes=free)
    need = (f"{est.model} needs about {_gb(est.one_gpu)} ({_gb(est.weights)} weights + "
            f"{_gb(est.kv)} KV cache at {est.context:,} tokens + runtime)")
    placed = _fits(est, chosen)
    if placed is not None:
        verdict, gpu = placed
        if verdict == "fits":
            msg = f"{need}: fits on GPU {gpu}"
        else:
            msg = f"{need}: fits spread over GPUs {', '.join(str(g.index) for g in chosen)}"
        return FitCheck(est.model, verdict, msg, est, tuple(selected), gpu=gpu,  # type: ignore[arg-type]
                        free_bytes=free)
    would = [c.model for c in sorted(candidates, key=lambda c: -(c.weights or 0))
             if c.model != est.model and c.weights is not None and _fits(c, chosen)]
    better: tuple[int, ...] | None = None
    others = [g for g in gpus if g.index not in selected]
    if others and _fits(est, gpus) is not None:
        better = tuple(g.index for g in gpus)
    parts = [f"{need}, more than the {_gb(free)} free on "
             f"{where if chosen else 'the selected GPUs (none visible)'}; Ollama would put "
             "the rest on the CPU (very slow) or refuse"]
    if would:
        parts.append(f"would fit: {', '.join(would[:4])}")
    if better is not None:
        parts.append(f"or select GPUs {','.join(str(i) for i in better)}")
    return FitCheck(est.model, "spill", "; ".join(parts), est, tuple(selected),
                    free_bytes=free, would_fit=tuple(would[:4]), better_selection=better)


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class OllamaStatus:
    instance: str
    probe: ServerProbe
    gpus: tuple[GpuInfo, ...]
    version: str | None = None  # from /api/version; None when it did not answer
    error: str | None = None  # why it did not answer, or why GPUs are unknown
    gpu_error: str | None = None

    @property
    def installed(self) -> bool:
        return self.probe.installed

    @property
    def running(self) -> bool:
        return self.probe.running

    @property
    def reachable(self) -> bool:
        return self.version is not None

    @property
    def managed_by(self) -> str | None:
        return self.probe.managed_by

    @property
    def pid(self) -> int | None:
        return self.probe.pid

    @property
    def env(self) -> dict[str, str]:
        return self.probe.server_env

    @property
    def host(self) -> str:
        return parse_host(self.env.get("OLLAMA_HOST"))[0]

    @property
    def port(self) -> int:
        return parse_host(self.env.get("OLLAMA_HOST"))[1]

    @property
    def forward_host(self) -> str:
        host = self.host
        return "127.0.0.1" if host in ("0.0.0.0", "::", "", "localhost") else host

    @property
    def visible_devices(self) -> str | None:
        return self.env.get("CUDA_VISIBLE_DEVICES")

    @property
    def selected(self) -> list[int]:
        return selection_of(self.visible_devices, self.gpus)

    @property
    def context(self) -> int:
        try:
            return max(256, int(self.env.get("OLLAMA_CONTEXT_LENGTH") or DEFAULT_CONTEXT))
        except ValueError:
            return DEFAULT_CONTEXT

    @property
    def parallel(self) -> int:
        try:
            return max(1, int(self.env.get("OLLAMA_NUM_PARALLEL") or 1))
        except ValueError:
            return 1

    @property
    def state(self) -> str:
        if not self.installed:
            return "not installed"
        if not self.running:
            return "stopped"
        return "running" if self.reachable else "not answering"

    def as_dict(self) -> dict[str, Any]:
        p = self.probe
        return {
            "instance": self.instance, "state": self.state, "installed": self.installed,
            "running": self.running, "reachable": self.reachable, "version": self.version,
            "client_version": p.client_version, "managed_by": self.managed_by,
            "unit": p.unit, "unit_active": p.unit_active, "dropin": p.dropin, "pid": p.pid,
            "binary": p.binary, "host": self.host, "port": self.port,
            "env": {k: v for k, v in self.env.items()},
            "cuda_visible_devices": self.visible_devices, "selected": self.selected,
            "gpus": [g.as_dict() for g in self.gpus], "error": self.error,
            "gpu_error": self.gpu_error,
            "log": LOG_FILE.replace("$HOME", p.home or "~") if self.managed_by == "process"
            else None,
            "install_command": None if self.installed else INSTALL_COMMAND,
        }


@dataclass(frozen=True)
class PlacementReport:
    selected: tuple[int, ...]
    per_gpu_mib: dict[int, float]  # memory Ollama's processes hold, by GPU index
    running: tuple[RunningModel, ...]
    outside: tuple[int, ...]  # GPUs holding Ollama memory that are not selected
    on_cpu: tuple[str, ...]  # models partly (or wholly) in host memory
    message: str
    unverified: bool = False  # models in VRAM, but nvidia-smi shows no Ollama process

    @property
    def ok(self) -> bool:
        return not self.outside and not self.on_cpu

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "unverified": self.unverified, "selected": list(self.selected),
            "per_gpu_mib": {str(k): v for k, v in sorted(self.per_gpu_mib.items())},
            "outside": list(self.outside), "on_cpu": list(self.on_cpu),
            "running": [m.as_dict() for m in self.running], "message": self.message,
        }


@dataclass(frozen=True)
class LoadResult:
    model: str
    fit: FitCheck
    placement: PlacementReport


def placement_report(
    apps_text: str,
    gpus: Sequence[GpuInfo],
    selected: Sequence[int],
    running: Sequence[RunningModel],
    *,
    server_pid: int | None,
) -> PlacementReport:
    from gputui.nvidia.nvsmi import parse_compute_apps_csv

    fields = ["pid", "gpu_uuid", "process_name", "used_gpu_memory"]
    uuid_to_index = {g.uuid: g.index for g in gpus if g.uuid}
    procs = parse_compute_apps_csv(apps_text, fields, uuid_to_index=uuid_to_index)
    per_gpu: dict[int, float] = {}
    for p in procs:
        ours = (server_pid is not None and p.pid == server_pid) or "ollama" in (p.name or "").lower()
        if ours and p.gpu_index is not None:
            per_gpu[p.gpu_index] = per_gpu.get(p.gpu_index, 0.0) + (p.used_memory_mib or 0.0)
    outside = tuple(sorted(i for i, mib in per_gpu.items() if mib > 0 and i not in selected))
    on_cpu = tuple(m.name for m in running if m.size_vram < m.size)
    names = {g.index: g.short_name for g in gpus}
    held = ", ".join(f"{mib / 1024:,.1f} GiB on GPU {i} ({names.get(i, '?')})"
                     for i, mib in sorted(per_gpu.items())) or "no GPU memory"
    sel = ",".join(str(i) for i in selected) or "none"
    in_vram = sum(m.size_vram for m in running)
    unverified = in_vram > 0 and not per_gpu
    if outside:
        msg = (f"MISMATCH: Ollama holds {held}; GPU {','.join(map(str, outside))} "
               f"is not selected (selected: {sel})")
    elif on_cpu:
        msg = f"Ollama holds {held}; partly on the CPU: {', '.join(on_cpu)} (selected: {sel})"
    elif unverified:
        msg = (f"Ollama reports {_gb(in_vram)} in GPU memory, but nvidia-smi lists no Ollama "
               "process (in a container it often cannot see processes): placement not verified")
    else:
        msg = f"Ollama holds {held}: as selected (GPUs {sel})"
    return PlacementReport(tuple(selected), per_gpu, tuple(running), outside, on_cpu, msg,
                           unverified)


# --------------------------------------------------------------------------- the service


ProgressCallback = Callable[[PullProgress], None]


class OllamaService:
    """Ollama on instances, through the hub's shared SSH links. One per Services hub."""

    def __init__(
        self, services: Services, *, timeout: float = 10.0, long_timeout: float = 600.0
    ) -> None:
        self.services = services
        self.timeout = timeout
        self.long_timeout = long_timeout
        self._clients: dict[str, tuple[Any, tuple[str, int], int, OllamaClient]] = {}

    # -- plumbing ------------------------------------------------------------------------------
    async def _sh(self, inst: Instance, command: str, *, timeout: float = 60.0) -> Any:
        """Run one command on the instance (tests intercept this)."""
        return await self.services.run(inst, command, timeout=timeout)

    async def _client(self, inst: Instance, status: OllamaStatus) -> OllamaClient:
        from gputui.remote.ssh import SSHLayerError

        link = await self.services.link(inst)
        try:
            local = await link.forward_local(status.port, status.forward_host)
        except (SSHLayerError, OSError) as exc:
            raise OllamaServiceError(
                f"{inst.name}: cannot forward to Ollama's port {status.port}: {exc}") from None
        remote = (status.forward_host, status.port)
        cached = self._clients.get(inst.id)
        if cached is not None and cached[0] is link and cached[1] == remote and cached[2] == local:
            return cached[3]
        if cached is not None:
            await cached[3].aclose()
            if cached[0] is link and cached[1] != remote:  # the server moved: drop the old one
                with contextlib.suppress(Exception):
                    await link.close_forward(cached[1][1], cached[1][0])
        client = OllamaClient(f"http://127.0.0.1:{local}", timeout=self.timeout,
                              long_timeout=self.long_timeout)
        self._clients[inst.id] = (link, remote, local, client)
        return client

    async def _forget_client(self, inst: Instance) -> None:
        cached = self._clients.pop(inst.id, None)
        if cached is not None:
            await cached[3].aclose()

    async def close(self) -> None:
        """Close the HTTP clients (the forwards belong to the links, closed with them)."""
        for key in list(self._clients):
            cached = self._clients.pop(key)
            await cached[3].aclose()

    def _error(self, inst: Instance, exc: OllamaError) -> OllamaServiceError:
        return OllamaServiceError(f"{inst.name}: ollama: {exc.message}")

    # -- status --------------------------------------------------------------------------------
    async def probe(self, inst: Instance) -> ServerProbe:
        result = await self._sh(inst, probe_script(), timeout=30)
        return parse_probe(result.stdout)

    async def gpus(self, inst: Instance) -> list[GpuInfo]:
        result = await self._sh(inst, gpu_query_command(), timeout=30)
        if result.exit_status != 0:
            why = (result.stderr or result.stdout).strip().splitlines()
            raise OllamaServiceError(f"{inst.name}: nvidia-smi failed: {why[-1] if why else ''}")
        return parse_gpu_rows(result.stdout)

    async def status(
        self, inst: Instance, *, check_http: bool = True, client_version: bool = True
    ) -> OllamaStatus:
        """Server, its settings and the GPUs, in one SSH round trip (+ /api/version)."""
        marker = "@@gputui-gpus@@"
        script = probe_script(client_version=client_version)
        result = await self._sh(
            inst, f"{script}echo {marker}\n{gpu_query_command()} 2>&1", timeout=30)
        head, _, tail = result.stdout.partition(marker)
        probe = parse_probe(head)
        gpus = parse_gpu_rows(tail)
        gpu_error = None
        if not gpus:
            lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
            gpu_error = _clean(lines[-1]) if lines else "nvidia-smi printed no GPU"
        status = OllamaStatus(inst.name, probe, tuple(gpus), gpu_error=gpu_error)
        if not check_http or not probe.running:
            return status
        try:
            client = await self._client(inst, status)
            version = await client.version()
        except OllamaError as exc:
            return OllamaStatus(inst.name, probe, tuple(gpus), error=exc.message,
                                gpu_error=gpu_error)
        except OllamaServiceError as exc:
            return OllamaStatus(inst.name, probe, tuple(gpus), error=str(exc),
                                gpu_error=gpu_error)
        return OllamaStatus(inst.name, probe, tuple(gpus), version=version, gpu_error=gpu_error)

    async def _ready(self, inst: Instance, status: OllamaStatus | None = None) -> tuple[
            OllamaStatus, OllamaClient]:
        st = status or await self.status(inst)
        if not st.installed:
            raise OllamaServiceError(
                f"{inst.name}: Ollama is not installed (install it with: {INSTALL_COMMAND})")
        if not st.running:
            raise OllamaServiceError(f"{inst.name}: the Ollama server is not running")
        if not st.reachable:
            raise OllamaServiceError(
                f"{inst.name}: the Ollama server does not answer on port {st.port}: {st.error}")
        return st, await self._client(inst, st)

    # -- models --------------------------------------------------------------------------------
    async def models(self, inst: Instance, *, status: OllamaStatus | None = None) -> list[
            InstalledModel]:
        _, client = await self._ready(inst, status)
        try:
            return await client.tags()
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def running(self, inst: Instance, *, status: OllamaStatus | None = None) -> list[
            RunningModel]:
        _, client = await self._ready(inst, status)
        try:
            return await client.ps()
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def show(self, inst: Instance, model: str) -> ModelInfo:
        _, client = await self._ready(inst)
        try:
            return await client.show(model)
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def pull(
        self,
        inst: Instance,
        model: str,
        on_progress: ProgressCallback | None = None,
        *,
        status: OllamaStatus | None = None,
    ) -> PullProgress:
        """Pull with progress summed over layers. Cancel the task to cancel the pull (the
        connection is closed; a later pull resumes where this one stopped)."""
        _, client = await self._ready(inst, status)
        progress = PullProgress(model)
        try:
            async with contextlib.aclosing(client.pull(model)) as events:
                async for event in events:
                    progress.update(event)
                    if on_progress is not None:
                        on_progress(progress)
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        if not progress.done:
            raise OllamaServiceError(f"{inst.name}: pull of {model} ended before it succeeded")
        return progress

    async def delete(self, inst: Instance, model: str) -> None:
        _, client = await self._ready(inst)
        try:
            await client.delete(model)
        except OllamaNotFound:
            raise OllamaServiceError(f"{inst.name}: no model {model!r} is installed") from None
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def fit_check(
        self, inst: Instance, model: str, *, status: OllamaStatus | None = None
    ) -> FitCheck:
        st, client = await self._ready(inst, status)
        try:
            installed = await client.tags()
            running = await client.ps()
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        full = normalize_name(model)
        mine = next((m for m in installed if normalize_name(m.name) == full), None)
        info = None
        if mine is not None:
            with contextlib.suppress(OllamaError):
                info = await client.show(mine.name)
        est = estimate_model(full, installed=mine, info=info, context=st.context,
                             parallel=st.parallel)
        loaded = any(normalize_name(m.name) == full for m in running)
        candidates = [
            estimate_model(m.name, installed=m, info=None, context=st.context,
                           parallel=st.parallel)
            for m in installed
        ]
        from gputui.catalog.fit import MODELS

        known = {c.model for c in candidates}
        for cat in MODELS.values():
            tag = _catalog_tag(cat.name)
            if tag not in known:
                candidates.append(estimate_model(tag, installed=None, info=None,
                                                 context=st.context, parallel=st.parallel))
        return check_fit(est, st.gpus, st.selected, loaded=loaded, candidates=candidates)

    async def load(
        self,
        inst: Instance,
        model: str,
        *,
        force: bool = False,
        keep_alive: float | str | None = None,
    ) -> LoadResult:
        """Fit check, load (warm with keep_alive), then verify where it went. A load that would
        not fit raises FitRefused unless `force`."""
        st, client = await self._ready(inst)
        fit = await self.fit_check(inst, model, status=st)
        if not fit.ok and not force:
            raise FitRefused(fit)
        try:
            await client.load(model, keep_alive=keep_alive)
        except OllamaNotFound:
            raise OllamaServiceError(
                f"{inst.name}: {model} is not installed (pull it first)") from None
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        placement = await self.verify_placement(inst, status=st)
        return LoadResult(model, fit, placement)

    async def unload(self, inst: Instance, model: str) -> None:
        _, client = await self._ready(inst)
        try:
            await client.unload(model)
        except OllamaNotFound:
            raise OllamaServiceError(f"{inst.name}: no model {model!r} is installed") from None
        except OllamaError as exc:
            raise self._error(inst, exc) from None

    async def verify_placement(
        self, inst: Instance, *, status: OllamaStatus | None = None
    ) -> PlacementReport:
        """Where Ollama's memory is, from nvidia-smi's compute processes, against the
        selection."""
        st, client = await self._ready(inst, status)
        try:
            running = await client.ps()
        except OllamaError as exc:
            raise self._error(inst, exc) from None
        apps = await self._sh(inst, compute_apps_query(), timeout=30)
        return placement_report(apps.stdout, st.gpus, st.selected, running, server_pid=st.pid)

    # -- the server ----------------------------------------------------------------------------
    async def _run_all(self, inst: Instance, commands: Sequence[str], what: str) -> None:
        for cmd in commands:
            result = await self._sh(inst, cmd, timeout=120)
            if result.exit_status != 0:
                why = (result.stderr or result.stdout).strip().splitlines()
                raise OllamaServiceError(
                    f"{inst.name}: {what} failed at `{cmd.splitlines()[0][:60]}`: "
                    f"{why[-1] if why else f'exit status {result.exit_status}'}")

    async def apply_gpus(
        self, inst: Instance, indices: Sequence[int] | None, *, wait_s: float = 30.0
    ) -> OllamaStatus:
        """Restart the server with CUDA_VISIBLE_DEVICES naming `indices` (None: all GPUs).
        This unloads the running models (see `restart_warning`)."""
        st = await self.status(inst, check_http=False)
        if not st.installed:
            raise OllamaServiceError(
                f"{inst.name}: Ollama is not installed (install it with: {INSTALL_COMMAND})")
        if indices is not None and not indices:
            raise OllamaServiceError("select at least one GPU (or all)")
        value = None if indices is None else cuda_visible_value(st.gpus, indices)
        sudo = st.probe.uid not in (None, 0)
        if st.managed_by == "systemd":
            dropin = None if value is None else systemd_dropin({"CUDA_VISIBLE_DEVICES": value})
            await self._run_all(inst, systemd_apply_commands(dropin, sudo=sudo),
                                "restarting ollama.service")
        else:
            env: dict[str, str | None] = {
                k: v for k, v in st.env.items()
                if k.startswith("OLLAMA_") or k == "CUDA_DEVICE_ORDER"
            }
            env["CUDA_VISIBLE_DEVICES"] = value
            if st.pid is not None:
                await self._run_all(inst, [stop_process_command(st.pid, sudo=sudo)],
                                    "stopping ollama")
            await self._run_all(inst, [nohup_start_command(st.probe.binary or "ollama", env)],
                                "starting ollama")
        await self._forget_client(inst)
        new = await self.wait_ready(inst, wait_s=wait_s)
        if new.visible_devices != value:
            raise OllamaServiceError(
                f"{inst.name}: Ollama restarted with CUDA_VISIBLE_DEVICES="
                f"{new.visible_devices!r}, not {value!r} (another setting overrides ours?)")
        return new

    async def start(self, inst: Instance, *, wait_s: float = 30.0) -> OllamaStatus:
        st = await self.status(inst, check_http=False, client_version=False)
        if not st.installed:
            raise OllamaServiceError(
                f"{inst.name}: Ollama is not installed (install it with: {INSTALL_COMMAND})")
        if st.running:
            return await self.wait_ready(inst, wait_s=wait_s)
        sudo = st.probe.uid not in (None, 0)
        if st.managed_by == "systemd":
            await self._run_all(inst, systemd_start_commands(sudo=sudo), "starting ollama")
        else:
            await self._run_all(inst, [nohup_start_command(st.probe.binary or "ollama", {})],
                                "starting ollama")
        return await self.wait_ready(inst, wait_s=wait_s)

    async def stop(self, inst: Instance) -> None:
        st = await self.status(inst, check_http=False)
        sudo = st.probe.uid not in (None, 0)
        if st.managed_by == "systemd" and st.running:
            s = "sudo -n " if sudo else ""
            await self._run_all(inst, [f"{s}systemctl stop {UNIT}"], "stopping ollama")
        elif st.pid is not None:
            await self._run_all(inst, [stop_process_command(st.pid, sudo=sudo)],
                                "stopping ollama")
        await self._forget_client(inst)

    async def wait_ready(self, inst: Instance, *, wait_s: float = 30.0) -> OllamaStatus:
        """Wait until the server answers /api/version (its port read from its environment)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        last: OllamaStatus | None = None
        while True:
            last = await self.status(inst, client_version=False)
            if last.reachable:
                return last
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        tail = ""
        if last is not None and last.managed_by == "process":
            result = await self._sh(inst, f'tail -n 3 "{LOG_FILE}" 2>/dev/null', timeout=10)
            tail = " ".join(result.stdout.split())[-200:]
        why = (last.error if last is not None else None) or "no server process"
        raise OllamaServiceError(
            f"{inst.name}: Ollama did not come up within {wait_s:g} s ({why})"
            + (f"; log: {tail}" if tail else ""))

    async def install(self, inst: Instance) -> str:
        """Run the official install script (minutes). Returns the last lines of its output."""
        result = await self._sh(inst, INSTALL_COMMAND, timeout=900)
        out = (result.stdout + result.stderr).strip().splitlines()
        if result.exit_status != 0:
            raise OllamaServiceError(
                f"{inst.name}: the install failed: {out[-1] if out else result.exit_status}")
        return "\n".join(out[-5:])


# --------------------------------------------------------------------------- the command


def service_for(services: Services) -> tuple[OllamaService, bool]:
    """The hub's OllamaService (`services.ollama`) if it has one, else a new one; the flag
    says whether the caller owns it (and should `close()` it when done)."""
    existing = getattr(services, "ollama", None)
    if isinstance(existing, OllamaService):
        return existing, False
    return OllamaService(services), True


def _print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def _status_lines(st: OllamaStatus) -> list[str]:
    p = st.probe
    if not st.installed:
        return [f"ollama on {st.instance}: not installed", f"  install: {INSTALL_COMMAND}"]
    how = (f"systemd unit {p.unit} ({p.unit_active or '?'})" if st.managed_by == "systemd"
           else f"process {p.pid}" if p.pid else "no process")
    head = f"ollama on {st.instance}: {st.state}"
    if st.version:
        head += f", version {st.version}"
    elif p.client_version:
        head += f" (installed: {p.client_version})"
    lines = [head, f"  runs as   {how}"]
    if st.running:
        lines.append(f"  listens   {st.host}:{st.port}")
    if st.error:
        lines.append(f"  error     {st.error}")
    env = [f"{k}={st.env[k]}" for k in SHOWN_ENV if k in st.env]
    lines.append(f"  env       {'  '.join(env) if env else '(defaults)'}")
    sel = st.selected
    lines.append(f"  GPUs      {','.join(map(str, sel)) if sel else 'none'}"
                 f"{'' if st.visible_devices is not None else ' (all: CUDA_VISIBLE_DEVICES unset)'}")
    if st.managed_by == "process":
        lines.append(f"  log       {LOG_FILE.replace('$HOME', p.home or '~')}")
    if not st.running:
        lines.append(f"  start it: gputui ollama {st.instance} start")
    lines.append("")
    lines += _gpu_lines(st)
    return lines


def _gpu_lines(st: OllamaStatus) -> list[str]:
    if not st.gpus:
        return [f"GPUs: unknown ({st.gpu_error or 'nvidia-smi printed nothing'})"]
    lines = [f"{'GPU':<4} {'NAME':<22} {'FREE':>9} {'TOTAL':>9}  SELECTED"]
    for g in st.gpus:
        lines.append(
            f"{g.index:<4} {g.short_name[:22]:<22} {_gb((g.memory_free_mib or 0) * MIB):>9} "
            f"{_gb((g.memory_total_mib or 0) * MIB):>9}  {'yes' if g.index in st.selected else ''}")
    return lines


def _ago(ts: Any) -> str:
    if ts is None:
        return ""
    seconds = max(0.0, time.time() - ts.timestamp())
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} days ago"


def _until(ts: Any) -> str:
    if ts is None:
        return ""
    seconds = ts.timestamp() - time.time()
    if seconds > 100 * 365 * 86400:
        return "forever"
    if seconds <= 0:
        return "stopping"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


async def ollama_command(
    services: Services,
    inst: Instance,
    action: str,
    arg: str | None,
    as_json: bool,
    *,
    force: bool = False,
) -> int:
    """`gputui ollama NAME ACTION [ARG] [--json]`: list | ps | pull MODEL | rm MODEL |
    load MODEL | unload MODEL | gpus [0,1|all] | status | start | stop | fit MODEL | verify.
    Prints its output; ServiceError for failures; returns 1 for a load refused by the fit
    check (printed), else 0."""
    svc, owned = service_for(services)
    try:
        return await _command(svc, inst, action, arg, as_json, force=force)
    finally:
        if owned:
            await svc.close()


def gpu_words(indices: Sequence[int]) -> str:
    """'GPU 0', 'GPUs 0,1', 'no GPU'."""
    if not indices:
        return "no GPU"
    return ("GPU " if len(indices) == 1 else "GPUs ") + ",".join(map(str, indices))


async def _command(
    svc: OllamaService, inst: Instance, action: str, arg: str | None, as_json: bool, *,
    force: bool,
) -> int:
    needs_arg = {"pull", "rm", "load", "unload", "fit"}
    if action in needs_arg and not arg:
        raise OllamaServiceError(f"ollama {action}: give a model name (e.g. qwen2.5:7b)")
    if action == "status":
        st = await svc.status(inst)
        if as_json:
            _print_json(st.as_dict())
        else:
            print("\n".join(_status_lines(st)))
        return 0
    if action == "list":
        models = await svc.models(inst)
        if as_json:
            _print_json([m.as_dict() for m in models])
        elif not models:
            print(f"No models on {inst.name}. Pull one: gputui ollama {inst.name} pull qwen2.5:7b")
        else:
            print(f"{'NAME':<28} {'SIZE':>8}  {'QUANT':<8} {'FAMILY':<8} MODIFIED")
            for m in models:
                print(f"{m.name[:28]:<28} {_gb(m.size):>8}  {(m.quantization or '')[:8]:<8} "
                      f"{(m.family or '')[:8]:<8} {_ago(m.modified_at)}")
        return 0
    if action == "ps":
        running = await svc.running(inst)
        if as_json:
            _print_json([m.as_dict() for m in running])
        elif not running:
            print(f"No model is loaded on {inst.name}.")
        else:
            print(f"{'NAME':<28} {'SIZE':>8} {'IN VRAM':>8}  {'PROCESSOR':<16} UNTIL")
            for m in running:
                print(f"{m.name[:28]:<28} {_gb(m.size):>8} {_gb(m.size_vram):>8}  "
                      f"{m.processor:<16} {_until(m.expires_at)}")
        return 0
    if action == "pull":
        assert arg is not None
        st = await svc.status(inst)
        fit = await svc.fit_check(inst, arg, status=st)
        if not fit.ok and not as_json:
            _err(f"warning: {fit.message}")
        last: list[object] = [None]

        def show(p: PullProgress) -> None:
            if as_json:
                return
            if p.digest and p.digest in p.layers:
                total, done = p.layers[p.digest]
                pct = 100 if done >= total else done * 100 // total // 10 * 10
                key: object = (p.digest, pct)
                line = f"{p.status} {pct:3d}% of {_human(total)}"
            else:
                key = line = p.status
            if key != last[0]:
                last[0] = key
                _err(line)

        progress = await svc.pull(inst, arg, show, status=st)
        if as_json:
            _print_json({"model": arg, "status": "success", "total": progress.total,
                         "fit": fit.as_dict()})
        else:
            print(f"pulled {arg} ({_gb(progress.total)})")
        return 0
    if action == "rm":
        assert arg is not None
        await svc.delete(inst, arg)
        if as_json:
            _print_json({"model": arg, "deleted": True})
        else:
            print(f"deleted {arg}")
        return 0
    if action == "fit":
        assert arg is not None
        fit = await svc.fit_check(inst, arg)
        if as_json:
            _print_json(fit.as_dict())
        else:
            print(fit.message)
        return 0 if fit.ok else 1
    if action == "load":
        assert arg is not None
        try:
            result = await svc.load(inst, arg, force=force)
        except FitRefused as exc:
            if as_json:
                _print_json({"model": arg, "loaded": False, "fit": exc.fit.as_dict()})
            else:
                _err(f"not loaded: {exc.fit.message}")
                _err("(load anyway with --force)")
            return 1
        if as_json:
            _print_json({"model": arg, "loaded": True, "fit": result.fit.as_dict(),
                         "placement": result.placement.as_dict()})
        else:
            print(f"loaded {arg}")
            print(result.placement.message)
        return 0
    if action == "unload":
        assert arg is not None
        await svc.unload(inst, arg)
        if as_json:
            _print_json({"model": arg, "unloaded": True})
        else:
            print(f"unloaded {arg}")
        return 0
    if action == "verify":
        report = await svc.verify_placement(inst)
        if as_json:
            _print_json(report.as_dict())
        else:
            print(report.message)
        return 0 if report.ok else 1
    if action == "gpus":
        if not arg:
            st = await svc.status(inst)
            if as_json:
                _print_json({"selected": st.selected, "gpus": [g.as_dict() for g in st.gpus],
                             "cuda_visible_devices": st.visible_devices})
            else:
                print("\n".join(_gpu_lines(st)))
            return 0
        indices = parse_gpu_list(arg)
        st = await svc.status(inst)
        running: list[RunningModel] = []
        if st.reachable:
            with contextlib.suppress(OllamaServiceError):
                running = await svc.running(inst, status=st)
        if not as_json:
            _err(restart_warning(running))
        new = await svc.apply_gpus(inst, indices)
        if as_json:
            _print_json({**new.as_dict(), "unloaded": [m.name for m in running]})
        else:
            print(f"ollama on {inst.name} now uses {gpu_words(new.selected)}"
                  f" (CUDA_VISIBLE_DEVICES={new.visible_devices or 'unset'})")
        return 0
    if action == "start":
        new = await svc.start(inst)
        if as_json:
            _print_json(new.as_dict())
        else:
            print(f"ollama on {inst.name} is running (version {new.version}, port {new.port})")
        return 0
    if action == "stop":
        await svc.stop(inst)
        if as_json:
            _print_json({"stopped": True})
        else:
            print(f"ollama on {inst.name} stopped")
        return 0
    raise OllamaServiceError(
        f"unknown action {action!r}: list, ps, pull, rm, load, unload, gpus, status, start, "
        "stop, fit, verify")
