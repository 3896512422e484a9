"""The console's release question (`r` on Home) over a real sandbox instance: it names a running
run and results not brought home before the user decides, and a run the release kills is
recorded as cancelled with its cost. With nothing at stake it asks as it always did."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from gputui.app import GpuTuiApp
from gputui.models import InstanceStatus
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.jobs import JobService, JobSpec, WhenDone, save_when_done
from gputui.ui.home import HomeScreen
from tests.ui.waits import question, shown, until


async def rent(svc: Services, name: str, gpu: str = "RTX 4090", count: int = 1):
    offer = await svc.find_offer("sandbox", gpu)
    return await svc.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name=name,
                                                            gpu_count=count))


async def test_release_names_the_running_run_and_records_it_cancelled(services: Services):
    inst = await rent(services, "trainer", "A100 80GB SXM4", 8)  # $22.32/h
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("sleep 600", name="train")])
    save_when_done(services, inst.id, WhenDone(policy="keep", pulls=[
        {"remote": "ckpt", "local": str(services.state_dir / "ckpt")}]))
    for _try in range(300):
        view = await jobs.view(inst)
        if view.jobs[0].status == "running":
            break
        await asyncio.sleep(0.1)
    assert view.jobs[0].status == "running"
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, HomeScreen)
        await pilot.press("r")
        text = " ".join((await question(pilot)).split())
        assert "Release trainer (8× A100 80GB SXM4) now?" in text
        assert ("⚠ 1 run is running (1 train); the results asked for (ckpt) are not home yet: "
                "the release ends them (a run it kills is recorded as cancelled).") in text
        await pilot.press("y")
        await until(pilot, lambda: services.store.get_instance_sync(inst.id).status
                    == InstanceStatus.RELEASED, "the release")
        await until(pilot, lambda: bool(services.store.run_costs_sync(inst.id)),
                    "the cancelled run recorded")
    [row] = services.store.run_costs_sync(inst.id)
    assert row["status"] == "cancelled" and row["label"] == "train"
    assert row["seconds"] > 0 and row["rate_per_hour"] == "22.32"  # its rate, to the release
    assert abs(Decimal(row["cost"]) - Decimal("22.32") * Decimal(str(row["seconds"])) / 3600) \
        <= Decimal("0.01")


async def test_with_nothing_at_stake_the_question_is_as_before(services: Services):
    inst = await rent(services, "quiet")
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, HomeScreen)
        await pilot.press("r")
        text = " ".join((await question(pilot)).split())
        assert "Release quiet" in text and "⚠" not in text and "cancelled" not in text
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, HomeScreen), "back on Home")
    assert services.store.get_instance_sync(inst.id).status == InstanceStatus.RUNNING
