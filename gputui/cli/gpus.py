"""GPUs: a one-shot snapshot (`smi`) and the doctor."""

from __future__ import annotations

import argparse

from gputui.cli.output import (
    EXIT_BAD_INPUT,
    CommandError,
    run_async,
)
from gputui.i18n import _


def cmd_smi(args: argparse.Namespace) -> int:
    from gputui.cli.smi_report import smi_input, smi_local, smi_remote

    if args.local:
        return smi_local(as_json=args.json)
    if args.input:
        return smi_input(args.input, as_json=args.json)
    if not args.name:
        raise CommandError(_("give an instance NAME, --local or --input FILE"), EXIT_BAD_INPUT)
    return run_async(args, lambda services: smi_remote(services, args.name, as_json=args.json))


def cmd_doctor(args: argparse.Namespace) -> int:
    from gputui.cli.smi_report import doctor_local, doctor_remote

    if args.local or not args.name:
        return doctor_local(as_json=args.json)
    return run_async(args, lambda services: doctor_remote(services, args.name,
                                                               as_json=args.json))



def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("smi", help=_("a one-shot snapshot of GPUs and processes, like gpustat"))
    s.add_argument("name", nargs="?", help=_("instance name or id"))
    t = s.add_mutually_exclusive_group()
    t.add_argument("--local", action="store_true", help=_("this machine, through NVML"))
    t.add_argument("--input", metavar="FILE",
                   help=_("a saved capture: CSV with header, -q -x XML or the table (- for stdin)"))
    s.add_argument("--json", action="store_true", help=_('print {"gpus": [...], "processes": [...]}'))
    s.set_defaults(handler=cmd_smi)

    s = sub.add_parser("doctor", help=_("check the GPU setup and say how to fix what is wrong"))
    s.add_argument("name", nargs="?", help=_("instance name or id (default: this machine)"))
    s.add_argument("--local", action="store_true", help=_("this machine (the default)"))
    s.add_argument("--json", action="store_true", help=_("print the checks as JSON"))
    s.set_defaults(handler=cmd_doctor)
