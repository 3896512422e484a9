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
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gputui.errors import BadInput
from gputui.models import GpuInventory, GpuSample, HostInventory, MigDevice, ProcessSample
from gputui.sanitize import sanitize  # the one sanitiser (re-exported here)

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


class NvsmiParseError(BadInput, ValueError):
    """The text is not an nvidia-smi XML report at all (not XML, or another document)."""


# --------------------------------------------------------------------------------------------
# Sanitising
# --------------------------------------------------------------------------------------------

MAX_TEXT_CHARS = 256  # names, process names
MAX_LINE_CHARS = 65536  # one CSV line; the widest real one (241 fields) is about 4 KB
MAX_XML_CHARS = 32 * 1024 * 1024  # an 8-GPU `-q -x` report is well under 1 MB

def _text(value: str | None, limit: int = MAX_TEXT_CHARS) -> str | None:
    """A sanitised string, or None where nvidia-smi says it has no value."""
    raw = _clean(value)
    if raw is None:
        return None
    text = sanitize(raw, limit)
    return text or None


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------

_NA_WORDS = {
    "",
    "n/a",
    "na",
    "not supported",
    "unknown error",
    "err!",
    "-",
    "none",
    "not available",
    "insufficient permissions",
    "gpu is lost",
    "requested functionality has been deprecated",
}
_NUM_RE = re.compile(
    r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,3})?)\s*([A-Za-z%/]{0,8})\s*$"
)
_MEM_FACTORS = {
    "": 1.0,
    "mib": 1.0,
    "mb": 1.0,  # nvidia-smi's "MB" has always meant MiB
    "kib": 1 / 1024,
    "kb": 1 / 1024,
    "gib": 1024.0,
    "gb": 1024.0,
    "b": 1 / (1024 * 1024),
}


def _clean(value: str | None) -> str | None:
    """Strip a raw field; None for nvidia-smi's not-available spellings and bracketed messages."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return None
    if text.lower() in _NA_WORDS:
        return None
    return text


def _num(value: str | None) -> float | None:
    text = _clean(value)
    if text is None or len(text) > 64:
        return None
    m = _NUM_RE.match(text)
    if not m:
        return None
    try:
        number = float(m.group(1))
    except ValueError:  # pragma: no cover - the regex admits only floats
        return None
    if not math.isfinite(number):
        return None
    return number


def _unit(value: str | None) -> str:
    text = _clean(value)
    if text is None:
        return ""
    m = _NUM_RE.match(text)
    return m.group(2).lower() if m else ""


def _mib(value: str | None) -> float | None:
    number = _num(value)
    if number is None:
        return None
    factor = _MEM_FACTORS.get(_unit(value))
    if factor is None:
        return None
    return number * factor


def _watts(value: str | None) -> float | None:
    number = _num(value)
    if number is None:
        return None
    unit = _unit(value)
    if unit == "mw":
        return number / 1000
    if unit == "kw":
        return number * 1000
    return number


def _int(value: str | None) -> int | None:
    number = _num(value)
    if number is None or number != int(number) or abs(number) > 2**62:
        return None
    return int(number)


def _index(value: str | None) -> int | None:
    number = _int(value)
    if number is None or number < 0 or number > 1_000_000:
        return None
    return number


def _pcie_width(value: str | None) -> int | None:
    text = _clean(value)
    if text is None:
        return None
    return _int(text.lower().rstrip("x"))


_TIME_FORMATS = (
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%a %b %d %H:%M:%S %Y",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
)


def _timestamp(value: str | None, tz: tzinfo = UTC) -> datetime | None:
    text = _clean(value)
    if text is None or len(text) > 64:
        return None
    text = " ".join(text.split())
    for fmt in _TIME_FORMATS:
        try:
            parsed = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=tz)
        return parsed.astimezone(UTC)
    return None


# --------------------------------------------------------------------------------------------
# Field names
# --------------------------------------------------------------------------------------------

#: The `--query-gpu` fields the live stream asks for (names as `nvidia-smi --help-query-gpu`).
TELEMETRY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "timestamp",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "fan.speed",
    "clocks.sm",
    "pstate",
    "mig.mode.current",
)

#: The `--query-compute-apps` fields (the names nvidia-smi prints in its header).
COMPUTE_APPS_FIELDS: tuple[str, ...] = ("pid", "gpu_uuid", "process_name", "used_gpu_memory")

# "alias" -> the name nvidia-smi prints in the CSV header (from --help-query-gpu, drivers
# 418..610).
_GPU_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "inforom.power": "inforom.pwr",
    "gpu_operation_mode.current": "gom.current",
    "gpu_operation_mode.pending": "gom.pending",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "remapped_rows.sbe": "remapped_rows.correctable",
    "remapped_rows.dbe": "remapped_rows.uncorrectable",
    "gpu.power.draw.average": "power.draw.average",
    "gpu.power.draw.instant": "power.draw.instant",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.min_limit": "power.min_limit",
    "gpu.power.max_limit": "power.max_limit",
    "module.power.requested_limit": "module.power.limit",
    "module.power.current_limit": "module.enforced.power.limit",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.default_applications.mem": "clocks.default_applications.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
}
for _reason in (
    "supported",
    "active",
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
):
    _GPU_ALIASES[f"clocks_throttle_reasons.{_reason}"] = f"clocks_event_reasons.{_reason}"

_APPS_ALIASES = {
    "name": "process_name",
    "used_memory": "used_gpu_memory",
    "uuid": "gpu_uuid",
}

_KNOWN_GPU_FIELDS = frozenset(
    set(_GPU_ALIASES.values())
    | {
        "index",
        "uuid",
        "name",
        "serial",
        "timestamp",
        "driver_version",
        "count",
        "utilization.gpu",
        "utilization.memory",
        "memory.used",
        "memory.total",
        "memory.free",
        "memory.reserved",
        "temperature.gpu",
        "temperature.memory",
        "power.draw",
        "fan.speed",
        "pstate",
        "mig.mode.current",
        "mig.mode.pending",
        "pcie.link.gen.current",
        "pcie.link.width.current",
        "ecc.mode.current",
        "vbios_version",
        "compute_mode",
    }
)
_KNOWN_APPS_FIELDS = frozenset(
    {
        "timestamp",
        "gpu_name",
        "gpu_bus_id",
        "gpu_serial",
        "gpu_uuid",
        "pid",
        "process_name",
        "used_gpu_memory",
    }
)

_FIELD_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,127}(?:\s*\[[^\[\]]{0,16}\])?$")


def canonical_field(name: str, kind: str = "gpu") -> str:
    """The name nvidia-smi prints for a query field: units dropped (`memory.used [MiB]` ->
    `memory.used`) and aliases resolved (`clocks.sm` -> `clocks.current.sm`). `kind` is "gpu"
    for --query-gpu and "apps" for --query-compute-apps (where `name` is the process name)."""
    base = name.strip().split("[", 1)[0].strip()
    aliases = _APPS_ALIASES if kind == "apps" else _GPU_ALIASES
    return aliases.get(base, base)


def _fields_arg(fields: Sequence[str]) -> str:
    for field in fields:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", field):
            raise ValueError(f"not an nvidia-smi query field: {field!r}")
    return ",".join(fields)


def query_gpu_command(
    interval_ms: int | None = 1000,
    fields: Sequence[str] = TELEMETRY_FIELDS,
    *,
    header: bool = True,
    units: bool = False,
) -> str:
    """`nvidia-smi --query-gpu=... --format=csv,nounits -lms N` (a shell command line).

    `interval_ms=None` runs once. `header=False` adds `noheader`; `units=True` keeps units.
    """
    fmt = "csv"
    if not header:
        fmt += ",noheader"
    if not units:
        fmt += ",nounits"
    command = f"nvidia-smi --query-gpu={_fields_arg(fields)} --format={fmt}"
    if interval_ms is not None:
        if int(interval_ms) < 1:
            raise ValueError("interval_ms must be at least 1")
        command += f" -lms {int(interval_ms)}"
    return command


def compute_apps_command(
    fields: Sequence[str] = COMPUTE_APPS_FIELDS, *, header: bool = True, units: bool = False
) -> str:
    """`nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_gpu_memory --format=csv,nounits`."""
    fmt = "csv"
    if not header:
        fmt += ",noheader"
    if not units:
        fmt += ",nounits"
    return f"nvidia-smi --query-compute-apps={_fields_arg(fields)} --format={fmt}"


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


class _CsvRows:
    """Header learning and line splitting shared by the --query-gpu and --query-compute-apps
    parsers."""

    def __init__(
        self,
        fields: Sequence[str] | None,
        default: Sequence[str],
        kind: str,
        free_text: frozenset[str],
    ) -> None:
        self.kind = kind
        self.known = _KNOWN_GPU_FIELDS if kind == "gpu" else _KNOWN_APPS_FIELDS
        self.free_text = free_text
        self.fields: list[str] = [canonical_field(f, kind) for f in (fields or default)]
        self.skipped = 0
        self.last_skipped: str | None = None
        self.headers = 0  # header lines seen

    def skip(self, line: str) -> None:
        self.skipped += 1
        self.last_skipped = sanitize(line, 200) or None

    def is_header(self, parts: list[str]) -> bool:
        """All cells look like field names and at least one is a field we know."""
        if not all(_FIELD_NAME_RE.match(p) for p in parts):
            return False
        return any(canonical_field(p, self.kind) in self.known for p in parts)

    def split(self, line: str) -> dict[str, str] | None:
        """The row as {field: raw value}; None for a header (learned), a blank or a bad line."""
        line = line.rstrip("\r\n")
        if not line.strip():
            return None
        if len(line) > MAX_LINE_CHARS or "\n" in line:
            self.skip(line[:200])
            return None
        parts = [p.strip() for p in line.split(",")]
        if self.is_header(parts):
            self.fields = [canonical_field(p, self.kind) for p in parts]
            self.headers += 1
            return None
        n = len(self.fields)
        if len(parts) > n:
            # A comma inside a name: give the extra pieces back to the one free-text field.
            text_cols = [i for i, f in enumerate(self.fields) if f in self.free_text]
            if len(text_cols) != 1:
                self.skip(line)
                return None
            k = text_cols[0]
            extra = len(parts) - n
            parts = parts[:k] + [", ".join(parts[k : k + extra + 1])] + parts[k + extra + 1 :]
        if len(parts) != n:
            self.skip(line)
            return None
        return dict(zip(self.fields, parts, strict=True))


class CsvStreamParser:
    """Line-by-line parser for `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    `fields` is the order asked for (default `TELEMETRY_FIELDS`); a header line, when one
    arrives, replaces it. Values may carry units or not. `feed` never raises: a line it cannot
    use returns None and counts in `.skipped` (`.last_skipped` keeps it, sanitised, for a
    diagnosis). A row without `index` gets one from its UUID (first seen first), else from its
    position since the header.
    """

    def __init__(self, fields: Sequence[str] | None = None, *, tz: tzinfo = UTC) -> None:
        self._rows = _CsvRows(fields, TELEMETRY_FIELDS, "gpu", frozenset({"name"}))
        self._tz = tz
        self._uuid_index: dict[str, int] = {}
        self._position = 0

    @property
    def fields(self) -> list[str]:
        return list(self._rows.fields)

    @property
    def skipped(self) -> int:
        return self._rows.skipped

    @property
    def last_skipped(self) -> str | None:
        return self._rows.last_skipped

    def feed(self, line: str | bytes) -> GpuSample | None:
        try:
            return self._feed(line)
        except Exception:  # noqa: BLE001 - a parser of remote output must never raise
            self._rows.skip(str(line)[:200])
            return None

    def _feed(self, line: str | bytes) -> GpuSample | None:
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        headers = self._rows.headers
        row = self._rows.split(line)
        if self._rows.headers != headers:
            self._position = 0  # a new header starts a new table
        if row is None:
            return None
        uuid = _text(row.get("uuid"), 96)
        if "index" in row:
            index = _index(row["index"])
            if index is None:
                self._rows.skip(line)
                return None
        elif uuid is not None and (uuid in self._uuid_index or len(self._uuid_index) < 1024):
            index = self._uuid_index.setdefault(uuid, len(self._uuid_index))
        else:
            index = self._position
        self._position += 1

        def num(*names: str) -> float | None:
            for name in names:
                value = _num(row.get(name))
                if value is not None:
                    return value
            return None

        def watts(*names: str) -> float | None:
            for name in names:
                value = _watts(row.get(name))
                if value is not None:
                    return value
            return None

        def mib(name: str) -> float | None:
            return _mib(row.get(name))

        return GpuSample(
            index=index,
            uuid=uuid,
            name=_text(row.get("name")),
            timestamp=_timestamp(row.get("timestamp"), self._tz),
            utilization_gpu=num("utilization.gpu"),
            utilization_memory=num("utilization.memory"),
            memory_used_mib=mib("memory.used"),
            memory_total_mib=mib("memory.total"),
            temperature_c=num("temperature.gpu"),
            power_draw_w=watts("power.draw", "power.draw.instant", "power.draw.average"),
            power_limit_w=watts("power.limit", "enforced.power.limit"),
            fan_pct=num("fan.speed"),
            sm_clock_mhz=num("clocks.current.sm"),
            pstate=_text(row.get("pstate"), 16),
            mig_mode=_text(row.get("mig.mode.current"), 32),
        )


def _lines(text: str | bytes) -> list[str]:
    """Lines split on "\n" only: `str.splitlines` would also split on \x1c-\x1e, \x85 and
    U+2028, which a hostile name can contain."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return [line.removesuffix("\r") for line in text.split("\n")]


def parse_query_gpu_csv(
    text: str | bytes, fields: Sequence[str] | None = None, *, tz: tzinfo = UTC
) -> list[GpuSample]:
    """Every sample in a `--query-gpu` CSV text (with or without header and units)."""
    parser = CsvStreamParser(fields, tz=tz)
    samples = []
    for line in _lines(text):
        sample = parser.feed(line)
        if sample is not None:
            samples.append(sample)
    return samples


def parse_compute_apps_csv(
    text: str | bytes,
    fields: Sequence[str] | None = None,
    *,
    uuid_to_index: Mapping[str, int] | None = None,
) -> list[ProcessSample]:
    """The processes in a `--query-compute-apps` CSV text. `gpu_index` is filled from
    `uuid_to_index` where given (see `assign_gpu_indices`). `used_memory_mib` is None where
    the driver cannot tell (Windows WDDM)."""
    rows = _CsvRows(fields, COMPUTE_APPS_FIELDS, "apps", frozenset({"process_name"}))
    out: list[ProcessSample] = []
    for line in _lines(text):
        try:
            row = rows.split(line)
            if row is None:
                continue
            pid = _int(row.get("pid"))
            if pid is None or pid < 0:
                rows.skip(line)
                continue
            uuid = _text(row.get("gpu_uuid"), 96)
            out.append(
                ProcessSample(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_index=(uuid_to_index or {}).get(uuid) if uuid else None,
                    name=_text(row.get("process_name")),
                    used_memory_mib=_mib(row.get("used_gpu_memory")),
                )
            )
        except Exception:  # noqa: BLE001 - never raise on remote output
            rows.skip(line[:200])
    return out


def assign_gpu_indices(
    processes: Iterable[ProcessSample], gpus: Iterable[GpuSample | GpuInventory]
) -> list[ProcessSample]:
    """Processes with `gpu_index` filled in from their `gpu_uuid`, given the GPUs (samples or
    inventory entries) that carry both."""
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid}
    return [
        p.model_copy(update={"gpu_index": by_uuid[p.gpu_uuid]})
        if p.gpu_index is None and p.gpu_uuid in by_uuid
        else p
        for p in processes
    ]


# --------------------------------------------------------------------------------------------
# MIG profiles
# --------------------------------------------------------------------------------------------

# SMs per compute slice, by architecture (NVIDIA MIG user guide profile tables).
_SMS_PER_SLICE = {"ampere": 14, "hopper": 16}
# Nominal memory (GB) of MIG-capable parts whose name does not say it.
_NOMINAL_GB = {"h200": 141, "h20": 96, "a30": 24, "h100 pcie": 80, "h100 sxm": 80, "h800": 80}
# memory slices (of 8) a GPU instance of g compute slices can have
_MEM_SLICES_FOR = {1: {1, 2}, 2: {2}, 3: {4}, 4: {4}, 7: {8}}


def _architecture(product: str | None, arch: str | None) -> str | None:
    if arch:
        return arch.strip().lower()
    name = (product or "").lower()
    if re.search(r"\b(a100|a30|a800)\b", name) or "a100-" in name:
        return "ampere"
    if re.search(r"\b(gh200|h100|h200|h800|h20)\b", name):
        return "hopper"
    return None


def guess_mig_profile(
    product: str | None,
    sm_count: int | None,
    memory_mib: float | None,
    gpu_memory_mib: float | None,
    architecture: str | None = None,
) -> str | None:
    """A MIG profile name such as `3g.40gb`, inferred from the instance's SM count and memory
    (the XML and the table do not print it; `nvidia-smi -L` does, see `apply_gpu_list`).

    Known for Ampere (A100, A30) and Hopper (H100, H200); None where it cannot be told
    (other architectures, compute-instance profiles such as `1c.3g.71gb`)."""
    per_slice = _SMS_PER_SLICE.get(_architecture(product, architecture) or "")
    if not per_slice or not sm_count or not memory_mib or not gpu_memory_mib:
        return None
    g = min(7, sm_count // per_slice)
    if g == 5 or g == 6:
        g = 4
    if g < 1:
        return None
    slices = round(memory_mib / gpu_memory_mib * 8)
    if slices not in _MEM_SLICES_FOR.get(g, set()):
        return None
    name = (product or "").lower()
    m = re.search(r"(\d+)\s*gb\b", name)
    if m:
        nominal = Decimal(m.group(1))
    else:
        nominal = next(
            (Decimal(gb) for key, gb in _NOMINAL_GB.items() if key in name),
            Decimal(round(gpu_memory_mib / 1024)),
        )
    gb = (nominal * slices / 8).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{g}g.{gb}gb"


# --------------------------------------------------------------------------------------------
# XML (`nvidia-smi -q -x`)
# --------------------------------------------------------------------------------------------


# Characters XML 1.0 forbids. nvidia-smi copies process names into its XML unescaped, so one
# process named with an escape sequence would make the whole report unreadable.
_XML_ILLEGAL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_XML_CHARREF_RE = re.compile(r"&#(x[0-9a-fA-F]{1,8}|[0-9]{1,10});")
_XML_BARE_AMP_RE = re.compile(r"&(?![A-Za-z_][\w.-]{0,31};|#x[0-9a-fA-F]{1,8};|#[0-9]{1,10};)")


_XML_ESCAPE_SEQ_RE = re.compile(
    # as _ESCAPE_RE, but never eating the markup that follows (< & ' ")
    r"\x1b\[[0-;=>?]*[ !#-%(-/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b<'\"&]*(?:\x07|\x1b\\)?"
    r"|\x1b[ !#-%(-/]*[0-;=-~]?"
)


def _xml_repair(text: str) -> str:
    """Remove what nvidia-smi may print but XML 1.0 forbids: terminal escape sequences and
    other control characters (raw or as character references); escape bare '&'."""

    def charref(m: re.Match[str]) -> str:
        ref = m.group(1)
        code = int(ref[1:], 16) if ref[0] in "xX" else int(ref)
        if code > 0x10FFFF or _XML_ILLEGAL_RE.match(chr(code)):
            return ""
        return m.group(0)

    if "\x1b" in text:
        text = _XML_ESCAPE_SEQ_RE.sub("", text)
    text = _XML_ILLEGAL_RE.sub("", text)
    text = _XML_CHARREF_RE.sub(charref, text)
    return _XML_BARE_AMP_RE.sub("&amp;", text)


def _xml_root(text: str | bytes) -> ET.Element:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise NvsmiParseError("nvidia-smi XML must be text")
    if len(text) > MAX_XML_CHARS:
        raise NvsmiParseError("nvidia-smi XML report is implausibly large")
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise NvsmiParseError("XML entity declarations are not accepted")
    # The encoding declaration is for bytes; we already hold text.
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text, count=1)
    text = _xml_repair(text)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise NvsmiParseError(f"not XML: {sanitize(exc, 120)}") from None
    except (ValueError, RecursionError):
        raise NvsmiParseError("not XML") from None
    if root.tag != "nvidia_smi_log":
        raise NvsmiParseError(f"not an nvidia-smi report (root <{sanitize(root.tag, 40)}>)")
    return root


def _find(el: ET.Element | None, *paths: str) -> str | None:
    """The text of the first of `paths` that exists under `el` (None if none do)."""
    if el is None:
        return None
    for path in paths:
        child = el.find(path)
        if child is not None and child.text is not None and child.text.strip():
            return child.text
    return None


def _first_value(el: ET.Element, paths: Sequence[str], conv: Any) -> Any:
    """The first of `paths` whose value converts to something other than None."""
    for path in paths:
        value = conv(_find(el, path))
        if value is not None:
            return value
    return None


def _version(value: str | None) -> str | None:
    text = _clean(value)
    if text is None:
        return None
    text = re.sub(r"\s*\[.*$", "", text)  # "610.57.04 [Deprecated; ...]"
    return _text(text, 32)


_POWER_DRAW = (
    "power_readings/power_draw",
    "gpu_power_readings/power_draw",
    "gpu_power_readings/instant_power_draw",
    "power_readings/instant_power_draw",
    "gpu_power_readings/average_power_draw",
    "power_readings/average_power_draw",
)
_POWER_LIMIT = (
    "power_readings/power_limit",
    "gpu_power_readings/current_power_limit",
    "power_readings/current_power_limit",
    "power_readings/enforced_power_limit",
    "gpu_power_readings/enforced_power_limit",
    "gpu_power_readings/requested_power_limit",
)


def _gpu_elements(root: ET.Element) -> list[ET.Element]:
    return root.findall("gpu")


def _xml_mig_devices(gpu: ET.Element, index: int) -> list[MigDevice]:
    product = _text(_find(gpu, "product_name"))
    arch = _text(_find(gpu, "product_architecture"), 32)
    gpu_total = _mib(_find(gpu, "fb_memory_usage/total"))
    out = []
    for dev in gpu.findall("mig_devices/mig_device"):
        total = _mib(_find(dev, "fb_memory_usage/total"))
        sms = _int(_find(dev, "device_attributes/shared/multiprocessor_count"))
        out.append(
            MigDevice(
                gpu_index=index,
                gi_id=_int(_find(dev, "gpu_instance_id")),
                ci_id=_int(_find(dev, "compute_instance_id")),
                mig_index=_index(_find(dev, "index")),
                profile=_text(_find(dev, "profile_name", "profile"), 32)
                or guess_mig_profile(product, sms, total, gpu_total, arch),
                memory_used_mib=_mib(_find(dev, "fb_memory_usage/used")),
                memory_total_mib=total,
                uuid=_text(_find(dev, "uuid", "mig_uuid"), 96),
            )
        )
    return out


def parse_xml(text: str | bytes) -> HostInventory:
    """The inventory in an `nvidia-smi -q -x` report (DTD v10..v13, trimmed reports too).

    Raises `NvsmiParseError` when the text is not such a report; missing elements are None."""
    root = _xml_root(text)
    gpus: list[GpuInventory] = []
    processes: list[ProcessSample] = []
    for index, gpu in enumerate(_gpu_elements(root)):
        uuid = _text(_find(gpu, "uuid"), 96)
        gpus.append(
            GpuInventory(
                index=index,
                name=_text(_find(gpu, "product_name")),
                uuid=uuid,
                serial=_text(_find(gpu, "serial"), 64),
                pci_bus_id=_text(_find(gpu, "pci/pci_bus_id") or gpu.get("id"), 32),
                memory_total_mib=_mib(_find(gpu, "fb_memory_usage/total")),
                power_limit_w=_first_value(gpu, _POWER_LIMIT, _watts),
                ecc_mode=_text(_find(gpu, "ecc_mode/current_ecc"), 32),
                mig_mode=_text(_find(gpu, "mig_mode/current_mig"), 32),
                pcie_gen=_int(_find(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
                pcie_width=_pcie_width(
                    _find(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")
                ),
                vbios=_text(_find(gpu, "vbios_version"), 64),
                mig_devices=_xml_mig_devices(gpu, index),
            )
        )
        for proc in gpu.findall("processes/process_info"):
            pid = _int(_find(proc, "pid"))
            if pid is None or pid < 0:
                continue
            processes.append(
                ProcessSample(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_index=index,
                    name=_text(_find(proc, "process_name")),
                    used_memory_mib=_mib(_find(proc, "used_memory")),
                    kind=_text(_find(proc, "type"), 8),
                )
            )
    return HostInventory(
        driver_version=_version(_find(root, "kmd_version", "driver_version")),
        cuda_version=_version(_find(root, "cuda_umd_version", "cuda_version")),
        gpus=gpus,
        processes=processes,
    )


def xml_samples(text: str | bytes, *, tz: tzinfo = UTC) -> list[GpuSample]:
    """The current readings in an `nvidia-smi -q -x` report, one sample per GPU. Power draw
    falls back to `instant_power_draw`, then `average_power_draw` where `power_draw` is N/A."""
    root = _xml_root(text)
    when = _timestamp(_find(root, "timestamp"), tz)
    samples = []
    for index, gpu in enumerate(_gpu_elements(root)):
        samples.append(
            GpuSample(
                index=index,
                uuid=_text(_find(gpu, "uuid"), 96),
                name=_text(_find(gpu, "product_name")),
                timestamp=when,
                utilization_gpu=_num(_find(gpu, "utilization/gpu_util")),
                utilization_memory=_num(_find(gpu, "utilization/memory_util")),
                memory_used_mib=_mib(_find(gpu, "fb_memory_usage/used")),
                memory_total_mib=_mib(_find(gpu, "fb_memory_usage/total")),
                temperature_c=_num(_find(gpu, "temperature/gpu_temp")),
                power_draw_w=_first_value(gpu, _POWER_DRAW, _watts),
                power_limit_w=_first_value(gpu, _POWER_LIMIT, _watts),
                fan_pct=_num(_find(gpu, "fan_speed")),
                sm_clock_mhz=_num(_find(gpu, "clocks/sm_clock")),
                pstate=_text(_find(gpu, "performance_state"), 16),
                mig_mode=_text(_find(gpu, "mig_mode/current_mig"), 32),
            )
        )
    return samples


# --------------------------------------------------------------------------------------------
# The plain table (`nvidia-smi`)
# --------------------------------------------------------------------------------------------

_TABLE_TIME_RE = re.compile(r"^\s*([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\s*$")
_DRIVER_RE = re.compile(r"(?:Driver|KMD) Version:\s*([0-9][\w.\-]*)")
_CUDA_RE = re.compile(r"CUDA(?: UMD)? Version:\s*([0-9][\w.\-]*|N/A)")
_GPU_LINE1_RE = re.compile(r"^\s*(\d{1,6})\s+(.*?)\s+(On|Off|WDDM|TCC|MCDM|N/A)?\s*$")
_GPU_LINE1_NAME_ONLY_RE = re.compile(r"^\s*(\d{1,6})\s+(.*?)\s*$")
_PWR_RE = re.compile(r"^(\S+)\s*/\s*(\S+)$")
_MEM_USAGE_RE = re.compile(r"^\s*(\S+?)\s*/\s*(\S+?)\s*$")
_PROC_RE = re.compile(
    r"^\|\s*(\d{1,6})\s+"
    r"(?:(N/A|\d+|-)\s+(N/A|\d+|-)\s+)?"
    r"(\d{1,10})\s+"
    r"([A-Z][A-Z+]{0,4}|N/A)\s+"
    r"(.*?)\s+"
    r"(\d+(?:\.\d+)?\s*[KMG]iB|N/A)\s*\|?\s*$"
)
_MIG_ROW_RE = re.compile(
    r"^\|\s*(\d{1,6})\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s*\|"
    r"\s*(\S+?)\s*/\s*(\S+?)\s*\|"
    r"\s*(\d+|N/A)\b"
)


def _cells(line: str) -> list[str]:
    """The cells of a `| a | b | c |` row."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [c.strip() for c in body.split("|")]


def _table_gpu(lines: list[str], timestamp: datetime | None) -> tuple[GpuSample, dict] | None:
    """One GPU's block: 2 rows (old layout) or 3 (with `MIG M.`)."""
    first = _cells(lines[0])
    if len(first) < 2:
        return None
    m = _GPU_LINE1_RE.match(first[0]) or _GPU_LINE1_NAME_ONLY_RE.match(first[0])
    if not m:
        return None
    index = _index(m.group(1))
    if index is None:
        return None
    name = _text(m.group(2))
    bus = first[1].split()
    bus_id = _text(bus[0], 32) if bus else None
    fan = temp = pstate = draw = limit = used = total = util = mig = None
    if len(lines) > 1:
        second = _cells(lines[1])
        if second:
            tokens = second[0].split()
            if len(tokens) >= 3:
                fan = _num(tokens[0])
                temp = _num(tokens[1])
                pstate = _text(tokens[2], 16)
                pm = _PWR_RE.match(" ".join(tokens[3:]))
                if pm:
                    draw, limit = _watts(pm.group(1)), _watts(pm.group(2))
        if len(second) > 1:
            mm = _MEM_USAGE_RE.match(second[1])
            if mm:
                used, total = _mib(mm.group(1)), _mib(mm.group(2))
        if len(second) > 2 and second[2].split():
            util = _num(second[2].split()[0])
    if len(lines) > 2:
        third = _cells(lines[2])
        if len(third) > 2:
            mig = _text(third[2], 32)
    sample = GpuSample(
        index=index,
        name=name,
        timestamp=timestamp,
        utilization_gpu=util,
        memory_used_mib=used,
        memory_total_mib=total,
        temperature_c=temp,
        power_draw_w=draw,
        power_limit_w=limit,
        fan_pct=fan,
        pstate=pstate,
        mig_mode=mig,
    )
    return sample, {"pci_bus_id": bus_id}


def parse_table(
    text: str | bytes, *, tz: tzinfo = UTC
) -> tuple[HostInventory, list[GpuSample], list[ProcessSample]]:
    """The plain `nvidia-smi` table: old (346/390) and new (450+, `MIG M.`) layouts, the 610
    header (`KMD Version` / `CUDA UMD Version`), Windows (`Driver-Model`), the `MIG devices`
    block and the process list. Names may be truncated by nvidia-smi (`GeForce GTX 108...`).
    Never raises; what it cannot read is left out."""
    try:
        return _parse_table(text, tz)
    except Exception:  # noqa: BLE001 - never raise on remote output
        return HostInventory(), [], []


def _parse_table(
    text: str | bytes, tz: tzinfo
) -> tuple[HostInventory, list[GpuSample], list[ProcessSample]]:
    lines = [line for line in _lines(text) if len(line) <= 4096]
    driver = cuda = None
    timestamp = None
    samples: list[GpuSample] = []
    extras: list[dict] = []
    processes: list[ProcessSample] = []
    mig_rows: list[
        tuple[int, int | None, int | None, int, float | None, float | None, int | None]
    ] = []

    section = None  # "gpus", "mig", "procs"
    block: list[str] = []

    def flush() -> None:
        if block:
            got = _table_gpu(block, timestamp)
            if got:
                samples.append(got[0])
                extras.append(got[1])
            block.clear()

    for line in lines:
        stripped = line.strip()
        if timestamp is None and section is None:
            tm = _TABLE_TIME_RE.match(line)
            if tm:
                timestamp = _timestamp(tm.group(1), tz)
                continue
        if driver is None:
            dm = _DRIVER_RE.search(line)
            if dm:
                driver = _version(dm.group(1))
                cm = _CUDA_RE.search(line)
                if cm:
                    cuda = _version(cm.group(1))
                continue
        if stripped.startswith("| Processes"):
            flush()
            section = "procs-head"
            continue
        if stripped.startswith("| MIG devices"):
            flush()
            section = "mig-head"
            continue
        if stripped.startswith("|=") or stripped.startswith("+=") or stripped.startswith("|="):
            if section is None:
                section = "gpus"
            elif section == "procs-head":
                section = "procs"
            elif section == "mig-head":
                section = "mig"
            continue
        if section == "gpus":
            if stripped.startswith("+") or stripped.startswith("|-") or not stripped:
                flush()
                if not stripped:
                    section = "after-gpus"
                continue
            if stripped.startswith("|"):
                block.append(stripped)
                if len(block) > 3:
                    flush()
            continue
        if section == "mig":
            mm = _MIG_ROW_RE.match(stripped)
            if mm:
                mig_rows.append(
                    (
                        int(mm.group(1)),
                        _int(mm.group(2)),
                        _int(mm.group(3)),
                        int(mm.group(4)),
                        _mib(mm.group(5)),
                        _mib(mm.group(6)),
                        _int(mm.group(7)),
                    )
                )
            elif not stripped:
                section = "after-mig"
            continue
        if section == "procs":
            pm = _PROC_RE.match(stripped)
            if pm:
                pid = _int(pm.group(4))
                gpu_index = _index(pm.group(1))
                if pid is not None:
                    processes.append(
                        ProcessSample(
                            pid=pid,
                            gpu_index=gpu_index,
                            name=_text(pm.group(6)),
                            used_memory_mib=_mib(pm.group(7).replace(" ", "")),
                            kind=_text(pm.group(5), 8),
                        )
                    )
            continue
    flush()

    by_index = {s.index: (s, e) for s, e in zip(samples, extras, strict=True)}
    migs: dict[int, list[MigDevice]] = {}
    for gpu_i, gi, ci, dev, used, total, sms in mig_rows:
        parent = by_index.get(gpu_i)
        product = parent[0].name if parent else None
        gpu_total = parent[0].memory_total_mib if parent else None
        migs.setdefault(gpu_i, []).append(
            MigDevice(
                gpu_index=gpu_i,
                gi_id=gi,
                ci_id=ci,
                mig_index=dev,
                memory_used_mib=used,
                memory_total_mib=total,
                profile=guess_mig_profile(product, sms, total, gpu_total),
            )
        )
    gpus = [
        GpuInventory(
            index=s.index,
            name=s.name,
            pci_bus_id=e.get("pci_bus_id"),
            memory_total_mib=s.memory_total_mib,
            power_limit_w=s.power_limit_w,
            mig_mode=s.mig_mode,
            mig_devices=migs.get(s.index, []),
        )
        for s, e in zip(samples, extras, strict=True)
    ]
    inventory = HostInventory(
        driver_version=driver, cuda_version=cuda, gpus=gpus, processes=processes
    )
    return inventory, samples, processes


# --------------------------------------------------------------------------------------------
# `nvidia-smi -L`
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedGpu:
    """One line of `nvidia-smi -L`: a GPU, or (indented) a MIG device of the GPU above it.

    For a MIG device, `index` is its MIG device index, `parent_index` the GPU's index and
    `mig_profile` the profile (`3g.40gb`, `1c.3g.71gb`)."""

    index: int
    name: str | None
    uuid: str | None
    parent_index: int | None = None
    mig_profile: str | None = None

    @property
    def is_mig(self) -> bool:
        return self.parent_index is not None


_LIST_GPU_RE = re.compile(r"^GPU\s+(\d{1,6}):\s*(.*?)\s*(?:\(UUID:\s*([^)]*)\))?\s*$")
_LIST_MIG_RE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d{1,6}):\s*(?:\(UUID:\s*([^)]*)\))?\s*$")


def parse_gpu_list(text: str | bytes) -> list[ListedGpu]:
    """The GPUs and MIG devices listed by `nvidia-smi -L`; other lines are ignored."""
    out: list[ListedGpu] = []
    parent: int | None = None
    for line in _lines(text):
        if len(line) > 1024:
            continue
        m = _LIST_GPU_RE.match(line)
        if m:
            index = _index(m.group(1))
            if index is None:
                continue
            parent = index
            out.append(ListedGpu(index, _text(m.group(2)), _text(m.group(3), 96)))
            continue
        m = _LIST_MIG_RE.match(line)
        if m and parent is not None:
            profile = _text(m.group(1), 32)
            index = _index(m.group(2))
            if index is None:
                continue
            out.append(
                ListedGpu(
                    index,
                    f"MIG {profile}" if profile else None,
                    _text(m.group(3), 96),
                    parent_index=parent,
                    mig_profile=profile,
                )
            )
    return out


def apply_gpu_list(inventory: HostInventory, listed: Sequence[ListedGpu]) -> HostInventory:
    """The inventory with what `nvidia-smi -L` adds: GPU UUIDs and names where missing, and the
    exact MIG profiles and UUIDs (matched by GPU index and MIG device index)."""
    gpus_listed = {g.index: g for g in listed if not g.is_mig}
    migs_listed: dict[tuple[int | None, int | None], ListedGpu] = {
        (g.parent_index, g.index): g for g in listed if g.is_mig}
    gpus = []
    for gpu in inventory.gpus:
        entry = gpus_listed.get(gpu.index)
        devices = []
        for dev in gpu.mig_devices:
            mig = migs_listed.get((gpu.index, dev.mig_index))
            if mig is not None:
                dev = dev.model_copy(
                    update={"profile": mig.mig_profile or dev.profile, "uuid": dev.uuid or mig.uuid}
                )
            devices.append(dev)
        update: dict[str, Any] = {"mig_devices": devices}
        if entry is not None:
            update["uuid"] = gpu.uuid or entry.uuid
            update["name"] = gpu.name if gpu.name and not gpu.name.endswith("...") else entry.name
        gpus.append(gpu.model_copy(update=update))
    return inventory.model_copy(update={"gpus": gpus})
