"""Reading an instance's GPU processes over its link (shared with `gputui smi`)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from gputui.i18n import N_
from gputui.i18n import Deferred as D
from gputui.models import (
    ProcessSample,
)
from gputui.nvidia.diagnose import diagnose_nvidia_smi
from gputui.nvidia.nvsmi import (
    compute_apps_command,
    parse_compute_apps_csv,
    sanitize,
)

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# Reading processes over a link (shared with `gputui smi`)
# --------------------------------------------------------------------------------------------


async def read_processes(
    link: Any,
    uuid_to_index: dict[str, int],
    *,
    timeout: float = 20.0,
    connect_timeout: float | None = None,
) -> tuple[list[ProcessSample] | None, str | None]:
    """The instance's compute processes, with their users (and command lines) from `ps`.

    Returns (processes, None), or (None, why) when nvidia-smi could not list them. Raises
    the SSH layer's errors (the caller decides whether the link matters).
    """
    result = await link.run(
        compute_apps_command(), timeout=timeout, connect_timeout=connect_timeout
    )
    if result.exit_status != 0:
        diag = diagnose_nvidia_smi(result.stdout + "\n" + result.stderr, result.exit_status)
        # Deferred: shown in the interface language (a diagnosis's problem is a message id)
        return None, (D(diag.problem) if diag
                      else D(N_("exit status {status}"), status=result.exit_status))
    procs = parse_compute_apps_csv(result.stdout, uuid_to_index=uuid_to_index)
    pids = sorted({p.pid for p in procs if p.pid > 0})
    if pids:
        arg = ",".join(str(pid) for pid in pids[:200])
        ps = await link.run(
            f"ps -o pid=,user=,args= -p {shlex.quote(arg)} 2>/dev/null",
            timeout=timeout,
            connect_timeout=connect_timeout,
        )
        owners: dict[int, tuple[str, str]] = {}
        for line in ps.stdout.splitlines()[:1000]:
            parts = line.split(None, 2)
            if len(parts) >= 2 and parts[0].isdigit():
                owners[int(parts[0])] = (
                    sanitize(parts[1], 64),
                    sanitize(parts[2], 256) if len(parts) > 2 else "",
                )
        out = []
        for p in procs:
            user, args = owners.get(p.pid, (None, None))
            update: dict[str, Any] = {}
            if user:
                update["user"] = user
            # nvidia-smi on Linux gives the executable's path only; the command line says more.
            if args and (p.name is None or " " not in p.name.strip()):
                update["name"] = args
            out.append(p.model_copy(update=update) if update else p)
        procs = out
    return procs, None


