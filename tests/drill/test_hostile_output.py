"""Drill: an instance whose nvidia-smi prints hostile output — escape sequences, binary, huge
lines — never reaches the terminal raw and never stops the monitor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.services.test_telemetry_support import make_services, make_telemetry, rent, wait_for

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

HOSTILE = r"""#!/bin/sh
# A compromised or broken host: the header is right, the values are not.
printf 'index, uuid, name, timestamp, utilization.gpu [%%], utilization.memory [%%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%%], clocks.current.sm [MHz], pstate, mig.mode.current\n'
while :; do
  printf '0, GPU-x, \033]0;pwned\007\033[2J\033[31mEvil GPU\033[0m, 2026/11/29 12:00:00.000, 50 %%, 10 %%, 100 MiB, 1000 MiB, 40, 100.00 W, 200.00 W, 30 %%, 1000 MHz, P0, [N/A]\n'
  head -c 3000 /dev/urandom | tr -d '\n'; printf '\n'
  printf '%%0200000d\n' 0
  printf '\377\376\375 garbage, 1, 2\n'
  sleep 0.3
done
"""


@pytest.fixture
async def services(gputui_home: Path):
    svc = make_services(gputui_home)
    yield svc
    await svc.close()


async def test_hostile_nvidia_smi_is_sanitised_and_counted(services):
    inst = await rent(services, count=1, name="hostile")
    root = services.provider("sandbox").instance_root(inst.id)
    (root / "bin" / "nvidia-smi").write_text(HOSTILE)
    (root / "bin" / "nvidia-smi").chmod(0o755)
    telemetry = make_telemetry(services)
    try:
        telemetry.start(inst)
        tel = services.store.telemetry(inst.id)
        await wait_for(lambda: tel.latest() and tel.skipped_lines >= 3, timeout=15,
                       what="samples and skipped lines")
        [sample] = tel.latest()
        assert sample.utilization_gpu == 50 and sample.memory_used_mib == 100
        assert sample.name is not None and not CONTROL.search(sample.name)
        assert "Evil GPU" in sample.name and "\033" not in sample.name
    finally:
        await telemetry.close()


async def test_labels_that_look_like_markup_are_shown_as_typed(gputui_home: Path):
    from decimal import Decimal

    from textual.widgets import DataTable

    from gputui.app import GpuTuiApp
    from gputui.config import Config
    from gputui.models import BillingRule, Instance, InstanceStatus
    from gputui.store import SessionStore

    store = SessionStore(gputui_home / "state.db")
    name = "[/] [b]not bold[/b] [link=x]"
    store.put_instance_sync(Instance(id="m", name=name, provider="sandbox", gpu="[red]GPU",
                                     billing=BillingRule(price_per_hour=Decimal(1)),
                                     status=InstanceStatus.RUNNING))
    app = GpuTuiApp(config=Config(), store=store, background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        from gputui.format import fit_name
        from gputui.ui.widgets import LABEL_CELLS

        table = app.screen.query_one(DataTable)
        # as typed (a long label cut in the middle), never read as markup
        assert str(table.get_cell("m", "name")) == fit_name(name, LABEL_CELLS)
        assert str(table.get_cell("m", "name")).startswith("[/] [b]not")
        for key in ("c", "m", "h"):
            await pilot.press(key)
            await pilot.pause(0.3)
        app.notify(f"{name} released")
        await pilot.pause()
    assert app.return_code in (None, 0)
