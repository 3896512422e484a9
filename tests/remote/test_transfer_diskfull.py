"""A full local disk stops a pull with that reason and keeps the partial file; with space again,
the same command resumes it. The small disk is a real 1 MiB tmpfs, mounted in a private mount
namespace (`unshare -rm`), skipped where the system does not allow that."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True,
                          env=run_gputui_env(home), timeout=120, stdin=subprocess.DEVNULL)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="cannot mount a small tmpfs here (unshare -rm)")
def test_full_local_disk_stops_keeps_partial_and_resumes(gputui_home: Path, tmp_path: Path):
    out = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "4090", "--name", "d",
                 "--json")
    assert out.returncode == 0, out.stderr
    iid = json.loads(out.stdout)["id"]
    big = gputui_home / "sandbox" / "instances" / iid / "big.bin"
    big.write_bytes(bytes(range(256)) * 4096 * 3)  # 3 MiB
    dest = tmp_path / "small"
    dest.mkdir()
    cmd = [*GPUTUI, "pull", "d", "big.bin", str(dest / "big.bin"), "--json"]
    script = (f"mount -t tmpfs -o size=1m tmpfs {dest} || exit 99; "
              f"{subprocess.list2cmdline(cmd)}; echo rc=$?; ls -la {dest}; "
              f"mount -o remount,size=8m {dest}; {subprocess.list2cmdline(cmd)}; "
              f"cmp {big} {dest}/big.bin && echo SAME")
    run = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                         env=run_gputui_env(gputui_home), timeout=300)
    assert "rc=1" in run.stdout, (run.stdout, run.stderr)
    assert "local disk is full" in run.stderr and "partial file is kept" in run.stderr
    assert len([ln for ln in run.stderr.splitlines() if "gputui:" in ln]) == 1
    assert ".gputui-part" in run.stdout  # the partial file was there, under its temporary name
    second = json.loads(run.stdout[run.stdout.index("{"):run.stdout.rindex("}") + 1])
    assert second["resumed"] == 1 and second["files"] == 1
    assert second["bytes"] < 3 * 1024 * 1024  # not from zero
    assert "SAME" in run.stdout


@pytest.mark.skipif(not _can_unshare(), reason="cannot mount a small tmpfs here (unshare -rm)")
def test_full_instance_disk_stops_keeps_partial_and_resumes(gputui_home: Path, tmp_path: Path):
    out = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "4090", "--name", "r",
                 "--json")
    assert out.returncode == 0, out.stderr
    iid = json.loads(out.stdout)["id"]
    up = gputui_home / "sandbox" / "instances" / iid / "up"
    up.mkdir()
    # The instance's machine is the sandbox daemon's: stop it here, so that the next use starts
    # it inside the private mount namespace below, where its disk is the small tmpfs.
    assert gputui(gputui_home, "sandbox", "stop").returncode == 0
    src = tmp_path / "big.bin"
    src.write_bytes(bytes(range(256)) * 4096 * 3)  # 3 MiB
    cmd = [*GPUTUI, "push", "r", str(src), "up/big.bin", "--json"]
    script = (f"mount -t tmpfs -o size=1m tmpfs {up} || exit 99; "
              f"{subprocess.list2cmdline(cmd)}; echo rc=$?; ls -la {up}; "
              f"mount -o remount,size=8m {up}; {subprocess.list2cmdline(cmd)}; "
              f"cmp {src} {up}/big.bin && echo SAME")
    run = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                         env=run_gputui_env(gputui_home), timeout=300)
    assert "rc=1" in run.stdout, (run.stdout, run.stderr)
    assert "instance's disk is full" in run.stderr and "partial file is kept" in run.stderr
    assert ".gputui-part" in run.stdout
    second = json.loads(run.stdout[run.stdout.index("{"):run.stdout.rindex("}") + 1])
    assert second["resumed"] == 1 and second["bytes"] < 3 * 1024 * 1024
    assert "SAME" in run.stdout
