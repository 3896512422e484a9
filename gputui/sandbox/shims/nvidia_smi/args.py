"""The sandbox nvidia-smi's command line, parsed as the real tool parses it."""

from __future__ import annotations

from .common import (
    Usage,
)

# --------------------------------------------------------------------------- arguments


class Options:
    def __init__(self) -> None:
        self.mode = "table"  # table | list | version | query | query_gpu | query_apps | help_*
        self.xml = False
        self.ids: list[str] | None = None
        self.loop_s: float | None = None
        self.query: str | None = None
        self.format: str | None = None
        self.filename: str | None = None


_WITH_VALUE = {
    "-i": "id",
    "--id": "id",
    "-l": "loop",
    "--loop": "loop",
    "-lms": "loop_ms",
    "--loop-ms": "loop_ms",
    "-f": "filename",
    "--filename": "filename",
    "--format": "format",
    "--query-gpu": "query_gpu",
    "--query-compute-apps": "query_apps",
    "-d": "display",
    "--display": "display",
}
_FLAGS = {
    "-L": "list",
    "--list-gpus": "list",
    "-q": "query",
    "--query": "query",
    "-x": "xml",
    "--xml-format": "xml",
    "-h": "help",
    "--help": "help",
    "--version": "version",
    "--help-query-gpu": "help_query_gpu",
    "--help-query-compute-apps": "help_query_apps",
    "-u": "unit",
    "--unit": "unit",
    "--dtd": "dtd",
}
_SUBCOMMANDS = {
    "dmon",
    "pmon",
    "topo",
    "nvlink",
    "mig",
    "clocks",
    "drain",
    "vgpu",
    "c2c",
    "daemon",
    "replay",
    "encodersessions",
    "fbcsessions",
    "compute-policy",
    "boost-slider",
    "power-hint",
    "base-clocks",
    "conf-compute",
    "gpm",
    "pci",
    "power-smoothing",
    "power-profiles",
    "rusd",
    "prm",
    "soc",
}


def _not_recognized(arg: str) -> Usage:
    return Usage(f"ERROR: Option {arg} is not recognized. Please run 'nvidia-smi -h'.")


def parse_args(argv: list[str]) -> Options:
    opts = Options()
    seen: set[str] = set()
    i = 0
    if argv and argv[0] in _SUBCOMMANDS:
        raise Usage(f"nvidia-smi {argv[0]}: not simulated on this sandbox instance.")
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if name in _WITH_VALUE:
            key = _WITH_VALUE[name]
            if eq:
                value = inline
            else:
                i += 1
                if i >= len(argv):
                    raise Usage(
                        f"ERROR: Option {name} requires an argument. Please run 'nvidia-smi -h'."
                    )
                value = argv[i]
            if key == "id":
                opts.ids = [v.strip() for v in value.split(",") if v.strip()]
            elif key in ("loop", "loop_ms"):
                try:
                    number = float(value)
                except ValueError:
                    raise Usage(f'Invalid loop value "{value}".') from None
                if number <= 0:
                    raise Usage(f'Invalid loop value "{value}".')
                opts.loop_s = number if key == "loop" else number / 1000.0
            elif key == "filename":
                opts.filename = value
            elif key == "format":
                opts.format = value
            elif key in ("query_gpu", "query_apps"):
                opts.query = value
                seen.add(key)
            # -d/--display is accepted and ignored (all sections are shown)
        elif arg in _FLAGS:
            seen.add(_FLAGS[arg])
        else:
            raise _not_recognized(arg)
        i += 1

    exclusive = seen & {
        "list",
        "query",
        "version",
        "query_gpu",
        "query_apps",
        "help",
        "help_query_gpu",
        "help_query_apps",
        "unit",
        "dtd",
    }
    if "unit" in exclusive or "dtd" in exclusive:
        raise Usage("This sandbox has no S-class units and no DTD to show.")
    if len(exclusive) > 1:
        raise Usage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    if "xml" in seen and "query" not in seen:
        raise Usage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    opts.xml = "xml" in seen
    opts.mode = next(iter(exclusive), "table")
    if opts.mode in ("query_gpu", "query_apps"):
        fmt = [p.strip() for p in (opts.format or "").split(",") if p.strip()]
        if "csv" not in fmt or any(p not in ("csv", "noheader", "nounits") for p in fmt):
            raise Usage(
                '"--format=" must be given with "csv" (plus optional "noheader", '
                "\"nounits\"). Please run 'nvidia-smi -h' for help."
            )
    return opts
