"""The config file: init, path, check."""

from __future__ import annotations

import argparse

from gputui.cli.output import (
    EXIT_BAD_INPUT,
    CommandError,
)


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



def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("config", help="the config file")
    s.add_argument("config_cmd", choices=["init", "path", "check"])
    s.add_argument("--force", action="store_true", help="with init: overwrite")
    s.set_defaults(handler=cmd_config)
