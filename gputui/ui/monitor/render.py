"""Monitor rendering, pure: bars, sparklines, ages, memory and power figures, state labels, the
overview's columns, the lines under the table and a GPU's panel in the detail view."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from gputui.format import short_gpu
from gputui.i18n import N_, _, cell_len, pad_cells, shown
from gputui.models import (
    GpuInventory,
    GpuSample,
    HostSample,
    Instance,
    InstanceStatus,
    LinkState,
)
from gputui.services.telemetry import LOCAL_ID, Hint, WatchStatus
from gputui.store import GpuHistory

BLOCKS = " ▏▎▍▌▋▊▉"
SPARKS = "▁▂▃▄▅▆▇█"
EMPTY = "·"

# Diagnosis codes as a few words for a table cell (translated where shown).
DIAG_SHORT = {
    "nvidia-smi-missing": N_("no nvidia-smi"),
    "driver-not-loaded": N_("no driver"),
    "driver-library-mismatch": N_("drv mismatch"),
    "nvml-unknown-error": N_("NVML error"),
    "no-devices": N_("no GPUs seen"),
    "permission-denied": N_("no permission"),
    "gpu-lost": N_("GPU lost"),
    "nvml-library-missing": N_("no NVML"),
    "nvml-function-missing": N_("NVML too old"),
    "nvidia-smi-failed": N_("smi failed"),
    "ssh-auth": N_("login refused"),
    "ssh-host-key": N_("host key!"),
    "ssh-unreachable": N_("unreachable"),
    "ssh-error": N_("ssh error"),
    "unavailable": N_("unavailable"),
    "internal": N_("error"),
}

# A hint as a few words for a table cell (`Hint.short` is the English form), by code.
HINT_SHORT = {
    "imbalance": N_("split?"),
    "idle-memory": N_("idle mem"),
    "low-util": N_("<{pct} util"),  # no "%" in a message id: Babel reads "% u" as a format
    "memory-full": N_("mem full"),
    "thermal": N_("hot"),
    "power-cap": N_("power cap"),
    "input-bound": N_("CPU/IO bound"),
    "disk-full": N_("disk full"),
}
# Hints about the host (CPU, disks), shown on the instance's host row, not on each GPU's
HOST_HINTS = frozenset({"input-bound", "disk-full"})

# An instance's status and a link's state, for people (the store keeps the English value).
STATUS_WORDS = {
    "requested": N_("requested"),
    "booting": N_("booting"),
    "running": N_("running"),
    "stopped": N_("stopped"),
    "releasing": N_("releasing"),
    "released": N_("released"),
    "failed": N_("failed"),
}
LINK_WORDS = {
    "unknown": N_("unknown"),
    "connecting": N_("connecting"),
    "connected": N_("connected"),
    "reconnecting": N_("reconnecting"),
    "failed": N_("failed"),
}

# How the process list is sorted (`s` steps through them), as the title line says it.
SORT_WORDS = {
    "memory": N_("memory"),
    "pid": N_("pid"),
    "gpu": N_("gpu"),
    "user": N_("user"),
    "command": N_("command"),
}

SORTS: list[tuple[str, Any]] = [
    ("memory", lambda p: (-(p.used_memory_mib or 0), p.pid)),
    ("pid", lambda p: (p.pid,)),
    ("gpu", lambda p: (p.gpu_index if p.gpu_index is not None else 999, -(p.used_memory_mib or 0))),
    ("user", lambda p: ((p.user or "~").lower(), p.pid)),
    ("command", lambda p: ((p.name or "~").lower(), p.pid)),
]



def level_style(pct: float | None) -> str:
    """Readable with 16 colours: green / yellow / red, and the bar length says it anyway."""
    if pct is None:
        return "dim"
    return "red" if pct >= 90 else "yellow" if pct >= 60 else "green"


def bar(pct: float | None, width: int, style: str | None = None) -> Text:
    """A horizontal bar of `width` cells (eighth-cell precision); N/A is a dim dotted line."""
    width = max(1, width)
    if pct is None:
        return Text(EMPTY * width, style="dim")
    pct = max(0.0, min(100.0, pct))
    cells = pct / 100 * width
    full = int(cells)
    frac = int((cells - full) * 8)
    filled = "█" * full + (BLOCKS[frac] if full < width and frac else "")
    text = Text(filled, style=style or level_style(pct))
    text.append(EMPTY * (width - len(filled)), style="dim")
    return text


def sparkline(values: Sequence[float | None], width: int, top: float | None = 100.0) -> Text:
    """The last `width` values as ▁..█ (scaled to `top`, else to their maximum)."""
    if width <= 0:
        return Text("")
    vals = list(values)[-width:]
    known = [v for v in vals if v is not None]
    scale = top if top else (max(known) if known else 0)
    out = []
    for v in vals:
        if v is None or not scale:
            out.append(" ")
        else:
            level = int(max(0.0, min(1.0, v / scale)) * (len(SPARKS) - 1) + 0.5)
            out.append(SPARKS[level])
    return Text("".join(out).rjust(width), style="cyan")


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return _("{n}s").format(n=f"{seconds:.1f}")
    if seconds < 120:
        return _("{n}s").format(n=f"{seconds:.0f}")
    if seconds < 7200:
        return _("{n}m").format(n=f"{seconds / 60:.0f}")
    return _("{n}h").format(n=f"{seconds / 3600:.0f}")


def hint_short(h: Hint) -> str:
    """A hint as a few words for a table cell, in the interface language."""
    word = HINT_SHORT.get(h.code)
    return _(word).format(pct="50%") if word else h.short


def hint_text(h: Hint) -> str:
    """A hint's sentence in the interface language (the store keeps it in English)."""
    return str(shown(h.text))


def status_word(value: str) -> str:
    """An instance status or a link state (`running`, `reconnecting`) for people."""
    word = STATUS_WORDS.get(value) or LINK_WORDS.get(value)
    return _(word) if word else value


def problem_line(diagnosis) -> str:  # noqa: ANN001 - a gputui.nvidia.diagnose.Diagnosis
    """A diagnosis's problem in the interface language, with the tool's own words after it."""
    text = diagnosis.problem_text
    if diagnosis.detail:
        text += _(" (said: {detail})").format(detail=diagnosis.detail)
    return text


def fmt_mem(used: float | None, total: float | None, unit: str = "") -> str:
    """`18.0/24.0` GiB (the unit where the caller has no header saying it: `unit=" GiB"`)."""
    def g(mib: float | None, decimals: int) -> str:
        return "?" if mib is None else f"{mib / 1024:.{decimals}f}"

    big = (total or used or 0) >= 100 * 1024
    d = 0 if big else 1
    return f"{g(used, d)}/{g(total, d)}{unit}"


def fmt_power(draw: float | None, limit: float | None) -> str:
    def w(v: float | None) -> str:
        return "?" if v is None else f"{v:.0f}"

    if draw is None and limit is None:
        return "N/A"
    return f"{w(draw)}/{w(limit)}W"


def mem_pct(s: GpuSample) -> float | None:
    if s.memory_used_mib is None or not s.memory_total_mib:
        return None
    return s.memory_used_mib / s.memory_total_mib * 100


def state_label(st: WatchStatus | None, inst: Instance) -> tuple[str, str]:
    """(short state for a table cell, style)."""
    if st is None:
        return _("no service"), "dim"
    if not st.watching:
        if inst.status != InstanceStatus.RUNNING:
            return status_word(inst.status.value), "dim"
        return _("not watched"), "dim"
    if st.diagnosis is not None:
        return "⚠ " + _(DIAG_SHORT.get(st.diagnosis.code, N_("error"))), "bold red"
    if st.link == LinkState.RECONNECTING:
        return "⟳ " + _("reconnecting"), "bold yellow"
    if st.link == LinkState.CONNECTING:
        return _("connecting…"), "yellow"
    if st.link == LinkState.FAILED:
        return "⚠ " + _("link failed"), "bold red"
    if st.age_s is None:
        return _("waiting…"), "dim"
    if st.stale:
        return _("stale {age}").format(age=fmt_age(st.age_s)), "bold yellow"
    return _("live"), "green"


class SortText(Text):
    """A cell that carries its row's sort key (rows are sorted on it after inserts)."""

    def __init__(self, text: Text | str, order: tuple) -> None:
        if isinstance(text, Text):
            super().__init__(text.plain, style=text.style, no_wrap=True)
            for span in text.spans:
                self.spans.append(span)
        else:
            super().__init__(text, no_wrap=True)
        self.order = order

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SortText) and self.order == other.order
                and super().__eq__(other))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None


# Labels are marked here and translated when the columns are built (`overview_columns`).
NARROW = [
    Column("gpu", N_("Instance / GPU"), 14),
    Column("util", N_("Util"), 10),
    Column("mem", N_("Memory GiB"), 16),
    Column("temp", N_("Temp"), 4),
    Column("power", N_("Power"), 9),
]
WIDE_EXTRA = [
    Column("fan", N_("Fan"), 4),
    Column("sm", N_("SM MHz"), 6),
    Column("hist", N_("Util history"), 30),
]
WIDE_AT = 136  # where fan, SM clock and a 30-cell history fit beside a readable note
HISTORY_AT = 96  # a tmux pane beside a training run is often ~100 columns: room for a sparkline


def overview_columns(width: int) -> list[Column]:
    cols = list(NARROW)
    if width >= WIDE_AT:
        cols += WIDE_EXTRA
        cols[0] = Column("gpu", N_("Instance / GPU"), 24)
    elif width >= HISTORY_AT:
        cols.append(Column("hist", N_("Util history"), min(30, width - 84)))
    used = sum((c.width or 0) + 2 for c in cols)
    note = max(10, width - used - 4)
    cols.append(Column("note", N_("State / hints"), note))
    # in the interface language, and never cut: a column is as wide as its header at least
    return [Column(c.key, _(c.label), max(c.width or 0, cell_len(_(c.label))))
            for c in cols]


def fmt_rate(bps: float | None) -> str:
    """Bytes a second as people read them: `0 B/s`, `512 kB/s`, `12 MB/s`, `1.1 GB/s`."""
    if bps is None:
        return "?"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= size:
            value = bps / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{bps:.0f} B/s"


def host_cells(host: HostSample, hints: Sequence[Hint]) -> dict[str, Text]:
    """An instance's host vitals as one compact overview row: CPU bar (and cores), RAM bar,
    the fullest disk, and the host hints (else network and disk read rates)."""
    cores = f"{host.cpu_cores:g}" if host.cpu_cores else "?"
    disk = host.fullest_disk()
    disk_pct = disk.used_pct if disk is not None else None
    marks = " ".join(hint_short(h) for h in hints if h.code in HOST_HINTS)
    if marks:
        note = Text("⚑ " + marks, style="bold yellow")
    else:
        note = Text(f"↓{fmt_rate(host.net_rx_bps)} ▤{fmt_rate(host.disk_read_bps)}",
                    style="dim")
    return {
        "gpu": Text(" " + _("CPU ×{cores}").format(cores=cores), style="cyan"),
        "util": bar(host.cpu_pct, 5) + Text(f"{host.cpu_pct:>4.0f}%"
                                           if host.cpu_pct is not None else "  ..."),
        "mem": bar(host.mem_pct, 5) + Text(" " + fmt_mem(host.mem_used_mib,
                                                         host.mem_total_mib)),
        "temp": Text(""),  # the load average is in the full vitals: here it reads as °C
        "power": Text(_("disk {pct}").format(pct=f"{disk_pct:.0f}%")
                      if disk_pct is not None else "",
                      style="bold red" if disk_pct is not None and disk_pct >= 90 else ""),
        "fan": Text(""),
        "sm": Text(""),
        "note": note,
    }


def host_lines(host: HostSample) -> list[Text]:
    """The host's vitals in full, for the lines under the overview (a wide terminal)."""
    cpu = _("CPU {pct} of {cores} cores").format(
        pct=f"{host.cpu_pct:.0f}%" if host.cpu_pct is not None else "?",
        cores=f"{host.cpu_cores:g}" if host.cpu_cores else "?")
    if host.cpu_limited:
        cpu += " " + _("(container limit)")
    parts = [cpu]
    if host.iowait_pct is not None:
        parts.append(_("I/O wait {pct}").format(pct=f"{host.iowait_pct:.0f}%"))
    if host.load1 is not None:
        parts.append(_("load {values}").format(values=" ".join(
            f"{v:.2f}" for v in (host.load1, host.load5, host.load15) if v is not None)))
    ram = _("RAM {used} GiB").format(used=fmt_mem(host.mem_used_mib, host.mem_total_mib))
    if host.mem_limited:
        ram += " " + _("(container limit)")
    parts.append(ram)
    first = Text("▣ " + " · ".join(parts))
    io = " · ".join([
        _("disk read {read} write {write}").format(read=fmt_rate(host.disk_read_bps),
                                                   write=fmt_rate(host.disk_write_bps)),
        _("network in {rx} out {tx}").format(rx=fmt_rate(host.net_rx_bps),
                                             tx=fmt_rate(host.net_tx_bps)),
    ])
    disks = []
    for d in host.disks:
        pct = d.used_pct
        free = d.avail_kib / 1048576
        disks.append(Text(_("{mount} {pct} ({free} GiB free)").format(
            mount=d.mount, pct=f"{pct:.0f}%" if pct is not None else "?", free=f"{free:.1f}"),
            style="bold red" if pct is not None and pct >= 90 else ""))
    second = Text("  " + io)
    if disks:
        second.append(" · " + _("disks") + " ")
        second.append_text(Text(", ").join(disks))
    return [first, second]


def status_text(inst: Instance, st: WatchStatus | None, hints: Sequence[Hint],
                limit: int = 5, host: HostSample | None = None) -> Text:
    """The lines under the overview table for the instance under the cursor (with `host`:
    its host vitals in full after the first line)."""
    lines: list[Text] = []
    state, style = state_label(st, inst)
    head = Text.assemble((inst.name, "bold"), ": ", (state, style))
    if st is not None and st.age_s is not None:
        head.append(_(" · last data {age} ago").format(age=fmt_age(st.age_s)), style="dim")
    lines.append(head)
    if host is not None:
        lines.extend(host_lines(host))
    if st is not None and st.link not in (LinkState.CONNECTED, LinkState.UNKNOWN) \
            and st.link_detail and (inst.id != LOCAL_ID):
        lines.append(Text(f"{status_word(st.link.value)}: {shown(st.link_detail)}",
                          style="yellow"))
    if st is not None and st.diagnosis is not None:
        lines.append(Text("⚠ " + problem_line(st.diagnosis), style="bold red"))
        lines.append(Text.assemble((_("Fix: "), "bold"), st.diagnosis.fix_text))
    for h in hints:
        lines.append(Text("⚑ " + hint_text(h), style="yellow"))
    if len(lines) == 1 and st is not None and st.watching:
        lines.append(Text(_("enter: GPUs in detail, history, processes (kill)"), style="dim"))
    return Text("\n").join(lines[:limit])


def _recent(history: GpuHistory | None, name: str, n: int) -> list[float | None]:
    return history.last(name, n) if history is not None and n > 0 else []


def gpu_panel_text(s: GpuSample, history: GpuHistory | None, inv: GpuInventory | None,
                   hints: Sequence[Hint], width: int) -> Text:
    """One GPU in the detail view: title line, util / memory / power bars with sparklines,
    then its MIG devices."""
    bar_w = max(10, min(40, (width - 20) // 3))
    val_w = 14
    labels = {"util": _("util"), "mem": _("mem"), "pwr": _("pwr")}
    # as wide as the longest label in this language (利用率 is 6 cells): none is cut
    label_w = max(5, *(cell_len(v) + 1 for v in labels.values()))
    spark_w = max(0, min(120, width - label_w - bar_w - 1 - val_w - 1))
    title = Text.assemble((f"GPU {s.index} ", "bold"), short_gpu(s.name or (inv.name if inv else None)))
    if s.temperature_c is not None:
        title.append(" · ")
        title.append(f"{s.temperature_c:.0f}°C",
                     style="bold red" if s.temperature_c >= 85 else "")
    title.append(_(" · fan {pct}%").format(pct=f"{s.fan_pct:.0f}") if s.fan_pct is not None
                 else _(" · fan N/A"))
    title.append(f" · SM {s.sm_clock_mhz:.0f} MHz" if s.sm_clock_mhz is not None else "")
    if s.pstate:
        title.append(f" · {s.pstate}")
    if inv is not None and inv.pcie_gen:
        title.append(_(" · PCIe {gen}×{lanes}").format(gen=inv.pcie_gen,
                                                       lanes=inv.pcie_width or "?"), style="dim")
    if hints:
        title.append("  ⚑ " + " ".join(hint_short(h) for h in hints), style="bold yellow")
    util = s.utilization_gpu
    mp = mem_pct(s)
    limit = s.power_limit_w or (inv.power_limit_w if inv else None)
    pp = (s.power_draw_w / limit * 100) if (s.power_draw_w is not None and limit) else None
    total = s.memory_total_mib

    def row(label: str, pct: float | None, value: str, values: list[float | None],
            top: float | None) -> Text:
        return Text.assemble(
            (pad_cells(label, label_w), "bold"), bar(pct, bar_w), " ", pad_cells(value, val_w, ellipsis=""), " ",
            sparkline(values, spark_w, top),
        )

    lines = [
        title,
        row(labels["util"], util, f"{util:.0f}%" if util is not None else "N/A",
            _recent(history, "util", spark_w), 100),
        row(labels["mem"], mp, fmt_mem(s.memory_used_mib, total, " GiB"),
            _recent(history, "mem_pct", spark_w), 100),
        row(labels["pwr"], pp, fmt_power(s.power_draw_w, limit).replace("W", " W"),
            _recent(history, "power_w", spark_w), limit),
    ]
    for mig in (inv.mig_devices if inv else []):
        mpct = (mig.memory_used_mib / mig.memory_total_mib * 100
                if mig.memory_used_mib is not None and mig.memory_total_mib else None)
        lines.append(Text.assemble(
            ("  └ MIG ", "dim"), (mig.profile or "?", "bold"),
            f"  GI {mig.gi_id if mig.gi_id is not None else '?'}"
            f" CI {mig.ci_id if mig.ci_id is not None else '?'}  ",
            bar(mpct, 10), " ", fmt_mem(mig.memory_used_mib, mig.memory_total_mib, " GiB"),
        ))
    return Text("\n").join(lines)

