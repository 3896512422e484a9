"""Every gputui command that a message tells the renter to run (written between backticks, as
`gputui extend NAME 1h`) is one that gputui takes: run as printed, with the message's blanks
filled in, it parses. (`create` once told renters to run `gputui extend NAME --by 1h`, which
exit 2 refused.)"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

from babel.messages.pofile import read_po

from gputui.cli import build_parser

CATALOG = Path(__file__).resolve().parents[1] / "gputui" / "locale" / "gputui.pot"

# what a blank stands for: a value of the kind the command takes there
BLANKS = {"policy": "release", "POLICY": "release", "OTHER": "out", "quoted": "img",
          "gpu": "4090"}
# a command named, not one to run as it stands (the rest of the message says what it takes)
NAMED_ONLY = {"gputui add-ssh", "gputui jobs", "gputui config {init,path,check}"}


def _filled(command: str) -> str:
    command = re.sub(r"\{([a-z_]+)\}", lambda m: BLANKS.get(m[1], "x1"), command)
    return re.sub(r"\b[A-Z]{3,}\b", lambda m: BLANKS.get(m[0], m[0]), command)


def commands_in_messages() -> list[str]:
    with CATALOG.open("rb") as fh:
        catalog = read_po(fh)
    found: list[str] = []
    for message in catalog:
        for text in message.id if isinstance(message.id, tuple) else (message.id,):
            found += re.findall(r"`(gputui [^`]+)`", text or "")
    return sorted(set(found))


def test_every_command_a_message_names_is_one_gputui_takes():
    commands = commands_in_messages()
    assert len(commands) > 20  # (the catalog was read)
    refused = []
    for command in commands:
        if command.split(" usage")[0] in NAMED_ONLY:
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(shlex.split(_filled(command))[1:])
        except SystemExit as exc:
            if exc.code:
                refused.append(f"{command}: {err.getvalue().strip().splitlines()[-1]}")
    assert not refused, "\n".join(refused)
