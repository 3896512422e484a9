"""The Monitor and Ollama screens in Simplified Chinese at 80×24: SVG snapshots with the fixed
data of test_screen_snapshots.py, and what a user reads there (column headers, the status line,
the waiting text, a hint, the Ollama server line) checked with Pilot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.widgets import Checkbox, DataTable, Static

from gputui.config import Config
from gputui.i18n import cell_len
from gputui.models import GpuSample, ProcessSample
from gputui.services.hub import Services
from gputui.ui.livetable import LiveTable
from tests.ui.test_ollama_ui import services as ollama_services  # noqa: F401 (a fixture)
from tests.ui.test_screen_snapshots import (
    SIZE,
    _monitor,
    _monitor_app,
    plain_app,
)
from tests.ui.waits import until


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


# ------------------------------------------------------------------------------------------
# Snapshots
# ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_monitor_overview_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _monitor(pilot, detail=False))


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_monitor_detail_snapshot(snap_compare, gputui_home: Path):
    assert snap_compare(_monitor_app(gputui_home), terminal_size=SIZE,
                        run_before=lambda pilot: _monitor(pilot, detail=True))


@pytest.mark.usefixtures("utc_clock", "zh")
def test_zh_ollama_snapshot_without_an_instance(snap_compare, gputui_home: Path):
    async def ollama(pilot) -> None:
        await pilot.press("o")
        await until(pilot, lambda: pilot.app.screen.TITLE == "Ollama", "Ollama")
        await pilot.pause()

    assert snap_compare(plain_app(gputui_home), terminal_size=SIZE, run_before=ollama)


# ------------------------------------------------------------------------------------------
# What a user reads
# ------------------------------------------------------------------------------------------


async def test_zh_overview_headers_status_line_and_detail(gputui_home: Path, zh):
    """The overview's headers are Chinese, whole and aligned with their cells; the status line
    counts in Chinese; the detail view's state line, panel labels and process headers too, and
    its status line is not cut at 80 columns."""
    app = _monitor_app(gputui_home)
    async with app.run_test(size=SIZE) as pilot:
        await _monitor(pilot, detail=False)
        table = app.screen.query_one("#gpus", LiveTable)
        labels = [c.label for c in table.columns]
        assert labels[:5] == ["实例 / GPU", "利用率", "显存 GiB", "温度", "功耗"]
        assert labels[-1] == "状态 / 提示"
        assert all(cell_len(c.label) <= c.width for c in table.columns)  # no header is cut
        lines = screen_lines(app)
        header = next(line for line in lines if "实例 / GPU" in line)
        row = next(line for line in lines if "RTX 4090" in line and "°" in line)
        # a column starts at the same cell in the header and in the rows (double width)
        for label, cell in (("温度", re.search(r"\d+°", row)), ("功耗", re.search(r"\d+/\d+W", row))):
            assert cell is not None
            assert cell_len(header[:header.index(label)]) == cell_len(row[:cell.start()]), label
        status = str(app.screen.query_one("#mon-status", Static).render())
        assert status.startswith("每 1 秒 (+/-) · 1 个实例 · 1 块 GPU")
        assert "实时" in "\n".join(lines)  # the state column
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.detail.panels, "the GPU panel")
        await pilot.pause(0.2)
        status = str(app.screen.query_one("#mon-status", Static).render())
        assert status == "esc：全部 · [ ]：上/下一个 1/1 · 每 1 秒 (+/-)"
        shown_line = next(line for line in screen_lines(app) if line.lstrip().startswith("esc："))
        assert shown_line.rstrip().endswith("(+/-)") and cell_len(shown_line) <= 80
        head = str(app.screen.query_one("#detail-head", Static).render())
        assert "qwen-lora · 1× RTX 4090 · 实时" in head and "驱动 570" in head
        panel = str(next(iter(app.screen.detail.panels.values())).render())
        assert all(word in panel for word in ("风扇", "显存", "功耗"))
        assert "利用率 " in panel and "利用…" not in panel  # whole, not cut to 利用
        procs = app.screen.query_one("#procs", DataTable)
        assert [str(c.label) for c in procs.columns.values()] == ["PID", "用户", "GPU", "显存",
                                                                  "命令"]
        title = str(app.screen.query_one("#procs-title", Static).render())
        assert title.startswith("进程：1 · 按显存排序 (s)")
        await pilot.press("s")
        assert "按PID排序" in str(app.screen.query_one("#procs-title", Static).render())


async def test_zh_waiting_text_and_a_hint(gputui_home: Path, zh):
    """A watched instance without a sample yet says so in Chinese; a GPU that stays under
    50 % for minutes gets its hint in Chinese, in the table and in full under it."""
    now = [0.0]
    app = _monitor_app(gputui_home)
    telemetry = app.telemetry
    telemetry._clock = lambda: now[0]
    async with app.run_test(size=SIZE) as pilot:
        telemetry.ingest("fixed", [])  # watched, nothing read yet
        await pilot.press("m")
        await until(pilot, lambda: "fixed/msg" in app.screen.query_one("#gpus").rows,
                    "the no-data row")
        await pilot.press("enter")
        await until(pilot, lambda: "等待第一个采样…" in str(
            app.screen.query_one("#panel-wait", Static).render()), "the waiting text")
        await pilot.press("escape")
        proc = ProcessSample(pid=77, gpu_index=0, used_memory_mib=8000, name="python train.py")
        for t in range(0, 200, 5):  # 20 % for over three minutes, with a process on the GPU
            now[0] = float(t)
            telemetry.ingest("fixed", [GpuSample(index=0, name="NVIDIA GeForce RTX 4090",
                                                 utilization_gpu=20.0, memory_used_mib=8000,
                                                 memory_total_mib=24564, temperature_c=60,
                                                 power_draw_w=120, power_limit_w=450)],
                             processes=[proc])
        await until(pilot, lambda: "⚑ 利用率<50%" in "\n".join(screen_lines(app)),
                    "the hint's mark in the table")
        notes = str(app.screen.query_one("#notes", Static).render())
        assert "GPU 0 已持续 3 分钟低于 50 %（平均 20 %）" in notes
        assert "⚑ 1 条提示" in str(app.screen.query_one("#mon-status", Static).render())


# ------------------------------------------------------------------------------------------
# Ollama with a sandbox instance (real SSH, the sandbox's Ollama)
# ------------------------------------------------------------------------------------------


async def test_zh_ollama_server_line_columns_and_toasts(services: Services, zh):
    from gputui.providers.base import CreateRequest
    from gputui.ui.ollama import OllamaScreen
    from tests.ui.test_ollama_ui import OllamaApp, settle
    from tests.ui.waits import shown

    offer = await services.find_offer("sandbox", "RTX 4090")
    await services.create("sandbox", offer, CreateRequest(offer_id=offer.offer_id, gpu_count=2,
                                                          name="llm"))
    app = OllamaApp(config=Config(), store=services.store, services=services, background=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        screen = await shown(pilot, OllamaScreen)
        await settle(app, pilot)
        server = str(screen.query_one("#server", Static).render())
        assert server.startswith("服务：已停止 — 按 s 启动")
        installed = screen.query_one("#installed", DataTable)
        assert [str(c.label) for c in installed.columns.values()] == [
            "已安装", "大小", "量化", "系列", "修改时间"]
        running = screen.query_one("#running", DataTable)
        assert [str(c.label) for c in running.columns.values()] == [
            "运行中", "大小", "显存占用", "GPU 占比", "保留至"]
        await pilot.press("s")
        await settle(app, pilot)
        await until(pilot, lambda: "服务：运行中 · v0.6.5" in str(
            screen.query_one("#server", Static).render()), "the running server")
        boxes = list(screen.query("#gpus Checkbox").results(Checkbox))
        assert "空闲" in str(boxes[0].label)
        screen.query_one("#installed", DataTable).focus()
        await pilot.pause()
        await pilot.press("l")  # nothing installed yet: a toast says so in Chinese
        await until(pilot, lambda: any("光标处没有已安装的模型" in str(n.message)
                                       for n in app._notifications), "the toast")
        assert "Ollama 可用的 GPU（空格勾选，a 应用）：" in "\n".join(screen_lines(app))
