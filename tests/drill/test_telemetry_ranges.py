"""Drill: telemetry values no GPU can report (1e308 °C, -50 % utilisation, -1e300 MiB) are N/A
on every screen and to the idle check; the raw value is kept for `--json`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from gputui.models import GpuSample
from tests.conftest import GPUTUI, run_gputui_env
from tests.services.test_telemetry_support import make_services, make_telemetry, rent, wait_for

HEADER = ("index, uuid, name, timestamp, utilization.gpu [%], utilization.memory [%], "
          "memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], "
          "power.limit [W], fan.speed [%], clocks.current.sm [MHz], pstate, mig.mode.current")
ROW = ("0, GPU-x, NVIDIA GeForce RTX 4090, 2026/11/29 12:00:00.000, -50 %, 10 %, "
       "-1e300 MiB, 24564 MiB, 1e308, 100.00 W, 450.00 W, 30 %, 1000 MHz, P0, [N/A]")
LONG_NUMBER = re.compile(r"\d{12,}")

SCRIPT = f"""#!/bin/sh
printf '%s\\n' '{HEADER}'
while :; do printf '%s\\n' '{ROW}'; sleep 0.3; done
"""


def test_a_sample_keeps_the_raw_value_aside():
    s = GpuSample(index=0, temperature_c=1e308, utilization_gpu=-50, memory_used_mib=-1e300,
                  power_draw_w=float("nan"), fan_pct=30)
    assert s.temperature_c is None and s.utilization_gpu is None and s.memory_used_mib is None
    assert s.power_draw_w is None and s.fan_pct == 30
    assert s.out_of_range["temperature_c"] == 1e308 and s.raw("utilization_gpu") == -50


def test_smi_shows_na_and_json_keeps_the_raw_value(gputui_home: Path, tmp_path: Path):
    capture = tmp_path / "capture.csv"
    capture.write_text(f"{HEADER}\n{ROW}\n")
    env = run_gputui_env(gputui_home)
    text = subprocess.run([*GPUTUI, "smi", "--input", str(capture)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert not LONG_NUMBER.search(text.stdout) and "-50" not in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 120
    raw = subprocess.run([*GPUTUI, "smi", "--input", str(capture), "--json"], env=env,
                         capture_output=True, text=True, timeout=60)
    [gpu] = json.loads(raw.stdout)["gpus"]
    assert gpu["temperature_c"] == 1e308 and gpu["utilization_gpu"] == -50
    assert gpu["memory_used_mib"] == -1e300
    assert set(gpu["out_of_range"]) == {"temperature_c", "utilization_gpu", "memory_used_mib"}


@pytest.fixture
async def services(gputui_home: Path):
    svc = make_services(gputui_home)
    yield svc
    await svc.close()


async def test_monitor_shows_na_not_a_309_digit_number(services):
    from gputui.ui.livetable import LiveTable
    from tests.ui.test_monitor_ui import MonitorApp, cells, screen_text

    inst = await rent(services, count=1, name="weird")
    root = services.provider("sandbox").instance_root(inst.id)
    (root / "bin" / "nvidia-smi").write_text(SCRIPT)
    (root / "bin" / "nvidia-smi").chmod(0o755)
    telemetry = make_telemetry(services)
    app = MonitorApp(services, telemetry)
    async with app.run_test(size=(80, 24)) as pilot:
        telemetry.sync(services.store.instances_sync(live_only=True))
        await pilot.press("m")
        table = app.screen.query_one("#gpus", LiveTable)
        await wait_for(lambda: f"{inst.id}/0" in table.rows
                       and services.store.telemetry(inst.id).latest(), timeout=20,
                       what="the GPU row")
        await pilot.pause(0.5)
        row = " ".join(cells(table, f"{inst.id}/0"))
        text = screen_text(app)
        assert not LONG_NUMBER.search(row) and not LONG_NUMBER.search(text)
        assert "-50" not in row
        [sample] = services.store.telemetry(inst.id).latest()
        assert sample.utilization_gpu is None and sample.temperature_c is None
        hist = services.store.telemetry(inst.id).history[0]
        assert all(v is None for v in hist.last("util"))  # never charted, never "idle"
        await pilot.press("enter")  # the detail view too
        await pilot.pause(0.5)
        assert not LONG_NUMBER.search(screen_text(app))
