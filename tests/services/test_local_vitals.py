"""This machine's host vitals (the Monitor's `l`, `gputui smi --local`): read from /proc, the
cgroup files and statvfs in-process. This machine has no GPU: the reader is checked on its real
/proc (figures plausible, every key there), on a fixed tree (a container's limits, mounts with
odd names), and `smi --local --json` with a fixed reading (the hints)."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

from gputui.cli import smi_report as smi
from gputui.models import DiskUse, HostSample
from gputui.services.telemetry.local_vitals import (
    LocalVitals,
    mounted_disks,
    proc_fields,
    read_local_vitals,
)
from tests.nvidia.test_nvml import FakeNvml


def _meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def test_the_real_proc_gives_every_figure_and_they_are_plausible():
    reader = LocalVitals()
    first = reader.read()
    assert first is not None and first.cpu_pct is None  # rates need two readings
    burn_until = time.monotonic() + 0.4
    while time.monotonic() < burn_until:  # some CPU of our own between the readings
        sum(range(1000))
    host = reader.read()
    assert host is not None
    assert host.cpu_pct is not None and 0 < host.cpu_pct <= 100  # we were busy meanwhile
    assert host.iowait_pct is not None and 0 <= host.iowait_pct <= 100
    online = os.cpu_count() or 1
    assert host.cpu_cores is not None and 0 < host.cpu_cores <= online
    if not host.cpu_limited:
        assert host.cpu_cores == online
    load = os.getloadavg()
    assert host.load1 is not None and abs(host.load1 - load[0]) < 2
    assert host.load5 is not None and host.load15 is not None
    total_mib = _meminfo_kib("MemTotal") / 1024
    assert host.mem_total_mib is not None and 0 < host.mem_total_mib <= total_mib + 1
    assert host.mem_used_mib is not None and 0 < host.mem_used_mib < host.mem_total_mib
    assert host.disk_read_bps is not None and host.disk_read_bps >= 0
    assert host.disk_write_bps is not None and host.disk_write_bps >= 0
    assert host.net_rx_bps is not None and host.net_tx_bps is not None
    root = next(d for d in host.disks if d.mount == "/")
    st = os.statvfs("/")
    assert root.size_kib == st.f_blocks * st.f_frsize // 1024
    assert abs(root.avail_kib - st.f_bavail * st.f_frsize // 1024) < 1024 * 1024  # ±1 GiB
    assert root.used_pct is not None and 0 < root.used_pct < 100
    # the pseudo file systems are not disks
    assert not any(d.mount.startswith(("/proc", "/sys", "/dev")) for d in host.disks)


def test_the_one_shot_reading_has_rates():
    host = read_local_vitals(gap_s=0.2)
    assert host is not None and host.cpu_pct is not None and host.disks


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


PROC = {
    "/proc/uptime": "100.00 300.00\n",
    "/proc/stat": "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\n"
                  "cpu1 1 0 1 1 0 0 0 0 0 0\ncpu2 1 0 1 1 0 0 0 0 0 0\n"
                  "cpu3 1 0 1 1 0 0 0 0 0 0\nintr 1\n",
    "/proc/loadavg": "3.50 2.00 1.00 2/300 4242\n",
    "/proc/meminfo": "MemTotal:       65536000 kB\nMemFree: 1 kB\nMemAvailable:   32768000 kB\n",
    "/proc/diskstats": "   8       0 sda 10 0 2000 0 5 0 4000 0 0 0 0\n"
                       "   8       1 sda1 10 0 2000 0 5 0 4000 0 0 0 0\n"
                       "   7       0 loop0 10 0 9999 0 5 0 9999 0 0 0 0\n",
    "/proc/net/dev": "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n"
                     "    lo: 999 1 0 0 0 0 0 0 999 1 0 0 0 0 0 0\n"
                     "  eth0: 1000 1 0 0 0 0 0 0 500 1 0 0 0 0 0 0\n",
    # a container: 2 of the 4 cores, 8 GiB of the 62.5
    "/sys/fs/cgroup/cpu.max": "200000 100000\n",
    "/sys/fs/cgroup/cpu.stat": "usage_usec 1000000\nuser_usec 1\n",
    "/sys/fs/cgroup/memory.max": "8589934592\n",
    "/sys/fs/cgroup/memory.current": "4294967296\n",
    "/sys/fs/cgroup/memory.stat": "anon 1\ninactive_file 1073741824\n",
}


def test_a_container_reads_as_the_remote_reader_reads_it(tmp_path: Path):
    _tree(tmp_path, PROC)
    fields = proc_fields(str(tmp_path))
    assert fields["on"] == "4" and fields["cq"] == "200000" and fields["cp"] == "100000"
    assert fields["cu"] == "1000000000" and fields["dk"].startswith("sda:2000:4000,sda1:")
    assert "loop0" not in fields["dk"] and fields["nk"] == "eth0:1000:500"
    reader = LocalVitals(str(tmp_path))
    reader.read()
    _tree(tmp_path, {
        "/proc/uptime": "102.00 300.00\n",
        "/proc/stat": PROC["/proc/stat"].replace("cpu  100 0 50 800 50", "cpu  300 0 50 900 150"),
        "/sys/fs/cgroup/cpu.stat": "usage_usec 4000000\n",  # 3 s of CPU in 2 s, on 2 cores
        "/proc/diskstats": PROC["/proc/diskstats"].replace("sda 10 0 2000 0 5 0 4000",
                                                           "sda 10 0 6000 0 5 0 4000"),
        "/proc/net/dev": PROC["/proc/net/dev"].replace("eth0: 1000", "eth0: 3001000"),
    })
    host = reader.read()
    assert host is not None
    assert host.cpu_cores == 2 and host.cpu_limited and host.cpu_pct == 75.0
    assert host.iowait_pct == 25.0  # 100 of 400 jiffies waited on I/O
    assert host.mem_limited and host.mem_total_mib == 8192 and host.mem_used_mib == 3072
    assert host.disk_read_bps == 4000 * 512 / 2 and host.disk_write_bps == 0
    assert host.net_rx_bps == 1_500_000 and host.net_tx_bps == 0
    assert (host.load1, host.load5, host.load15) == (3.5, 2.0, 1.0)


def test_mounts_are_measured_as_df_measures_them(tmp_path: Path):
    _tree(tmp_path, {"/proc/self/mounts": (
        "/dev/vda / ext4 rw 0 0\n"
        "proc /proc proc rw 0 0\n"
        "tmpfs /dev/shm tmpfs rw 0 0\n"
        "/dev/nvme1n1 /data\\040set xfs rw 0 0\n"  # a space, as /proc/mounts writes it
        "/dev/vdb /empty ext4 rw 0 0\n"
        "/dev/vdc /gone ext4 rw 0 0\n")})
    sizes = {"/": (1000, 400, 300), "/data set": (2000, 100, 50), "/empty": (0, 0, 0)}

    def statvfs(path: str) -> SimpleNamespace:
        mount = path[len(str(tmp_path)):] or "/"
        if mount not in sizes:
            raise FileNotFoundError(path)
        blocks, free, avail = sizes[mount]
        return SimpleNamespace(f_blocks=blocks, f_bfree=free, f_bavail=avail, f_frsize=4096,
                               f_bsize=4096)

    disks = mounted_disks(str(tmp_path), statvfs)  # type: ignore[arg-type]
    assert [(d.mount, d.filesystem) for d in disks] == [("/", "/dev/vda"),
                                                         ("/data set", "/dev/nvme1n1")]
    root, data = disks
    assert (root.size_kib, root.used_kib, root.avail_kib) == (4000, 2400, 1200)
    assert data.used_pct == 1900 / (1900 + 50) * 100  # reserved blocks count as full


def _full_and_busy() -> HostSample:
    return HostSample(
        cpu_pct=98.0, cpu_cores=16, iowait_pct=1.0, load1=15.8, load5=15.0, load15=12.0,
        mem_used_mib=40_000, mem_total_mib=64_000, disk_read_bps=1e6, disk_write_bps=0,
        net_rx_bps=0, net_tx_bps=0,
        disks=[DiskUse(mount="/", filesystem="/dev/vda", size_kib=100 * 1048576,
                       used_kib=95 * 1048576, avail_kib=5 * 1048576)])


def test_smi_local_json_carries_the_host_and_its_hints():
    """NVML answers (two GPUs, one of them idle): the host's vitals beside them, the disk-full
    warning, and the bottleneck hint when the GPUs idle while the CPUs are saturated."""
    nv = FakeNvml()
    out = io.StringIO()
    assert smi.smi_local(as_json=True, out=out, err=io.StringIO(), nvml=nv,
                         host_reader=_full_and_busy) == 0
    data = json.loads(out.getvalue())
    assert data["host"]["cpu_pct"] == 98.0 and data["host"]["cpu_cores"] == 16
    assert data["host"]["disks"][0]["used_pct"] == 95.0
    codes = [h["code"] for h in data["hints"]]
    assert "disk-full" in codes
    # GPU 0 is at 97 %, GPU 1 does not say: the GPUs are not known to idle, no bottleneck
    assert "input-bound" not in codes

    class Idle(FakeNvml):
        def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802 - pynvml's name
            return SimpleNamespace(gpu=2, memory=0)

    out = io.StringIO()
    assert smi.smi_local(out=out, err=io.StringIO(), nvml=Idle(),
                         host_reader=_full_and_busy) == 0
    text = out.getvalue()
    assert "host: CPU 98% of 16 cores" in text and "disks / 95% (5.0 GiB free)" in text
    assert "⚑ The CPUs are saturated (98 % of 16 cores) while the GPUs idle (2 %)" in text
    assert "data loading is the bottleneck" in text
    assert "⚑ Disk / is 95 % full" in text


def test_smi_local_without_nvml_still_shows_the_host():
    if _nvml_here():
        return
    out, err = io.StringIO(), io.StringIO()
    assert smi.smi_local(as_json=True, out=out, err=err, host_reader=_full_and_busy) == 1
    data = json.loads(out.getvalue())
    assert data["gpus"] == [] and data["diagnosis"]["code"] == "nvml-library-missing"
    assert data["host"]["cpu_pct"] == 98.0 and [h["code"] for h in data["hints"]] == [
        "disk-full"]  # no GPUs read: no bottleneck claimed
    out = io.StringIO()
    assert smi.smi_local(out=out, err=io.StringIO(), host_reader=_full_and_busy) == 1
    assert out.getvalue().startswith("host: CPU 98% of 16 cores")


def _nvml_here() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


async def test_watching_this_machine_reads_its_host_every_tick(gputui_home: Path):
    """The Monitor's `l`: this machine's vitals arrive in the store beside (here: instead of)
    its GPUs, tick after tick, with no process started for them."""
    import subprocess

    from gputui.services.telemetry import LOCAL_ID
    from tests.services.test_telemetry_support import make_services, make_telemetry, wait_for

    services = make_services(gputui_home)
    telemetry = make_telemetry(services)
    spawned: list[object] = []
    real_popen = subprocess.Popen

    def popen(*args, **kw):
        spawned.append(args[0] if args else kw.get("args"))
        return real_popen(*args, **kw)

    subprocess.Popen = popen  # type: ignore[misc]
    try:
        telemetry.start_local()
        tel = services.store.telemetry(LOCAL_ID)
        await wait_for(lambda: tel.host is not None and tel.host.cpu_pct is not None,
                       what="this machine's vitals with rates")
        first = tel.host_updated
        await wait_for(lambda: tel.host_updated != first, what="a second tick")
        assert tel.host is not None and any(d.mount == "/" for d in tel.host.disks)
        assert len(tel.host_cpu) >= 2
        assert spawned == []
    finally:
        subprocess.Popen = real_popen  # type: ignore[misc]
        await telemetry.close()
        await services.close()
