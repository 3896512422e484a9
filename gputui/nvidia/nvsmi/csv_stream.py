"""``--query-gpu`` / ``--query-compute-apps`` CSV: the streaming parser and one-shot parses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, tzinfo

from gputui.models import GpuInventory, GpuSample, ProcessSample
from gputui.sanitize import sanitize

from .common import (
    MAX_LINE_CHARS,
    _index,
    _int,
    _lines,
    _mib,
    _num,
    _text,
    _timestamp,
    _watts,
)
from .fields import (
    _FIELD_NAME_RE,
    _KNOWN_APPS_FIELDS,
    _KNOWN_GPU_FIELDS,
    COMPUTE_APPS_FIELDS,
    TELEMETRY_FIELDS,
    canonical_field,
)

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
