"""`gputui mcp`: the Model Context Protocol server over stdio, for coding agents.

Stricter than the command line: every create sets a release timer, a release and anything that
would spend over the configured cap need `confirm: true`, and no result carries a secret.
On the sandbox an instance's shell runs on this machine, as this user: there the agent's
commands are a local shell (the local-folder rule confines push and pull, not them).
The server itself is `gputui.mcp_server` (an adapter like this package; services never import it).
"""

from __future__ import annotations

import argparse

from gputui.i18n import _


def cmd_mcp(args: argparse.Namespace) -> int:
    from gputui.mcp_server import serve_stdio

    return serve_stdio(args.config)


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "mcp", help=_("serve gputui's actions to AI agents (MCP over stdio)"),
        description=_("Serve gputui's actions to AI agents (MCP over stdio). On the sandbox "
                      "an instance's shell runs on this machine, as you: an agent's commands "
                      "there are a local shell."))
    s.set_defaults(handler=cmd_mcp)
