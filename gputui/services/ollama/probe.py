"""Finding the Ollama server on an instance: one shell probe, parsed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from gputui.services.ollama.common import (
    _ENV_NAME,
)

if TYPE_CHECKING:
    pass


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


