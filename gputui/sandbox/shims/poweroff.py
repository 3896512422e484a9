"""`poweroff`: power the sandbox instance off now (same as `shutdown -h now`)."""

from __future__ import annotations

import sys

from .shutdown import main as shutdown_main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv:
        sys.stdout.write("poweroff [OPTIONS...]\n\nPower off the system.\n")
        return 0
    # -f/--force, -p, --no-wall and the like change nothing here.
    return shutdown_main(["-P", "now"], command_name="poweroff")


if __name__ == "__main__":
    sys.exit(main())
