"""`ollama` on a sandbox instance: `ollama serve` and the usual client commands.

    ollama serve                  run the simulated server (see ollama_server)
    ollama list | ls              installed models
    ollama ps                     loaded models
    ollama pull MODEL             download (simulated) with progress
    ollama rm MODEL...            delete
    ollama show MODEL             architecture, parameters, context, quantisation
    ollama run MODEL [PROMPT]     pull if needed, load, answer PROMPT
    ollama stop MODEL             unload
    ollama -v | --version         server and client version

The client commands talk HTTP to the server at ``$OLLAMA_HOST``; without it, at the port
this sandbox instance's server uses (``.sandbox/ollama/port``; sandbox instances share one
loopback, so each has its own port), else 127.0.0.1:11434. ``ollama serve`` without
``OLLAMA_HOST`` takes that per-instance port and starts the server with ``OLLAMA_HOST`` set
in its environment, so that anyone reading the server's environment (gputui does) finds it.

Stdlib only. Output follows the real CLI's wording.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from .state import PACKAGE, ROOT_ENV, state_dir

VERSION = "0.6.5"  # the Ollama release the sandbox imitates
DEFAULT_PORT = 11434
CONNECT_ERROR = "Error: could not connect to ollama app, is it running?"
SERVER_MODULE = PACKAGE + ".ollama_server"


# --------------------------------------------------------------------------- shared with the server
# (kept here, light, so client commands start fast; ollama_server imports them)


def human_bytes(n: float) -> str:
    """Ollama's HumanBytes: decimal units, '4.7 GB', '398 MB'."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{int(n)} B"


def parse_host(value: str | None) -> tuple[str, int]:
    """OLLAMA_HOST as Ollama reads it: '127.0.0.1:11500', '0.0.0.0', 'http://host:port',
    ':11500' -> (host, port). Default 127.0.0.1:11434."""
    text = (value or "").strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    text = text.split("/", 1)[0]
    host, port = "127.0.0.1", DEFAULT_PORT
    if text.startswith("["):  # [::1]:11434
        end = text.find("]")
        host = text[1:end] or host
        rest = text[end + 1:]
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
        return host, port
    if ":" in text:
        h, _, p = text.rpartition(":")
        host = h or host
        if p.isdigit():
            port = int(p)
    elif text:
        host = text
    return host, port


def sandbox_port_file(root: Path) -> Path:
    """Where a sandbox instance keeps the port its `ollama serve` uses when OLLAMA_HOST is
    not set (sandbox instances share one loopback, so each needs its own port)."""
    return state_dir(root) / "ollama" / "port"


def sandbox_port(root: Path, *, create: bool = False) -> int | None:
    path = sandbox_port_file(root)
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        pass
    if not create:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".port.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)
    return port


class CliError(Exception):
    pass


class Unreachable(CliError):
    def __init__(self) -> None:
        super().__init__(CONNECT_ERROR.removeprefix("Error: "))


def _root() -> Path | None:
    value = os.environ.get(ROOT_ENV)
    if value:
        return Path(value)
    return Path.cwd() if (Path.cwd() / ".sandbox").is_dir() else None


def client_address() -> tuple[str, int]:
    """Where the client commands connect."""
    if os.environ.get("OLLAMA_HOST", "").strip():
        host, port = parse_host(os.environ["OLLAMA_HOST"])
    else:
        root = _root()
        port = (sandbox_port(root) if root is not None else None) or 11434
        host = "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return host, port


# --------------------------------------------------------------------------- HTTP


def _connection(timeout: float = 30.0) -> http.client.HTTPConnection:
    host, port = client_address()
    return http.client.HTTPConnection(host, port, timeout=timeout)


def request(method: str, path: str, body: dict[str, Any] | None = None,
            timeout: float = 600.0) -> tuple[int, Any]:
    conn = _connection(timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
    except (ConnectionError, OSError) as exc:
        raise Unreachable() from exc
    finally:
        conn.close()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        payload = {"error": raw.decode("utf-8", "replace").strip()}
    return resp.status, payload


def stream(path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    conn = _connection(600.0)
    try:
        try:
            conn.request("POST", path, body=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
        except (ConnectionError, OSError) as exc:
            raise Unreachable() from exc
        if resp.status != 200:
            raw = resp.read()
            try:
                message = json.loads(raw).get("error") or raw.decode()
            except ValueError:
                message = raw.decode("utf-8", "replace")
            raise CliError(message)
        for line in resp:
            if line.strip():
                part = json.loads(line)
                if part.get("error"):
                    raise CliError(part["error"])
                yield part
    finally:
        conn.close()


def _check(status: int, payload: Any) -> Any:
    if status >= 400:
        message = payload.get("error") if isinstance(payload, dict) else None
        raise CliError(message or f"status {status}")
    return payload


# --------------------------------------------------------------------------- formatting


def _ago(stamp: str) -> str:
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    seconds = max(0.0, time.time() - then.timestamp())
    return _human_duration(seconds) + " ago"


def _human_duration(seconds: float) -> str:
    if seconds < 1:
        return "Less than a second"
    if seconds < 60:
        n = int(seconds)
        return f"{n} second{'s' if n != 1 else ''}"
    if seconds < 120:
        return "About a minute"
    if seconds < 3600:
        return f"{int(seconds // 60)} minutes"
    if seconds < 7200:
        return "About an hour"
    if seconds < 86400 * 2:
        return f"{int(seconds // 3600)} hours"
    if seconds < 86400 * 14:
        return f"{int(seconds // 86400)} days"
    if seconds < 86400 * 60:
        return f"{int(seconds // (86400 * 7))} weeks"
    if seconds < 86400 * 730:
        return f"{int(seconds // (86400 * 30))} months"
    return f"{int(seconds // (86400 * 365))} years"


def _until(stamp: str) -> str:
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    seconds = then.timestamp() - time.time()
    if seconds > 100 * 365 * 86400:
        return "Forever"
    if seconds <= 0:
        return "Stopping..."
    return _human_duration(seconds) + " from now"


def processor(size: int, size_vram: int) -> str:
    if size <= 0 or size_vram <= 0:
        return "100% CPU"
    if size_vram >= size:
        return "100% GPU"
    gpu = round(size_vram * 100 / size)
    return f"{100 - gpu}%/{gpu}% CPU/GPU"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        lines.append("".join(cell.ljust(widths[i] + 4) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- commands


def cmd_list() -> int:
    data = _check(*request("GET", "/api/tags", timeout=30))
    rows = [["NAME", "ID", "SIZE", "MODIFIED"]]
    for m in data.get("models", []):
        rows.append([m["name"], m.get("digest", "")[:12], human_bytes(m.get("size", 0)),
                     _ago(m.get("modified_at", ""))])
    print(table(rows))
    return 0


def cmd_ps() -> int:
    data = _check(*request("GET", "/api/ps", timeout=30))
    rows = [["NAME", "ID", "SIZE", "PROCESSOR", "UNTIL"]]
    for m in data.get("models", []):
        rows.append([m["name"], m.get("digest", "")[:12], human_bytes(m.get("size", 0)),
                     processor(m.get("size", 0), m.get("size_vram", 0)),
                     _until(m.get("expires_at", ""))])
    print(table(rows))
    return 0


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // total if total else width
    return "▕" + "█" * filled + " " * (width - filled) + "▏"


def cmd_pull(model: str) -> int:
    shown: set[str] = set()
    for part in stream("/api/pull", {"model": model, "stream": True}):
        status = part.get("status", "")
        total, done = part.get("total"), part.get("completed")
        if part.get("digest") and total:
            if done is not None and done >= total and status not in shown:
                shown.add(status)
                print(f"{status}... 100% {_bar(total, total)} {human_bytes(total)}")
            continue
        if status not in shown:
            shown.add(status)
            print(status)
    return 0


def cmd_rm(models: list[str]) -> int:
    for model in models:
        _check(*request("DELETE", "/api/delete", {"model": model}, timeout=60))
        print(f"deleted '{model}'")
    return 0


def cmd_show(model: str) -> int:
    data = _check(*request("POST", "/api/show", {"model": model}, timeout=60))
    info = data.get("model_info") or {}
    details = data.get("details") or {}
    arch = info.get("general.architecture", details.get("family", ""))
    rows = [
        ("architecture", arch),
        ("parameters", details.get("parameter_size", "")),
        ("context length", info.get(f"{arch}.context_length", "")),
        ("embedding length", info.get(f"{arch}.embedding_length", "")),
        ("quantization", details.get("quantization_level", "")),
    ]
    print("  Model")
    for key, value in rows:
        print(f"    {key:<20}{value}")
    caps = data.get("capabilities") or []
    if caps:
        print("\n  Capabilities")
        for cap in caps:
            print(f"    {cap}")
    return 0


def cmd_stop(model: str) -> int:
    running = _check(*request("GET", "/api/ps", timeout=30)).get("models", [])
    names = {m.get("name") for m in running} | {m.get("model") for m in running}
    full = model if ":" in model else model + ":latest"
    if model not in names and full not in names:
        raise CliError(f'couldn\'t find model "{model}" to stop')
    _check(*request("POST", "/api/generate", {"model": model, "keep_alive": 0}, timeout=120))
    return 0


def cmd_run(model: str, prompt: str) -> int:
    status, payload = request("POST", "/api/show", {"model": model}, timeout=60)
    if status == 404:
        cmd_pull(model)
    elif status >= 400:
        _check(status, payload)
    body: dict[str, Any] = {"model": model, "stream": False}
    if prompt:
        body["prompt"] = prompt
    reply = _check(*request("POST", "/api/generate", body))
    if prompt:
        print(reply.get("response", ""))
    else:
        print(f"{model} is loaded (the sandbox does not simulate an interactive chat)")
    return 0


def cmd_version() -> int:
    try:
        status, payload = request("GET", "/api/version", timeout=5)
    except Unreachable:
        print("Warning: could not connect to a running Ollama instance")
        print(f"Warning: client version is {VERSION}")
        return 0
    version = payload.get("version", "") if isinstance(payload, dict) else ""
    print(f"ollama version is {version}")
    if version and version != VERSION:
        print(f"Warning: client version is {VERSION}")
    return 0


def cmd_serve() -> int:
    """Start the server in this process's place, with OLLAMA_HOST in its environment."""
    env = dict(os.environ)
    if not env.get("OLLAMA_HOST", "").strip():
        root = _root()
        port = sandbox_port(root, create=True) if root is not None else None
        env["OLLAMA_HOST"] = f"127.0.0.1:{port or 11434}"
    argv = [sys.executable, "-S", "-m", SERVER_MODULE, "serve"]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return 1  # pragma: no cover - execve does not return


USAGE = """Large language model runner

Usage:
  ollama [flags]
  ollama [command]

Available Commands:
  serve       Start ollama
  show        Show information for a model
  run         Run a model
  stop        Stop a running model
  pull        Pull a model from a registry
  list        List models
  ps          List running models
  rm          Remove a model

Flags:
  -h, --help      help for ollama
  -v, --version   Show version information
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    cmd, rest = args[0], args[1:]
    try:
        if cmd in ("-v", "--version", "version"):
            return cmd_version()
        if cmd == "serve":
            return cmd_serve()
        if cmd in ("list", "ls"):
            return cmd_list()
        if cmd == "ps":
            return cmd_ps()
        if cmd in ("pull", "show", "stop") and len(rest) != 1:
            raise CliError(f'accepts 1 arg(s), received {len(rest)}')
        if cmd == "pull":
            return cmd_pull(rest[0])
        if cmd == "show":
            return cmd_show(rest[0])
        if cmd == "stop":
            return cmd_stop(rest[0])
        if cmd == "rm":
            if not rest:
                raise CliError("requires at least 1 arg(s), only received 0")
            return cmd_rm(rest)
        if cmd == "run":
            if not rest:
                raise CliError("requires at least 1 arg(s), only received 0")
            return cmd_run(rest[0], " ".join(rest[1:]))
        raise CliError(f'unknown command "{cmd}" for "ollama"')
    except Unreachable:
        sys.stderr.write(CONNECT_ERROR + "\n")
        return 1
    except CliError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
