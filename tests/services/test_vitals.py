"""Host vitals: the remote reader's lines, captured on real hosts, parsed into HostSamples; and
the reader itself run here (this machine's /proc) through `sh`."""

from __future__ import annotations

import subprocess

import pytest

from gputui.models import DiskUse, GpuSample, HostSample
from gputui.services.telemetry.hints import HintRules, _Trend, evaluate_host_hints
from gputui.services.telemetry.vitals import (
    VitalsParser,
    cpuset_count,
    data_disks,
    parse_df_row,
    vitals_command,
)

# A bare host with cgroup v1 (no limits): two ticks 0.31 s apart, df once.
HOST_V1 = """\
D devtmpfs                   12358000        0  12358000       0% /dev
D tmpfs                      24731184        0  24731184       0% /dev/shm
D /dev/vda                  264212084 23742236  82648676      23% /
D model_tools_unavailable           4        0         4       0% /mnt/sandboxing/model_tools_env/v1/python
D tmpfs                      12365592        0  12365592       0% /sys/fs/cgroup
V up=2847.49 cpu=460136,0,36804,69812,504,0,775,538 on=2 load=2.29,2.44,3.30 mt=24731184 ma=23804160 cq=-1 cp=100000 cu=4983989247469 cs=0-1 ml=9223372036854771712 mu=2796969984 mi=1443790848 dk=vda:1846378:6241848 nk=ifb0:0:0,ifb1:0:0,eth0:105284265:272645
V up=2847.80 cpu=460167,0,36805,69840,504,0,776,538 on=2 load=2.29,2.44,3.30 mt=24731184 ma=23804204 cq=-1 cp=100000 cu=4984320512257 cs=0-1 ml=9223372036854771712 mu=2796720128 mi=1443815424 dk=vda:1846378:6242128 nk=ifb0:0:0,ifb1:0:0,eth0:105284265:272645
"""

# A rented container (cgroup v2): 4 cores by quota out of 64, 32 GiB of a 512 GiB machine, an
# overlay root and a data disk, the driver's files and /etc/hosts bind-mounted in.
CONTAINER_V2 = """\
D overlay                    31441920   8126464  23315456      26% /
D tmpfs                         65536         0     65536       0% /dev
D shm                         8388608         0   8388608       0% /dev/shm
D /dev/nvme1n1              3905108992 3710853120 194255872   96% /root/autodl-tmp
D /dev/nvme1n1              3905108992 3710853120 194255872   96% /root/autodl-fs
D /dev/nvme0n1p2             491135216 101829376 364283136      22% /etc/hosts
D tmpfs                      263932580        12 263932568       1% /usr/bin/nvidia-smi
V up=1000.00 cpu=100,0,100,10000,0,0,0,0 on=64 load=7.91,6.02,4.10 mt=528000000 ma=400000000 cq=400000 cp=100000 cu=5000000000 cs=0-63 ml=34359738368 mu=20000000000 mi=2000000000 dk=nvme0n1:100:200,nvme0n1p1:50:100,nvme1n1:1000:2000,loop0:5:5 nk=eth0:1000000:500000,veth12ab:7:7
V up=1002.00 cpu=900,0,900,11000,400,0,0,0 on=64 load=8.00,6.10,4.20 mt=528000000 ma=399000000 cq=400000 cp=100000 cu=12600000000 cs=0-63 ml=34359738368 mu=21000000000 mi=1000000000 dk=nvme0n1:100:200,nvme0n1p1:50:100,nvme1n1:5096:1026000,loop0:5:5 nk=eth0:21000000:700000,veth12ab:9999999:9999999
"""


def feed_all(text: str) -> list:
    parser = VitalsParser()
    out = [s for line in text.splitlines() if (s := parser.feed(line)) is not None]
    assert parser.skipped == 0
    return out


def test_a_bare_host_reads_its_whole_machine():
    first, second = feed_all(HOST_V1)
    # the first tick has nothing to take a rate from
    assert first.cpu_pct is None and first.disk_read_bps is None
    assert second.cpu_cores == 2 and not second.cpu_limited
    # busy = user+nice+system+irq+softirq+steal over all; idle+iowait is not busy
    delta_busy = (460167 - 460136) + (36805 - 36804) + (776 - 775)
    delta_all = delta_busy + (69840 - 69812)
    assert second.cpu_pct == pytest.approx(delta_busy / delta_all * 100)
    assert second.iowait_pct == 0
    assert (second.load1, second.load5, second.load15) == (2.29, 2.44, 3.30)
    # no cgroup memory limit (v1 writes a huge number): the machine's MemTotal - MemAvailable
    assert not second.mem_limited
    assert second.mem_total_mib == pytest.approx(24731184 / 1024)
    assert second.mem_used_mib == pytest.approx((24731184 - 23804204) / 1024)
    assert second.disk_write_bps == pytest.approx((6242128 - 6241848) * 512 / 0.31)
    assert second.net_rx_bps == 0
    # only the real disk: not /dev, /dev/shm, the cgroup tmpfs or a sandboxing mount
    assert [d.mount for d in second.disks] == ["/"]
    assert second.disks[0].used_pct == pytest.approx(23742236 / (23742236 + 82648676) * 100)


def test_a_container_reads_what_it_may_use():
    _first, s = feed_all(CONTAINER_V2)
    # 4 cores by quota: CPU use is the cgroup's (7.6 s of CPU in 2 s = 3.8 of 4 cores)
    assert s.cpu_limited and s.cpu_cores == 4
    assert s.cpu_pct == pytest.approx(95.0)
    # iowait is the machine's: 400 of (1600+1000+400) jiffies
    assert s.iowait_pct == pytest.approx(400 / 3000 * 100)
    # memory: the 32 GiB limit, usage less the page cache that can be dropped
    assert s.mem_limited and s.mem_total_mib == 32768
    assert s.mem_used_mib == pytest.approx((21000000000 - 1000000000) / 1048576)
    # disks: whole disks only (a partition is inside its disk; loop devices are left out)
    assert s.disk_read_bps == pytest.approx((5096 - 1000) * 512 / 2)
    assert s.disk_write_bps == pytest.approx((1026000 - 2000) * 512 / 2)
    # network: eth0, not the veth that repeats it
    assert s.net_rx_bps == pytest.approx(10_000_000)
    assert s.net_tx_bps == pytest.approx(100_000)
    # / and one line for the data disk mounted twice; no /etc/hosts, /dev, nvidia-smi
    assert [d.mount for d in s.disks] == ["/", "/root/autodl-fs"]
    assert s.fullest_disk().mount == "/root/autodl-fs"
    assert round(s.fullest_disk().used_pct) == 95


def test_a_counter_that_goes_back_is_no_rate():
    parser = VitalsParser()
    parser.feed("V up=10 cpu=5,0,5,90,0,0,0,0 on=1 dk=sda:100:100 nk=eth0:100:100")
    s = parser.feed("V up=11 cpu=6,0,6,91,0,0,0,0 on=1 dk=sda:50:50 nk=eth0:10:10")
    assert s.disk_read_bps is None and s.net_rx_bps is None
    assert s.cpu_pct == pytest.approx(2 / 3 * 100)


def test_garbage_is_counted_not_believed():
    parser = VitalsParser()
    assert parser.feed("sh: 1: awk: not found") is None
    assert parser.feed("D not a df row") is None
    assert parser.feed("V cpu=1,2") is None  # no uptime: no reading
    assert parser.skipped == 3
    s = parser.feed("V up=1 cpu=x,y on=abc load=nan,1,2 mt=-")
    assert s is not None and s.cpu_cores is None and s.load1 is None and s.mem_total_mib is None


def test_cpuset_and_df_rows():
    assert cpuset_count("0-3,8") == 5
    assert cpuset_count("0") == 1
    assert cpuset_count("3-1") is None and cpuset_count("") is None and cpuset_count("a") is None
    d = parse_df_row("/dev/sdb1 1000 900 100 90% /mnt/my data")
    assert d == DiskUse(mount="/mnt/my data", filesystem="/dev/sdb1", size_kib=1000,
                        used_kib=900, avail_kib=100)
    assert parse_df_row("Filesystem 1024-blocks Used Available Capacity Mounted on") is None
    assert data_disks([DiskUse(mount="/data", filesystem="/dev/sdb", size_kib=0)]) == []


def test_the_reader_runs_with_sh_and_awk_here():
    """The real script through /bin/sh: a `D` row for / and `V` lines that parse, with rates
    from the second line on; it ends when its output is closed."""
    proc = subprocess.Popen(vitals_command(200), shell=True, stdout=subprocess.PIPE, text=True)
    parser = VitalsParser()
    samples = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            s = parser.feed(line)
            if s is not None:
                samples.append(s)
            if len(samples) == 3:
                break
    finally:
        proc.stdout.close()
        proc.wait(timeout=10)  # the loop ends by itself once nothing reads it
    assert parser.skipped == 0
    last = samples[-1]
    assert last.cpu_pct is not None and 0 <= last.cpu_pct <= 100
    assert last.mem_total_mib and last.mem_used_mib is not None
    assert last.load1 is not None and last.cpu_cores and last.cpu_cores >= 1
    assert any(d.mount == "/" for d in last.disks)


# ------------------------------------------------------------------------------------------
# Hints from the vitals
# ------------------------------------------------------------------------------------------

RULES = HintRules(bucket_s=1.0, input_s=30.0)


def gpu_history(util: float, seconds: int = 40) -> tuple[list[GpuSample], dict[int, _Trend]]:
    trends = {0: _Trend(RULES.bucket_s, RULES.keep_s), 1: _Trend(RULES.bucket_s, RULES.keep_s)}
    samples = [GpuSample(index=i, utilization_gpu=util) for i in (0, 1)]
    for t in range(seconds + 1):
        for s in samples:
            trends[s.index].add(float(t), s)
    return samples, trends


def host_history(cpu: float | None, wait: float | None, seconds: int = 40):
    return [(float(t), cpu, wait) for t in range(seconds + 1)]


def codes(hints) -> list[str]:
    return [h.code for h in hints]


def test_idle_gpus_beside_saturated_cpus_say_data_loading():
    latest, trends = gpu_history(3.0)
    host = HostSample(cpu_pct=97, cpu_cores=8, iowait_pct=1)
    hints = evaluate_host_hints(host, host_history(97, 1), latest, trends, 40.0, RULES)
    assert codes(hints) == ["input-bound"]
    text = str(hints[0].text)
    assert "97 % of 8 cores" in text and "3 %" in text and "DataLoader workers" in text


def test_idle_gpus_waiting_on_io_say_a_faster_disk():
    latest, trends = gpu_history(10.0)
    host = HostSample(cpu_pct=30, cpu_cores=8, iowait_pct=45)
    hints = evaluate_host_hints(host, host_history(30, 45), latest, trends, 40.0, RULES)
    assert codes(hints) == ["input-bound"]
    assert "wait on I/O (45 %" in str(hints[0].text) and "faster disk" in str(hints[0].text)


@pytest.mark.parametrize("gpu, cpu, wait, seconds", [
    (85.0, 97, 0, 40),   # busy GPUs: the CPUs keep up
    (3.0, 40, 2, 40),    # idle GPUs, idle CPUs: nothing is running
    (3.0, 97, 0, 10),    # saturated for 10 s only: not yet
])
def test_no_data_loading_hint_otherwise(gpu, cpu, wait, seconds):
    latest, trends = gpu_history(gpu, seconds)
    host = HostSample(cpu_pct=cpu, cpu_cores=8, iowait_pct=wait)
    hints = evaluate_host_hints(host, host_history(cpu, wait, seconds), latest, trends,
                                float(seconds), RULES)
    assert codes(hints) == []


def test_a_dip_in_the_window_is_the_mean_not_every_reading():
    latest, trends = gpu_history(3.0)
    recent = host_history(97, 0)
    recent[-5:] = [(t, 20.0, 0.0) for t, _c, _w in recent[-5:]]  # the job just ended
    hints = evaluate_host_hints(HostSample(cpu_pct=20, cpu_cores=8), recent, latest, trends,
                                40.0, RULES)
    assert codes(hints) == []  # mean (26×97 + 5×20)/31 < 90


def test_a_disk_nearly_full_warns_and_names_it():
    disks = [DiskUse(mount="/", filesystem="overlay", size_kib=100, used_kib=50, avail_kib=50),
             DiskUse(mount="/root/autodl-tmp", filesystem="/dev/nvme1n1",
                     size_kib=50 * 1048576, used_kib=46 * 1048576, avail_kib=4 * 1048576)]
    hints = evaluate_host_hints(HostSample(disks=disks), [], [], {}, 0.0, RULES)
    assert codes(hints) == ["disk-full"]
    assert hints[0].severity == "warning"
    text = str(hints[0].text)
    assert "/root/autodl-tmp is 92 % full (4.0 GiB free)" in text
    full = [DiskUse(mount="/", size_kib=100, used_kib=99, avail_kib=1)]
    assert evaluate_host_hints(HostSample(disks=full), [], [], {}, 0.0, RULES)[0].severity \
        == "error"


def _awks() -> list[str]:
    """Every awk on this machine, once each (`awk` is often a link to one of the others)."""
    import os
    import shutil

    found: dict[str, str] = {}
    for name in ("awk", "mawk", "gawk", "nawk", "original-awk", "busybox"):
        path = shutil.which(name)
        if path:
            found.setdefault(os.path.realpath(path), f"{path} awk" if name == "busybox" else path)
    return list(found.values()) or ["awk"]


@pytest.mark.parametrize("awk", _awks())
def test_a_cgroup_v2_cpu_counter_reads_exact_with_every_awk(tmp_path, awk):
    """A container's cpu.stat counts microseconds (days of CPU on a busy box). mawk, the awk of
    Debian and Ubuntu images, prints a product over 2^31 as 1.23457e+14: the counter must reach
    the parser digit for digit, or the container's CPU % moves in steps of whole seconds."""
    from gputui.services.telemetry.vitals import _AWK, _fields

    (tmp_path / "cpu.max").write_text("400000 100000\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 123456789012\nuser_usec 100000000000\n"
                                       "system_usec 23456789012\n")
    out = subprocess.run([*awk.split(), _AWK, "/proc/uptime", str(tmp_path / "cpu.max"),
                          str(tmp_path / "cpu.stat")], capture_output=True, text=True,
                         check=True).stdout
    fields = _fields(out.strip())
    assert fields["cu"] == "123456789012000"
    assert (fields["cq"], fields["cp"]) == ("400000", "100000")
    parser = VitalsParser()
    assert parser.feed(out) is not None
    (tmp_path / "cpu.stat").write_text("usage_usec 123458789012\n")  # 2 s of CPU later
    later = _fields(subprocess.run([*awk.split(), _AWK, str(tmp_path / "cpu.stat")],
                                   capture_output=True, text=True, check=True).stdout.strip())
    assert int(later["cu"]) - int(fields["cu"]) == 2_000_000_000
