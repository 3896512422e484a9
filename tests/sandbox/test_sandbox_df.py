"""`df` on a sandbox instance: the disk it was rented with and what its folder holds, not the
host's disk; run as a real process through the bin/ wrapper from /bin/sh, as the SSH server
does, and read back by the host-vitals parser."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gputui.sandbox.shims import state
from gputui.sandbox.shims.df import write_disk_size
from gputui.services.telemetry.vitals import VitalsParser, parse_df_row


@pytest.fixture
def inst(tmp_path: Path) -> Path:
    return state.create_instance_dir(
        tmp_path / "box", instance_id="test-df", gpu_name="NVIDIA GeForce RTX 4090", gpu_count=1,
        memory_total_mib=24564, power_limit_w=450.0, tdp_w=450.0)


def sh(inst: Path, cmd: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != state.ROOT_ENV}
    env.update(PATH=f"{inst / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(inst))
    return subprocess.run(["/bin/sh", "-c", cmd], cwd=inst, env=env, capture_output=True,
                          text=True, timeout=30)


def test_df_shows_the_rented_disk_and_what_the_instance_wrote(inst: Path):
    write_disk_size(inst, 50)
    before = sh(inst, "df -kP")
    assert before.returncode == 0, before.stderr
    header, row = before.stdout.splitlines()
    assert header.split()[:2] == ["Filesystem", "1024-blocks"]
    disk = parse_df_row(row)
    assert disk is not None and disk.mount == "/"
    assert disk.size_kib == 48_828_125  # 50 GB as sold (10^9 bytes), in KiB
    # not the host's disk, whatever its size
    host = os.statvfs("/")
    assert disk.size_kib != host.f_blocks * host.f_frsize // 1024
    (inst / "data.bin").write_bytes(os.urandom(8 * 1024 * 1024))
    after = parse_df_row(sh(inst, "df -kP /").stdout.splitlines()[1])
    assert after is not None
    assert after.used_kib - disk.used_kib >= 8 * 1024
    assert after.avail_kib == after.size_kib - after.used_kib - 1 or \
        after.avail_kib == after.size_kib - after.used_kib
    # the way people read it
    human = sh(inst, "df -h .")
    assert human.returncode == 0
    assert human.stdout.splitlines()[0].split() == ["Filesystem", "Size", "Used", "Avail",
                                                    "Use%", "Mounted", "on"]
    assert human.stdout.splitlines()[1].split()[1] == "47G"  # 50e9 bytes in GiB, rounded up
    typed = sh(inst, "df -hT").stdout.splitlines()
    assert typed[0].split()[1] == "Type" and typed[1].split()[1] == "overlay"


def test_df_nearly_full_reads_as_full_to_the_vitals(inst: Path):
    write_disk_size(inst, 0.01)  # 10 MB rented
    (inst / "ckpt.pt").write_bytes(os.urandom(9_500_000))
    parser = VitalsParser()
    for line in sh(inst, "df -kP").stdout.splitlines()[1:]:
        parser.feed("D " + line)
    sample = parser.feed("V up=1 on=1")
    assert sample is not None and [d.mount for d in sample.disks] == ["/"]
    assert sample.disks[0].used_pct is not None and sample.disks[0].used_pct >= 90


def test_df_refuses_what_it_does_not_know(inst: Path):
    write_disk_size(inst, 50)
    bad = sh(inst, "df -Z")
    assert bad.returncode == 1 and "invalid option -- 'Z'" in bad.stderr
    missing = sh(inst, "df /no/such/place")
    assert missing.returncode == 1 and "No such file or directory" in missing.stderr


def test_an_instance_without_a_recorded_size_gets_the_hosts_df(inst: Path):
    out = sh(inst, "df -kP /")
    assert out.returncode == 0
    row = parse_df_row(out.stdout.splitlines()[1])
    host = os.statvfs("/")
    assert row is not None and row.size_kib == host.f_blocks * host.f_frsize // 1024
