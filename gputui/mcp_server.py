"""`gputui mcp`: gputui's actions for AI agents, over the Model Context Protocol (stdio), with
the official `mcp` SDK. An adapter like `gputui.cli`: it calls the services and nothing below
imports it.

Stricter than the command line, because nobody is watching:
- `create` always sets a release timer (`[mcp] default_release`, 2 h unless configured; at most
  `[mcp] max_release`); there is no "no timer".
- `release` always needs `confirm: true`; so does anything that would spend more than
  `[mcp] confirm_over` in its currency (a currency with no cap always needs it).
- Results never carry secrets: instances are described field by field (no key or password
  file), and any configured secret (the Lambda API key) is masked in command output.
- Bad input (a missing or absurd argument, an unknown instance or GPU) is a JSON-RPC error
  (invalid params) and nothing is started or spent.
"""

from __future__ import annotations

import math
import os
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from gputui.config import Config, parse_duration
from gputui.errors import BadInput, GputuiError
from gputui.models import Instance, Lease, money, utcnow
from gputui.services.ollama import service_for

if TYPE_CHECKING:
    from gputui.services.hub import Services

MAX_OUTPUT = 64_000  # characters of command output returned (the tail)
MAX_COMMAND_S = 600


def default_name(gpu: str) -> str:
    """`agent-4090-1a2b`: says who rented it."""
    import re
    import secrets

    short = re.sub(r"(?i)\b(nvidia|geforce|tesla|rtx)\b", "", gpu)
    short = re.sub(r"[^a-z0-9]+", "-", short.lower()).strip("-")[:16] or "gpu"
    return f"agent-{short}-{secrets.token_hex(2)}"


def bad(message: str) -> MCPError:
    """Bad input: a JSON-RPC invalid-params error, nothing done."""
    return MCPError(INVALID_PARAMS, message)


class Gateway:
    """The services, made on first use, and the rules the tools share."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._services: Services | None = None

    @property
    def services(self) -> Services:
        if self._services is None:
            from gputui.config import ensure_state_dir, state_path
            from gputui.services.hub import Services
            from gputui.store import SessionStore

            ensure_state_dir()
            self._services = Services(SessionStore(state_path()), self.config)
        return self._services

    async def close(self) -> None:
        if self._services is not None:
            await self._services.close()

    # -- secrets ---------------------------------------------------------------------------------

    def secrets(self) -> list[str]:
        found = [self.config.providers.lambda_cloud.api_key, os.environ.get("LAMBDA_API_KEY")]
        return [s for s in found if s and len(s.strip()) >= 6]

    def mask(self, text: str) -> str:
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

    # -- instances -------------------------------------------------------------------------------

    def find(self, name: str, *, live: bool = True) -> Instance:
        if not isinstance(name, str) or not name.strip():
            raise bad("name: give an instance name or id")
        try:
            inst = self.services.store.find_instance_sync(name)
        except BadInput as exc:
            raise bad(str(exc)) from None
        if live and not inst.status.live:
            raise bad(f"{inst.name} is {inst.status.value}")
        return inst

    def view(self, inst: Instance) -> dict[str, Any]:
        from gputui.services.views import instance_view

        v = instance_view(inst, self.services.store.get_lease_sync(inst.id))
        v.pop("ssh", None)  # reach instances through the tools, not with their credentials
        return v

    # -- money -----------------------------------------------------------------------------------

    def check_spend(self, amount: Decimal, currency: str, what: str, confirm: bool) -> None:
        cap = self.config.mcp.confirm_over.get(currency)
        if confirm:
            return
        if cap is None:
            raise bad(f"{what} would spend up to {money(amount)} {currency} and no cap is "
                      f"configured for {currency}: call again with confirm: true")
        if amount > cap:
            raise bad(f"{what} would spend up to {money(amount)} {currency}, over the "
                      f"{cap} {currency} cap: call again with confirm: true")

    def duration(self, text: Any, field: str) -> timedelta:
        if not isinstance(text, str) or not text.strip():
            raise bad(f"{field}: give a duration such as 2h or 90m")
        try:
            delta = parse_duration(text)
        except ValueError as exc:
            raise bad(f"{field}: {exc}") from None
        longest = parse_duration(self.config.mcp.max_release)
        if delta.total_seconds() < 60:
            raise bad(f"{field}: {text!r} is under a minute")
        if delta > longest:
            raise bad(f"{field}: {text!r} is longer than the {self.config.mcp.max_release} "
                      "an agent may set ([mcp] max_release)")
        return delta


def _fail(exc: GputuiError) -> Exception:
    """Our errors: bad input is a JSON-RPC error; a failure (a provider, a link) is a tool
    error the agent can read."""
    from mcp.server.mcpserver.exceptions import ToolError

    if isinstance(exc, BadInput):
        return bad(str(exc))
    return ToolError(str(exc))


class _Server(MCPServer):
    """The SDK answers arguments that fail the tools' schemas, and unknown tools, as tool
    results; here they are what the protocol calls them: invalid-params errors, one line."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        from mcp.server.mcpserver.exceptions import ToolError
        from pydantic import ValidationError

        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                err = cause.errors()[0]
                where = ".".join(str(part) for part in err["loc"]) or "arguments"
                raise bad(f"{name}: {where}: {err['msg'].lower()}") from None
            if self._tool_manager.get_tool(name) is None:
                raise bad(f"unknown tool {name!r}") from None
            raise


def build_server(config: Config) -> tuple[MCPServer, Gateway]:
    gw = Gateway(config)
    server: MCPServer = _Server(
        "gputui", instructions=(
            "Rent GPUs with a release timer, run commands on them, watch them and release "
            "them. Every instance created here is released at its timer. release, and "
            "anything spending over the configured cap, need confirm: true."),
    )

    @server.tool()
    async def list_instances(include_ended: bool = False) -> list[dict[str, Any]]:
        """Instances with status, GPUs, release time and cost so far (with currency)."""
        store = gw.services.store
        return [gw.view(i) for i in store.instances_sync(live_only=not include_ended)]

    @server.tool()
    async def offers(provider: str = "sandbox") -> list[dict[str, Any]]:
        """What a provider rents now: GPU, count, price per GPU-hour and currency."""
        try:
            found = await gw.services.offers(provider)
        except GputuiError as exc:
            raise _fail(exc) from None
        return [{"provider": o.provider, "offer_id": o.offer_id, "gpu": o.gpu,
                 "gpu_count": o.gpu_count, "vram_gb": o.vram_gb,
                 "price_per_gpu_hour": str(o.price_per_gpu_hour),
                 "currency": o.billing.currency, "billing": o.billing.granularity.value,
                 "region": o.region, "available": o.available} for o in found]

    @server.tool()
    async def fit(model: str, job: str = "inference", precision: str = "bf16",
                  context: int = 4096, batch: int = 1) -> dict[str, Any]:
        """Will a model fit: VRAM needed and the cards it fits on, cheapest first."""
        from gputui.services.catalog import catalog_prices
        from gputui.services.catalog import fit as fit_model

        if not 1 <= context <= 10_000_000 or not 1 <= batch <= 100_000:
            raise bad("context and batch must be positive and sensible")
        try:
            return fit_model(model, job=job, precision=precision, context=context, batch=batch,
                             prices=catalog_prices(gw.config)).as_dict()
        except GputuiError as exc:
            raise _fail(exc) from None

    @server.tool()
    async def cost_estimate(gpu: str, hours: float, count: int = 1) -> dict[str, Any]:
        """What COUNT × GPU for HOURS costs on each priced provider (dated reference prices)."""
        from gputui.services.catalog import catalog_prices, cost

        if not (isinstance(hours, int | float) and math.isfinite(hours) and 0 < hours <= 24 * 366):
            raise bad("hours: between 0 and a year")
        if not 1 <= count <= 64:
            raise bad("count: 1-64 GPUs")
        try:
            return cost(gpu, count=count, hours=str(hours),
                        prices=catalog_prices(gw.config)).as_dict()
        except GputuiError as exc:
            raise _fail(exc) from None

    @server.tool()
    async def create(gpu: str, provider: str = "sandbox", count: int | None = None,
                     name: str | None = None, release_after: str | None = None,
                     idle_minutes: float | None = None, idle_util_pct: float | None = None,
                     confirm: bool = False) -> dict[str, Any]:
        """Rent an instance. It is always released at its timer (release_after, default from
        [mcp] default_release); spending over the cap needs confirm: true."""
        from pydantic import ValidationError

        from gputui.providers.base import CreateRequest
        from gputui.services.leases import LeaseService

        delta = gw.duration(release_after or gw.config.mcp.default_release, "release_after")
        if count is not None and not 1 <= count <= 64:
            raise bad("count: 1-64 GPUs")
        if (idle_minutes is None) != (idle_util_pct is None):
            raise bad("idle_minutes and idle_util_pct go together")
        if idle_minutes is not None and not (0 < idle_minutes <= 24 * 60
                                             and 0 < (idle_util_pct or 0) <= 100):
            raise bad("idle: 0-100 % utilisation over at most 24 h")
        services = gw.services
        try:
            offer = await services.find_offer(provider, gpu)
            gpus = offer.gpu_count if count is None else count
            request = CreateRequest(offer_id=offer.offer_id, gpu_count=gpus,
                                    name=name or default_name(offer.gpu), disk_gb=50)
            services.check_name_free(request.name)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise bad(f"{err['loc'][0]}: {err['msg'].lower()}") from None
        except GputuiError as exc:
            raise _fail(exc) from None
        spend = offer.billing.model_copy(update={
            "price_per_hour": offer.price_per_gpu_hour * gpus}).compute_cost(
            delta.total_seconds())
        gw.check_spend(spend, offer.billing.currency, f"{gpus}× {offer.gpu} for {delta}", confirm)
        lease = Lease(instance_id="pending", release_at=utcnow() + delta,
                      idle_util_pct=idle_util_pct, idle_minutes=idle_minutes)
        try:
            inst = await services.create(provider, offer, request, lease=lease)
            await LeaseService(services).arm(inst)
        except GputuiError as exc:
            raise _fail(exc) from None
        result = gw.view(services.store.get_instance_sync(inst.id) or inst)
        from gputui.services.daemon import capabilities_of, deadline_keeper

        caps = capabilities_of(services, provider)
        if caps is not None and not caps.power_off_stops_billing and \
                deadline_keeper(services.state_dir) is None:
            result["warning"] = ("only gputui releases this instance at its deadline (a power-off "
                                 "does not stop the billing) and no gputui daemon runs: start "
                                 "one with `gputui daemon` or `gputui daemon --install`")
        return result

    @server.tool()
    async def extend(name: str, by: str = "1h", confirm: bool = False) -> dict[str, Any]:
        """Move an instance's release time later by BY (e.g. 1h, 30m)."""
        from gputui.services.leases import LeaseService

        inst = gw.find(name)
        delta = gw.duration(by, "by")
        lease = gw.services.store.get_lease_sync(inst.id)
        base = lease.release_at if lease and lease.release_at and lease.release_at > utcnow() \
            else utcnow()
        if base + delta - utcnow() > parse_duration(gw.config.mcp.max_release):
            raise bad(f"by: the timer would be over {gw.config.mcp.max_release} from now "
                      "([mcp] max_release)")
        extra = inst.billing.price_per_hour * Decimal(delta.total_seconds()) / Decimal(3600)
        gw.check_spend(extra, inst.billing.currency, f"extending {inst.name} by {by}", confirm)
        try:
            await LeaseService(gw.services).extend(inst, by=delta)
        except GputuiError as exc:
            raise _fail(exc) from None
        return gw.view(gw.services.store.get_instance_sync(inst.id) or inst)

    @server.tool()
    async def release(name: str, confirm: bool = False) -> dict[str, Any]:
        """Release an instance now (stops the billing; its disk is gone). Needs confirm: true."""
        inst = gw.find(name)
        if confirm is not True:
            raise bad(f"release of {inst.name} needs confirm: true (its disk and everything on "
                      "it go with it)")
        try:
            entry = await gw.services.release(inst, "manual")
        except GputuiError as exc:
            raise _fail(exc) from None
        if entry is None:
            return {"name": inst.name, "released": False,
                    "status": (gw.services.store.get_instance_sync(inst.id) or inst).status.value}
        return {"name": inst.name, "released": True, "end_reason": entry.end_reason,
                "cost": str(entry.compute_cost + entry.storage_cost),
                "currency": entry.currency}

    @server.tool()
    async def run_command(name: str, command: str, timeout_s: float = 60) -> dict[str, Any]:
        """Run a shell command on the instance; its exit status and output (the tail)."""
        from gputui.nvidia.nvsmi import sanitize

        inst = gw.find(name)
        if not isinstance(command, str) or not command.strip():
            raise bad("command: give a command")
        if not (math.isfinite(timeout_s) and 1 <= timeout_s <= MAX_COMMAND_S):
            raise bad(f"timeout_s: 1-{MAX_COMMAND_S} seconds")
        try:
            result = await gw.services.run(inst, command, timeout=timeout_s)
        except GputuiError as exc:
            raise _fail(exc) from None

        def clean(text: str | None) -> str:
            text = gw.mask(text or "")[-MAX_OUTPUT:]
            return "\n".join(sanitize(line, MAX_OUTPUT) for line in text.splitlines())

        return {"exit_status": result.exit_status, "stdout": clean(result.stdout),
                "stderr": clean(result.stderr)}

    @server.tool()
    async def smi_snapshot(name: str) -> dict[str, Any]:
        """One reading of the instance's GPUs and processes (like nvidia-smi / gpustat)."""
        from gputui.remote.ssh import SSHLayerError
        from gputui.services.smi import SnapshotFailed, snapshot_instance, snapshot_json

        inst = gw.find(name)
        try:
            snap = await snapshot_instance(gw.services, inst)
        except SnapshotFailed as exc:
            from mcp.server.mcpserver.exceptions import ToolError

            raise ToolError(f"{inst.name}: {exc.diagnosis.problem} Fix: "
                            f"{exc.diagnosis.fix}") from None
        except (SSHLayerError, GputuiError) as exc:
            from mcp.server.mcpserver.exceptions import ToolError

            raise ToolError(f"{inst.name}: {exc}") from None
        return snapshot_json(snap)

    @server.tool()
    async def ollama_list(name: str) -> dict[str, Any]:
        """Ollama models installed on the instance, and those loaded now."""
        inst = gw.find(name)
        svc = service_for(gw.services)[0]
        try:
            models = await svc.models(inst)
            running = await svc.running(inst)
        except GputuiError as exc:
            raise _fail(exc) from None
        return {"models": [m.as_dict() for m in models],
                "loaded": [m.as_dict() for m in running]}

    @server.tool()
    async def ollama_pull(name: str, model: str) -> dict[str, Any]:
        """Pull an Ollama model onto the instance (starts Ollama there if it is stopped)."""
        inst = gw.find(name)
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise bad("model: give a model name such as qwen2.5:7b")
        svc = service_for(gw.services)[0]
        try:
            st = await svc.start(inst)
            progress = await svc.pull(inst, model, status=st)
        except GputuiError as exc:
            raise _fail(exc) from None
        return {"model": model, "pulled": True, "bytes": progress.total}

    @server.tool()
    async def ollama_load(name: str, model: str, gpus: list[int] | None = None,
                          force: bool = False) -> dict[str, Any]:
        """Load a pulled model into GPU memory, optionally on chosen GPUs (restarts Ollama
        with those GPUs); refused when the fit check says it will not fit, unless force."""
        from gputui.services.ollama import FitRefused

        inst = gw.find(name)
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise bad("model: give a model name such as qwen2.5:7b")
        if gpus is not None and (not gpus or any(g < 0 or g > 63 for g in gpus)):
            raise bad("gpus: GPU indices such as [0, 1]")
        svc = service_for(gw.services)[0]
        try:
            if gpus is not None:
                await svc.apply_gpus(inst, sorted(set(gpus)))
            else:
                await svc.start(inst)
            result = await svc.load(inst, model, force=force)
        except FitRefused as exc:
            return {"model": model, "loaded": False, "fit": exc.fit.as_dict()}
        except GputuiError as exc:
            raise _fail(exc) from None
        return {"model": model, "loaded": True, "fit": result.fit.as_dict(),
                "placement": result.placement.as_dict()}

    return server, gw


def serve_stdio(config: Config) -> int:
    """Serve until the client closes stdin."""
    import anyio

    server, gw = build_server(config)

    async def main() -> None:
        try:
            await server.run_stdio_async()
        finally:
            await gw.close()

    anyio.run(main)
    return 0
