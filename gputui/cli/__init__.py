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
from typing import Any, NoReturn

from gputui import __version__
from gputui.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, GputuiError, exit_code, one_line
from gputui.i18n import (
    _,
    language_from_argv,
    language_from_env,
    normalize_language,
    set_language,
    wrap_cells,
)

# The subjects, in the order `gputui --help` lists their commands.
SUBJECTS = ("instances", "lifecycle", "images", "jobs", "ollama", "gpus", "costs", "catalog",
            "config", "daemon", "notify", "metrics", "mcp", "sandbox", "slurm")


def _run_console(args: argparse.Namespace) -> int:
    from gputui.app import GpuTuiApp

    # the app draws its first frame, then reads config.toml and the state (open_session)
    app = GpuTuiApp(theme_name=args.theme)
    app.run()
    if app.startup_error is not None:  # a broken config.toml: one line, exit code 2
        raise app.startup_error
    return app.return_code or 0


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped by terminal cells: Chinese text is double-width and has no
    spaces to break at."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_cells(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in wrap_cells(text, width - len(indent)))


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit code 2), like every other error, and
    help is wrapped by cells (every subcommand's parser is one of these too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, _("{prog}: {message} (see {prog} --help)").format(
            prog=self.prog, message=message) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gputui",
        description=_("A keyboard-driven console for rented GPUs: choose a card, rent it with a "
                      "release timer, watch its GPUs, manage Ollama models and see what it "
                      "costs. With no command, opens the console."),
    )
    p.add_argument("--version", action="version", version=f"gputui {__version__}",
                   help=_("show the version and exit"))
    p.add_argument("--theme", metavar="NAME", help=_("console theme (remembered in config)"))
    p.add_argument("--lang", choices=["zh", "en"],
                   help=_("interface language: zh (Simplified Chinese) or en; default: "
                          "language in config.toml, else the locale (LANG=zh_CN.UTF-8...)"))
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for subject in SUBJECTS:
        import_module(f"gputui.cli.{subject}").register(sub)
    return p


def _configured_language() -> str | None:
    """`language` in config.toml, read early and leniently: a broken file is reported later by
    `load_config`, in the language chosen without it (read without pydantic, so that
    `gputui --help` stays fast)."""
    from gputui.paths import early_setting

    value = early_setting("language")
    return value if isinstance(value, str) else None


def choose_language(argv: Sequence[str]) -> str:
    """Set the interface language for this run: `--lang`, else `language` in config.toml, else
    the locale (LANGUAGE, LC_ALL, LC_MESSAGES, LANG); English otherwise."""
    chosen = normalize_language(language_from_argv(argv, ("--theme",)))
    if chosen is None:
        chosen = normalize_language(_configured_language())
    return set_language(chosen or language_from_env())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    choose_language(argv)  # before the parser is built, so that --help is translated
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
        print("gputui: " + _("internal error: {error} (details in {log})").format(
            error=f"{type(exc).__name__}: {exc}", log=log), file=sys.stderr)
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
        return _("nowhere: the state folder is not writable")
    return str(path)
