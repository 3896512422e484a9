"""Ollama on an instance: models, loads, the GPUs it may use."""

from __future__ import annotations

import argparse

from gputui.cli.output import (
    CommandError,
    run_async,
    status_text,
)
from gputui.i18n import _


def cmd_ollama(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.cli.ollama_report import ollama_command

        inst = services.store.find_instance_sync(args.name)
        if not inst.status.live:
            raise CommandError(_("{name} is {status}").format(name=inst.name,
                                                                status=status_text(inst.status)))
        return await ollama_command(services, inst, args.action, args.arg, args.json,
                                    force=args.force)

    return run_async(args, body)



def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("ollama", help=_("Ollama on an instance: models, loads, GPU selection"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("action", choices=["status", "list", "ps", "pull", "rm", "load", "unload",
                                      "gpus", "start", "stop", "fit", "verify"])
    s.add_argument("arg", nargs="?", help=_("a model (pull/rm/load/unload/fit/verify), or GPU "
                   "indices for gpus: 0,1 (all: every GPU)"))
    s.add_argument("--json", action="store_true", help=_("print JSON"))
    s.add_argument("--force", action="store_true", help=_("load even when the fit check refuses"))
    s.set_defaults(handler=cmd_ollama)
