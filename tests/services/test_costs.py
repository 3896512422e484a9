"""Costs: billing edges, totals by day, budgets (alert and release), the ledger against the
sandbox's own books, and the exports."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from gputui.config import BudgetSettings, Config
from gputui.models import (
    BillingRule,
    Granularity,
    Instance,
    InstanceStatus,
    Lease,
    LedgerEntry,
    utcnow,
)
from gputui.providers.base import CreateRequest
from gputui.services.costs import (
    BudgetWatch,
    export_rows,
    group_ledger,
    instance_cost,
    spent_between,
    to_csv,
)
from gputui.services.hub import Services
from gputui.services.leases import LeaseService
from gputui.store import Notice, SessionStore
from tests.conftest import GPUTUI, run_gputui_env

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def running(price: str = "3.60", **kw) -> Instance:
    inst = Instance(id=kw.pop("id", "i"), name=kw.pop("name", "job"), provider="sandbox",
                    gpu=kw.pop("gpu", "RTX 4090"),
                    billing=BillingRule(price_per_hour=Decimal(price), **kw), created_at=T0,
                    status=InstanceStatus.RUNNING)
    inst.mark_running(T0)
    return inst


def test_release_exactly_on_a_boundary_bills_no_extra_unit():
    inst = running(granularity=Granularity.HOUR)
    inst.mark_ended(T0 + timedelta(hours=2), "timer")
    assert inst.compute_cost() == Decimal("7.20")
    inst2 = running(granularity=Granularity.HOUR)
    inst2.mark_ended(T0 + timedelta(hours=2, seconds=1), "timer")
    assert inst2.compute_cost() == Decimal("10.80")


def test_daily_package_bills_started_days():
    rule = BillingRule(price_per_hour=Decimal("1"), package="daily")
    assert rule.billed_seconds(3600) == 86400
    assert rule.compute_cost(86401) == Decimal(48)


def test_projection_to_release_and_stopped_storage():
    inst = running(price="2.00", storage_per_gb_month=Decimal("0.73"))
    inst.disk_gb = 100
    lease = Lease(instance_id="i", release_at=T0 + timedelta(hours=3))
    cost = instance_cost(inst, lease, T0 + timedelta(hours=1))
    assert cost.compute == Decimal("2.00") and cost.rate == Decimal("2.00")
    # 3 h of compute + 3 h of 100 GB at $0.73/GB-month (730 h) = 6.00 + 0.30
    assert cost.projected == Decimal("6.30")
    inst.mark_stopped(T0 + timedelta(hours=1))
    stopped = instance_cost(inst, lease, T0 + timedelta(hours=2))
    assert stopped.rate == 0 and stopped.billing_state == "storage only"
    assert stopped.compute == Decimal("2.00") and stopped.storage == Decimal("0.20")


def test_today_counts_only_todays_share():
    inst = running(price="1.00")
    now = T0 + timedelta(hours=30)
    # the instance ran 30 h; the window of the last 6 h holds 6 h of it
    assert spent_between([inst], [], now - timedelta(hours=6), now) == Decimal("6.00")
    ended = running(price="2.00", id="e")
    ended.mark_ended(T0 + timedelta(hours=4), "manual")
    entry = LedgerEntry.from_instance(ended, "manual", ended.ended_at)
    assert spent_between([], [entry], T0 + timedelta(hours=2), T0 + timedelta(hours=10)) == Decimal("4.00")


def test_budget_alerts_once_per_level():
    watch = BudgetWatch()
    inst = running(price="10.00")
    budget = BudgetSettings(per_instance=Decimal("20"))
    assert watch.check(budget, [inst], [], T0 + timedelta(hours=1)) == []
    [alert] = watch.check(budget, [inst], [], T0 + timedelta(hours=1, minutes=40))
    assert alert.level == 80
    assert watch.check(budget, [inst], [], T0 + timedelta(hours=1, minutes=50)) == []
    [alert] = watch.check(budget, [inst], [], T0 + timedelta(hours=2))
    assert alert.level == 100 and alert.instance_id == "i"


def test_budget_toasts_say_the_real_share_and_which_instance():
    """$0.13 of a $0.10 cap is 130 % (as the Costs screen says), and a per-instance alert names
    the instance (issue 16, item 8)."""
    watch = BudgetWatch()
    inst = running(price="0.13")
    [day] = watch.check(BudgetSettings(daily=Decimal("0.10")), [inst], [], T0 + timedelta(hours=1))
    assert day.level == 100 and "130 % of the daily cap ($0.13 of $0.10)" in day.text
    watch = BudgetWatch()
    [one] = watch.check(BudgetSettings(per_instance=Decimal("0.10")), [inst], [],
                        T0 + timedelta(hours=1))
    assert one.text.startswith(f"Budget: {inst.name} has cost 130 % of its per-instance cap")


def test_grouping_and_export_shapes():
    a, b = running(id="a", name="lora", gpu="A100"), running(id="b", name="serve", gpu="H100")
    a.mark_ended(T0 + timedelta(hours=1), "timer")
    b.mark_ended(T0 + timedelta(hours=2), "manual")
    ledger = [LedgerEntry.from_instance(x, x.end_reason, x.ended_at) for x in (a, b)]
    live = running(id="c", name="now")
    assert [r[0] for r in group_ledger(ledger, "gpu")] == ["H100", "A100"]
    rows = export_rows(ledger, [live], now=T0 + timedelta(hours=1))
    assert [r["running"] for r in rows] == [False, False, True]
    assert rows[-1]["accrued"] == "3.60"
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert parsed[0]["total"] == "3.60" and parsed[2]["accrued"] == "3.60"




async def test_meter_and_ledger_agree_with_the_sandbox_to_the_cent(services: Services):
    offer = await services.find_offer("sandbox", "RTX 3090")
    inst = await services.create("sandbox", offer, CreateRequest(
        offer_id=offer.offer_id, gpu_count=4, name="cycle", disk_gb=200),
        lease=Lease(instance_id="x", release_at=utcnow() + timedelta(hours=1)))
    await services.run(inst, "gpu-load --gpus 0 --mem 1G --util 50 --seconds 1")
    await LeaseService(services).extend(inst, by=timedelta(minutes=30))
    provider = services.provider("sandbox")
    now = utcnow()
    assert services.store.get_instance_sync(inst.id).accrued(now) == provider.read_record(inst.id).billed(now)
    entry = await services.release(services.store.get_instance_sync(inst.id), "manual")
    assert entry.total == provider.read_record(inst.id).billed()
    assert entry.compute_cost == entry.compute_cost.quantize(Decimal("0.01"))
    assert entry.gpu_count == 4 and entry.storage_cost >= 0


async def test_budget_cap_releases_through_the_verified_path(gputui_home: Path):
    config = Config()
    config.budget.per_instance = Decimal("0.0001")
    config.budget.release_at_cap = True
    svc = Services(SessionStore(gputui_home / "state.db"), config, state_dir=gputui_home,
                   sandbox_boot_seconds=0)
    notices: list[Notice] = []
    svc.store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    try:
        offer = await svc.find_offer("sandbox", "H100 80GB SXM5")
        inst = await svc.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="cap"))
        result = await LeaseService(svc).tick(utcnow() + timedelta(seconds=5))
        assert result.released == ["cap"]
        assert any(n.text.startswith("Budget: cap has cost") and "of its per-instance cap" in n.text
                   and n.bell for n in notices)
        assert svc.store.get_instance_sync(inst.id).end_reason == "budget"
        assert svc.provider("sandbox").read_record(inst.id).terminated_at is not None
    finally:
        await svc.close()


def test_costs_command_exports(gputui_home: Path):
    env = run_gputui_env(gputui_home)
    made = subprocess.run([*GPUTUI, "create", "--gpu", "RTX 4090", "--name", "exp", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    out = subprocess.run([*GPUTUI, "costs", "--json"], capture_output=True, text=True, env=env)
    data = json.loads(out.stdout)
    [row] = data["rows"]
    assert data["totals"]["USD"]["currency"] == "USD" and "CNY" not in data["totals"]
    assert row["name"] == "exp" and row["running"] is True and "accrued" in row
    out = subprocess.run([*GPUTUI, "costs", "--csv"], capture_output=True, text=True, env=env)
    assert out.stdout.splitlines()[0].startswith("instance_id,name,provider,gpu")


def test_today_never_reads_less_than_the_live_figures_it_holds(gputui_home: Path, monkeypatch):
    """Two yuan instances started today, ¥0.075 and ¥0.065 so far: each reads as its rounded
    figure (¥0.08, ¥0.07), so "live instances" is ¥0.15 — and today says the same, not the
    ¥0.14 of the unrounded sum (as `gputui costs` once did: 在线实例 ¥0.15 · 今日 ¥0.14)."""
    import time

    from gputui.services.costs import totals

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        now = utcnow()
        began = max(now - timedelta(minutes=10), now.replace(hour=0, minute=0, second=0))
        insts = []
        for iid, seconds in (("a", 150), ("b", 130)):  # ¥1.80/h: ¥0.075 and ¥0.065
            inst = Instance(id=iid, name=f"yuan-{iid}", provider="autodl", gpu="RTX 4090 D",
                            billing=BillingRule(price_per_hour=Decimal("1.80"), currency="CNY"),
                            created_at=began, status=InstanceStatus.RUNNING)
            inst.mark_running(began)
            inst.mark_stopped(began + timedelta(seconds=seconds))  # (its figure stays put)
            insts.append(inst)
        t = totals(insts, [], now, "CNY")
        assert t.accrued_live == Decimal("0.15") == t.today == t.month, t
        # an ended one of today adds its own figure as shown
        ended = insts[1].model_copy(deep=True, update={"id": "c"})
        ended.mark_ended(began + timedelta(seconds=130), "manual")
        entry = LedgerEntry.from_instance(ended, "manual", ended.ended_at)
        t = totals(insts[:1], [entry], now, "CNY")
        assert (t.accrued_live, t.today) == (Decimal("0.08"), Decimal("0.15")), t
        # what the command prints, in Chinese, each figure named
        gputui_home.mkdir(parents=True, exist_ok=True)
        store = SessionStore(gputui_home / "state.db")
        for inst in insts:
            store.put_instance_sync(inst)
        store.close()
        env = run_gputui_env(gputui_home) | {"LANG": "zh_CN.UTF-8", "TZ": "UTC"}
        out = subprocess.run([*GPUTUI, "costs"], capture_output=True, text=True, env=env,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        line = out.stdout.splitlines()[0]
        assert "在线实例已花 ¥0.15" in line and "今日已花 ¥0.15" in line, line
    finally:
        monkeypatch.undo()
        time.tzset()


def test_costs_runs_in_chinese_keeps_headings_whole_and_names_an_unlabelled_run(
        gputui_home: Path):
    """`gputui costs --runs` in Chinese at 80 columns: 退出码 whole (not 退…), and a run queued
    without a label reads 第 1 个任务, not the runner's English "run 1"."""
    from gputui.i18n import cell_len

    gputui_home.mkdir(parents=True, exist_ok=True)
    store = SessionStore(gputui_home / "state.db")
    start = utcnow() - timedelta(minutes=5)
    for job_id, label, code in (("1", "run 1", 3), ("2", "train", 0)):
        store.record_run_cost_sync("i-1", job_id, {
            "instance_id": "i-1", "instance": "box", "job_id": job_id, "label": label,
            "command": "python train.py", "status": "failed" if code else "succeeded",
            "exit_code": code, "gpu": "RTX 4090", "gpus": None, "gpu_count": 1,
            "started_at": start.isoformat(), "ended_at": utcnow().isoformat(), "seconds": 300.0,
            "rate_per_hour": "1.80", "cost": "0.15", "currency": "CNY"}, ended=0.0)
    store.close()
    env = run_gputui_env(gputui_home) | {"LANG": "zh_CN.UTF-8"}
    out = subprocess.run([*GPUTUI, "costs", "--runs"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "退出码" in lines[0] and "…" not in lines[0], lines[0]
    assert all(cell_len(line) <= 80 for line in lines), lines
    first = next(line for line in lines if line.startswith("box") and " 3 " in line)
    assert "第 1 个任务" in first and "run 1" not in first, first
    assert any("train" in line for line in lines)
    # the exit code sits under its heading
    assert cell_len(lines[0][:lines[0].index("退出码")]) + cell_len("退出码") == \
        cell_len(first[:first.index(" 3 ") + 2]), (lines[0], first)


async def test_budgets_read_the_ledger_again_only_after_a_commit(gputui_home: Path):
    """The lease clock checks the caps every second; the whole ledger (months of it, for a
    renter who keeps one) is read again only once something was committed — here or by another
    gputui process — never every second."""
    config = Config()
    config.budget.daily = Decimal("100")
    svc = Services(SessionStore(gputui_home / "state.db"), config, state_dir=gputui_home,
                   sandbox_boot_seconds=0)
    other = Services(SessionStore(gputui_home / "state.db"), config, state_dir=gputui_home,
                     sandbox_boot_seconds=0)
    reads = 0
    ledger = svc.store.ledger

    async def counted() -> list:
        nonlocal reads
        reads += 1
        return await ledger()

    svc.store.ledger = counted  # type: ignore[method-assign]
    try:
        offer = await svc.find_offer("sandbox", "H100 80GB SXM5")
        inst = await svc.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, name="b"))
        leases = LeaseService(svc)
        await leases.tick()
        first = reads
        for _ in range(3):
            await leases.tick()
        assert reads == first  # nothing committed: the ledger is not read again
        # another process releases the instance: its ledger entry is read at the next tick
        await other.release(other.store.get_instance_sync(inst.id), "manual")
        await leases.tick()
        assert reads == first + 1
        _instances, entries = await leases._budget_books()
        assert [e.name for e in entries] == ["b"]
    finally:
        await svc.close()
        await other.close()
