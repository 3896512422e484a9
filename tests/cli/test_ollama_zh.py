"""`gputui ollama` in Simplified Chinese against a sandbox instance (real SSH, the sandbox's
Ollama): the status report with its labels and GPU table lined up by cells, the fit check,
the restart warning and a missing-argument error; --json stays English."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gputui.i18n import cell_len
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = run_gputui_env(home)
    env["GPUTUI_SANDBOX_OLLAMA_TIME_SCALE"] = "0.1"  # quick simulated downloads
    for name in ("OLLAMA_HOST", "CUDA_VISIBLE_DEVICES", "OLLAMA_KEEP_ALIVE", "AUTODL_TOKEN",
                 "LAMBDA_API_KEY", "LANG", "LC_ALL", "LC_MESSAGES", "LANGUAGE"):
        env.pop(name, None)
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, env=env, timeout=120)


def zh(home: Path, *args: str) -> subprocess.CompletedProcess:
    return gputui(home, "--lang", "zh", *args)


def value_column(line: str, label: str) -> int:
    """The cell where the value after `label` starts."""
    rest = line[line.index(label) + len(label):]
    return cell_len(line[:line.index(label) + len(label)]) + cell_len(rest) - cell_len(
        rest.lstrip(" "))


def test_ollama_status_fit_and_gpus_in_chinese(gputui_home: Path):
    made = gputui(gputui_home, "create", "--gpu", "RTX 4090", "--count", "2", "--name", "serve")
    assert made.returncode == 0, made.stderr
    try:
        _check_in_chinese(gputui_home)
    finally:
        gputui(gputui_home, "release", "serve")  # the sandbox stops billing and its server


def _check_in_chinese(gputui_home: Path) -> None:
    stopped = zh(gputui_home, "ollama", "serve", "status")
    assert stopped.returncode == 0, stopped.stderr
    lines = stopped.stdout.splitlines()
    assert lines[0] == "serve 上的 ollama：已停止（已安装：0.6.5）"
    assert "  启动：gputui ollama serve start" in lines
    fields = {label: next(line for line in lines if line.startswith("  " + label))
              for label in ("运行方式", "环境变量", "GPUs", "日志")}
    assert "无进程" in fields["运行方式"] and "（默认）" in fields["环境变量"]
    # the values line up although the labels mix double- and single-width characters
    assert {value_column(line, label) for label, line in fields.items()} == {12}
    header = next(line for line in lines if line.startswith("GPU "))
    assert header.split() == ["GPU", "名称", "空闲", "总量", "已选"]
    gpu1 = next(line for line in lines if line.startswith("1 "))
    # the right-aligned figures end under their headers, counted in cells
    gib = [i + len("GiB") for i in range(len(gpu1)) if gpu1.startswith("GiB", i)]
    assert len(gib) == 2
    for word, end in (("空闲", gib[0]), ("总量", gib[1])):
        assert cell_len(header[:header.index(word) + len(word)]) == cell_len(gpu1[:end]), word

    started = zh(gputui_home, "ollama", "serve", "start")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("serve 上的 ollama 正在运行（版本 0.6.5，端口 ")

    fit = zh(gputui_home, "ollama", "serve", "fit", "qwen2.5:0.5b")
    assert fit.returncode == 0, fit.stderr
    assert fit.stdout.startswith("qwen2.5:0.5b 约需 ") and "：可放入 GPU " in fit.stdout
    as_json = json.loads(zh(gputui_home, "ollama", "serve", "fit", "qwen2.5:0.5b", "--json").stdout)
    assert "needs about" in as_json["message"] and as_json["verdict"] == "fits"  # English

    moved = zh(gputui_home, "ollama", "serve", "gpus", "1")
    assert moved.returncode == 0, moved.stderr
    assert moved.stderr.strip() == "重启 Ollama：没有已加载的模型，不会丢失什么。"
    assert moved.stdout.startswith("serve 上的 ollama 现在使用 GPU 1（CUDA_VISIBLE_DEVICES=GPU-")

    running = zh(gputui_home, "ollama", "serve", "status")
    assert running.stdout.splitlines()[0] == "serve 上的 ollama：运行中，版本 0.6.5"
    assert "  监听      127.0.0.1:" in running.stdout
    status = json.loads(zh(gputui_home, "ollama", "serve", "status", "--json").stdout)
    assert status["state"] == "running" and status["selected"] == [1]  # English values

    verify = zh(gputui_home, "ollama", "serve", "verify")
    assert verify.stdout.strip() == "Ollama 占用 0 GiB 显存：与所选一致（GPU 1）"

    missing = zh(gputui_home, "ollama", "serve", "load")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr  # bad input
    assert missing.stderr.strip().splitlines() == [
        "gputui: ollama load：请给出模型名（如 qwen2.5:7b）"]

    # a GPU the instance does not have: bad input, said before any restart is announced
    nine = zh(gputui_home, "ollama", "serve", "gpus", "9")
    assert nine.returncode == 2
    assert nine.stderr.strip().splitlines() == ["gputui: 该实例上没有 GPU 9（现有 GPU：0, 1）"]
    after = json.loads(zh(gputui_home, "ollama", "serve", "status", "--json").stdout)
    assert after["state"] == "running" and after["selected"] == [1]  # untouched
