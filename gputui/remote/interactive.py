"""`gputui ssh NAME`: an interactive shell over the instance's link, in the user's terminal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
from typing import Any


async def interactive_shell(link: Any) -> int:
    """Open a PTY shell; the local terminal is raw while it runs and restored afterwards."""
    conn = await link._connection()  # the link's one connection
    stdin_fd = sys.stdin.fileno()
    is_tty = os.isatty(stdin_fd)
    term = os.environ.get("TERM", "xterm")
    size = os.get_terminal_size() if is_tty else os.terminal_size((80, 24))
    proc = await conn.create_process(
        term_type=term if is_tty else None,
        term_size=(size.columns, size.lines) if is_tty else None,
        encoding=None,
    )
    loop = asyncio.get_running_loop()
    saved = termios.tcgetattr(stdin_fd) if is_tty else None

    def on_input() -> None:
        data = os.read(stdin_fd, 4096)
        if data:
            proc.stdin.write(data)
        else:
            loop.remove_reader(stdin_fd)
            proc.stdin.write_eof()

    def on_resize() -> None:
        cols, rows = os.get_terminal_size()
        proc.change_terminal_size(cols, rows)

    try:
        if is_tty:
            tty.setraw(stdin_fd)
            loop.add_signal_handler(signal.SIGWINCH, on_resize)
        loop.add_reader(stdin_fd, on_input)

        async def pump(reader: Any, out: Any) -> None:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                out.write(chunk)
                out.flush()

        await asyncio.gather(pump(proc.stdout, sys.stdout.buffer),
                             pump(proc.stderr, sys.stderr.buffer))
        result = await proc.wait()
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(stdin_fd)
        if is_tty:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGWINCH)
            if saved is not None:
                termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)
    return result.exit_status if result.exit_status is not None else 255
