"""Host vitals on the Monitor: a compact host row per instance at 80×24, and the full vitals
under the table at 120×40; SVG snapshots in English and Chinese with the fixed data of
test_screen_snapshots.py plus a fixed host reading, and what a user reads there checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.models import DiskUse, HostSample, ProcessSample
from tests.ui.test_screen_snapshots import _fixed_xml, _monitor_app
from tests.ui.waits import until

WIDE = (120, 40)
NARROW = (80, 24)

HOST = HostSample(
    cpu_pct=97.0, cpu_cores=8, cpu_limited=True, iowait_pct=3.0, load1=7.91, load5=6.02,
    load15=4.1, mem_used_mib=12.5 * 1024, mem_total_mib=32 * 1024, mem_limited=True,
    disk_read_bps=182e6, disk_write_bps=1.2e6, net_rx_bps=5.5e6, net_tx_bps=120e3,
    disks=[DiskUse(mount="/", filesystem="overlay", size_kib=30 * 1048576,
                   used_kib=8 * 1048576, avail_kib=22 * 1048576),
           DiskUse(mount="/root/autodl-tmp", filesystem="/dev/nvme1n1",
                   size_kib=50 * 1048576, used_kib=46 * 1048576, avail_kib=4 * 1048576)],
)


async def _vitals(pilot) -> None:
    from gputui.nvidia.nvsmi import parse_xml, xml_samples

    app = pilot.app
    xml = _fixed_xml()
    procs = [ProcessSample(pid=4242, gpu_index=0, used_memory_mib=10240, name="python train.py",
                           user="root")]
    app.telemetry.ingest("fixed", xml_samples(xml), processes=procs, inventory=parse_xml(xml),
                         host=HOST)
    await pilot.press("m")
    await until(pilot, lambda: app.screen.TITLE == "Monitor"
                and "fixed/host" in app.screen.query_one("#gpus").rows, "the host row")
    await pilot.pause(0.3)


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


@pytest.mark.usefixtures("utc_clock")
def test_vitals_narrow_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=NARROW, run_before=_vitals)


@pytest.mark.usefixtures("utc_clock")
def test_vitals_wide_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=WIDE, run_before=_vitals)


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_vitals_narrow_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=NARROW, run_before=_vitals)


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_vitals_wide_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=WIDE, run_before=_vitals)


@pytest.mark.usefixtures("utc_clock")
async def test_the_host_row_and_the_full_vitals_read_right(gputui_home: Path):
    app = _monitor_app(gputui_home)
    async with app.run_test(size=NARROW) as pilot:
        await _vitals(pilot)
        text = screen_text(app)
        row = next(line for line in text.splitlines() if "CPU ×8" in line)
        # CPU of the 8 cores the container may use, RAM of its limit, the fullest disk
        assert "97%" in row and "12.5/32.0" in row and "disk 92%" in row
        assert "disk full" in row  # the hint on the host row, not on each GPU
        gpu_row = next(line for line in text.splitlines() if "4090" in line)
        assert "disk full" not in gpu_row
        # the warning in full under the table
        assert "/root/autodl-tmp is 92 % full (4.0 GiB free)" in " ".join(text.split())
        await pilot.resize_terminal(*WIDE)
        await until(pilot, lambda: "container limit" in screen_text(app), "the full vitals")
        wide = " ".join(screen_text(app).split())
        assert "CPU 97% of 8 cores (container limit)" in wide
        assert "I/O wait 3%" in wide and "load 7.91 6.02 4.10" in wide
        assert "RAM 12.5/32.0 GiB (container limit)" in wide
        assert "disk read 182 MB/s write 1.2 MB/s" in wide
        assert "network in 5.5 MB/s out 120 kB/s" in wide
        assert "/root/autodl-tmp 92% (4.0 GiB free)" in wide


# -- the detail view ---------------------------------------------------------------------------


async def _detail(pilot) -> None:
    await _vitals(pilot)
    await pilot.press("enter")
    await until(pilot, lambda: pilot.app.screen.detail.panels
                and pilot.app.screen.detail.query_one("#vitals").display, "the detail's vitals")
    await pilot.pause(0.3)


@pytest.mark.usefixtures("utc_clock")
def test_detail_vitals_narrow_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=NARROW, run_before=_detail)


@pytest.mark.usefixtures("utc_clock")
def test_detail_vitals_wide_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=WIDE, run_before=_detail)


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_detail_vitals_narrow_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=NARROW, run_before=_detail)


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_detail_vitals_wide_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=WIDE, run_before=_detail)


def _lines(app) -> list[str]:
    return screen_text(app).splitlines()


@pytest.mark.parametrize("size", [NARROW, WIDE])
@pytest.mark.usefixtures("utc_clock")
async def test_the_detail_shows_every_vital_within_the_screen(gputui_home: Path, size):
    from gputui.i18n import cell_len

    app = _monitor_app(gputui_home)
    async with app.run_test(size=size) as pilot:
        await _detail(pilot)
        lines = _lines(app)
        text = " ".join(" ".join(lines).split())
        assert "CPU" in text and "97% of 8 cores (container limit)" in text
        assert "load 7.91 6.02 4.10" in text and "I/O wait 3%" in text
        assert "12.5/32.0 GiB (container limit)" in text
        assert "disk read 182 MB/s write 1.2 MB/s" in text
        assert "network in 5.5 MB/s out 120 kB/s" in text
        disks = next(line for line in lines if "/root/autodl-tmp 92%" in line)
        assert "/ 27% (22.0 GiB free)" in disks and disks.rstrip().endswith("⚠")
        # every vital on a line of its own, none cut at the edge, and the GPU and the
        # processes still on the screen under them
        vitals = app.screen.detail.query_one("#vitals")
        assert vitals.region.height == (5 if size == NARROW else 4)
        assert all(cell_len(line.rstrip()) < size[0] for line in lines)
        assert any("GPU 0 RTX 4090" in line for line in lines)
        assert any("python train.py" in line for line in lines)
        assert "Disk /root/autodl-tmp is 92 % full" in text  # the warning in words


def _idle(samples):
    return [s.model_copy(update={"utilization_gpu": 2.0}) for s in samples]


async def _saturated_for(pilot, start: int, seconds: int, idle: bool) -> None:
    """Readings every 5 s for `seconds` from `start` on the telemetry's own clock: the CPUs at
    97 % and the GPU at 2 % (`idle`) or at its fixed 86 %."""
    from gputui.nvidia.nvsmi import xml_samples

    app = pilot.app
    clock = [0.0]
    app.telemetry._clock = lambda: clock[0]
    samples = xml_samples(_fixed_xml())
    for t in range(start, start + seconds + 1, 5):
        clock[0] = float(t)
        app.telemetry.ingest("fixed", _idle(samples) if idle else samples, host=HOST)
    await pilot.pause()


@pytest.mark.usefixtures("utc_clock")
async def test_the_hint_shows_when_the_gpus_idle_while_the_cpus_are_saturated(
        gputui_home: Path):
    app = _monitor_app(gputui_home)
    async with app.run_test(size=NARROW) as pilot:
        await _detail(pilot)
        # the CPUs saturated while the GPU works: no bottleneck to report
        await _saturated_for(pilot, 0, 40, idle=False)
        app.screen.detail.refresh_for("fixed")
        await pilot.pause()
        assert "bottleneck" not in screen_text(app)
        # the GPU idles for 40 s while the CPUs stay at 97 %: the hint, first among the hints
        await _saturated_for(pilot, 200, 40, idle=True)
        # both hints on the screen: the box's new height may reach the layout a frame after
        # its new text, so one frame can show the first hint with the second still cut off
        await until(pilot, lambda: all(
            words in " ".join(screen_text(app).split())
            for words in ("data loading is the", "Disk /root/autodl-tmp")),
            "the bottleneck hint beside the disk warning")
        text = " ".join(screen_text(app).split())
        assert "⚑ The CPUs are saturated (97 % of 8 cores) while the GPUs idle (2 %)" in text
        assert text.index("The CPUs are saturated") < text.index("Disk /root/autodl-tmp")
        assert "more DataLoader workers" in text


@pytest.mark.usefixtures("utc_clock")
async def test_this_machine_shows_its_host_beside_its_gpus(gputui_home: Path):
    """The Monitor's `l` (this machine through NVML, here with no GPU driver): its host row
    on the overview and its vitals in the detail, from a fixed reading."""
    from gputui.services.telemetry import LOCAL_ID

    app = _monitor_app(gputui_home)
    async with app.run_test(size=NARROW) as pilot:
        app.telemetry.ingest(LOCAL_ID, [], host=HOST)
        await pilot.press("m")
        await until(pilot, lambda: app.screen.TITLE == "Monitor"
                    and f"{LOCAL_ID}/host" in app.screen.query_one("#gpus").rows,
                    "this machine's host row")
        lines = _lines(app)
        row = next(line for line in lines if "CPU ×8" in line)
        assert "97%" in row and "disk 92%" in row
        app.screen.show_detail(LOCAL_ID)
        await until(pilot, lambda: "97% of 8 cores" in " ".join(screen_text(app).split()),
                    "this machine's vitals")
        text = " ".join(screen_text(app).split())
        assert "this machine · live" in text
        assert "/root/autodl-tmp 92% (4.0 GiB free) ⚠" in text
