"""Parsers for what `nvidia-smi` prints: the CSV stream, the XML report, the plain table, `-L`.

Everything here is pure: text in, `gputui.models` out, no I/O. The output of a remote machine
is untrusted, so:

- nothing raises on odd input except `parse_xml`/`xml_samples`, which raise `NvsmiParseError`
  (and only that) when the text is not an XML document at all;
- every string taken from the device (GPU names, process names, UUIDs, states) goes through
  `sanitize`, which removes terminal escape sequences and control characters and bounds the
  length, so hostile output never reaches a terminal raw;
- a value nvidia-smi cannot give (`[N/A]`, `[Not Supported]`, `N/A`, `[Unknown Error]`, any
  other bracketed message, an empty or missing field) is `None`.

nvidia-smi's timestamps carry no time zone (they are the remote host's local time). They are
read as UTC unless told otherwise (`tz=`); most rented machines run in UTC.

The modules, by idea: common (the parse error, sanitising, reading values), fields (field
names, the command lines), csv_stream (the --query-gpu / --query-compute-apps CSV), mig (MIG
profile guesses), xml_report (-q -x), table (the plain table), gpu_list (-L).
"""

from __future__ import annotations

from gputui.sanitize import sanitize  # the one sanitiser (re-exported here)

from .common import MAX_LINE_CHARS, MAX_TEXT_CHARS, MAX_XML_CHARS, NvsmiParseError
from .csv_stream import (
    CsvStreamParser,
    assign_gpu_indices,
    parse_compute_apps_csv,
    parse_query_gpu_csv,
)
from .fields import (
    COMPUTE_APPS_FIELDS,
    TELEMETRY_FIELDS,
    canonical_field,
    compute_apps_command,
    query_gpu_command,
)
from .gpu_list import ListedGpu, apply_gpu_list, parse_gpu_list
from .mig import guess_mig_profile
from .table import parse_table
from .xml_report import parse_xml, xml_samples

__all__ = [
    "COMPUTE_APPS_FIELDS",
    "MAX_LINE_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_XML_CHARS",
    "TELEMETRY_FIELDS",
    "CsvStreamParser",
    "ListedGpu",
    "NvsmiParseError",
    "apply_gpu_list",
    "assign_gpu_indices",
    "canonical_field",
    "compute_apps_command",
    "guess_mig_profile",
    "parse_compute_apps_csv",
    "parse_gpu_list",
    "parse_query_gpu_csv",
    "parse_table",
    "parse_xml",
    "query_gpu_command",
    "sanitize",
    "xml_samples",
]

