"""The `gputui` command. Subcommands are thin calls into the services the console uses.

Imports are lazy: `gputui --help` and `gputui instances --json` load neither Textual nor asyncssh.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

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


def _run_console(args: argparse.Namespace) -> int:
    from gputui.config import load_config

    config = load_config()
    from gputui.app import GpuTuiApp

    app = GpuTuiApp(config=config, theme_name=args.theme)
    app.run()
    return app.return_code or 0


# --- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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

    s = sub.add_parser("config", help="the config file")
    s.add_argument("config_cmd", choices=["init", "path", "check"])
    s.add_argument("--force", action="store_true", help="with init: overwrite")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from gputui.config import ConfigError
    from gputui.store import StateError

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
    except (CommandError, StateError, LookupError) as exc:
        code = getattr(exc, "code", EXIT_ERROR)
        msg = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
        print(f"gputui: {msg}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
