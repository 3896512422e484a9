"""Restarting Ollama with a GPU selection: a systemd drop-in, or nohup."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gputui.i18n import N_, _
from gputui.i18n import Deferred as D
from gputui.remote.ollama_client import (
    RunningModel,
)
from gputui.services.ollama.common import (
    _ENV_NAME,
    DROPIN_DIR,
    DROPIN_NAME,
    LOG_FILE,
    PID_FILE,
    UNIT,
    OllamaServiceError,
)

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------- restarting


# systemd's own syntax in the unit file, not text for people
_DIRECTIVE = 'Environment="{name}={value}"'


def _check_env_value(name: str, value: str) -> None:
    if not _ENV_NAME.match(name):
        raise OllamaServiceError(_("not an environment variable name: {name}").format(
            name=repr(name)))
    if any(c in value for c in "\"\\\n\r") or "$" in value:
        raise OllamaServiceError(_("{name}: value {value} has characters systemd would mangle")
                                 .format(name=name, value=repr(value)))


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
        lines.append(_DIRECTIVE.format(name=name, value=value))
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
            raise OllamaServiceError(_("not an environment variable name: {name}").format(
                name=repr(name)))
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


def restart_warning(running: Sequence[RunningModel]) -> D:
    """What a restart loses (a Deferred: shown in the interface language with `shown`)."""
    if not running:
        return D(N_("Restarting Ollama: no model is loaded, nothing is lost."))
    names = ", ".join(m.name for m in running)
    return D(N_("Restarting Ollama unloads the running models ({names}); load them again "
                "afterwards."), names=names)


