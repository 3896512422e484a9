"""The Monitor screen with Pilot: live sandbox instances under load, keyboard only, at 80×24
and 200×60; kill with confirmation; reconnecting; diagnoses in place of data; MIG devices from
fixed data."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import DataTable, Static

from gputui.app import GpuTuiApp
from gputui.config import Config
from gputui.models import BillingRule, Instance, InstanceStatus
from gputui.services.hub import Services
from gputui.services.telemetry import TelemetryService
from gputui.ui.livetable import LiveTable
from gputui.ui.monitor import (
    MonitorScreen,
    bar,
    fit_name,
    fmt_age,
    fmt_mem,
    overview_columns,
    sparkline,
)
from tests.services.test_telemetry_support import (
    DRIVER_MESSAGE,
    break_nvidia_smi,
    instance_root,
    make_services,
    make_telemetry,
    rent,
    start_load,
    stream_pids,
    wait_for,
)
from tests.shared import capture_text
from tests.ui.waits import question, shown


class MonitorApp(GpuTuiApp):
    """The console with the Monitor wired to a TelemetryService, as the App will be."""

    MODES = {**GpuTuiApp.MODES, "monitor": MonitorScreen}

    def __init__(self, services: Services, telemetry: TelemetryService, **kw) -> None:
        super().__init__(config=Config(), store=services.store, services=services,
                         background=False, **kw)
        self.telemetry = telemetry
        self.focus_instance: str | None = None

    async def on_unmount(self) -> None:
        await self.telemetry.close()
        await super().on_unmount()


@pytest.fixture
async def services(gputui_home: Path):
    svc = make_services(gputui_home)
    yield svc
    await svc.close()


def screen_text(app: GpuTuiApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def cells(table: LiveTable | DataTable, key: str) -> list[str]:
    return [str(c) for c in table.get_row(key)]


def row_keys(table: LiveTable) -> list[str]:
    return table.row_keys()


async def test_live_instance_under_load_at_80x24_keyboard_only(services: Services):
    inst = await rent(services, count=2, name="train")
    pid = await start_load(services, inst)
    telemetry = make_telemetry(services)
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.sync(services.store.instances_sync(live_only=True))
        await pilot.press("m")
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        table = screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: f"{inst.id}/1" in table.rows, what="GPU rows")
        await wait_for(lambda: "%" in cells(table, f"{inst.id}/0")[1]
                       and int(cells(table, f"{inst.id}/0")[1].split()[-1].rstrip("%")) >= 60,
                       what="GPU 0 busy on screen")
        # grouped: the instance row, its host's vitals, then one compact row per GPU
        await wait_for(lambda: f"{inst.id}/host" in table.rows, what="the host row")
        assert row_keys(table)[:4] == [inst.id, f"{inst.id}/host", f"{inst.id}/0",
                                       f"{inst.id}/1"]
        assert cells(table, inst.id)[0] == "▾ train"
        assert "10.0/24.0" in cells(table, f"{inst.id}/0")[2]
        assert cells(table, inst.id)[-1] == "live"
        # everything fits in 80 columns
        assert table.virtual_size.width <= 80
        await wait_for(lambda: "split?" in cells(table, f"{inst.id}/0")[-1], what="hint mark")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "GPU 0 busy" in text and "every 0.5 s" in text
        # rows are updated in place: the same row objects, never cleared
        before = list(table.rows)
        await pilot.pause(0.6)
        assert list(table.rows) == before
        # enter opens the detail view for the instance under the cursor
        await pilot.press("enter")
        assert screen.view == "detail" and screen.detail_id == inst.id
        procs = screen.query_one("#procs", DataTable)
        await wait_for(lambda: str(pid) in procs.rows, what="the load in the process table")
        row = cells(procs, str(pid))
        assert row[2] == "0" and row[3] == "10.0 GiB" and row[4] == "python train.py"
        panels = list(screen.query(".gpu-panel"))
        assert len(panels) == 2
        panel = str(panels[0].render())
        assert "GPU 0 RTX 4090" in panel and "SM" in panel and "fan" in panel
        assert "util" in panel and "mem" in panel and "pwr" in panel and "/450 W" in panel
        assert any(ch in panel for ch in "▁▂▃▄▅▆▇█")  # sparklines from the ring buffer
        head = str(screen.query_one("#detail-head", Static).render())
        assert "driver 570.124.06" in head and "CUDA 12.8" in head
        text = screen_text(app)
        assert "Processes: 1" in text and "python train.py" in text
        # sort cycles; kill asks first; "n" keeps it
        await pilot.press("s")
        assert "sorted by pid" in str(screen.query_one("#procs-title", Static).render())
        await pilot.press("k")
        assert f"PID {pid}" in await question(pilot)
        await pilot.press("n")
        await shown(pilot, MonitorScreen)
        assert str(pid) in procs.rows
        # "y" sends TERM; the row goes
        await pilot.press("k")
        await pilot.press("y")
        await wait_for(lambda: str(pid) not in procs.rows, timeout=8,
                       what="the process row to go")
        # esc goes back to every instance
        await pilot.press("escape")
        assert screen.view == "overview"


async def test_wide_terminal_focus_from_home_and_interval_keys(services: Services):
    a = await rent(services, count=1, name="alpha")
    b = await rent(services, gpu="H100 SXM", count=2, name="beta")
    telemetry = make_telemetry(services)
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(200, 60)) as pilot:
        telemetry.sync(services.store.instances_sync(live_only=True))
        await pilot.press("m")
        screen = app.screen
        table = screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: f"{a.id}/0" in table.rows and f"{b.id}/1" in table.rows,
                       what="both instances")
        assert [c.key for c in overview_columns(200)][-4:] == ["fan", "sm", "hist", "note"]
        await wait_for(lambda: f"{a.id}/host" in table.rows and f"{b.id}/host" in table.rows,
                       what="both host rows")
        assert row_keys(table) == [a.id, f"{a.id}/host", f"{a.id}/0", b.id, f"{b.id}/host",
                                   f"{b.id}/0", f"{b.id}/1"]
        assert "H100" in cells(table, f"{b.id}/0")[0]
        await wait_for(lambda: any(ch in cells(table, f"{b.id}/0")[7] for ch in "▁▂▃"),
                       what="history column")
        # +/- change the refresh interval, within 0.5-10 s
        await pilot.press("plus")
        assert telemetry.interval == 1.0
        await pilot.press("plus", "plus", "plus", "plus", "plus")
        assert telemetry.interval == 10.0
        await pilot.press("minus")
        assert telemetry.interval == 5.0
        await pilot.pause(0.3)
        assert "every 5 s" in str(screen.query_one("#mon-status", Static).render())
        telemetry.set_interval(0.5)
        # Home's Enter sets focus_instance: the monitor opens that instance's detail
        await pilot.press("h")
        app.focus_instance = b.id
        await pilot.press("m")
        await pilot.pause(0.2)
        assert screen.view == "detail" and screen.detail_id == b.id
        assert app.focus_instance is None
        await wait_for(lambda: len(list(screen.query(".gpu-panel"))) == 2, what="2 panels")
        # ] and [ move between instances
        await pilot.press("right_square_bracket")
        assert screen.detail_id == a.id
        await wait_for(lambda: len(list(screen.query(".gpu-panel"))) == 1, what="1 panel")
        await pilot.press("left_square_bracket")
        assert screen.detail_id == b.id


async def test_dropped_link_shows_reconnecting_then_resumes(services: Services):
    inst = await rent(services, count=1, name="flaky")
    telemetry = make_telemetry(services, stale_after=0.8)
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.sync(services.store.instances_sync(live_only=True))
        await pilot.press("m")
        table = app.screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: inst.id in table.rows and cells(table, inst.id)[-1] == "live",
                       what="live")
        provider = services.provider("sandbox")
        await provider.client.call("outage", id=inst.id, down=True)  # the cloud's endpoint goes down
        await wait_for(lambda: "reconnecting" in cells(table, inst.id)[-1], what="reconnecting")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "reconnecting" in text and "last data" in text
        await provider.client.call("outage", id=inst.id, down=False)  # and is served again
        await wait_for(lambda: cells(table, inst.id)[-1] == "live", timeout=15,
                       what="live again")


async def test_broken_driver_shows_the_diagnosis_not_a_crash(services: Services):
    inst = await rent(services, count=1, name="broken")
    break_nvidia_smi(instance_root(services, inst), DRIVER_MESSAGE, 9)
    telemetry = make_telemetry(services)
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.sync(services.store.instances_sync(live_only=True))
        await pilot.press("m")
        table = app.screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: inst.id in table.rows and "no driver" in cells(table, inst.id)[-1],
                       what="the diagnosis mark")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "NVIDIA driver" in text and "Fix:" in text
        await pilot.press("enter")
        await pilot.pause(0.3)
        diag = str(app.screen.query_one("#diag", Static).render())
        assert "kernel module is not loaded" in diag and "modprobe" in diag
        assert not list(app.screen.query(".gpu-panel"))
        assert "Traceback" not in screen_text(app)


_fixture = capture_text


async def test_mig_devices_under_their_gpu_with_fixed_data(services: Services):
    from gputui.nvidia.nvsmi import parse_xml, xml_samples

    xml = _fixture("netdata-go.d.plugin__a100-sxm4-mig.xml")
    inv, samples = parse_xml(xml), xml_samples(xml)
    inst = Instance(id="fixed", name="a100", provider="ssh", gpu="A100 SXM4", gpu_count=1,
                    billing=BillingRule(price_per_hour=1), status=InstanceStatus.RUNNING)
    services.store.put_instance_sync(inst)
    telemetry = make_telemetry(services)
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.ingest("fixed", samples, processes=[], inventory=inv)
        await pilot.press("m")
        table = app.screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: "fixed/0/mig1" in table.rows, what="MIG rows")
        assert row_keys(table) == ["fixed", "fixed/0", "fixed/0/mig0", "fixed/0/mig1"]
        assert cells(table, "fixed/0/mig0")[0] == "   └ 3g.20gb"
        assert cells(table, "fixed/0")[1].endswith("N/A")  # utilisation N/A under MIG
        await pilot.press("enter")
        await pilot.pause(0.2)
        panel = str(app.screen.query_one(".gpu-panel", Static).render())
        assert "└ MIG 3g.20gb" in panel and "GI 1 CI 0" in panel


def test_bars_sparklines_and_ages_read_without_colour() -> None:
    assert bar(50, 10).plain == "█████·····"
    assert bar(None, 4).plain == "····"
    assert bar(100, 3).plain == "███" and bar(0, 3).plain == "···"
    assert len(bar(33.3, 7).plain) == 7
    assert bar(95, 4).style == "red" and bar(10, 4).style == "green"
    assert sparkline([0, 50, 100], 3).plain == "▁▅█"
    assert sparkline([None, 100], 4).plain == "   █"
    assert sparkline([10, 20], 2, top=None).plain == "▅█"
    assert fmt_age(0.42) == "0.4s" and fmt_age(75) == "75s" and fmt_age(600) == "10m"
    assert fmt_mem(10240, 24564) == "10.0/24.0" and fmt_mem(1024, 144384, " GiB") == "1/141 GiB"
    assert isinstance(bar(1, 1), Text)


def test_overview_columns_fit_every_width_and_a_100_column_pane_has_history() -> None:
    for width in range(80, 221):
        cols = overview_columns(width)
        drawn = sum(c.width + 2 for c in cols)  # each column has a blank cell either side
        assert drawn <= width - 2, width  # room left for the scrollbar: nothing is cut off
        assert ("hist" in [c.key for c in cols]) == (width >= 96), width
    assert [c.key for c in overview_columns(100)][-2:] == ["hist", "note"]


def test_long_instance_names_keep_the_end_that_tells_them_apart() -> None:
    a, b = fit_name("rtx-4090-00d7", 12), fit_name("rtx-4090-8c1e", 12)
    assert a == "rtx-409…00d7" and b == "rtx-409…8c1e" and len(a) == 12
    assert fit_name("a100", 12) == "a100" and fit_name("abcdefgh", 5) == "abcd…"


OVERVIEW_80x24 = """\
 every 0.5 s (+/-) · 1 instance · 1 GPU · enter details
 Instance / GPU  Util        Memory GiB        Temp  Power      State / hints
 ▾ a100          1× GPU      0.0/40.0                67/400W    live
  0 A100-SXM4-…  ·····  N/A  ····· 0.0/40.0    36°   67/400W
    └ 3g.20gb    GI1 CI0     ····· 0.0/19.5                     MIG
    └ 3g.20gb    GI2 CI0     ····· 0.0/19.5                     MIG"""

DETAIL_80x24 = """\
 esc: all · [ ]: prev/next 1 of 1 · every 0.5 s (+/-)
 a100 · 1× A100 SXM4 · live (0.0s ago) · driver 510.47.03 · CUDA 11.6
 GPU 0 A100-SXM4-40GB · 36°C · fan N/A · SM 1410 MHz · P0 · PCIe 4×16
 util ·················· N/A
 mem  ·················· 0.0/40.0 GiB                                       ▁
 pwr  ███··············· 67/400 W                                           ▂
   └ MIG 3g.20gb  GI 1 CI 0  ·········· 0.0/19.5 GiB
   └ MIG 3g.20gb  GI 2 CI 0  ·········· 0.0/19.5 GiB
 Processes: 0 · sorted by memory (s) · k TERM · K KILL
 PID       User        GPU  Memory     Command"""


def _body(app: GpuTuiApp, lines: int) -> str:
    """The screen below the top bar (whose clock depends on the time zone), right-trimmed."""
    rows = [line.rstrip() for line in screen_text(app).splitlines()]
    return "\n".join(rows[1:1 + lines])


async def test_text_snapshot_with_fixed_data(services: Services):
    from gputui.nvidia.nvsmi import parse_xml, xml_samples

    xml = _fixture("netdata-go.d.plugin__a100-sxm4-mig.xml")
    inst = Instance(id="fixed", name="a100", provider="ssh", gpu="A100 SXM4", gpu_count=1,
                    billing=BillingRule(price_per_hour=1), status=InstanceStatus.RUNNING)
    services.store.put_instance_sync(inst)
    telemetry = make_telemetry(services, clock=lambda: 0.0)  # every age reads 0.0 s
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.ingest("fixed", xml_samples(xml), processes=[], inventory=parse_xml(xml))
        await pilot.press("m")
        await pilot.pause(0.4)
        assert _body(app, 6) == OVERVIEW_80x24
        await pilot.press("enter")
        await pilot.pause(0.4)
        assert _body(app, 10) == DETAIL_80x24


async def test_rows_out_of_view_catch_up_when_scrolled_to(services: Services):
    """Off-screen rows are rebuilt when they come into view; new GPUs are placed at once."""
    from gputui.models import GpuSample

    ids = []
    for n in range(12):
        inst = Instance(id=f"m{n:02d}", name=f"job-{n:02d}", provider="ssh", gpu="H100",
                        gpu_count=2, billing=BillingRule(price_per_hour=1),
                        status=InstanceStatus.RUNNING)
        services.store.put_instance_sync(inst)
        ids.append(inst.id)
    telemetry = make_telemetry(services, clock=lambda: 0.0)

    def feed(iid: str, util: float, gpus: int = 2) -> None:
        telemetry.ingest(iid, [GpuSample(index=g, name="NVIDIA H100 80GB HBM3",
                                         utilization_gpu=util, memory_used_mib=1024.0,
                                         memory_total_mib=81559.0) for g in range(gpus)],
                         processes=[])

    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        for iid in ids:
            feed(iid, 10.0)
        await pilot.press("m")
        await pilot.pause(0.4)
        table = app.screen.query_one("#gpus", LiveTable)
        assert "m11/1" not in table.visible_keys()  # 36 rows do not fit in 24 lines
        feed("m11", 77.0)
        feed("m10", 10.0, gpus=3)  # a GPU appears out of view: its row is placed now
        await pilot.pause(0.4)
        assert "m10/2" in table.rows
        await pilot.press("end")
        await pilot.pause(0.4)
        assert "m11/1" in table.visible_keys()
        assert cells(table, "m11/1")[1].endswith("77%")
        assert any(" 1 H100" in line and "77%" in line for line in screen_text(app).splitlines())


async def test_off_screen_the_streams_slow_down_and_the_monitor_brings_them_back(
        services: Services):
    """Issue 16, idle: while no screen shows the GPU streams, each host's `nvidia-smi -lms`
    runs at the background pace (10 s) — samples still arrive for the idle rules and budgets —
    and the Monitor brings it back to the interval it shows."""
    inst = await rent(services, count=1, name="quiet")
    telemetry = make_telemetry(services, interval=1.0)
    root = instance_root(services, inst)
    app = MonitorApp(services, telemetry)

    def paces() -> set[str]:
        return {args.split("-lms")[1].split()[0] for args in stream_pids(root).values()}

    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.sync(services.store.instances_sync(live_only=True))
        await wait_for(lambda: paces() == {"10000"}, timeout=30, what="the 10 s pace on Home")
        await wait_for(lambda: services.store.telemetry(inst.id).gpus, timeout=30,
                       what="samples on Home")
        await pilot.press("m")
        screen = await shown(pilot, MonitorScreen)
        await wait_for(lambda: paces() == {"1000"}, timeout=30, what="the 1 s pace on Monitor")
        assert "every 1 s" in str(screen.query_one("#mon-status", Static).render())
        table = screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: f"{inst.id}/0" in table.rows, timeout=30, what="its GPU row")
        assert "stale" not in screen_text(app)  # a sample at the slower pace is not stale
        await pilot.press("c")  # another screen that does not draw them: slow again
        await wait_for(lambda: paces() == {"10000"}, timeout=30, what="the 10 s pace on Costs")
