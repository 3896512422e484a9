"""``ollama serve``: run the server for an instance until stopped or powered off."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import FrameType

from ..ollama_shim import VERSION, parse_host
from ..state import (
    SandboxStateError,
    enforce_power,
    instance_file,
    locked,
    power_file,
    power_state,
    procs_dir,
    root_from_env,
)
from .common import (
    MIB,
    TICK_S,
    human_gib,
)
from .http_api import make_server
from .runtime import OllamaState, log

# --------------------------------------------------------------------------- serve


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _watch(state: OllamaState, server: ThreadingHTTPServer) -> None:
    """Expire models; stop when the instance powers off or its folder goes away."""
    root = state.root
    own = procs_dir(root) / f"{state.pid}.json" if root is not None else None
    while not state.stopping.wait(TICK_S):
        state.expire(time.time())
        if root is None:
            continue
        gone = not instance_file(root).exists()
        off = False
        with contextlib.suppress(SandboxStateError, OSError):
            off = power_file(root).exists() and power_state(root).is_off
        if gone or off or (own is not None and not own.exists()):
            state.stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()
            return


def serve(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise _Stop(signum)

    # First of all, so a signal at any later moment still unregisters the GPU process.
    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGINT, _raise)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # respect nohup
        signal.signal(signal.SIGHUP, _raise)
    state: OllamaState | None = None
    try:
        state = _prepare(env)
        if state is None:
            return 1
        return _run(state, env)
    except _Stop as exc:
        return 0 if exc.signum in (signal.SIGTERM, signal.SIGINT) else 128 + exc.signum
    finally:
        if state is not None:
            state.stopping.set()
            state.unregister()


def _prepare(env: dict[str, str]) -> OllamaState | None:
    root: Path | None = None
    if env.get("GPUTUI_SANDBOX_ROOT") or (Path.cwd() / ".sandbox").is_dir():
        root = root_from_env()
    try:
        if root is not None and enforce_power(root).is_off:
            sys.stderr.write("Error: this sandbox instance is powered off\n")
            return None
        return OllamaState(root, env)
    except SandboxStateError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return None


def _run(state: OllamaState, env: dict[str, str]) -> int:
    host, port = parse_host(env.get("OLLAMA_HOST"))
    try:
        server = make_server(state, host, port)
    except OSError as exc:
        reason = "address already in use" if exc.errno in (98, 48) else (exc.strerror or str(exc))
        sys.stderr.write(f"Error: listen tcp {host}:{port}: bind: {reason}\n")
        return 1
    try:
        keys = sorted(k for k in env if k.startswith("OLLAMA_") or k == "CUDA_VISIBLE_DEVICES")
        config = " ".join(f"{k}:{env[k]}" for k in keys)
        log("INFO", "routes.go", f"server config env=\"map[{config}]\"")
        if state.root is not None:
            with locked(state.root):
                state.publish()
        if state.spec is not None:
            for index in state.visible():
                gpu = state.spec.gpu(index)
                if gpu is not None:
                    log("INFO", "types.go", f'inference compute id={gpu.uuid} library=cuda '
                        f'name="{gpu.name}" total="{human_gib(gpu.memory_total_mib * MIB)}"')
        log("INFO", "routes.go", f"Listening on {host}:{port} (version {VERSION})")
        watcher = threading.Thread(target=_watch, args=(state, server), daemon=True)
        watcher.start()
        server.serve_forever(poll_interval=0.2)
        return 0
    finally:
        state.stopping.set()
        with contextlib.suppress(Exception):
            server.server_close()
        state.unregister()
        log("INFO", "routes.go", "server stopped")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] not in ([], ["serve"]):
        sys.stderr.write("usage: python -m gputui.sandbox.shims.ollama_server serve\n")
        return 2
    return serve()
