"""Money, leases and jobs in Chinese (issue 20): the Costs and Jobs screens at 80×24 with fixed
data, a budget alert and a ledger reason as a person sees them, and the exports scripts read
(`gputui costs --csv` / `--json`) byte for byte the same in either language."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from gputui.app import GpuTuiApp
from gputui.config import BudgetSettings, Config
from gputui.i18n import cell_len
from gputui.models import (
    BillingRule,
    Instance,
    InstanceStatus,
    Lease,
    LeaseState,
    LedgerEntry,
)
from gputui.services.hub import Services
from gputui.services.jobs import Job, JobService, QueueView
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env
from tests.ui.test_costs_ui import FROZEN, seeded_app
from tests.ui.waits import until

SIZE = (80, 24)


def _costs_app(home: Path) -> GpuTuiApp:
    """The Costs fixture (one live instance, two ended ones) with a daily and a monthly cap."""
    app = seeded_app(home, [FROZEN])
    app.config.budget = BudgetSettings(daily=Decimal("10"), monthly=Decimal("200"))
    return app


def test_zh_costs_now_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_costs_app(gputui_home), press=["c"], terminal_size=SIZE)


def test_zh_costs_ledger_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_costs_app(gputui_home), press=["c", "2"], terminal_size=SIZE)


def test_zh_costs_summary_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_costs_app(gputui_home), press=["c", "3"], terminal_size=SIZE)


def test_zh_costs_chart_snapshot(snap_compare, gputui_home: Path, utc_clock, zh):
    assert snap_compare(_costs_app(gputui_home), press=["c", "4"], terminal_size=SIZE)


# -- Jobs ---------------------------------------------------------------------------------------

JOBS_NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _fixed_queue(instance_id: str) -> QueueView:
    """A queue as the runner on the instance reports it: one run of each kind."""
    t0 = JOBS_NOW - timedelta(hours=1, minutes=30)

    def job(n: int, name: str, status: str, start_min: float | None, end_min: float | None,
            code: int | None, util: float | None, mem: float | None, cost: str | None) -> Job:
        return Job(id=str(n), name=name, command=f"python train.py --run {n}", status=status,
                   exit_code=code,
                   started_at=None if start_min is None else t0 + timedelta(minutes=start_min),
                   ended_at=None if end_min is None else t0 + timedelta(minutes=end_min),
                   gpu_util_avg=util, gpu_mem_max_mib=mem,
                   cost=None if cost is None else Decimal(cost))

    return QueueView(instance_id, [
        job(1, "lr-3e-4", "succeeded", 0, 41, 0, 93, 21544, "0.47"),
        job(2, "lr-1e-4", "failed", 41, 43.5, 1, 12, 3020, "0.03"),
        job(3, "qwen-lora-很长的标签名字-sweep", "running", 43.5, None, None, 88, 22011, "0.53"),
        job(4, "eval", "queued", None, None, None, None, None, None),
        job(5, "lr-1e-5", "cancelled", None, None, None, None, None, None),
    ], daemon=True)


def _jobs_app(home: Path, monkeypatch: pytest.MonkeyPatch) -> GpuTuiApp:
    """A running instance whose queue reads as `_fixed_queue` (the runner's answers fixed, so
    that times and costs do not move between runs)."""
    store = SessionStore(home / "state.db")
    inst = Instance(id="i-sweep", name="sweep", provider="sandbox", gpu="GeForce RTX 4090",
                    gpu_count=2, billing=BillingRule(price_per_hour=Decimal("0.68")),
                    created_at=JOBS_NOW - timedelta(hours=2), status=InstanceStatus.RUNNING)
    inst.mark_running(inst.created_at)
    store.put_instance_sync(inst)
    store.put_lease_sync(Lease(instance_id=inst.id, release_at=JOBS_NOW + timedelta(hours=3)))

    async def view(self, instance):  # noqa: ANN001
        return _fixed_queue(instance.id)

    async def log_tail(self, instance, job_id, lines=200):  # noqa: ANN001
        return [f"[run {job_id}] epoch 3/3 loss 0.412", f"[run {job_id}] 保存到 results/"]

    monkeypatch.setattr(JobService, "view", view)
    monkeypatch.setattr(JobService, "log_tail", log_tail)
    services = Services(store, Config(), state_dir=home, sandbox_boot_seconds=0)
    app = GpuTuiApp(config=Config(), store=store, services=services, remember_theme=False,
                    background=False)
    app.now = lambda: JOBS_NOW
    return app


async def _on_jobs(pilot) -> None:
    from gputui.ui.jobs import JobsScreen

    await pilot.press("j")
    await until(pilot, lambda: isinstance(pilot.app.screen, JobsScreen), "Jobs")
    table = pilot.app.screen.query_one(DataTable)
    await until(pilot, lambda: table.row_count == 5, "the queue")
    head = pilot.app.screen.query_one("#jobs-head", Static)
    await until(pilot, lambda: "成功 1" in str(head.render()), "the head's counts")
    await pilot.pause()


def test_zh_jobs_snapshot(snap_compare, gputui_home: Path, utc_clock, zh,
                          monkeypatch: pytest.MonkeyPatch):
    assert snap_compare(_jobs_app(gputui_home, monkeypatch), terminal_size=SIZE,
                        run_before=_on_jobs)


async def _on_add_form(pilot) -> None:
    """The Jobs screen's `a`: the form to queue a run, whole at 80×24 with its keys line."""
    from gputui.ui.jobs import FormDialog, JobsScreen

    await pilot.press("j")
    await until(pilot, lambda: isinstance(pilot.app.screen, JobsScreen), "Jobs")
    table = pilot.app.screen.query_one(DataTable)
    await until(pilot, lambda: table.row_count == 5, "the queue")
    await pilot.press("a")
    await until(pilot, lambda: isinstance(pilot.app.screen, FormDialog)
                and bool(pilot.app.screen.query("#form-keys")), "the add form")
    await pilot.pause()


def test_add_run_form_snapshot(snap_compare, gputui_home: Path, utc_clock,
                               monkeypatch: pytest.MonkeyPatch):
    assert snap_compare(_jobs_app(gputui_home, monkeypatch), terminal_size=SIZE,
                        run_before=_on_add_form)


def test_zh_add_run_form_snapshot(snap_compare, gputui_home: Path, utc_clock, zh,
                                  monkeypatch: pytest.MonkeyPatch):
    assert snap_compare(_jobs_app(gputui_home, monkeypatch), terminal_size=SIZE,
                        run_before=_on_add_form)


async def test_zh_jobs_columns_and_states(gputui_home: Path, utc_clock, zh,
                                          monkeypatch: pytest.MonkeyPatch):
    app = _jobs_app(gputui_home, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await _on_jobs(pilot)
        table = app.screen.query_one(DataTable)
        headers = [str(c.label) for c in table.columns.values()]
        assert headers == ["#", "任务", "状态", "退出码", "时长", "GPU%", "显存 MiB", "费用"]
        assert str(table.get_cell("1", "status")) == "成功"
        assert str(table.get_cell("3", "status")) == "运行中"
        assert str(table.get_cell("4", "status")) == "排队中"
        assert str(table.get_cell("1", "time")) == "41分00秒"
        assert str(table.get_cell("3", "time")) == "46分30秒"
        assert str(table.get_cell("1", "cost")) == "$0.47"  # money keeps its currency
        head = str(app.screen.query_one("#jobs-head", Static).render())
        assert "sweep" in head and "成功 1" in head and "结束后：保留（按 w 修改）" in head


# -- what a person is told ------------------------------------------------------------------------


async def test_zh_budget_alert_toast_and_ledger_reason(gputui_home: Path, utc_clock,
                                                       zh):
    """The lease clock's budget check raises a toast in Chinese (its notice stays English for
    the log); the ledger says why each instance ended in Chinese."""
    from textual.widgets._toast import Toast

    from gputui.services.leases import LeaseService
    from gputui.store import Notice

    app = _costs_app(gputui_home)
    app.config.budget = BudgetSettings(daily=Decimal("1.00"))  # the live one has cost $2.08
    # its timer off: the clock looks at the budget only (nothing to re-arm on a sandbox that
    # was never started)
    app.store.update_lease_sync("live", lambda le: le.model_copy(
        update={"state": LeaseState.CANCELLED}))
    notices: list[Notice] = []
    app.store.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    services = Services(app.store, app.config, state_dir=gputui_home, sandbox_boot_seconds=0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("c")
        await pilot.pause()
        now = app.now()
        await LeaseService(services).tick(now)
        await until(pilot, lambda: any("预算：今日花费已达每日上限的" in str(t.render())
                                       for t in app.screen.query(Toast)), "the budget toast")
        toast = next(str(t.render()) for t in app.screen.query(Toast) if "预算" in str(t.render()))
        assert "$2.08 / $1.00" in toast and "208 %" in toast, toast
        alert = next(n for n in notices if "预算" in n.text)
        assert alert.log_text.startswith("Budget: today's spend is 208 % of the daily cap")

        await pilot.press("2")
        ledger = app.screen.query_one("#ledger-table", DataTable)
        await until(pilot, lambda: ledger.row_count == 2, "the ledger")
        assert ledger.get_cell("old0", "reason") == "定时器"
        assert ledger.get_cell("old1", "reason") == "手动"
        assert [str(c.label) for c in ledger.columns.values()][:6] == [
            "结束于", "任务", "GPU", "小时数", "合计", "原因"]
        await services.close()


# -- what scripts read -------------------------------------------------------------------------


def _seed_ledger(home: Path) -> None:
    store = SessionStore(home / "state.db")
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    runs = [("a", "训练-4090", "GeForce RTX 4090", "USD", "0.68", "timer"),
            ("b", "qwen-lora", "H20 96GB (China SKU)", "CNY", "8.20", "manual"),
            ("c", "eval", "A100 80GB SXM4", "USD", "1.79", "budget")]
    for n, (iid, name, gpu, cur, price, reason) in enumerate(runs):
        start = t0 + timedelta(hours=5 * n)
        inst = Instance(id=iid, name=name, provider="sandbox", gpu=gpu,
                        billing=BillingRule(price_per_hour=Decimal(price), currency=cur),
                        created_at=start, status=InstanceStatus.RUNNING)
        inst.mark_running(start)
        inst.mark_ended(start + timedelta(hours=1.5 + n), reason)
        store.put_instance_sync(inst)
        store.end_instance_sync(iid, LedgerEntry.from_instance(inst, reason, inst.ended_at), inst)
    store.close()
    (home / "config.toml").write_text("[money]\ncny_per_usd = 7.1\n", encoding="utf-8")


@pytest.mark.parametrize("flag", ["--csv", "--json"])
def test_costs_exports_are_the_same_in_chinese_and_english(gputui_home: Path, flag: str):
    _seed_ledger(gputui_home)

    def run(lang: str) -> bytes:
        return subprocess.run([*GPUTUI, "--lang", lang, "costs", flag],
                              env=run_gputui_env(gputui_home), capture_output=True,
                              timeout=120, check=True).stdout

    en, zh_out = run("en"), run("zh")
    assert en == zh_out
    text = en.decode()
    assert "manual" in text and "budget" in text  # the stored words, as scripts read them
    if flag == "--json":
        import json

        assert json.loads(text)["combined"]["note"] == "at ¥7.1/$ (your config)"  # not 按…换算
    # and the human listing does change language
    human = subprocess.run([*GPUTUI, "--lang", "zh", "costs"], env=run_gputui_env(gputui_home),
                           capture_output=True, timeout=120, check=True).stdout.decode()
    assert "按 ¥7.1/$ 换算（你的配置）" in human and "手动" in human, human


def test_countdowns_and_state_details_read_in_chinese(zh):
    """Countdowns, and an instance's status detail read back from the store in English, show
    in Chinese; a provider's own words stay as they are."""
    from gputui.format import format_remaining, stored_text
    from gputui.services.views import state_detail

    assert format_remaining(23 * 3600 + 58 * 60) == "23小时58分"
    assert cell_len(format_remaining(23 * 3600 + 58 * 60)) <= 10  # the CLI's column
    assert format_remaining(0) == "已到期" and format_remaining(None) == "无定时器"
    assert stored_text("releasing (timer)") == "正在释放（定时器）"
    assert stored_text("STILL BILLING — release failed: HTTP 503") == "仍在计费 — 释放失败：HTTP 503"
    assert stored_text("booting in us-east-1") == "booting in us-east-1"
    inst = Instance(id="s", name="s", provider="autodl", gpu="RTX 4090",
                    billing=BillingRule(price_per_hour=Decimal("1.88"), currency="CNY",
                                        storage_per_gb_month=Decimal("7.3")),
                    disk_gb=50, status=InstanceStatus.STOPPED,
                    stopped_at=FROZEN - timedelta(days=14, hours=2))
    detail = state_detail(inst, FROZEN)
    assert str(detail) == "⚠ stopped 14 d · wiped in 22 h · still costs ¥0.50/h (disk)"
    assert stored_text(detail) == "⚠ 已关机 14 天 · 22 小时后清除 · 仍在计费 ¥0.50/小时（磁盘）"
    assert stored_text(str(detail)) == stored_text(detail)  # read back from JSON or the store


def test_a_notice_is_shown_in_chinese_and_logged_in_english(gputui_home: Path, zh, capsys,
                                                            monkeypatch: pytest.MonkeyPatch):
    """A lease warning reaches the person in Chinese; the daemon's log line (the journal,
    which scripts grep) stays English."""
    from gputui.cli.daemon import Notifier
    from gputui.i18n import N_, Deferred
    from gputui.store import Notice

    for var in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"):
        monkeypatch.delenv(var, raising=False)  # no desktop notification from a test
    store = SessionStore(gputui_home / "state.db")
    seen: list[Notice] = []
    store.subscribe(lambda e: seen.append(e) if isinstance(e, Notice) else None)
    store.notify(Deferred(N_("{name} will be released in {mins} min — on Home, e extends 1 h, "
                             "E 30 min"), name="qwen-\x1b[31mserve", mins=10), "warning")
    [notice] = seen
    assert notice.text == "qwen-serve 将在 10 分钟后释放 — 在主页按 e 延长 1 小时，E 延长 30 分钟"
    assert notice.log_text == "qwen-serve will be released in 10 min — on Home, e extends 1 h, " \
        "E 30 min"  # sanitised both ways: the escape sequence is gone
    Notifier()(notice)
    assert capsys.readouterr().err.rstrip().endswith(
        "warning: qwen-serve will be released in 10 min — on Home, e extends 1 h, E 30 min")
    store.close()
