"""The monitor's detail view of one instance: its state line, its host's vitals (CPU, memory,
disk and network rates, each disk), a diagnosis with the fix, a panel per GPU (bars and
history), hints (the host's first: what the GPUs wait on), and its processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from gputui.format import short_gpu
from gputui.i18n import _, pad_cells, shown, truncate_cells
from gputui.models import HostSample, Instance, LinkState
from gputui.services.telemetry import LOCAL_ID
from gputui.ui.monitor.processes import Processes
from gputui.ui.monitor.render import (
    HOST_HINTS,
    bar,
    fmt_age,
    fmt_mem,
    fmt_rate,
    gpu_panel_text,
    hint_text,
    state_label,
    status_word,
)
from gputui.ui.widgets import show

if TYPE_CHECKING:
    from gputui.ui.monitor.screen import MonitorScreen


def disks_line(inst: Instance) -> Text | None:
    """"disks: system 12/30 GB (40 %) · data 47/50 GB (94 %) ⚠" where the provider reports its
    disks (AutoDL's snapshot); a disk at 90 % or more in red, with what it means."""
    from gputui.services.views import disks_view

    view = disks_view(inst)
    if view is None:
        return None
    line = Text(_("disks: "), style="dim")
    parts = 0
    for key, word in (("system", _("system")), ("data", _("data"))):
        d = view[key]
        if d["total_bytes"] is None:
            continue
        used = (d["used_bytes"] or 0) / (1 << 30)
        total = d["total_bytes"] / (1 << 30)
        pct = d["percent"]
        full = pct is not None and pct >= 90
        if parts:
            line.append(" · ", style="dim")
        line.append(_("{disk} {used}/{total} GB ({pct} %)").format(
            disk=word, used=f"{used:.0f}", total=f"{total:.0f}",
            pct="?" if pct is None else f"{pct:.0f}"), style="bold red" if full else "")
        parts += 1
    for warning in view["warnings"]:
        line.append("\n⚠ " + str(shown(warning)), style="bold red")
    return line if parts else None


DISK_FULL_PCT = 90.0  # a disk at this share or more reads red, with ⚠


def _pack(first: Text, rest: list[Text], width: int, indent: int) -> list[Text]:
    """`first`, then each of `rest` after " · " while the line has room, else on a line of its
    own under the figures (indented past the label)."""
    lines = [first]
    for part in rest:
        if lines[-1].cell_len + 3 + part.cell_len <= width:
            lines[-1].append(" · ")
            lines[-1].append_text(part)
        else:
            lines.append(Text(" " * indent) + part)
    return lines


def vitals_text(host: HostSample, width: int) -> Text:
    """The instance's host in the detail view, to fit `width` cells: CPU (of the cores it may
    use), load and I/O wait; memory; disk and network rates; then each disk's use, a disk at
    90 % or more in red with ⚠. A figure goes on the line before while it has room."""
    bar_w = 20 if width >= 100 else 10
    label_w = 6
    cpu = Text.assemble((pad_cells("CPU", label_w), "bold"), bar(host.cpu_pct, bar_w), " ")
    cpu.append(_("{pct} of {cores} cores").format(
        pct=f"{host.cpu_pct:.0f}%" if host.cpu_pct is not None else "?",
        cores=f"{host.cpu_cores:g}" if host.cpu_cores else "?"))
    if host.cpu_limited:
        cpu.append(" " + _("(container limit)"), style="dim")
    cpu_rest = []
    if host.load1 is not None:
        cpu_rest.append(Text(_("load {values}").format(values=" ".join(
            f"{v:.2f}" for v in (host.load1, host.load5, host.load15) if v is not None))))
    if host.iowait_pct is not None:
        cpu_rest.append(Text(_("I/O wait {pct}").format(pct=f"{host.iowait_pct:.0f}%"),
                             style="bold yellow" if host.iowait_pct >= 20 else ""))
    ram = Text.assemble((pad_cells(_("RAM"), label_w), "bold"), bar(host.mem_pct, bar_w), " ",
                        fmt_mem(host.mem_used_mib, host.mem_total_mib, " GiB"))
    if host.mem_limited:
        ram.append(" " + _("(container limit)"), style="dim")
    io = [Text(_("disk read {read} write {write}").format(
              read=fmt_rate(host.disk_read_bps), write=fmt_rate(host.disk_write_bps))),
          Text(_("network in {rx} out {tx}").format(rx=fmt_rate(host.net_rx_bps),
                                                   tx=fmt_rate(host.net_tx_bps)))]
    lines = _pack(cpu, cpu_rest, width, label_w) + _pack(ram, io, width, label_w)
    if host.disks:
        marks = []
        for d in host.disks:
            pct = d.used_pct
            full = pct is not None and pct >= DISK_FULL_PCT
            marks.append(Text(_("{mount} {pct} ({free} GiB free)").format(
                mount=truncate_cells(d.mount, 28, where="middle"),
                pct=f"{pct:.0f}%" if pct is not None else "?",
                free=f"{d.avail_kib / 1048576:.1f}") + (" ⚠" if full else ""),
                style="bold red" if full else ""))
        head = Text(pad_cells(_("disks"), label_w), style="bold") + marks[0]
        lines += _pack(head, marks[1:], width, label_w)
    return Text("\n").join(lines)


class Detail(Vertical):
    DEFAULT_CSS = """
    Detail { height: 1fr; display: none; }
    Detail #detail-head { height: auto; max-height: 2; padding: 0 1; }
    Detail #vitals { height: auto; max-height: 6; padding: 0 1; display: none; }
    Detail #gpu-panels { height: auto; max-height: 60%; padding: 0 1; }
    Detail .gpu-panel { height: auto; margin-bottom: 0; }
    Detail #diag { height: auto; padding: 0 1; display: none; }
    Detail #hints { height: auto; max-height: 6; padding: 0 1; }
    """

    def __init__(self, monitor: MonitorScreen, **kw) -> None:
        super().__init__(**kw)
        self.monitor = monitor
        self.panels: dict[int, Static] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="detail-head")
        yield Static("", id="vitals")
        yield Static("", id="diag")
        with VerticalScroll(id="gpu-panels", can_focus=False):
            yield Static("", id="panel-wait")
        yield Static("", id="hints")
        yield Processes(id="processes")

    @property
    def processes(self) -> Processes:
        return self.query_one(Processes)

    def reset(self) -> None:
        """Another instance: nothing of the last one stays."""
        self.processes.clear()
        for panel in self.panels.values():
            panel.remove()
        self.panels.clear()

    def _panel_width(self) -> int:
        return max(40, (self.monitor.size.width or 80) - 4)

    def refresh_for(self, iid: str | None) -> None:
        m = self.monitor
        inst = m.instance(iid)
        head = self.query_one("#detail-head", Static)
        if inst is None or iid is None:
            show(head, Text(_("This instance is no longer running (esc: all instances)."),
                             style="dim"))
            return
        st = m.status_of(iid)
        svc = m.service
        inv = svc.inventory(iid) if svc is not None else None
        state, style = state_label(st, inst)
        line = Text.assemble((inst.name, "bold"))
        if iid != LOCAL_ID:
            line.append(f" · {inst.gpu_count}× {short_gpu(inst.gpu)}")
        line.append(" · ")
        line.append(state, style=style)
        if st is not None and st.age_s is not None and not st.stale:
            line.append(_(" ({age} ago)").format(age=fmt_age(st.age_s)), style="dim")
        if inv is not None:  # after the state: a narrow pane cuts this first
            line.append(_(" · driver {driver} · CUDA {cuda}").format(
                driver=inv.driver_version or "?", cuda=inv.cuda_version or "?"), style="dim")
        if st is not None and st.link_detail and st.link != LinkState.CONNECTED:
            line.append(f"\n{status_word(st.link.value)}: {shown(st.link_detail)}",
                        style="yellow")
            if st.age_s is not None:
                line.append(_(" — last data {age} ago").format(age=fmt_age(st.age_s)),
                            style="yellow")
        show(head, line)

        diag = self.query_one("#diag", Static)
        if st is not None and st.diagnosis is not None:
            d = st.diagnosis
            t = Text.assemble(("⚠ " + d.problem_text, "bold red"), "\n", (_("Fix: "), "bold"),
                              d.fix_text)
            if d.detail:
                t.append("\n" + _("(said: {detail})").format(detail=d.detail), style="dim")
            show(diag, t)
            diag.display = True
        else:
            diag.display = False

        vitals = self.query_one("#vitals", Static)
        host = m.gapp.store.telemetry(iid).host if st is None or st.watching else None
        if host is not None:
            show(vitals, vitals_text(host, max(40, (m.size.width or 80) - 2)))
            vitals.display = True
        else:
            vitals.display = False

        self._refresh_panels(iid, diagnosed=bool(st and st.diagnosis))
        # the host's hints first: "data loading is the bottleneck" is why the GPUs idle
        hints = sorted(m.hints_of(iid), key=lambda h: h.code not in HOST_HINTS)
        hint_box = self.query_one("#hints", Static)
        lines = [Text("⚑ " + hint_text(h), style="yellow") for h in hints]
        disks = disks_line(inst)
        if disks is not None:
            lines.insert(0, disks)
        if lines:
            show(hint_box, Text("\n").join(lines))
            hint_box.display = True
        else:
            hint_box.display = False
        self.processes.update_from(list(m.gapp.store.telemetry(iid).processes))

    def _refresh_panels(self, iid: str, diagnosed: bool) -> None:
        m = self.monitor
        box = self.query_one("#gpu-panels", VerticalScroll)
        latest = [] if diagnosed else m.latest(iid)
        wanted = {s.index for s in latest}
        for idx in [i for i in self.panels if i not in wanted]:
            self.panels.pop(idx).remove()
        tel = m.gapp.store.telemetry(iid)
        width = self._panel_width()
        new: list[Static] = []
        for s in latest:
            text = gpu_panel_text(s, tel.history.get(s.index), m.inventory_gpu(iid, s.index),
                                  [h for h in m.hints_of(iid) if h.gpu_index == s.index], width)
            panel = self.panels.get(s.index)
            if panel is None:
                panel = self.panels[s.index] = Static(text, classes="gpu-panel")
                new.append(panel)
            else:
                show(panel, text)
        if new:
            box.mount_all(new)
        wait = box.query_one("#panel-wait", Static)
        if not latest and not diagnosed:
            st = m.status_of(iid)
            show(wait, Text(str(shown(st.note)) if st and st.note
                            else _("waiting for the first sample…"), style="dim italic"))
            wait.display = True
        else:
            wait.display = False
