"""The `gputui` command. Subcommands are thin calls into the services the console uses.

Imports are lazy: `gputui --help` and `gputui instances --json` load neither Textual nor asyncssh.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from gputui import __version__

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2


class CommandError(Exception):
    """A one-line message for the user, and an exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


Handler = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, Handler] = {}


def command(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _COMMANDS[name] = fn
        return fn

    return register


def _print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _open_store():  # -> SessionStore
    from gputui.config import ensure_state_dir, state_path
    from gputui.store import SessionStore

    ensure_state_dir()
    return SessionStore(state_path())


# --- commands ---------------------------------------------------------------------------------


@command("instances")
def cmd_instances(args: argparse.Namespace) -> int:
    from gputui.services.views import format_money, format_remaining, instance_view

    store = _open_store()
    _refresh_quietly(args, store)
    items = store.instances_sync(live_only=not args.all)
    leases = {lease.instance_id: lease for lease in store.leases_sync()}
    views = [instance_view(i, leases.get(i.id)) for i in items]
    if args.json:
        _print_json(views)
        return 0
    if not views:
        print("No instances. Create one with `gputui create --provider sandbox --gpu 4090`"
              " or open the console with `gputui`.")
        return 0
    print(f"{'NAME':<16} {'PROVIDER':<9} {'GPU':<22} {'STATUS':<9} {'RELEASE IN':<10} {'COST':>9}")
    for inst, v in zip(items, views, strict=True):
        lease = leases.get(inst.id)
        left = format_remaining(lease.remaining()) if lease and inst.status.live else "-"
        gpu = f"{v['gpu_count']}× {v['gpu']}"
        print(f"{v['name'][:16]:<16} {v['provider'][:9]:<9} {gpu[:22]:<22} {v['status']:<9} "
              f"{left:<10} {format_money(inst.accrued(), v['currency']):>9}")
    return 0


def _refresh_quietly(args: argparse.Namespace, store) -> None:
    """Bring live instances up to date with their providers (a power-off or a scheduled
    termination that happened while nothing ran). Providers that need the network are not
    asked here; `gputui reap` does the full round."""
    live = [i for i in store.instances_sync(live_only=True) if i.provider == "sandbox"]
    if not live:
        return
    import asyncio

    from gputui.services.hub import ServiceError

    async def refresh() -> None:
        services = _services(args, store)
        try:
            for inst in live:
                try:
                    await services.refresh(inst)
                except ServiceError as exc:
                    print(f"gputui: {inst.name}: {exc}", file=sys.stderr)
        finally:
            await services.close()

    asyncio.run(refresh())


@command("ollama")
def cmd_ollama(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services.ollama import ollama_command

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(f"{inst.name} is {inst.status.value}")
        return await ollama_command(services, inst, args.action, args.arg, args.json,
                                    force=args.force)

    return _run_async(args, body)


@command("smi")
def cmd_smi(args: argparse.Namespace) -> int:
    from gputui.services import smi

    if args.local:
        return smi.smi_local(as_json=args.json)
    if args.input:
        return smi.smi_input(args.input, as_json=args.json)
    if not args.name:
        raise CommandError("give an instance NAME, --local or --input FILE", EXIT_BAD_INPUT)
    return _run_async(args, lambda services: smi.smi_remote(services, args.name, as_json=args.json))


@command("doctor")
def cmd_doctor(args: argparse.Namespace) -> int:
    from gputui.services import smi

    if args.local or not args.name:
        return smi.doctor_local(as_json=args.json)
    return _run_async(args, lambda services: smi.doctor_remote(services, args.name,
                                                               as_json=args.json))


@command("costs")
def cmd_costs(args: argparse.Namespace) -> int:
    from gputui.services.costs import export_rows, to_csv, totals
    from gputui.services.views import format_money

    store = _open_store()
    _refresh_quietly(args, store)
    instances, ledger = store.instances_sync(), store.ledger_sync()
    rows = export_rows(ledger, instances)
    if args.csv:
        sys.stdout.write(to_csv(rows))
        return 0
    if args.json:
        _print_json(rows)
        return 0
    from gputui.models import utcnow

    t = totals(instances, ledger, utcnow())
    print(f"now {format_money(t.rate)}/h · live instances {format_money(t.accrued_live)} · "
          f"today {format_money(t.today)} · this month {format_money(t.month)}")
    for row in rows:
        state = "running" if row["running"] else row["end_reason"]
        print(f"  {row['name'][:20]:<20} {row['gpu_count']}× {row['gpu'][:22]:<22} "
              f"{state:<8} {row['total']:>10} {row['currency']}")
    return 0


@command("catalog")
def cmd_catalog(args: argparse.Namespace) -> int:
    from gputui.services import catalog as svc

    return svc.run_command(
        svc.catalog_command, args.config, sort=args.sort, reverse=args.reverse,
        min_vram=args.min_vram, arch=args.arch, provider=args.provider,
        interconnect=args.interconnect, as_json=args.json,
    )


@command("fit")
def cmd_fit(args: argparse.Namespace) -> int:
    from gputui.services import catalog as svc

    if args.model and args.model_opt:
        raise CommandError("give the model once: MODEL or --model", EXIT_BAD_INPUT)
    return svc.run_command(
        svc.fit_command, args.config, args.model or args.model_opt, job=args.job,
        precision=args.precision, context=args.context, batch=args.batch, params=args.params,
        layers=args.layers, kv_heads=args.kv_heads, head_dim=args.head_dim, heads=args.heads,
        lora_rank=args.lora_rank, as_json=args.json,
    )


@command("cost")
def cmd_cost(args: argparse.Namespace) -> int:
    from gputui.services import catalog as svc

    if args.gpu and args.gpu_opt:
        raise CommandError("give the GPU once: GPU or --gpu", EXIT_BAD_INPUT)
    return svc.run_command(
        svc.cost_command, args.config, args.gpu or args.gpu_opt or "", count=args.count,
        hours=args.hours, as_json=args.json,
    )


@command("config")
def cmd_config(args: argparse.Namespace) -> int:
    from gputui.config import Config, config_path, load_config, save_config

    path = config_path()
    if args.config_cmd == "path":
        print(path)
        return 0
    if args.config_cmd == "init":
        if path.exists() and not args.force:
            raise CommandError(f"{path} exists already (use --force to overwrite it)")
        save_config(Config(), path)
        print(f"wrote {path}")
        return 0
    if args.config_cmd == "check":
        load_config(path)
        print(f"{path}: ok")
        return 0
    raise CommandError("usage: gputui config {init,path,check}", EXIT_BAD_INPUT)


def _services(args: argparse.Namespace, store=None):  # -> Services
    from gputui.services.hub import Services

    return Services(store or _open_store(), args.config)


def _run_async(args: argparse.Namespace, body) -> int:
    """Run `body(services)` on a fresh loop; always close links and servers afterwards."""
    import asyncio

    from gputui.services.hub import InvalidRequest, ServiceError

    async def main() -> int:
        from gputui.store import Notice

        services = _services(args)

        def show(event: object) -> None:
            if isinstance(event, Notice) and not getattr(args, "json", False):
                print(f"{event.severity}: {event.text}", file=sys.stderr)

        services.store.subscribe(show)
        try:
            return await body(services)
        except InvalidRequest as exc:
            raise CommandError(str(exc), EXIT_BAD_INPUT) from None
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        finally:
            await services.close()

    return asyncio.run(main())


@command("create")
def cmd_create(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from gputui.providers.base import CreateRequest
    from gputui.services.views import instance_view

    async def body(services) -> int:
        offer = await services.find_offer(args.provider, args.gpu)
        try:
            request = CreateRequest(offer_id=offer.offer_id, gpu_count=offer.gpu_count if args.count is None else args.count,
                                    name=args.name or _default_name(offer.gpu),
                                    disk_gb=args.disk, image=args.image)
        except ValidationError as exc:
            err = exc.errors()[0]
            flag = {"gpu_count": "--count", "disk_gb": "--disk", "name": "--name"}.get(
                str(err["loc"][0]), f"--{err['loc'][0]}")
            raise CommandError(f"{flag}: {err['msg'].lower()}", EXIT_BAD_INPUT) from None
        lease = _lease_from_args(args, services)
        progress = None if args.json else (lambda m: print(f"  {m}", file=sys.stderr))
        inst = await services.create(args.provider, offer, request, lease=lease, progress=progress)
        inst = await _arm_lease(services, inst)
        view = instance_view(inst, services.store.get_lease_sync(inst.id))
        if args.json:
            _print_json(view)
        else:
            print(f"{inst.name}: {inst.gpu_count}× {inst.gpu} on {args.provider}, {view['status']}"
                  f" — ssh with `gputui ssh {inst.name}`")
        return 0

    return _run_async(args, body)


def _default_name(gpu: str) -> str:
    import secrets

    short = gpu.lower().replace("geforce", "").replace("nvidia", "").strip().replace(" ", "-")
    return f"{short}-{secrets.token_hex(2)}"


def _lease_from_args(args: argparse.Namespace, services):  # -> Lease
    from gputui.config import parse_duration
    from gputui.models import Lease, utcnow

    release_at = None
    if args.no_timer:
        if not args.yes:
            raise CommandError("--no-timer bills until you release it by hand: add --yes to confirm",
                               EXIT_BAD_INPUT)
    elif args.release_at:
        release_at = _parse_clock(args.release_at)
    else:
        text = args.release_after or services.config.lease.default_release
        try:
            delta = parse_duration(text)
        except ValueError as exc:
            raise CommandError(f"--release-after: {exc}", EXIT_BAD_INPUT) from None
        if delta.total_seconds() < 1 or delta.days > 366:
            raise CommandError(f"--release-after: {text!r} must be between 1 second and a year",
                               EXIT_BAD_INPUT)
        release_at = utcnow() + delta
    idle_util = idle_minutes = None
    if args.idle:
        idle_util, idle_minutes = _parse_idle(args.idle)
    return Lease(instance_id="pending", release_at=release_at, no_timer_confirmed=args.no_timer,
                 idle_util_pct=idle_util, idle_minutes=idle_minutes)


def _parse_idle(text: str) -> tuple[float, float]:
    """`30m@5%`: power off once every GPU stays under 5 % utilisation for 30 minutes."""
    from gputui.config import parse_duration

    try:
        span, _, pct = text.partition("@")
        minutes = parse_duration(span).total_seconds() / 60
        util = float(pct.strip().rstrip("%"))
    except ValueError:
        raise CommandError(f"--idle: {text!r} is not DURATION@PCT% (e.g. 30m@5%)",
                           EXIT_BAD_INPUT) from None
    if not (0 < util <= 100) or not (0 < minutes <= 24 * 60):
        raise CommandError("--idle: utilisation 1-100 % over at most 24 h", EXIT_BAD_INPUT)
    return util, minutes


def _parse_clock(text: str):  # -> datetime (UTC)
    """`18:30` (today, or tomorrow if past) or an ISO-8601 time, in local time unless it says."""
    from datetime import datetime, timedelta

    from gputui.models import as_utc

    now = datetime.now().astimezone()
    try:
        if len(text) <= 5 and ":" in text:
            hh, mm = (int(x) for x in text.split(":"))
            at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
            if at <= now:
                at += timedelta(days=1)
        else:
            at = datetime.fromisoformat(text)
            if at.tzinfo is None:
                at = at.astimezone()
    except ValueError:
        raise CommandError(f"--release-at: {text!r} is not a time (try 18:30)", EXIT_BAD_INPUT) from None
    if at <= now:
        raise CommandError(f"--release-at: {text!r} is in the past", EXIT_BAD_INPUT)
    return as_utc(at)


async def _arm_lease(services, inst):
    from gputui.services.leases import LeaseService

    await LeaseService(services).arm(inst)
    return inst


@command("extend")
def cmd_extend(args: argparse.Namespace) -> int:
    from gputui.config import parse_duration
    from gputui.services.views import format_remaining

    async def body(services) -> int:
        from gputui.services.leases import LeaseService

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(f"{inst.name} is {inst.status.value}")
        leases = LeaseService(services)
        if args.to:
            lease = await leases.extend(inst, to=_parse_clock(args.to))
        else:
            try:
                by = parse_duration(args.by)
            except ValueError as exc:
                raise CommandError(f"extend: {exc}", EXIT_BAD_INPUT) from None
            lease = await leases.extend(inst, by=by)
        layers = ["console"] + (["on-instance"] if lease.on_instance_armed else []) + (
            ["provider"] if lease.provider_armed else [])
        print(f"{inst.name}: release at {lease.release_at.astimezone():%Y-%m-%d %H:%M} "
              f"(in {format_remaining(lease.remaining())}; layers: {', '.join(layers)})")
        return 0

    return _run_async(args, body)


@command("reap")
def cmd_reap(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services.leases import LeaseService

        result = await LeaseService(services).reap()
        if args.json:
            _print_json({"released": result.released, "errors": result.errors})
        else:
            for name in result.released:
                print(f"released {name}")
            for err in result.errors:
                print(f"error: {err}", file=sys.stderr)
        return 1 if result.errors else 0

    return _run_async(args, body)


@command("ssh")
def cmd_ssh(args: argparse.Namespace) -> int:
    command_args = list(args.remote)
    if command_args and command_args[0] == "--":
        command_args = command_args[1:]

    async def body(services) -> int:
        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(f"{inst.name} is {inst.status.value}")
        link = await services.link(inst, accept_new_host_key=args.accept_new_host_key)
        from gputui.remote.ssh import SSHLayerError

        try:
            if command_args:
                result = await link.run(" ".join(command_args), timeout=None)
                sys.stdout.write(result.stdout)
                sys.stderr.write(result.stderr)
                return result.exit_status if result.exit_status is not None else 255
            from gputui.remote.interactive import interactive_shell

            return await interactive_shell(link)
        except SSHLayerError as exc:
            raise CommandError(f"{inst.name}: {exc}") from None

    return _run_async(args, body)


@command("add-ssh")
def cmd_add_ssh(args: argparse.Namespace) -> int:
    from decimal import Decimal, InvalidOperation

    from gputui.models import Granularity
    from gputui.remote.sshline import parse_ssh_line
    from gputui.services.views import instance_view

    try:
        endpoint = parse_ssh_line(args.line)
    except ValueError as exc:
        raise CommandError(f"ssh line: {exc}", EXIT_BAD_INPUT) from None
    try:
        price = Decimal(args.price)
        if not price.is_finite() or price < 0 or price > 10_000:
            raise InvalidOperation
    except InvalidOperation:
        raise CommandError(f"--price: {args.price!r} is not an hourly price", EXIT_BAD_INPUT) from None
    if args.password_file:
        import os

        try:
            mode = os.stat(args.password_file).st_mode
        except OSError as exc:
            raise CommandError(f"--password-file: {exc.strerror}: {args.password_file}",
                               EXIT_BAD_INPUT) from None
        if mode & 0o077:
            raise CommandError(f"--password-file: others can read {args.password_file}; "
                               f"run chmod 600 {args.password_file}", EXIT_BAD_INPUT)
        endpoint = endpoint.model_copy(update={"password_file": args.password_file})

    async def body(services) -> int:
        from gputui.services.hosts import add_ssh_host

        inst = await add_ssh_host(
            services, endpoint, name=args.name, gpu=args.gpu, price=price,
            per=Granularity(args.per), accept_new_host_key=args.accept_new_host_key,
            password=_read_password(args),
        )
        if args.json:
            _print_json(instance_view(inst, services.store.get_lease_sync(inst.id)))
        else:
            print(f"added {inst.name}: {inst.gpu_count}× {inst.gpu} at "
                  f"{inst.billing.price_per_hour}/h ({inst.billing.granularity.value} billing)")
        return 0

    return _run_async(args, body)


def _read_password(args: argparse.Namespace) -> str | None:
    if not args.ask_password:
        return None
    import getpass

    return getpass.getpass("SSH password (not stored): ")


@command("release")
def cmd_release(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        inst = services.store.find_instance_sync(args.name)
        entry = await services.release(inst, "manual")
        if entry is None:
            print(f"{inst.name} was already {inst.status.value}")
            return 0
        if args.json:
            _print_json(json.loads(entry.model_dump_json()))
        else:
            print(f"released {inst.name}: {entry.compute_cost + entry.storage_cost} "
                  f"{entry.currency} in all")
        return 0

    return _run_async(args, body)


def _run_console(args: argparse.Namespace) -> int:
    from gputui.config import load_config

    config = load_config()
    from gputui.app import GpuTuiApp

    app = GpuTuiApp(config=config, theme_name=args.theme)
    app.run()
    return app.return_code or 0


# --- parser -----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit code 2), like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gputui",
        description="A keyboard-driven console for rented GPUs: choose a card, rent it with a "
        "release timer, watch its GPUs, manage Ollama models and see what it costs. "
        "With no command, opens the console.",
    )
    p.add_argument("--version", action="version", version=f"gputui {__version__}")
    p.add_argument("--theme", metavar="NAME", help="console theme (remembered in config)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("instances", help="list instances")
    s.add_argument("--json", action="store_true", help="print a JSON list")
    s.add_argument("--all", action="store_true", help="include released instances")

    s = sub.add_parser("create", help="rent an instance")
    s.add_argument("--provider", default="sandbox", help="provider (default: sandbox)")
    s.add_argument("--gpu", required=True, help="GPU model, matched loosely (e.g. 4090, 'H100 SXM')")
    s.add_argument("--count", type=int, help="number of GPUs (default: the offer's size, often 1)")
    s.add_argument("--name", help="task label (default: from the GPU)")
    s.add_argument("--disk", type=float, default=50, help="disk in GB (default 50)")
    s.add_argument("--image", help="image, where the provider has images")
    s.add_argument("--json", action="store_true", help="print the instance as JSON")
    t = s.add_mutually_exclusive_group()
    t.add_argument("--release-after", metavar="DURATION",
                   help="auto-release after this long: 2h, 90m (default from config: 2h)")
    t.add_argument("--release-at", metavar="TIME", help="auto-release at a clock time: 18:30")
    t.add_argument("--no-timer", action="store_true", help="no auto-release (needs --yes)")
    s.add_argument("--yes", action="store_true", help="confirm --no-timer")
    s.add_argument("--idle", metavar="SPAN@PCT%",
                   help="idle release: power off when every GPU stays under PCT %% for SPAN, e.g. 30m@5%%")

    s = sub.add_parser("extend", help="move an instance's release time")
    s.add_argument("name", help="instance name or id")
    s.add_argument("by", nargs="?", default="1h", help="how much longer: 1h, 30m (default 1h)")
    s.add_argument("--to", metavar="TIME", help="a new release time instead: 18:30")

    s = sub.add_parser("reap", help="release overdue instances (for cron / a systemd timer)")
    s.add_argument("--json", action="store_true", help="print what was released as JSON")

    s = sub.add_parser("ssh", help="a shell (or one command) on an instance")
    s.add_argument("name", help="instance name or id")
    s.add_argument("remote", nargs=argparse.REMAINDER, help="-- CMD: run one command and exit with its code")
    s.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown host key")

    s = sub.add_parser("add-ssh", help="add an instance rented elsewhere by its ssh line")
    s.add_argument("line", help="as the platform gives it: 'ssh -p PORT root@HOST'")
    s.add_argument("--gpu", help="GPU model (default: detected with nvidia-smi -L)")
    s.add_argument("--price", required=True, help="price per hour for the whole instance")
    s.add_argument("--per", choices=["second", "minute", "hour"], default="second",
                   help="billing granularity (default second)")
    s.add_argument("--name", help="task label (default: the host)")
    s.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown host key")
    s.add_argument("--ask-password", action="store_true", help="prompt for a password (not stored)")
    s.add_argument("--password-file", help="a 0600 file holding the password")
    s.add_argument("--json", action="store_true", help="print the instance as JSON")

    s = sub.add_parser("release", help="release an instance now (stops the billing)")
    s.add_argument("name", help="instance name or id")
    s.add_argument("--json", action="store_true", help="print the ledger entry as JSON")

    s = sub.add_parser("ollama", help="Ollama on an instance: models, loads, GPU selection")
    s.add_argument("name", help="instance name or id")
    s.add_argument("action", choices=["status", "list", "ps", "pull", "rm", "load", "unload",
                                      "gpus", "start", "stop", "fit", "verify"])
    s.add_argument("arg", nargs="?", help="a model (pull/rm/load/unload/fit/verify), or GPU "
                   "indices for gpus: 0,1 (all: every GPU)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--force", action="store_true", help="load even when the fit check refuses")

    s = sub.add_parser("smi", help="a one-shot snapshot of GPUs and processes, like gpustat")
    s.add_argument("name", nargs="?", help="instance name or id")
    t = s.add_mutually_exclusive_group()
    t.add_argument("--local", action="store_true", help="this machine, through NVML")
    t.add_argument("--input", metavar="FILE",
                   help="a saved capture: CSV with header, -q -x XML or the table (- for stdin)")
    s.add_argument("--json", action="store_true", help='print {"gpus": [...], "processes": [...]}')

    s = sub.add_parser("doctor", help="check the GPU setup and say how to fix what is wrong")
    s.add_argument("name", nargs="?", help="instance name or id (default: this machine)")
    s.add_argument("--local", action="store_true", help="this machine (the default)")
    s.add_argument("--json", action="store_true", help="print the checks as JSON")

    s = sub.add_parser("costs", help="what you have spent: the ledger, and what is billing now")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--csv", action="store_true", help="export every entry (and running ones) as CSV")
    g.add_argument("--json", action="store_true", help="the same as JSON")

    s = sub.add_parser("catalog", help="compare GPUs: specs, dated reference prices, $ per figure")
    s.add_argument("--sort", default="price", metavar="COL",
                   help="name, vram, price (default), bandwidth, bf16, fp8, usd_per_tflop, "
                   "usd_per_gb, bw_per_usd, link, tdp, as_of, provider, arch; best first")
    s.add_argument("--reverse", action="store_true", help="reverse the sort")
    s.add_argument("--min-vram", type=float, metavar="GB", help="at least this much memory")
    s.add_argument("--arch", metavar="NAME", help="architecture: ampere, ada, hopper, blackwell…")
    s.add_argument("--provider", metavar="NAME", help="cards this provider prices (its prices only)")
    s.add_argument("--interconnect", choices=["nvlink", "pcie"], help="NVLink, or PCIe only")
    s.add_argument("--json", action="store_true", help="print a JSON list of cards")

    s = sub.add_parser("fit", help="will a model fit: VRAM breakdown, the cards it fits, cheapest first")
    s.add_argument("model", nargs="?", help="built-in model: Qwen2.5-0.5B…72B, Llama-3.1-8B/70B")
    s.add_argument("--model", dest="model_opt", metavar="NAME", help="the same, as an option")
    s.add_argument("--params", metavar="N", help="or any model by its parameter count: 7e9, 13B")
    s.add_argument("--layers", type=int, metavar="L", help="with --params: layers")
    s.add_argument("--kv-heads", type=int, metavar="K", help="with --params: KV heads")
    s.add_argument("--head-dim", type=int, metavar="D", help="with --params: head dimension")
    s.add_argument("--heads", type=int, metavar="H", help="with --params: attention heads")
    s.add_argument("--job", default="inference", metavar="JOB",
                   help="inference (default), lora, qlora or full (Adam)")
    s.add_argument("--precision", default="bf16", metavar="P",
                   help="fp32, bf16 (default), fp16, fp8, int8, int4, nf4, q4_k_m, q5_k_m, q8_0")
    s.add_argument("--context", type=int, default=4096, metavar="T", help="tokens (default 4096)")
    s.add_argument("--batch", type=int, default=1, metavar="B", help="sequences (default 1)")
    s.add_argument("--lora-rank", type=int, metavar="R", help="LoRA rank (default 16)")
    s.add_argument("--json", action="store_true", help="print total_gb, breakdown, fits as JSON")

    s = sub.add_parser("cost", help="estimate before renting: N GPUs for H hours on each provider")
    s.add_argument("gpu", nargs="?", help="GPU, matched loosely (4090, 'H100 SXM')")
    s.add_argument("--gpu", dest="gpu_opt", metavar="NAME", help="the same, as an option")
    s.add_argument("--count", type=int, default=1, help="GPUs (default 1)")
    s.add_argument("--hours", required=True, help="running time in hours, e.g. 10 or 2.5")
    s.add_argument("--json", action="store_true", help="print the costs as JSON")

    s = sub.add_parser("config", help="the config file")
    s.add_argument("config_cmd", choices=["init", "path", "check"])
    s.add_argument("--force", action="store_true", help="with init: overwrite")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from gputui.config import ConfigError
    from gputui.store import StateError, UnknownInstance

    try:
        if args.command is None:
            return _run_console(args)
        if args.command != "config":
            from gputui.config import load_config

            args.config = load_config()
        return _COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"gputui: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (CommandError, StateError, UnknownInstance) as exc:
        code = EXIT_BAD_INPUT if isinstance(exc, UnknownInstance) else getattr(exc, "code", EXIT_ERROR)
        msg = exc.args[0] if isinstance(exc, UnknownInstance) and exc.args else str(exc)
        print(f"gputui: {msg}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gputui ... | head`: the reader has all it wanted
        import os

        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug: one line for the user, the traceback in a log file
        log = _log_crash()
        print(f"gputui: internal error: {type(exc).__name__}: {exc} (details in {log})",
              file=sys.stderr)
        return 70


def _log_crash() -> str:
    import traceback

    from gputui.config import state_dir

    path = state_dir() / "error.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
    except OSError:
        return "nowhere: the state folder is not writable"
    return str(path)
