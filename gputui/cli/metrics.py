"""`gputui metrics --listen HOST:PORT`: serve the fleet's GPU and cost figures to Prometheus
(the text exposition format), watching the running instances but keeping no leases: that is
`gputui daemon --metrics`."""

from __future__ import annotations

import argparse

from gputui.i18n import _


def cmd_metrics(args: argparse.Namespace) -> int:
    from gputui.cli.daemon import _serve

    return _serve(args, keep_leases=False)


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("metrics", help=_("serve GPU and cost figures to Prometheus"))
    s.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:9400",
                   help=_("where to serve /metrics (default 127.0.0.1:9400)"))
    s.add_argument("--allow-remote", action="store_true",
                   help=_("allow an address other machines can reach"))
    s.add_argument("--interval", type=float, default=2.0,
                   help=_("GPU sampling interval in seconds (0.5-10, default 2)"))
    s.set_defaults(handler=cmd_metrics)
