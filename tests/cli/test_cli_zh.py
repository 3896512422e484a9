"""The command line in Simplified Chinese: chosen by --lang, config.toml or the locale; each
command's error line, --help, the doctor; JSON and CSV stay English."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.models import BillingRule, Instance, InstanceStatus, Lease, utcnow
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str, env: dict[str, str] | None = None,
           stdin: str | None = None) -> subprocess.CompletedProcess:
    full = run_gputui_env(home)
    for secret in ("AUTODL_TOKEN", "LAMBDA_API_KEY"):  # no real provider from these tests
        full.pop(secret, None)
    full.update(env or {})
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, env=full,
                          input=stdin, timeout=120)


def zh(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return gputui(home, "--lang", "zh", *args, **kw)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def put_instance(home: Path, name: str = "train", status=InstanceStatus.RUNNING) -> None:
    store = SessionStore(home / "state.db")
    start = utcnow() - timedelta(hours=1)
    store.put_instance_sync(Instance(
        id=f"id-{name}", name=name, provider="sandbox", gpu="GeForce RTX 4090", gpu_count=2,
        billing=BillingRule(price_per_hour=Decimal("0.80")), status=status,
        created_at=start, running_since=start,
        ended_at=None if status.live else utcnow(),
    ))
    if status.live:
        store.put_lease_sync(Lease(instance_id=f"id-{name}", release_at=utcnow() + timedelta(hours=2)))


# Every command, with a bad request, and the Chinese line it must end with (exit code 2).
BAD_INPUT = [
    (["instances", "--bogus"], "无法识别的参数：--bogus"),
    (["create", "--gpu", "4090", "--idle", "30x"], "--idle：'30x' 不是 时长@百分比% 的格式"),
    (["create", "--gpu", "4090", "--no-timer"], "--no-timer 会一直计费，直到你手动释放：加上 --yes 确认"),
    (["create", "--gpu", "4090", "--release-after", "5y"], "'5y' 不是时长（试试 2h、90m、1h30m）"),
    (["create", "--gpu", "4090", "--release-at", "soon"], "--release-at：'soon' 不是时间（试试 18:30）"),
    (["create"], "缺少必需的参数：--gpu"),
    (["extend", "nope"], "没有名为 'nope' 的实例（见 `gputui instances`）"),
    (["release", "nope"], "没有名为 'nope' 的实例"),
    (["reap", "--now"], "无法识别的参数：--now"),
    (["ssh", "nope"], "没有名为 'nope' 的实例"),
    (["add-ssh", "ssh root@h", "--price", "abc"], "--price：'abc' 不是有效的每小时价格"),
    (["add-ssh", "ssh -J jump root@h", "--price", "1"], "ssh 命令行：不支持跳板机（-J）：请直接给出最终主机"),
    (["add-ssh", "ssh -p 99999 root@h", "--price", "1"], "端口 '99999' 有误：必须在 1-65535 之间"),
    (["ollama", "nope", "status"], "没有名为 'nope' 的实例"),
    (["ollama", "x", "dance"], "无效的选择：'dance'"),
    (["smi"], "请给出实例名称 NAME、--local 或 --input FILE"),
    (["doctor", "nope"], "没有名为 'nope' 的实例"),
    (["costs", "--csv", "--json"], "参数 --json：不能与参数 --csv 同时使用"),
    (["catalog", "--min-vram", "lots"], "参数 --min-vram：无效的 float 值：'lots'"),
    (["fit", "Qwen2.5-7B", "--model", "Llama-3.1-8B"], "模型只能给一次：MODEL 或 --model"),
    (["cost", "4090"], "缺少必需的参数：--hours"),
    (["cost", "4090", "--gpu", "H100", "--hours", "1"], "GPU 只能给一次：GPU 或 --gpu"),
    (["config", "frob"], "无效的选择：'frob'"),
    (["cost", "9999", "--hours", "1"], "未知的 GPU '9999'"),
    (["cost", "4090", "--hours", "abc"], "小时数必须是数字（收到 'abc'）"),
    (["fit", "FooModel"], "未知的模型 'FooModel'；内置模型有："),
    (["fit", "Qwen2.5-7B", "--precision", "fp3"], "未知的精度 'fp3'"),
    (["catalog", "--sort", "foo"], "未知的排序列 'foo'"),
    (["create", "--provider", "nope", "--gpu", "4090"], "未知或未启用的平台 'nope'"),
    (["frobnicate"], "无效的选择：'frobnicate'"),
    (["cost", "4090", "--hours", "1e9"], "小时数最多为 100000（收到 1e9）"),
    (["create", "--gpu", "4090", "--release-after", "400d"],
     "--release-after：'400d' 必须在 1 秒到一年（366 天）之间"),
    (["create", "--gpu", "4090", "--name", "a\x1b[31m"], "--name：名称中不能有控制字符"),
    (["jobs", "nope"], "没有名为 'nope' 的实例"),
    (["run", "box"], "run：没有命令（gputui run NAME -- CMD ...）"),
    (["push", "nope", "/tmp"], "没有名为 'nope' 的实例"),
    (["pull", "nope", "x"], "没有名为 'nope' 的实例"),
    (["stop", "nope"], "没有名为 'nope' 的实例"),
    (["start", "nope"], "没有名为 'nope' 的实例"),
    (["account"], "没有配置带账号的平台（AutoDL：设置 AUTODL_TOKEN）"),
    (["daemon", "--interval", "99"], "--interval：99 秒超出 0.5-10 秒的范围"),
    (["metrics", "--interval", "0.1"], "--interval：0.1 秒超出 0.5-10 秒的范围"),
    (["mcp", "--stdio-x"], "无法识别的参数：--stdio-x"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_each_commands_error_line_in_chinese(gputui_home: Path, args, expected):
    out = zh(gputui_home, *args)
    line = one_error_line(out)
    assert out.returncode == 2, out.stderr
    assert line.startswith("gputui") and expected in line, line
    english = gputui(gputui_home, *args)
    assert english.returncode == 2 and not any("\u4e00" <= c <= "\u9fff" for c in english.stderr)


@pytest.mark.parametrize("locale_env", [
    {"LANG": "zh_CN.UTF-8"},
    {"LC_ALL": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"},
    {"LC_MESSAGES": "zh_CN.UTF-8"},
    {"LANGUAGE": "zh_CN:en"},
])
def test_a_chinese_locale_selects_chinese(gputui_home: Path, locale_env):
    out = gputui(gputui_home, "extend", "nope", env=locale_env)
    assert out.returncode == 2
    assert one_error_line(out) == "gputui: 没有名为 'nope' 的实例（见 `gputui instances`）"


def test_lang_en_overrides_a_chinese_locale_and_config(gputui_home: Path):
    gputui_home.mkdir(parents=True)
    (gputui_home / "config.toml").write_text('language = "zh"\n')
    out = gputui(gputui_home, "--lang", "en", "extend", "nope", env={"LANG": "zh_CN.UTF-8"})
    assert one_error_line(out) == "gputui: no instance named 'nope' (see `gputui instances`)"


def test_language_in_config_selects_chinese_and_english(gputui_home: Path):
    gputui_home.mkdir(parents=True)
    config = gputui_home / "config.toml"
    config.write_text('language = "zh"\n')
    assert "没有名为 'nope' 的实例" in gputui(gputui_home, "release", "nope").stderr
    check = gputui(gputui_home, "config", "check")
    assert check.returncode == 0 and check.stdout.strip() == f"{config}：正常"
    config.write_text('language = "en"\n')
    out = gputui(gputui_home, "release", "nope", env={"LANG": "zh_CN.UTF-8"})
    assert "no instance named 'nope'" in out.stderr  # the config beats the locale


def test_config_errors_in_chinese(gputui_home: Path):
    gputui_home.mkdir(parents=True)
    config = gputui_home / "config.toml"
    # The broken file still says which language it wants.
    config.write_text('language = "zh"\n[ui]\nrefresh_seconds = 99\ncolour = "red"\n')
    out = gputui(gputui_home, "instances")
    assert out.returncode == 2
    assert one_error_line(out).startswith(f"gputui: {config}：键 'ui.")
    assert "（另有 1 处问题）" in out.stderr
    config.write_text('language = "fr"\n')
    out = zh(gputui_home, "config", "check")
    assert out.returncode == 2
    assert one_error_line(out).startswith(f"gputui: {config}：键 'language'：")
    config.write_text("[ui\n")
    out = zh(gputui_home, "costs")
    assert out.returncode == 2 and "不是有效的 TOML" in one_error_line(out)


def test_duration_and_state_errors_in_chinese(gputui_home: Path):
    put_instance(gputui_home, "train")
    put_instance(gputui_home, "old", InstanceStatus.RELEASED)
    out = zh(gputui_home, "extend", "train", "5y")
    assert out.returncode == 2
    assert one_error_line(out) == "gputui: extend：'5y' 不是时长（试试 2h、90m、1h30m）"
    out = zh(gputui_home, "extend", "old")
    assert out.returncode == 1 and one_error_line(out) == "gputui: old 当前为「已释放」"
    out = zh(gputui_home, "release", "old")
    assert out.returncode == 0 and out.stdout.strip() == "old 此前已是「已释放」"


def test_help_in_chinese(gputui_home: Path):
    out = zh(gputui_home, "--help", env={"COLUMNS": "80"})
    assert out.returncode == 0
    assert out.stdout.startswith("用法：gputui")
    for text in ("选项", "显示此帮助信息并退出", "列出实例", "租用实例", "立即释放实例（停止计费）",
                 "界面语言"):
        assert text in out.stdout, text
    from gputui.i18n import cell_len

    assert max(cell_len(line) for line in out.stdout.splitlines()) <= 80  # wrapped by cells
    sub = gputui(gputui_home, "create", "--help", env={"LANG": "zh_CN.UTF-8"})
    assert "多久后自动释放" in sub.stdout and "空闲释放" in sub.stdout
    english = gputui(gputui_home, "--help")
    assert english.stdout.startswith("usage: gputui") and "list instances" in english.stdout


def test_json_and_csv_stay_english(gputui_home: Path):
    put_instance(gputui_home, "train")
    put_instance(gputui_home, "old", InstanceStatus.RELEASED)
    en = json.loads(gputui(gputui_home, "instances", "--json", "--all").stdout)
    cn = json.loads(zh(gputui_home, "instances", "--json", "--all").stdout)
    assert [sorted(i) for i in cn] == [sorted(i) for i in en]
    for a, b in zip(en, cn, strict=True):
        assert {k: v for k, v in a.items() if k != "cost"} == {k: v for k, v in b.items() if k != "cost"}
    assert {i["status"] for i in cn} == {"running", "released"}
    assert zh(gputui_home, "catalog", "--json").stdout == gputui(gputui_home, "catalog", "--json").stdout
    rows = list(csv.DictReader(io.StringIO(zh(gputui_home, "costs", "--csv").stdout)))
    assert rows and "end_reason" in rows[0] and "running" in rows[0]
    assert not any("\u4e00" <= c <= "\u9fff" for row in rows for v in row.values() for c in v or "")
    doctor = json.loads(zh(gputui_home, "doctor", "--json").stdout)
    assert not any("\u4e00" <= c <= "\u9fff" for c in json.dumps(doctor, ensure_ascii=False))


def test_instances_table_in_chinese_is_aligned(gputui_home: Path):
    from gputui.i18n import cell_len

    put_instance(gputui_home, "训练任务-长名字-qwen2.5-72b")
    put_instance(gputui_home, "b")
    out = zh(gputui_home, "instances")
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["名称", "平台", "GPU", "状态", "距释放", "费用"]
    assert "运行中" in lines[1] and "运行中" in lines[2]
    assert len({cell_len(line) for line in lines}) == 1, lines  # columns line up by cells
    # The status column starts in the same cell on every line.
    starts = {cell_len(line[:line.index(word)]) for line, word in
              zip(lines, ["状态", "运行中", "运行中"], strict=True)}
    assert len(starts) == 1


def test_doctor_diagnosis_and_fix_in_chinese(gputui_home: Path, tmp_path: Path):
    # nvidia-smi's own words in a container that lost its /dev/nvidia* mounts.
    capture = tmp_path / "nvidia-smi.txt"
    capture.write_text("Failed to initialize NVML: Unknown Error\n", encoding="utf-8")
    out = zh(gputui_home, "smi", "--input", str(capture))
    assert out.returncode == 1
    line = one_error_line(out)
    assert "NVML 报错 'Unknown Error'" in line and "容器未挂载 /dev/nvidia*" in line
    assert "（原始信息：" in line  # the tool's own words are kept
    english = gputui(gputui_home, "smi", "--input", str(capture))
    assert "Restart the container" in english.stderr


def test_every_diagnosis_reads_in_the_guides_vocabulary():
    from gputui.i18n import set_language
    from gputui.nvidia.diagnose import DIAGNOSES

    set_language("zh")
    texts = {code: d.problem_text + d.fix_text for code, d in DIAGNOSES.items()}
    assert all(any("\u4e00" <= c <= "\u9fff" for c in t) for t in texts.values()), texts
    assert "CPU 版 PyTorch" in texts["no-devices"] and "CPU 版 PyTorch" in texts["nvidia-smi-missing"]
    assert "驱动" in texts["driver-not-loaded"] and "容器未挂载 /dev/nvidia*" in texts["nvml-unknown-error"]
    assert DIAGNOSES["no-devices"].fix.startswith("In a container")  # the data stays English


def test_doctor_checklist_in_chinese_and_its_json_in_english():

    from gputui.cli import smi_report as smi
    from gputui.i18n import set_language
    from gputui.services.smi import Facts, evaluate_checks

    broken = Facts("box", remote=True, smi_path="/usr/bin/nvidia-smi", smi_rc=255,
                   smi_output="Failed to initialize NVML: Unknown Error",
                   container=["dockerenv"], devices=[], env={"CUDA_VISIBLE_DEVICES": "0,3"},
                   torch={"installed": True, "version": "2.4.0+cpu", "cuda": None})
    english = io.StringIO()
    smi._print_checks("box", evaluate_checks(broken), False, english)
    as_json = io.StringIO()
    smi._print_checks("box", evaluate_checks(broken), True, as_json)
    set_language("zh")
    chinese = io.StringIO()
    smi._print_checks("box", evaluate_checks(broken), False, chinese)
    lines = {line.split(":")[0].split()[-1]: line for line in chinese.getvalue().splitlines()[1:]}
    assert "退出码 255：NVML 报错 'Unknown Error'" in lines["nvidia-smi"]
    assert "容器未挂载 /dev/nvidia*" in lines["容器"] and "解决：" in lines["容器"]
    assert "是 CPU 版 PyTorch" in lines["pytorch"]
    assert "驱动和 CUDA 版本未知" in lines["驱动"]  # check names in Chinese too
    assert "设置为 '0,3'" in lines["CUDA_VISIBLE_DEVICES"]
    # The same checks as JSON, written while Chinese is on, are the English ones.
    again = io.StringIO()
    smi._print_checks("box", evaluate_checks(broken), True, again)
    assert again.getvalue() == as_json.getvalue()
    assert "CPU-only build" in again.getvalue() and "\u5bb9" not in again.getvalue()
    assert "without /dev/nvidia* devices" in english.getvalue()


def test_catalog_fit_and_cost_tables_in_chinese_are_aligned(gputui_home: Path):
    from gputui.i18n import cell_len

    out = zh(gputui_home, "cost", "rtx-4090", "--hours", "10")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("平台"))
    assert "计费方式" in header and "备注" in header
    row = lines[lines.index(header) + 1]
    # the cost column ends where its header ends (right-aligned, measured in cells)
    end = cell_len(header[:header.index("费用") + 2])
    cost = row.split()[5]  # provider, tier, sold as, package, billed by, cost
    assert cost.startswith("$") and cell_len(row[:row.index(cost) + len(cost)]) == end
    assert "竞价/可中断" in out.stdout or "按 2 卡实例出售" in out.stdout  # notes translated

    fit = zh(gputui_home, "fit", "qwen2.5-7b")
    assert fit.returncode == 0, fit.stderr
    assert "· 推理 ·" in fit.stdout and "\n  权重 " in fit.stdout and "KV 缓存" in fit.stdout
    table = fit.stdout.splitlines()
    head = next(line for line in table if line.startswith("GPU ") and "卡数" in line)
    assert "最低价来源" in head and "价格日期" in head

    cards = zh(gputui_home, "catalog")
    assert cards.returncode == 0 and "价格日期" in cards.stdout.splitlines()[0]
    english = gputui(gputui_home, "--lang", "en", "cost", "rtx-4090", "--hours", "10", "--json")
    assert "竞价" not in english.stdout and "spot/interruptible" in english.stdout


def test_jobs_table_headers_whole_and_aligned_in_chinese(capsys):
    """`gputui jobs NAME`: each column starts in the same cell on every line, and no header is
    cut (退出码 is wider than EXIT)."""
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    from gputui.cli.jobs import print_table
    from gputui.i18n import cell_len, set_language
    from gputui.services.jobs import Job, QueueView

    start = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    view = QueueView("i-1", jobs=[
        Job("1", "训练-lr3e-4", "python train.py", "succeeded", exit_code=0, started_at=start,
            ended_at=start + timedelta(minutes=41), gpu_util_avg=93, gpu_mem_max_mib=21544,
            cost=Decimal("0.47")),
        Job("2", "fail", "false", "failed", exit_code=137, started_at=start,
            ended_at=start + timedelta(seconds=5), cost=Decimal("0.01")),
    ])
    set_language("zh")
    print_table(view, Instance(
        id="i-1", name="train", provider="sandbox", gpu="NVIDIA GeForce RTX 4090", gpu_count=1,
        billing=BillingRule(price_per_hour=Decimal("0.35")), status=InstanceStatus.RUNNING,
        created_at=start, running_since=start))
    lines = capsys.readouterr().out.splitlines()[:3]
    assert lines[0].split() == ["ID", "名称", "状态", "退出码", "用时", "GPU%", "显存", "MiB", "费用"]
    assert "41分00秒" in lines[1] and "137" in lines[2]
    # right-aligned columns end in the same cell: exit code, time, cost
    for header, values in (("退出码", ("0", "137")), ("用时", ("41分00秒", "0分05秒")),
                           ("费用", ("$0.47", "$0.01"))):
        end = cell_len(lines[0][:lines[0].index(header) + len(header)])
        for line, value in zip(lines[1:], values, strict=True):
            assert cell_len(line[:line.index(value) + len(value)]) == end, (header, line)
