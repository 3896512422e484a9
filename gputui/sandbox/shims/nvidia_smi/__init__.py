"""`nvidia-smi` for a sandbox instance, in the real tool's formats.

Supported: the plain table; ``-L``; ``--version``; ``-q`` (text) and ``-q -x`` (XML, DTD v12);
``--query-gpu=`` (any field of the real field list) and ``--query-compute-apps=`` with
``--format=csv[,noheader][,nounits]``; ``-i`` (indexes, UUIDs or PCI bus ids, comma
separated); ``-l SEC`` / ``-lms MS`` loops; ``-f FILE``; ``--help-query-gpu`` /
``--help-query-compute-apps`` (names only). Formats follow the captures in
../shared/fixtures/nvidia-smi; see ../fields.py for where the field names come from.

Run as ``python -m gputui.sandbox.shims.nvidia_smi`` (see __main__.py). The modules, by idea:
common (exit codes, escaping, the reading context), args (the command line), query
(--query-gpu / --query-compute-apps CSV), table (-L, --version, the plain table), xml_report
(-q -x), text_report (-q), cli (one invocation: loops, -f, power state, signals).
"""

from __future__ import annotations

from .args import Options, parse_args
from .cli import main, run
from .common import (
    DEPRECATED,
    EXIT_INVALID_ARG,
    EXIT_NOT_FOUND,
    EXIT_POWERED_OFF,
    NA,
    Context,
    Usage,
    escape,
    quoteattr,
    select_gpus,
)
from .query import gpu_values, render_query_apps, render_query_gpu, resolve_fields
from .table import render_list, render_table, render_version
from .text_report import render_query_text
from .xml_report import Node, render_xml

__all__ = [
    "DEPRECATED",
    "EXIT_INVALID_ARG",
    "EXIT_NOT_FOUND",
    "EXIT_POWERED_OFF",
    "NA",
    "Context",
    "Node",
    "Options",
    "Usage",
    "escape",
    "gpu_values",
    "main",
    "parse_args",
    "quoteattr",
    "render_list",
    "render_query_apps",
    "render_query_gpu",
    "render_query_text",
    "render_table",
    "render_version",
    "render_xml",
    "resolve_fields",
    "run",
    "select_gpus",
]
