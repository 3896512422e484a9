"""The simulated cloud's own process: watch it (`serve`), see it (`status`), stop it (`stop`).

The daemon starts by itself the first time anything needs the sandbox; these commands are for
those who want to watch it or stop it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gputui.cli.output import CommandError, add_json, print_json
from gputui.i18n import _


def _root() -> Path:
    from gputui.config import state_dir

    return state_dir() / "sandbox"


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground, its log on stderr, until Ctrl+C."""
    import asyncio
    import logging

    from gputui.sandbox.client import daemon_pid
    from gputui.sandbox.daemon import serve

    root = _root()
    pid = daemon_pid(root)
    if pid is not None:
        raise CommandError(_("the sandbox daemon already runs (pid {pid}); `gputui sandbox stop` first to serve it in the foreground").format(pid=pid))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    try:
        code = asyncio.run(serve(root.resolve()))
    except KeyboardInterrupt:
        return 0
    if code == 3:
        raise CommandError(_("another sandbox daemon started meanwhile; it serves the sandbox"))
    return code


def cmd_status(args: argparse.Namespace) -> int:
    import asyncio

    from gputui.sandbox.client import DaemonDown, SandboxClient

    root = _root()
    try:
        status = asyncio.run(SandboxClient(root, autostart=False).call("status"))
    except DaemonDown:
        status = None
    if args.json:
        print_json({"running": status is not None, **(status or {"root": str(root)})})
        return 0
    if status is None:
        print(_("sandbox daemon: not running (it starts when the sandbox is next used) · {root}").format(root=root))
        return 0
    instances = status.get("instances", [])
    print(_("sandbox daemon: running, pid {pid} · {n_instances} instance(s) · {root}").format(pid=status['pid'], n_instances=len(instances), root=status['root']))
    for rec in instances:
        periods = rec.get("periods") or []
        state = ("booting" if not periods else
                 "running" if periods[-1][1] is None else "powered off")
        where = f"127.0.0.1:{rec['port']}" if rec.get("serving") else "not served"
        print(f"  {rec['id']:<12} {rec['gpu_count']}× {str(rec['gpu'])[:28]:<28} "
              f"{state:<11} {where}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from gputui.sandbox.client import stop_daemon

    pid = stop_daemon(_root())
    if args.json:
        print_json({"stopped": pid is not None, "pid": pid})
    elif pid is None:
        print(_("sandbox daemon: not running"))
    else:
        print(_("sandbox daemon: stopped (pid {pid}); instances still running keep billing and are served again when the sandbox is next used").format(pid=pid))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("sandbox", help=_("the simulated cloud's own process: serve, status, stop"))
    ss = s.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    p = ss.add_parser("serve", help=_("run the sandbox daemon in the foreground (Ctrl+C stops it)"))
    p.set_defaults(handler=cmd_serve)
    p = ss.add_parser("status", help=_("is the sandbox daemon running, and what does it serve"))
    add_json(p)
    p.set_defaults(handler=cmd_status)
    p = ss.add_parser("stop", help=_("stop the sandbox daemon (instances keep running)"))
    add_json(p)
    p.set_defaults(handler=cmd_stop)
