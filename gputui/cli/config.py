"""The config file: init, path, check."""

from __future__ import annotations

import argparse

from gputui.cli.output import (
    EXIT_BAD_INPUT,
    CommandError,
)
from gputui.i18n import _


def cmd_config(args: argparse.Namespace) -> int:
    from gputui.config import Config, config_path, load_config, save_config

    path = config_path()
    if args.config_cmd == "path":
        print(path)
        return 0
    if args.config_cmd == "init":
        if path.exists() and not args.force:
            raise CommandError(_("{path} exists already (use --force to overwrite it)").format(
                path=path))
        save_config(Config(), path)
        print(_("wrote {path}").format(path=path))
        return 0
    if args.config_cmd == "check":
        load_config(path)
        print(_("{path}: ok").format(path=path))
        return 0
    raise CommandError(_("usage: gputui config {init,path,check}"), EXIT_BAD_INPUT)



def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("config", help=_("the config file"), description=_(
        "init writes a config.toml with the defaults, path prints where it is, check reads it "
        "and names the first bad key."))
    s.add_argument("config_cmd", choices=["init", "path", "check"], metavar="{init,path,check}")
    s.add_argument("--force", action="store_true", help=_("with init: overwrite"))
    s.set_defaults(handler=cmd_config)
