"""`gputui daemon`: keep every deadline with no console open; `gputui daemon status`;
`gputui daemon --install` (a systemd user unit, or the cron line where systemd is absent).
`gputui metrics --listen ADDR`: serve the fleet's figures to Prometheus without keeping leases.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import datetime
from typing import TYPE_CHECKING

from gputui.cli.output import print_json
from gputui.i18n import _

if TYPE_CHECKING:
    import subprocess

    from gputui.store import Notice

EXIT_NOT_RUNNING = 3  # `daemon status` when none runs (as LSB init scripts say it)


class Notifier:
    """Every notice as a log line on stderr (the journal, or the terminal); warnings and errors
    also as desktop notifications where `notify-send` and a session bus are present."""

    def __init__(self) -> None:
        session = any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY",
                                                  "DBUS_SESSION_BUS_ADDRESS"))
        self.notify_send = shutil.which("notify-send") if session else None
        self._children: list[subprocess.Popen[bytes]] = []

    def __call__(self, notice: Notice) -> None:
        from gputui.nvidia.nvsmi import sanitize

        text = sanitize(notice.text, 400)  # for a person: the interface's language
        stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
        print(f"{stamp} {notice.severity}: {sanitize(notice.log_text, 400)}", file=sys.stderr,
              flush=True)  # the log: English
        self._children = [c for c in self._children if c.poll() is None]
        if self.notify_send and (notice.bell or notice.severity != "information"):
            import subprocess

            urgency = "critical" if notice.severity == "error" else "normal"
            try:
                self._children.append(subprocess.Popen(
                    [self.notify_send, "-u", urgency, "-a", "gputui", "gputui", text],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))
            except OSError:
                self.notify_send = None  # the log line is there; stop trying


def _serve(args: argparse.Namespace, *, keep_leases: bool) -> int:
    import asyncio
    import signal

    from gputui.cli.output import open_store, services_for
    from gputui.config import ensure_state_dir
    from gputui.services.daemon import Daemon, DaemonInfo, DaemonLock, started_now
    from gputui.services.metrics import FleetCollector, parse_listen, serve_metrics

    listen = args.metrics if keep_leases else args.listen
    flag = "--metrics" if keep_leases else "--listen"
    if listen:
        parse_listen(listen, allow_remote=args.allow_remote, flag=flag)  # bad input: nothing started
    if not 0.5 <= args.interval <= 10:
        from gputui.errors import BadInput

        raise BadInput(_("--interval: {interval:g} s is outside 0.5-10 s").format(
            interval=args.interval))
    state = ensure_state_dir()
    store = open_store()
    lock = None
    if keep_leases:
        lock = DaemonLock.acquire(state, DaemonInfo(os.getpid(), started_now(), listen,
                                                    args.interval))
    server = None
    try:
        collector = FleetCollector(store)
        if listen:
            server = serve_metrics(listen, collector, allow_remote=args.allow_remote, flag=flag)
            if lock is not None:  # the real port (port 0 picks a free one)
                host, port = server.address
                lock.update(DaemonInfo(os.getpid(), started_now(), f"{host}:{port}",
                                       args.interval))
        notifier = Notifier()

        async def main() -> None:
            services = services_for(args, store)
            services.actor = "daemon" if keep_leases else None  # said in notifications
            collector.loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            daemon = Daemon(services, interval=args.interval, on_notice=notifier,
                            keep_leases=keep_leases)
            live = len(store.instances_sync(live_only=True))
            what = (_("keeping the deadlines of {n} live instance(s) in {state}") if keep_leases
                    else _("watching {n} live instance(s) in {state}")).format(n=live, state=state)
            where = _("; metrics on {url}").format(url=server.url) if server else ""
            print(f"gputui {'daemon' if keep_leases else 'metrics'}: {what}{where}",
                  file=sys.stderr, flush=True)
            try:
                await daemon.run(stop)
            finally:
                await services.close()

        asyncio.run(main())
    finally:
        if server is not None:
            server.close()
        if lock is not None:
            lock.release()
        store.close()
    return 0


def cmd_daemon(args: argparse.Namespace) -> int:
    from gputui.config import ensure_state_dir

    if args.action == "status":
        return _status(args)
    if args.install:
        from gputui.services.daemon import install
        from gputui.services.metrics import parse_listen

        if args.metrics:
            parse_listen(args.metrics, allow_remote=args.allow_remote, flag="--metrics")
        done = install(ensure_state_dir(), metrics=args.metrics, allow_remote=args.allow_remote)
        if args.json:
            print_json({"kind": done.kind, "path": str(done.path) if done.path else None,
                        "text": done.text, "next": done.next_step})
        elif done.kind == "systemd":
            print(_("wrote {path}").format(path=done.path))
            print(_("start it: {next_step}").format(next_step=done.next_step))
        else:
            print(_("systemd is not running here; add this line to your crontab "
                    "(`crontab -e`) so deadlines hold with the console closed:"))
            print(done.text)
        return 0
    return _serve(args, keep_leases=True)


def _status(args: argparse.Namespace) -> int:
    from gputui.config import ensure_state_dir
    from gputui.services.daemon import cron_line_known, daemon_status

    state = ensure_state_dir()
    info = daemon_status(state)
    cron = cron_line_known()
    if args.json:
        print_json({"running": info is not None, **(info.as_dict() if info else {}),
                    "state_dir": str(state), "cron_line": cron})
    elif info is not None:
        metrics = (_("; metrics on {url}").format(url=f"http://{info.metrics}/metrics")
                   if info.metrics else "")
        print(_("running: pid {pid}, since {started_at}{metrics} (state {state})").format(
            pid=info.pid, started_at=info.started_at, metrics=metrics, state=state))
    else:
        print(_("not running (state {state})").format(state=state) + (
            _("; a crontab line runs gputui") if cron else
            _("; start one with `gputui daemon`, or `gputui daemon --install`")))
    return 0 if info is not None else EXIT_NOT_RUNNING


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("daemon", help=_("keep every release deadline in the background "
                                        "(`daemon status`, `daemon --install`)"))
    s.add_argument("action", nargs="?", choices=["run", "status"], default="run",
                   help=_("run (default) or status: is one running?"))
    s.add_argument("--metrics", metavar="HOST:PORT",
                   help=_("also serve Prometheus metrics here (e.g. 127.0.0.1:9400)"))
    s.add_argument("--allow-remote", action="store_true",
                   help=_("allow a metrics address other machines can reach"))
    s.add_argument("--interval", type=float, default=2.0,
                   help=_("GPU sampling interval in seconds (0.5-10, default 2)"))
    s.add_argument("--install", action="store_true",
                   help=_("write a systemd user unit (or print the cron line without systemd)"))
    s.add_argument("--json", action="store_true", help=_("print JSON (status, --install)"))
    s.set_defaults(handler=cmd_daemon)
