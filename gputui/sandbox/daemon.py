"""The simulated cloud as its own process: one daemon per sandbox folder (per GPUTUI_HOME).

It holds every running instance's SSH endpoint, boots, powers off and terminates instances at
their times whether or not any gputui process is running, and answers clients (the sandbox
provider, `gputui sandbox status|stop`) on a Unix socket, one JSON object per line each way:

    → {"op": "view", "id": "3f2a…"}
    ← {"ok": true, "result": {...}}      or   {"ok": false, "kind": "unknown", "error": "…"}

Ops: ping, status, create, view, serve, release, schedule, stop, start, outage, shutdown.

Started on demand, detached (its own session: a console that dies or a closed terminal does not
take it down); a second daemon for the same folder exits at once (it holds `daemon.lock`).
When it starts it brings back every instance still running. `python -m gputui.sandbox.daemon
--root DIR` runs it in the foreground (what `gputui sandbox serve` does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from gputui.sandbox.client import private_folder, socket_path
from gputui.sandbox.platform import NoSuchInstance, Platform, PlatformError, power_off_machine

log = logging.getLogger("gputui.sandbox")

TICK_S = 0.5
MAX_REQUEST = 1 << 20


class Daemon:
    def __init__(self, root: Path, *, idle_exit_s: float | None = None) -> None:
        self.root = root
        self.platform = Platform(root)
        self.idle_exit_s = idle_exit_s
        self.stopping = asyncio.Event()
        self._last_request = asyncio.get_running_loop().time()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not reader.at_eof():
                line = await reader.readline()
                if not line:
                    break
                self._last_request = asyncio.get_running_loop().time()
                reply = await self.answer(line)
                writer.write(json.dumps(reply, default=str).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            return {"ok": False, "kind": "bad", "error": f"sandbox daemon: bad request: {exc}"}
        op = request.get("op")
        p = self.platform
        try:
            if op == "ping":
                result: Any = {"pid": os.getpid(), "root": str(self.root)}
            elif op == "status":
                result = {"pid": os.getpid(), "root": str(self.root),
                          "socket": str(socket_path(self.root)),
                          "instances": await p.status()}
            elif op == "create":
                result = await p.create(dict(request["spec"]))
            elif op in ("view", "serve", "release", "stop", "start"):
                result = await getattr(p, op)(str(request["id"]))
            elif op == "outage":
                result = await p.outage(str(request["id"]), bool(request["down"]))
            elif op == "schedule":
                result = await p.schedule(str(request["id"]), request.get("at"))
            elif op == "shutdown":
                self.stopping.set()
                result = {"pid": os.getpid()}
            else:
                return {"ok": False, "kind": "bad", "error": f"sandbox daemon: no op {op!r}"}
        except NoSuchInstance as exc:
            return {"ok": False, "kind": "unknown", "error": str(exc)}
        except PlatformError as exc:
            return {"ok": False, "kind": "error", "error": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "kind": "bad", "error": f"sandbox daemon: bad {op} request: {exc!r}"}
        except Exception as exc:  # a bug: logged, the daemon stays up for everyone else
            log.exception("%s failed", op)
            return {"ok": False, "kind": "error", "error": f"sandbox: {op} failed: {exc}"}
        return {"ok": True, "result": result}

    async def ticker(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), TICK_S)
            if self.stopping.is_set():
                break
            if not self.root.is_dir():  # its folder was removed: the machines go with it
                log.info("%s is gone; powering off what it served and stopping", self.root)
                for iid in list(self.platform.servers):
                    await asyncio.to_thread(power_off_machine, self.platform.instance_root(iid))
                self.stopping.set()
                break
            try:
                await self.platform.tick()
            except Exception:
                log.exception("tick failed")
            if (self.idle_exit_s is not None
                    and loop.time() - self._last_request > self.idle_exit_s
                    and self.platform.live_count() == 0):
                log.info("no instance for %.0f s; stopping", self.idle_exit_s)
                self.stopping.set()


def _hold_lock(root: Path) -> Any:
    """The daemon's lock on its folder, held for its life; None when another daemon has it."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    fh = open(root / "daemon.lock", "a+")  # noqa: SIM115 - held open for the process's life
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    return fh


async def serve(root: Path, *, idle_exit_s: float | None = None,
                ready: Any = None) -> int:
    """Run the daemon until asked to stop (or SIGTERM/SIGINT). 0, or 3 when one runs already."""
    lock = _hold_lock(root)
    if lock is None:
        log.info("a sandbox daemon already runs for %s", root)
        return 3
    daemon = Daemon(root, idle_exit_s=idle_exit_s)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, daemon.stopping.set)
    sock = socket_path(root)
    if sock.parent != root:
        private_folder(sock.parent)
    sock.unlink(missing_ok=True)  # a dead daemon's (we hold the lock)
    old_umask = os.umask(0o177)  # the socket is born 0600: only this user may ask the cloud
    try:
        server = await asyncio.start_unix_server(daemon.handle, path=str(sock), limit=MAX_REQUEST)
    finally:
        os.umask(old_umask)
    info = root / "daemon.json"
    try:
        await daemon.platform.restore()
        info.write_text(json.dumps({"pid": os.getpid(), "socket": str(sock)}) + "\n",
                        encoding="utf-8")
        log.info("sandbox daemon %s serving %s on %s", os.getpid(), root, sock)
        if ready is not None:
            ready()
        await daemon.ticker()
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
        await daemon.platform.close()
        with contextlib.suppress(OSError):
            if json.loads(info.read_text(encoding="utf-8")).get("pid") == os.getpid():
                info.unlink()
        with contextlib.suppress(OSError):
            sock.unlink()
        log.info("sandbox daemon %s stopped", os.getpid())
        lock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gputui.sandbox.daemon")
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--idle-exit", type=float, default=None, metavar="SECONDS",
                    help="stop after this long with no instance and no request")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    return asyncio.run(serve(args.root.resolve(), idle_exit_s=args.idle_exit))


if __name__ == "__main__":
    sys.exit(main())
