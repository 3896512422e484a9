"""The `gputui` command: the parser, and `main`, which maps every error to its exit code.

One module per subject registers its subcommands (`register(sub)`), and each handler is a thin
call into the services the console uses; output helpers live in `gputui.cli.output`.

Imports are lazy: `gputui --help` and `gputui instances --json` load neither Textual nor asyncssh.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import NoReturn

from gputui import __version__
from gputui.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, GputuiError, exit_code, one_line

# The subjects, in the order `gputui --help` lists their commands.
SUBJECTS = ("instances", "lifecycle", "jobs", "ollama", "gpus", "costs", "catalog", "config",
            "daemon", "metrics", "mcp", "sandbox")


def _run_console(args: argparse.Namespace) -> int:
    from gputui.config import load_config

    config = load_config()
    from gputui.app import GpuTuiApp

    app = GpuTuiApp(config=config, theme_name=args.theme)
    app.run()
    return app.return_code or 0


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
    for subject in SUBJECTS:
        import_module(f"gputui.cli.{subject}").register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            return _run_console(args)
        if args.command != "config":
            from gputui.config import load_config

            args.config = load_config()
        return int(args.handler(args))
    except GputuiError as exc:
        print(f"gputui: {one_line(exc)}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt as exc:
        return exit_code(exc)
    except BrokenPipeError:  # `gputui ... | head`: the reader has all it wanted
        import os

        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug: one line for the user, the traceback in a log file
        log = _log_crash()
        print(f"gputui: internal error: {type(exc).__name__}: {exc} (details in {log})",
              file=sys.stderr)
        return EXIT_INTERNAL


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
