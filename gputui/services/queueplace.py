"""Where an instance's jobs queue runner lives: on the instance itself, or where its provider's
own scheduler says (a Slurm allocation's: the cluster's login node, `Provider.queue_host`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputui.models import Instance

if TYPE_CHECKING:
    from gputui.services.hub import Services

RUNNER_DIR = ".gputui/jobs"
RUNNER_FILE = f"{RUNNER_DIR}/runner.py"


async def queue_place(services: Services,
                      inst: Instance) -> tuple[Any, str, dict[str, Any] | None]:
    """The link to the runner's host, the runner's file there (relative to the home), and how
    it starts runs (`launch.json`; None: on the instance itself). A provider's refusal is its
    ProviderError (one line)."""
    host = await services.provider(inst.provider).queue_host(inst)
    if host is None:
        return await services.link(inst), RUNNER_FILE, None
    await services.reachable(inst)  # an ended allocation: said so, nothing asked
    return host.link, f"{host.folder}/runner.py", dict(host.launch)
