"""Slurm clusters (`[providers.slurm.NAME]`): `gputui slurm trust NAME` pins the login node's
host key the first time, after the renter has checked its fingerprint (as `add-ssh
--accept-new-host-key` does for a host rented elsewhere)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gputui.cli.output import EXIT_BAD_INPUT, CommandError, run_async
from gputui.i18n import _


def cmd_trust(args: argparse.Namespace) -> int:
    async def body(services: Any) -> int:
        from gputui.providers.slurm import SlurmProvider

        clusters = services.config.providers.slurm
        if args.cluster not in clusters:
            raise CommandError(_("slurm trust: no cluster {name} in config.toml "
                                 "([providers.slurm.NAME]; configured: {names})").format(
                name=repr(args.cluster), names=", ".join(sorted(clusters)) or _("none")),
                EXIT_BAD_INPUT)
        provider = services.provider("slurm")
        assert isinstance(provider, SlurmProvider)
        where, fingerprint, key = await provider.login_key(args.cluster)
        if key is None:
            print(_("{cluster}: the login node {where} is trusted already ({fingerprint})").format(
                cluster=args.cluster, where=where, fingerprint=fingerprint))
            return 0
        print(_("{cluster}: the login node {where} shows host key {fingerprint}").format(
            cluster=args.cluster, where=where, fingerprint=fingerprint), file=sys.stderr)
        if not args.yes:
            if not sys.stdin.isatty():
                raise CommandError(_("slurm trust: check that fingerprint with the cluster's "
                                     "admins, then run `gputui slurm trust {cluster} --yes`").format(
                    cluster=args.cluster), EXIT_BAD_INPUT)
            sys.stderr.write(_("trust it? [y/N] "))
            sys.stderr.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                print(_("{cluster}: not trusted; nothing changed").format(cluster=args.cluster),
                      file=sys.stderr)
                return 1
        endpoint = provider.login_endpoint(args.cluster)
        services.known_hosts.add(endpoint.host, endpoint.port, key)
        print(_("{cluster}: the login node {where} is trusted ({fingerprint})").format(
            cluster=args.cluster, where=where, fingerprint=fingerprint))
        return 0

    return run_async(args, body)


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("slurm", help=_("Slurm clusters ([providers.slurm.NAME]): trust a login "
                                       "node"))
    ss = s.add_subparsers(dest="slurm_command", metavar="ACTION", required=True)
    p = ss.add_parser("trust", help=_("pin the cluster's login node host key, after showing its "
                                      "fingerprint"))
    p.add_argument("cluster", help=_("the NAME of [providers.slurm.NAME] in config.toml"))
    p.add_argument("--yes", action="store_true",
                   help=_("trust the key shown without asking (you checked the fingerprint)"))
    p.set_defaults(handler=cmd_trust)
