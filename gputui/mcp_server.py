"""`gputui mcp`: gputui's actions for AI agents, over the Model Context Protocol (stdio), with
the official `mcp` SDK. An adapter like `gputui.cli`: it calls the services and nothing below
imports it.

Stricter than the command line, because nobody is watching:
- `create` always sets a release timer (`[mcp] default_release`, 2 h unless configured; at most
  `[mcp] max_release`); there is no "no timer".
- `release` always needs `confirm: true`; so does anything that would spend more than
  `[mcp] confirm_over` in its currency (a currency with no cap always needs it).
- Results never carry secrets: instances are described field by field (no key or password
  file), and any configured secret (the Lambda API key, the AutoDL token) is masked in command
  output and in the server's log on stderr — after the text is cleaned of escapes, so a key
  split by one is masked too. The log cuts a long message (a 200 kB command is logged as its
  first 200 characters and its size), so logging never holds up the answers to other calls.
- Only JSON `true` confirms: `confirm` (and every other flag) refuses "true", "yes", 1, "1".
- Paths and labels holding a control character (an escape, a BEL...) are refused; text from
  the instance is cleaned before it is returned.
- The local folder (`[mcp] local_folder`, else the folder the server started in) is the only
  one push reads and pull writes: paths are resolved, links included, before the check, and a
  link inside a pushed folder or a pull's destination that leads out of it is refused.
- On the sandbox an instance's shell runs on this machine, as this user: there `run_command`
  and `jobs_add` are a local shell, and the folder rule above does not confine them.
- Bad input (a missing or absurd argument, an unknown instance or GPU) is a JSON-RPC error
  (invalid params) and nothing is started or spent.
"""

from __future__ import annotations

import logging
import math
import os
import posixpath
import sys
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import StrictBool

from gputui.config import Config, parse_duration
from gputui.errors import BadInput, GputuiError
from gputui.format import default_label
from gputui.models import Instance, Lease, money, utcnow
from gputui.services.ollama import service_for

if TYPE_CHECKING:
    from gputui.services.hub import Services

MAX_OUTPUT = 64_000  # characters of command output returned (the tail)
MAX_COMMAND_S = 600
MAX_RUNS = 1000  # runs one jobs_add may queue
MAX_COMMAND_CHARS = 16_000
MAX_LOG_LINES = 5000
POLICIES = ("release", "stop", "keep")


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
        from gputui.config import known_secrets

        return known_secrets(self.config)

    def mask(self, text: str) -> str:
        """One line for an agent: cleaned, then the secrets masked (in that order: an escape
        inside a key must not hide it from the mask)."""
        from gputui.sanitize import clean_masked

        return clean_masked(text, self.secrets(), 4000)

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
        if confirm is True:
            return
        if cap is None:
            raise bad(f"{what} would spend up to {money(amount)} {currency} and no cap is "
                      f"configured for {currency}: call again with confirm: true")
        if amount > cap:
            raise bad(f"{what} would spend up to {money(amount)} {currency}, over the "
                      f"{cap} {currency} cap: call again with confirm: true")

    # -- files -----------------------------------------------------------------------------------

    def local_root(self) -> Path:
        """The one local folder push reads from and pull writes into."""
        text = self.config.mcp.local_folder
        root = Path(os.path.expanduser(text)).resolve() if text else Path.cwd().resolve()
        if not root.is_dir():
            raise ToolError(f"[mcp] local_folder: {text}: no such folder")
        return root

    def local_path(self, text: Any, field: str, default: str | None = None) -> Path:
        """A local path inside the local folder (relative paths are taken from it); anything
        that leads out of it, by `..`, an absolute path or a link, is refused."""
        root = self.local_root()
        if text is None:
            text = default
        if not isinstance(text, str) or not text.strip() or "\x00" in text or len(text) > 4096:
            raise bad(f"{field}: give a path inside {root}")
        given = root / os.path.expanduser(text.strip())
        path = given.resolve()  # `..` and links, every one on the way, resolved first
        if path != root and root not in path.parents:
            via = "" if Path(os.path.normpath(given)) == path else f" (it leads to {path})"
            raise bad(f"{field}: {text!r}{via} is outside the folder gputui mcp may use "
                      f"({root}; [mcp] local_folder)")
        return path

    async def links_inside(self, path: Path, field: str) -> None:
        """Every link under `path` (a folder to push, a pull's destination) leads inside the
        local folder: a push would send what a file link points to, and a pull writes through
        a folder link. Followed to the end (a link to a folder inside that holds a link out is
        refused too); a cycle is walked once."""
        import asyncio

        root = self.local_root()

        def outside() -> tuple[str, Path] | None:
            seen: set[str] = set()
            todo = [path]
            while todo:
                top = todo.pop()
                real = os.path.realpath(top)
                if real in seen or not os.path.isdir(real):
                    continue
                seen.add(real)
                for dirpath, dirnames, filenames in os.walk(top):
                    for entry in dirnames + filenames:
                        full = os.path.join(dirpath, entry)
                        if not os.path.islink(full):
                            continue
                        target = Path(os.path.realpath(full))
                        if target != root and root not in target.parents:
                            return os.path.relpath(full, root), target
                        if entry in dirnames:
                            todo.append(Path(full))  # os.walk does not go into links
            return None

        found = await asyncio.to_thread(outside)
        if found is not None:
            rel, target = found
            raise bad(f"{field}: {rel} is a link to {target}, outside the folder gputui mcp "
                      f"may use ({root}; [mcp] local_folder)")

    async def remote_home(self, inst: Instance) -> str:
        from gputui.remote.ssh import SSHLayerError
        from gputui.remote.transfer import remote_home

        try:
            return await remote_home(await self.services.link(inst))
        except (SSHLayerError, GputuiError) as exc:
            raise ToolError(f"{inst.name}: {exc}") from None

    @staticmethod
    def remote_path(text: Any, home: str, field: str) -> str:
        """A path on the instance inside its home (`~/x`, `x`, or absolute under the home)."""
        from gputui.remote.transfer import remote_relpath

        if not isinstance(text, str) or not text.strip() or "\x00" in text or len(text) > 4096:
            raise bad(f"{field}: give a path inside the instance's home")
        try:
            return remote_relpath(text, home, inside_home=True)
        except BadInput as exc:
            raise bad(f"{field}: {exc}") from None

    def clean(self, value: Any, limit: int = 4000) -> Any:
        """Text from outside, fit for an agent: no terminal escape, then no secret."""
        from gputui.sanitize import clean_masked

        if isinstance(value, str):
            return clean_masked(value, self.secrets(), limit)
        if isinstance(value, dict):
            return {k: self.clean(v, limit) for k, v in value.items()}
        if isinstance(value, list):
            return [self.clean(v, limit) for v in value]
        return value

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

    gateway: Gateway | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        from mcp.server.mcpserver.exceptions import ToolError
        from pydantic import ValidationError

        where = _control_in(arguments or {})
        if where is not None:
            raise bad(f"{name}: {where}: control characters (an escape, a BEL...) are not "
                      "allowed")
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
            if self.gateway is not None:  # a failure's text: cleaned, no secret
                raise ToolError(self.gateway.mask(str(exc))) from None
            raise


MULTILINE = ("command", "commands")  # shell text: line breaks and tabs are its own


def _control_in(value: Any, where: str = "", multiline: bool = False) -> str | None:
    """Where in a tool's arguments a string holds a control character (escape, BEL, bidi
    override...), or None. Every entry refuses them: a path or label with an OSC 52 or a
    window-title sequence would reach a terminal later (`gputui jobs`)."""
    from gputui.sanitize import has_control

    if isinstance(value, str):
        text = value.translate({9: None, 10: None, 13: None}) if multiline else value
        return where or "arguments" if has_control(text) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _control_in(item, f"{where}.{key}" if where else str(key),
                                multiline or (not where and key in MULTILINE))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _control_in(item, f"{where}.{i}", multiline)
            if found is not None:
                return found
    return None


def build_server(config: Config) -> tuple[MCPServer, Gateway]:
    gw = Gateway(config)
    server = _Server(
        "gputui", instructions=(
            "Rent GPUs with a release timer, run commands on them, watch them and release "
            "them. Every instance created here is released at its timer. release, and "
            "anything spending over the configured cap, need confirm: true (JSON true). "
            "On the sandbox provider an instance's shell runs on this machine, as this user."),
    )
    server.gateway = gw

    @server.tool()
    async def list_instances(include_ended: StrictBool = False) -> list[dict[str, Any]]:
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
                 # an unknown price is null, never "0" (it is read once the instance exists)
                 "price_per_gpu_hour": str(o.price_per_gpu_hour) if o.price_known else None,
                 "price_known": o.price_known,
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
                     confirm: StrictBool = False) -> dict[str, Any]:
        """Rent an instance. It is always released at its timer (release_after, default from
        [mcp] default_release); spending over the cap needs confirm: true."""
        from pydantic import ValidationError

        from gputui.providers.base import CreateRequest
        from gputui.services.leases import session_leases

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
                                    name=name or services.free_name(
                                        "agent-" + default_label(offer.gpu)), disk_gb=50)
            services.check_name_free(request.name)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise bad(f"{err['loc'][0]}: {err['msg'].lower()}") from None
        except GputuiError as exc:
            raise _fail(exc) from None
        if not offer.price_known and confirm is not True:
            raise bad(f"{gpus}× {offer.gpu} at {provider}: its price is not known until it is "
                      "created: call again with confirm: true")
        spend = offer.billing.model_copy(update={
            "price_per_hour": offer.price_per_gpu_hour * gpus}).compute_cost(
            delta.total_seconds())
        gw.check_spend(spend, offer.billing.currency, f"{gpus}× {offer.gpu} for {delta}", confirm)
        lease = Lease(instance_id="pending", release_at=utcnow() + delta,
                      idle_util_pct=idle_util_pct, idle_minutes=idle_minutes)
        try:
            inst = await services.create(provider, offer, request, lease=lease)
            await session_leases(services).arm(inst)
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
    async def extend(name: str, by: str = "1h", confirm: StrictBool = False) -> dict[str, Any]:
        """Move an instance's release time later by BY (e.g. 1h, 30m)."""
        from gputui.services.leases import session_leases

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
            await session_leases(gw.services).extend(inst, by=delta)
        except GputuiError as exc:
            raise _fail(exc) from None
        return gw.view(gw.services.store.get_instance_sync(inst.id) or inst)

    @server.tool()
    async def release(name: str, confirm: StrictBool = False) -> dict[str, Any]:
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
        from gputui.sanitize import clean_masked

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
            return clean_masked(text or "", gw.secrets(), MAX_OUTPUT, keep="tail", lines=True)

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
                          force: StrictBool = False) -> dict[str, Any]:
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

    # -- jobs and files ----------------------------------------------------------------------------

    def job_id_of(job: Any) -> str:
        if isinstance(job, bool) or not isinstance(job, int | str) or \
                not str(job).strip().isdigit() or not 0 < int(str(job).strip()) < 10**9:
            raise bad(f"job: {job!r} is not a job id (ids are numbers: 1, 2, ...)")
        return str(int(str(job).strip()))

    @server.tool()
    async def jobs_add(name: str, command: str | None = None, commands: list[str] | None = None,
                       label: str | None = None, cwd: str | None = None,
                       gpus: list[int] | None = None, retries: int = 0) -> dict[str, Any]:
        """Queue runs on the instance: one `command`, or `commands` (one run each, in order).
        They run one after another (side by side on disjoint `gpus`), detached: they go on
        with no gputui running. Returns the new job ids."""
        from gputui.format import check_label
        from gputui.services.jobs import JobService, JobSpec, parse_gpus

        inst = gw.find(name)
        if (command is None) == (commands is None):
            raise bad("give command (one run) or commands (a list), not both and not neither")
        texts = [command] if command is not None else list(commands or [])
        if not texts or len(texts) > MAX_RUNS:
            raise bad(f"commands: 1-{MAX_RUNS} commands")
        for i, text in enumerate(texts):
            where = "command" if command is not None else f"commands.{i}"
            if not text.strip() or "\x00" in text or len(text) > MAX_COMMAND_CHARS:
                raise bad(f"{where}: give a shell command (at most {MAX_COMMAND_CHARS} "
                          "characters)")
        if not 0 <= retries <= 100:
            raise bad("retries: 0-100")
        if label is not None:
            try:
                label = check_label(label, "label")
            except BadInput as exc:
                raise bad(str(exc)) from None
        try:
            gpu_set = parse_gpus(",".join(map(str, gpus)), inst.gpu_count) \
                if gpus is not None else None
        except BadInput as exc:
            raise bad(str(exc).replace("--gpus", "gpus")) from None
        if gpus is not None and (not gpus or any(g < 0 for g in gpus)):
            raise bad("gpus: GPU indices such as [0, 1]")
        if cwd is not None:
            cwd = gw.remote_path(cwd, await gw.remote_home(inst), "cwd")
        many = len(texts) > 1
        specs = [JobSpec(command=text, name=f"{label}-{i}" if label and many else label,
                         cwd=cwd, gpus=gpu_set, retries=retries)
                 for i, text in enumerate(texts, 1)]
        try:
            ids = await JobService(gw.services).add(inst, specs)
        except BadInput as exc:
            raise bad(str(exc)) from None
        except GputuiError as exc:
            raise _fail(exc) from None
        return {"name": inst.name, "ids": ids}

    @server.tool()
    async def jobs_list(name: str) -> dict[str, Any]:
        """The instance's queue: each run's status, exit code, time, GPU use and cost (with
        currency; a part of the instance's cost, not added to it), and the when-done policy."""
        from gputui.services.jobs import JobService

        inst = gw.find(name)
        jobs = JobService(gw.services)
        try:
            view = await jobs.view(inst)
        except GputuiError as exc:
            raise _fail(exc) from None
        runs = []
        for job in view.jobs:
            item = job.as_dict()
            item.pop("log", None)  # a path on the instance: read it with jobs_log
            runs.append(gw.clean(item))
        rec = jobs.when_done(inst)
        return {"name": inst.name, "runs": runs, "finished": view.finished,
                "counts": view.counts(),
                "when_done": None if rec is None else {
                    "policy": rec.policy, "pulls": gw.clean(rec.pulls),
                    "done": rec.done_at is not None, "outcome": gw.clean(rec.outcome)}}

    @server.tool()
    async def jobs_log(name: str, job: int | str, lines: int = 200) -> dict[str, Any]:
        """The last LINES lines of a run's output (stdout and stderr), escapes removed."""
        from gputui.services.jobs import JobService

        inst = gw.find(name)
        job_id = job_id_of(job)
        if not 1 <= lines <= MAX_LOG_LINES:
            raise bad(f"lines: 1-{MAX_LOG_LINES}")
        try:
            text = await JobService(gw.services).log_tail(inst, job_id, lines)
        except BadInput as exc:
            raise bad(str(exc)) from None
        except GputuiError as exc:
            raise _fail(exc) from None
        kept: list[str] = []
        size = 0
        for line in reversed(text):  # the tail, at most MAX_OUTPUT characters in all
            line = gw.clean(line)
            size += len(line) + 1
            if size > MAX_OUTPUT:
                break
            kept.append(line)
        return {"name": inst.name, "job": job_id, "lines": kept[::-1],
                "truncated": len(kept) < len(text)}

    @server.tool()
    async def jobs_cancel(name: str, job: int | str) -> dict[str, Any]:
        """Drop a queued run, or stop a running one."""
        from gputui.services.jobs import JobService

        inst = gw.find(name)
        job_id = job_id_of(job)
        try:
            was = await JobService(gw.services).cancel(inst, job_id)
        except BadInput as exc:
            raise bad(str(exc)) from None
        except GputuiError as exc:
            raise _fail(exc) from None
        return {"name": inst.name, "job": job_id, "cancelled": True, "was": gw.clean(was)}

    @server.tool()
    async def when_done(name: str, policy: str, pull: str | None = None,
                        to: str | None = None, grace: str = "10m",
                        confirm: StrictBool = False) -> dict[str, Any]:
        """What happens when the queue ends: release, stop or keep the instance, after
        bringing `pull` (a path in its home) into `to` (inside the local folder) first.
        `release` needs confirm: true (the disk goes with it). Carried out now if the queue
        has ended, else by whichever gputui sees the end first (`gputui daemon`, the console,
        `gputui reap`)."""
        from gputui.config import parse_duration
        from gputui.services.jobs import JobService

        inst = gw.find(name)
        if policy not in POLICIES:
            raise bad(f"policy: one of {', '.join(POLICIES)}, not {policy!r}")
        if to is not None and pull is None:
            raise bad("to: needs pull")
        try:
            grace_s = parse_duration(grace).total_seconds() if isinstance(grace, str) else -1
        except ValueError as exc:
            raise bad(f"grace: {exc}") from None
        if not 0 <= grace_s <= 24 * 3600:
            raise bad("grace: a duration from 0 to 24h, such as 10m")
        pulls: list[tuple[str, str]] = []
        if pull is not None:
            remote = gw.remote_path(pull, await gw.remote_home(inst), "pull")
            default = posixpath.basename(remote.rstrip("/")) or "results"
            dest = gw.local_path(to, "to", default)
            await gw.links_inside(dest, "to")
            pulls.append((remote, str(dest)))
        if policy == "release" and confirm is not True:
            raise bad(f"when_done release of {inst.name} needs confirm: true (its disk and "
                      "everything on it go with it)")
        jobs = JobService(gw.services)
        try:
            rec = await jobs.set_when_done(inst, policy, pulls=pulls,  # type: ignore[arg-type]
                                           grace_s=grace_s)
            outcome = await jobs.finish(inst, force=True)  # the queue may have ended already
        except BadInput as exc:
            raise bad(str(exc)) from None
        except GputuiError as exc:
            raise _fail(exc) from None
        result: dict[str, Any] = {"name": inst.name, "policy": rec.policy,
                                  "pulls": gw.clean(rec.pulls), "grace_s": rec.grace_s,
                                  "outcome": gw.clean(outcome)}
        from gputui.services.daemon import deadline_keeper

        if outcome is None and deadline_keeper(gw.services.state_dir) != "daemon":
            result["warning"] = ("no gputui daemon runs: the policy is carried out when a "
                                 "console or `gputui reap` next looks (start one with "
                                 "`gputui daemon` or `gputui daemon --install`)")
        return result

    async def transfer(name: str, direction: str, local: Path, remote: str,
                       checksum: bool) -> dict[str, Any]:
        from gputui.remote.ssh import SSHLayerError
        from gputui.remote.transfer import pull as pull_files
        from gputui.remote.transfer import push as push_files

        inst = gw.find(name)
        try:
            link = await gw.services.link(inst)
            home = await gw.remote_home(inst)
            where = gw.remote_path(remote, home, "remote")
            if direction == "push":
                summary = await push_files(link, local, where, checksum=checksum, home=home)
            else:
                summary = await pull_files(link, where, local, checksum=checksum, home=home,
                                           inside_home=True)
        except BadInput as exc:
            raise bad(str(exc)) from None
        except (SSHLayerError, GputuiError) as exc:
            raise ToolError(gw.mask(f"{inst.name}: {exc}")) from None
        return {"name": inst.name, **gw.clean(summary.as_dict())}

    @server.tool()
    async def push(name: str, local: str, remote: str | None = None,
                   checksum: StrictBool = False) -> dict[str, Any]:
        """Send a file or folder from the local folder to the instance (inside its home;
        default ~/<its name>); only what changed, .gitignore respected."""
        path = gw.local_path(local, "local")
        if not path.exists():
            raise bad(f"local: {local}: no such file or folder in {gw.local_root()}")
        await gw.links_inside(path, "local")
        return await transfer(name, "push", path, remote or f"~/{path.name}", checksum)

    @server.tool()
    async def pull(name: str, remote: str, local: str | None = None,
                   checksum: StrictBool = False) -> dict[str, Any]:
        """Bring a file or folder from the instance's home into the local folder (default:
        <local folder>/<its name>); only what changed."""
        if not isinstance(remote, str) or not remote.strip():
            raise bad("remote: give a path inside the instance's home")
        default = posixpath.basename(posixpath.normpath(remote.strip()).rstrip("/"))
        if default in ("", ".", "..", "~"):
            default = "results"
        path = gw.local_path(local, "local", default)
        await gw.links_inside(path, "local")
        return await transfer(name, "pull", path, remote, checksum)


    return server, gw


class LogFormatter(logging.Formatter):
    """The server's log on stderr: one line a record, cleaned, the secrets masked, and a long
    message cut to its first 200 characters and its size. (The SDK's default, a Rich handler
    at INFO, took seconds to minutes laying out a 30-200 kB command that asyncssh logs, and
    no other call was answered meanwhile; it printed the command unmasked, too.)"""

    def __init__(self, secrets: Callable[[], list[str]]) -> None:
        super().__init__()
        self._secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        from gputui.sanitize import log_text

        try:
            message = record.getMessage()
        except Exception:  # a bad format string in someone's log call
            message = f"{record.msg} {record.args}"
        secrets = self._secrets()
        line = (f"{self.formatTime(record)} {record.levelname} {record.name}: "
                f"{log_text(message, secrets)}")
        if record.exc_info:
            trace = self.formatException(record.exc_info)
            line += "".join(f"\n  {log_text(part, secrets, 1000)}"
                            for part in trace.splitlines())
        return line


def setup_logging(gw: Gateway, stream: IO[str] | None = None) -> logging.Handler:
    """The one log handler (replacing the SDK's): INFO and up, through `LogFormatter`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LogFormatter(gw.secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    return handler


def serve_stdio(config: Config) -> int:
    """Serve until the client closes stdin."""
    import anyio

    server, gw = build_server(config)
    setup_logging(gw)

    async def main() -> None:
        try:
            await server.run_stdio_async()
        finally:
            await gw.close()

    anyio.run(main)
    return 0
