"""The sandbox shims, run as real processes through the generated bin/ wrappers, checked
against the real nvidia-smi captures in ../shared/fixtures/nvidia-smi."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import gputui
from gputui.sandbox.shims import nvidia_smi, state
from gputui.sandbox.shims.gpu_load import parse_mem
from gputui.sandbox.shims.shutdown import ShutdownError, parse_time
from gputui.sandbox.shims.sim import read_gpus
from gputui.sandbox.shims.state import (
    GpuUse,
    ProcRecord,
    SandboxStateError,
    cancel_poweroff,
    create_instance_dir,
    enforce_power,
    live_processes,
    load_instance,
    power_on,
    power_state,
    register_process,
    schedule_poweroff,
)
from tests.shared import capture, capture_names

H100_CAPTURE = "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
RTX4080_CAPTURE = "nvidia_gpu_exporter__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"


fixture = capture


def capture_section(name: str, title: str) -> list[str]:
    """The output lines of one `# <state> :: <title>` section of an exporter capture."""
    lines = fixture(name).read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("# ") and title in line:
            j = i + 1
            while lines[j].startswith("#"):
                j += 1
            out = []
            while j < len(lines) and not lines[j].startswith("####"):
                out.append(lines[j])
                j += 1
            while out and not out[-1].strip():
                out.pop()
            return out
    pytest.skip(f"section {title!r} not in {name}")


def capture_query(name: str, title: str) -> tuple[str, list[str]]:
    """(the --query-gpu=... field list used, output lines) of a capture's CSV section."""
    text = fixture(name).read_text(encoding="utf-8")
    m = re.search(r"^# " + re.escape(title) + r".*\n# \$ nvidia-smi --query-gpu=(\S+)", text, re.M)
    if not m:
        pytest.skip(f"no {title!r} query in {name}")
    return m.group(1), capture_section(name, title)


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in (state.ROOT_ENV, "CUDA_VISIBLE_DEVICES")}
    e["TZ"] = "UTC"
    return e


def make(root: Path, name: str = "NVIDIA H100 80GB HBM3", count: int = 2, **kw) -> Path:
    defaults = dict(memory_total_mib=81559, power_limit_w=700.0, tdp_w=700.0)
    defaults.update(kw)
    return create_instance_dir(
        root, instance_id=f"test-{root.name}", gpu_name=name, gpu_count=count, **defaults
    )


@pytest.fixture
def inst(tmp_path: Path) -> Path:
    return make(tmp_path / "h100")


class Shell:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.loads: list[subprocess.Popen] = []

    def run(self, cmd: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.root / "bin" / cmd), *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def smi(self, *args: str) -> subprocess.CompletedProcess:
        res = self.run("nvidia-smi", *args)
        assert res.returncode == 0, res.stdout + res.stderr
        return res

    def csv(self, query: str, fmt: str = "csv,noheader,nounits", *extra: str) -> list[list[str]]:
        out = self.smi(f"--query-gpu={query}", f"--format={fmt}", *extra).stdout
        return [line.split(", ") for line in out.splitlines()]

    def apps(self) -> list[list[str]]:
        out = self.smi(
            "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader"
        ).stdout
        return [line.split(", ") for line in out.splitlines()]

    def load(self, *args: str) -> tuple[subprocess.Popen, int]:
        proc = subprocess.Popen(
            [str(self.root / "bin" / "gpu-load"), *args],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.loads.append(proc)
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"gpu-load printed {line!r}: {proc.stderr.read()}"
        assert int(line) == proc.pid  # the wrapper execs: the PID printed is the real one
        return proc, int(line)

    def cleanup(self) -> None:
        for proc in self.loads:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                stream.close()


@pytest.fixture
def sh(inst: Path, env: dict[str, str]):
    shell = Shell(inst, env)
    yield shell
    shell.cleanup()


def wait_until(predicate, timeout: float = 5.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


# --------------------------------------------------------------------------- instance format


def test_instance_dir_layout(inst: Path) -> None:
    data = json.loads((inst / ".sandbox" / "instance.json").read_text())
    assert data["driver_version"] == "570.124.06" and data["cuda_version"] == "12.8"
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    assert all(
        re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g["uuid"])
        for g in data["gpus"]
    )
    assert len({g["uuid"] for g in data["gpus"]}) == 2
    assert len({g["pci_bus_id"] for g in data["gpus"]}) == 2
    for name in state.SHIMS:
        path = inst / "bin" / name
        assert path.exists() and os.access(path, os.X_OK)
        assert path.read_text().startswith("#!/bin/sh\n")
    # deterministic from the instance id
    again = make(inst.parent / "copy")
    assert load_instance(again).gpus[0].uuid != load_instance(inst).gpus[0].uuid
    assert state.gpu_uuid("test-h100", 1) == load_instance(inst).gpus[1].uuid


def test_shims_work_from_a_plain_shell_on_path(inst: Path, env: dict[str, str]) -> None:
    """What the SSH server does: /bin/sh in the instance folder, bin/ first on PATH."""
    e = dict(env, PATH=f"{inst / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(inst))
    res = subprocess.run(
        ["/bin/sh", "-c", "cd /tmp && nvidia-smi -L && command -v gpu-load"],
        cwd=inst,
        env=e,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("NVIDIA H100 80GB HBM3") == 2
    assert res.stdout.strip().endswith("bin/gpu-load")


def test_load_instance_errors(tmp_path: Path) -> None:
    with pytest.raises(SandboxStateError):
        load_instance(tmp_path)
    root = make(tmp_path / "x")
    (root / ".sandbox" / "instance.json").write_text("{not json")
    with pytest.raises(SandboxStateError):
        load_instance(root)
    (root / ".sandbox" / "instance.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(SandboxStateError, match="newer"):
        load_instance(root)


def test_shim_import_path_stays_light(inst: Path, env: dict[str, str]) -> None:
    code = (
        "import sys, gputui.sandbox.shims.nvidia_smi, "
        "gputui.sandbox.shims.gpu_load, gputui.sandbox.shims.shutdown;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'textual', 'asyncssh', 'httpx', 'urllib3', 'rich')))"
    )
    e = dict(env, PYTHONPATH=str(Path(gputui.__file__).resolve().parents[1]))
    res = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


# --------------------------------------------------------------------------- --query-gpu


@pytest.mark.parametrize(
    "capture",
    capture_names("nvidia_gpu_exporter__*.txt"),
)
def test_query_gpu_header_matches_real_capture(
    inst: Path, capture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exporter's full ~200-field query: same header, byte for byte, and one value per
    column. (In-process, to keep ten captures fast; the other tests run the real shim.)"""
    fields, lines = capture_query(capture, "idle :: query-gpu")
    monkeypatch.setenv(state.ROOT_ENV, str(inst))
    buf = io.StringIO()
    assert nvidia_smi.run([f"--query-gpu={fields}", "--format=csv"], buf) == 0
    ours = buf.getvalue().splitlines()
    assert ours[0] == lines[0]
    assert len(ours) == 3  # header + 2 GPUs
    assert all(len(row.split(", ")) == len(lines[0].split(", ")) for row in ours[1:])


def _shape(value: str) -> str:
    return (
        re.sub(r"[0-9A-Fa-f]+", "9", value)
        if value.startswith("GPU-")
        else re.sub(r"\d+", "9", value)
    )


CORE = [
    "name",
    "uuid",
    "pci.bus_id",
    "index",
    "memory.total",
    "memory.reserved",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "utilization.memory",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "enforced.power.limit",
    "clocks.current.graphics",
    "clocks.current.sm",
    "clocks.current.memory",
    "clocks.max.sm",
    "pstate",
    "fan.speed",
    "compute_cap",
    "driver_version",
    "timestamp",
    "persistence_mode",
    "mig.mode.current",
    "ecc.mode.current",
    "compute_mode",
    "clocks_event_reasons.gpu_idle",
    "encoder.stats.sessionCount",
]


@pytest.mark.parametrize("phase", ["idle", "load"])
def test_query_gpu_values_look_like_the_real_h100(sh: Shell, phase: str) -> None:
    fields, lines = capture_query(H100_CAPTURE, f"{phase} :: query-gpu")
    names = fields.split(",")
    real = dict(zip(names, lines[1].split(", "), strict=True))
    if phase == "load":
        sh.load("--gpus", "0", "--mem", "19818M", "--util", "100")
    header, row = sh.smi(
        f"--query-gpu={','.join(CORE)}", "--format=csv", "-i", "0"
    ).stdout.splitlines()
    ours = dict(zip(CORE, row.split(", "), strict=True))
    for name in CORE:
        assert _shape(ours[name]) == _shape(real[name]), (name, ours[name], real[name])
    assert ours["name"] == real["name"] == "NVIDIA H100 80GB HBM3"
    assert ours["memory.total"] == real["memory.total"] == "81559 MiB"
    assert ours["fan.speed"] == "[N/A]"
    assert ours["pstate"] == ("P0" if phase == "load" else "P8")
    if phase == "load":
        assert ours["memory.used"] == real["memory.used"] == "19818 MiB"


def test_consumer_card_values_look_like_the_real_rtx_4080(
    tmp_path: Path, env: dict[str, str]
) -> None:
    fields, lines = capture_query(RTX4080_CAPTURE, "idle :: query-gpu")
    real = dict(zip(fields.split(","), lines[1].split(", "), strict=True))
    root = make(
        tmp_path / "rtx",
        "NVIDIA GeForce RTX 4080 SUPER",
        1,
        memory_total_mib=16376,
        power_limit_w=320.0,
        tdp_w=320.0,
    )
    shell = Shell(root, env)
    query = "name,fan.speed,memory.total,power.draw,temperature.memory,ecc.mode.current,serial"
    _, row = shell.smi(f"--query-gpu={query}", "--format=csv").stdout.splitlines()
    ours = dict(zip(query.split(","), row.split(", "), strict=True))
    for name in query.split(","):
        assert _shape(ours[name]) == _shape(real[name]), (name, ours[name], real[name])
    assert ours["temperature.memory"] == "N/A"  # the real tool's bare N/A for this field
    assert ours["ecc.mode.current"] == "[N/A]"


def test_nounits_keeps_header_units_like_the_real_p100_csv(sh: Shell) -> None:
    """netdata's P100 capture was taken with --format=csv,nounits: units stay in the header
    and leave the values."""
    real = fixture("netdata-go.d.plugin__tesla-p100.csv").read_text().splitlines()
    fields = ",".join(h.split(" [")[0] for h in real[0].split(", "))
    lines = sh.smi(f"--query-gpu={fields}", "--format=csv,nounits", "-i", "0").stdout.splitlines()
    assert lines[0] == real[0]
    values = lines[1].split(", ")
    assert len(values) == len(real[1].split(", "))
    assert not any(v.endswith((" MiB", " %", " W", " MHz")) for v in values), values
    assert values[2] == "[N/A]"  # fan.speed of a datacenter card, as in the capture
    with_units = sh.smi(f"--query-gpu={fields}", "--format=csv", "-i", "0").stdout.splitlines()[1]
    assert re.search(r", \d+\.\d\d W, ", with_units)
    assert " MiB, " in with_units and " MHz" in with_units


def test_noheader_and_aliases(sh: Shell) -> None:
    out = sh.smi("--query-gpu=gpu_name,gpu_uuid,clocks.sm", "--format=csv").stdout.splitlines()
    assert out[0] == "name, uuid, clocks.current.sm [MHz]"  # canonical names in the header
    assert len(out) == 3
    rows = sh.csv("index,name", "csv,noheader")
    assert rows == [["0", "NVIDIA H100 80GB HBM3"], ["1", "NVIDIA H100 80GB HBM3"]]
    out = sh.smi("--query-compute-apps=pid,name,used_memory", "--format=csv").stdout
    assert out == "pid, process_name, used_gpu_memory [MiB]\n"  # no processes: header only
    assert sh.smi("--query-compute-apps=pid", "--format=csv,noheader").stdout == ""


def test_na_spellings(sh: Shell) -> None:
    query = "fan.speed,hostname,module.power.draw.average,temperature.memory"
    row = sh.csv(query, "csv,noheader")[0]
    assert row[:3] == ["[N/A]", "[N/A]", "[N/A]"]
    assert row[3].isdigit()  # HBM cards report a memory temperature


def test_unknown_field_is_the_real_error(sh: Shell) -> None:
    res = sh.run("nvidia-smi", "--query-gpu=name,foo", "--format=csv")
    assert res.returncode == 2
    assert res.stdout == 'Field "foo" is not a valid field to query.\n\n'
    res = sh.run("nvidia-smi", "--query-compute-apps=pid,bar", "--format=csv")
    assert res.returncode == 2 and 'Field "bar"' in res.stdout


def test_bad_arguments(sh: Shell) -> None:
    res = sh.run("nvidia-smi", "--bogus")
    assert res.returncode == 2 and "is not recognized" in res.stdout
    res = sh.run("nvidia-smi", "--query-gpu=name")
    assert res.returncode == 2
    res = sh.run("nvidia-smi", "-i", "7", "-L")
    assert res.returncode == 6 and res.stdout.strip() == "No devices were found"


def test_select_by_index_and_uuid(sh: Shell) -> None:
    uuids = [g.uuid for g in load_instance(sh.root).gpus]
    assert sh.csv("index,uuid", "csv,noheader", "-i", "1") == [["1", uuids[1]]]
    assert sh.csv("index", "csv,noheader", "-i", f"{uuids[1]},0") == [["1"], ["0"]]


def test_list_and_version_match_real_shape(sh: Shell) -> None:
    real = capture_section(H100_CAPTURE, "capabilities :: list (-L)")[0]
    pattern = r"GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)"
    assert re.fullmatch(pattern, real)
    lines = sh.smi("-L").stdout.splitlines()
    assert [re.fullmatch(pattern, line).group(1, 2) for line in lines] == [
        ("0", "NVIDIA H100 80GB HBM3"),
        ("1", "NVIDIA H100 80GB HBM3"),
    ]
    version = sh.smi("--version").stdout.splitlines()
    real_version = capture_section(H100_CAPTURE, "capabilities :: version")
    assert [v.split(":")[0] for v in version] == [v.split(":")[0] for v in real_version]


# --------------------------------------------------------------------------- table, XML, -q


def _bars(line: str) -> list[int]:
    return [i for i, c in enumerate(line) if c in "|+"]


def test_table_layout_matches_the_real_table(sh: Shell) -> None:
    real = capture_section(H100_CAPTURE, "load :: nvidia-smi (default table)")
    _, pid = sh.load("--gpus", "1", "--mem", "2566M", "--name", "/root/tools/memhog")
    ours = sh.smi().stdout.rstrip("\n").split("\n")
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", ours[0])
    # Headers and rules: identical apart from the versions.
    for i in (1, 3, 4, 5, 6, 7):
        assert ours[i] == real[i]
    assert _bars(ours[2]) == _bars(real[2]) and "Driver Version: 570.124.06" in ours[2]
    # GPU rows: same column boundaries as the real rows.
    for k in range(3):
        assert _bars(ours[8 + k]) == _bars(real[8 + k]), (ours[8 + k], real[8 + k])
    assert ours[8].startswith(
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |"
    )
    assert re.match(
        r"\| N/A   \d\dC    P8 +\d+W /  700W \|       0MiB /  81559MiB \|      0%", ours[9]
    )
    assert ours[11] == real[11] and ours[15] == real[11]  # the rule between and after GPUs
    # Processes: the real header, and rows with the real column positions.
    start = ours.index(real[14]) - 1
    assert ours[start : start + 5] == real[13:18]
    row = ours[start + 5]
    real_row = real[18]
    assert _bars(row) == _bars(real_row) and len(row) == len(real_row) == 91
    assert row == real_row.replace("    0 ", "    1 ").replace("11327", str(pid).rjust(5))
    assert ours[-1] == real[-1]


def test_table_without_processes_and_name_truncation(tmp_path: Path, env: dict[str, str]) -> None:
    real = capture_section(RTX4080_CAPTURE, "idle :: nvidia-smi (default table)")
    root = make(
        tmp_path / "rtx",
        "NVIDIA GeForce RTX 4080 SUPER",
        1,
        memory_total_mib=16376,
        power_limit_w=320.0,
        tdp_w=320.0,
    )
    ours = Shell(root, env).smi().stdout.rstrip("\n").split("\n")
    assert ours[8].split("|")[1] == real[8].split("|")[1]  # "NVIDIA GeForce RTX 4080 ...    Off"
    assert re.match(r"\|  0%   \d\dC    P8 +\d+W /  320W \|       0MiB /  16376MiB \|", ours[9])
    empty = capture_section(H100_CAPTURE, "idle :: nvidia-smi (default table)")
    assert ours[-2:] == empty[-2:]  # "No running processes found"


def test_xml_parses_and_has_the_values(sh: Shell) -> None:
    _, pid = sh.load("--gpus", "1", "--mem", "4G", "--util", "75", "--name", "python serve.py")
    text = sh.smi("-q", "-x").stdout
    assert text.startswith(
        '<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">'
    )
    root = ET.fromstring(text)
    assert root.tag == "nvidia_smi_log"
    assert root.findtext("driver_version") == "570.124.06"
    assert root.findtext("cuda_version") == "12.8"
    assert root.findtext("attached_gpus") == "2"
    gpus = root.findall("gpu")
    spec = load_instance(sh.root)
    assert [g.get("id") for g in gpus] == [g.pci_bus_id for g in spec.gpus]
    g1 = gpus[1]
    assert g1.findtext("product_name") == "NVIDIA H100 80GB HBM3"
    assert g1.findtext("uuid") == spec.gpus[1].uuid
    assert g1.findtext("fb_memory_usage/total") == "81559 MiB"
    assert g1.findtext("fb_memory_usage/used") == "4096 MiB"
    assert re.fullmatch(r"\d+ %", g1.findtext("utilization/gpu_util"))
    assert int(g1.findtext("utilization/gpu_util").split()[0]) >= 70
    assert re.fullmatch(r"\d+ C", g1.findtext("temperature/gpu_temp"))
    assert re.fullmatch(r"\d+\.\d\d W", g1.findtext("gpu_power_readings/average_power_draw"))
    assert g1.findtext("gpu_power_readings/current_power_limit") == "700.00 W"
    assert g1.findtext("fan_speed") == "N/A"
    assert g1.findtext("mig_mode/current_mig") == "Disabled"
    infos = g1.findall("processes/process_info")
    assert [
        (
            p.findtext("pid"),
            p.findtext("process_name"),
            p.findtext("used_memory"),
            p.findtext("type"),
        )
        for p in infos
    ] == [(str(pid), "python serve.py", "4096 MiB", "C")]
    assert gpus[0].findall("processes/process_info") == []
    # Every element we emit under <gpu> exists in a real v12 capture from a 570 driver.
    real = ET.parse(fixture("telegraf__rtx-3060-v12.xml")).getroot().find("gpu")

    def paths(elem: ET.Element, prefix: str = "") -> set[str]:
        out = set()
        for child in elem:
            if child.tag in ("supported_clocks", "processes", "remapped_rows"):
                continue
            p = f"{prefix}/{child.tag}"
            out |= {p} | paths(child, p)
        return out

    assert paths(gpus[0]) <= paths(real)
    # -i limits the GPUs, not attached_gpus.
    only = ET.fromstring(sh.smi("-q", "-x", "-i", "1").stdout)
    assert only.findtext("attached_gpus") == "2" and len(only.findall("gpu")) == 1


def test_query_text_layout(sh: Shell) -> None:
    sh.load("--gpus", "0", "--mem", "1G")
    lines = sh.smi("-q").stdout.splitlines()
    real = capture_section(H100_CAPTURE, "load :: query (-q)")
    assert lines[:3] == real[:3]
    product = next(line for line in lines if "Product Name" in line)
    real_product = next(line for line in real if "Product Name" in line)
    assert product == real_product
    for label in ("GPU UUID", "Bus Id", "Used GPU Memory", "Process ID", "Performance State"):
        ours = next(line for line in lines if label in line)
        theirs = next(line for line in real if label in line)
        assert ours.index(":") == theirs.index(":"), label


# --------------------------------------------------------------------------- gpu-load


def test_mem_sizes() -> None:
    assert parse_mem("20G") == parse_mem("20GiB") == parse_mem("20gb") == 20480
    assert parse_mem("512M") == parse_mem("512") == 512
    assert parse_mem("1.5g") == 1536
    with pytest.raises(argparse.ArgumentTypeError):
        parse_mem("lots")


def test_gpu_load_shows_up_and_goes_away(sh: Shell) -> None:
    uuids = [g.uuid for g in load_instance(sh.root).gpus]
    idle = sh.csv("memory.used,utilization.gpu,power.draw")
    assert [r[:2] for r in idle] == [["0", "0"], ["0", "0"]]
    proc, pid = sh.load("--gpus", "0", "--mem", "20G", "--util", "90")
    assert sh.apps() == [[str(pid), "python train.py", "20480 MiB", uuids[0]]]
    busy = sh.csv("memory.used,utilization.gpu,power.draw,pstate")
    assert busy[0][0] == "20480" and busy[1][0] == "0"
    assert 85 <= int(busy[0][1]) <= 95 and busy[1][1] == "0"
    assert float(busy[0][2]) > float(idle[0][2]) + 400
    assert busy[0][3] == "P0" and busy[1][3] == "P8"
    free = sh.csv("memory.free")[0][0]
    assert int(free) == 81559 - load_instance(sh.root).gpus[0].memory_reserved_mib - 20480

    subprocess.run(["kill", str(pid)], check=True)  # what a user types
    assert proc.wait(timeout=5) == -signal.SIGTERM  # it dies of the signal, like a real one
    assert sh.apps() == []
    assert list((sh.root / ".sandbox" / "procs").iterdir()) == []
    assert sh.csv("memory.used")[0] == ["0"]


def test_sigkilled_load_leaves_no_ghost(sh: Shell) -> None:
    proc, pid = sh.load("--gpus", "0,1", "--mem", "1G")
    assert len(sh.apps()) == 2
    proc.kill()
    proc.wait(timeout=5)
    assert (sh.root / ".sandbox" / "procs" / f"{pid}.json").exists()  # no chance to clean up
    assert sh.apps() == []
    assert sh.csv("memory.used") == [["0"], ["0"]]
    assert not (sh.root / ".sandbox" / "procs" / f"{pid}.json").exists()  # readers cleaned it


def test_stale_records_survive_pid_reuse(inst: Path) -> None:
    me = os.getpid()  # alive, but not a gpu-load
    register_process(inst, ProcRecord(me, "x", "gpu-load", time.time(), {0: GpuUse(100, 50)}))
    assert live_processes(inst) == []
    assert not (inst / ".sandbox" / "procs" / f"{me}.json").exists()
    # right marker, wrong start time: a new process that got an old PID
    record = ProcRecord(
        me,
        "x",
        "test",
        time.time(),
        {0: GpuUse(100, 50)},
        marker="python",
        proc_start=(state.proc_start_time(me) or 0) + 1,
    )
    register_process(inst, record)
    assert live_processes(inst) == []
    record.proc_start = state.proc_start_time(me)
    register_process(inst, record)
    assert [p.pid for p in live_processes(inst)] == [me]
    state.unregister_process(inst, me)


def test_gpu_load_errors(sh: Shell) -> None:
    sh.load("--gpus", "1", "--mem", "60G")
    res = sh.run("gpu-load", "--gpus", "1", "--mem", "30G")
    assert res.returncode == 1 and "CUDA out of memory" in res.stderr
    assert "GPU 1 has a total capacity of" in res.stderr
    res = sh.run("gpu-load", "--gpus", "0", "--mem", "90000M")
    assert res.returncode == 1 and "CUDA out of memory" in res.stderr
    res = sh.run("gpu-load", "--gpus", "2")
    assert res.returncode == 1 and "invalid device ordinal" in res.stderr
    assert len(sh.apps()) == 1


def test_gpu_load_seconds_and_visible_devices(sh: Shell) -> None:
    sh.env = dict(sh.env, CUDA_VISIBLE_DEVICES="1")
    proc, pid = sh.load("--gpus", "0", "--mem", "1G", "--seconds", "0.3", "--name", "job")
    uuids = [g.uuid for g in load_instance(sh.root).gpus]
    assert sh.apps() in ([[str(pid), "job", "1024 MiB", uuids[1]]], [])
    assert proc.wait(timeout=5) == 0
    assert sh.apps() == []


def test_sim_is_deterministic_and_warms_up(inst: Path) -> None:
    spec = load_instance(inst)
    t0 = 1_800_000_000.0
    procs = [ProcRecord(1, "p", "gpu-load", t0, {0: GpuUse(1000, 100)})]
    a = read_gpus(spec, procs, t0 + 1)
    assert a == read_gpus(spec, procs, t0 + 1)
    later = read_gpus(spec, procs, t0 + 600)[0]
    assert later.temp_c > a[0].temp_c + 20
    assert a[1].util_gpu == 0 and a[1].pstate == "P8" and a[1].memory_used_mib == 0
    assert a[0].util_gpu >= 98 and a[0].sm_clock_mhz > a[1].sm_clock_mhz
    assert spec.gpus[0].idle_power_w < a[1].power_w + 1 < a[0].power_w


# --------------------------------------------------------------------------- -l / -lms


def test_lms_loop_repeats_and_stops_cleanly(sh: Shell) -> None:
    proc = subprocess.Popen(
        [
            str(sh.root / "bin" / "nvidia-smi"),
            "--query-gpu=index,utilization.gpu,memory.used",
            "--format=csv,nounits",
            "-lms",
            "200",
        ],
        cwd=sh.root,
        env=sh.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=5)
    assert proc.returncode == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "index, utilization.gpu [%], memory.used [MiB]"
    assert lines.count(lines[0]) == 1  # the header once, then blocks of rows
    rows = lines[1:]
    assert len(rows) % 2 == 0 and 4 <= len(rows) // 2 <= 8
    assert [r.split(", ")[0] for r in rows[:4]] == ["0", "1", "0", "1"]


def test_loop_survives_a_closed_pipe(inst: Path, env: dict[str, str]) -> None:
    e = dict(env, PATH=f"{inst / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}")
    res = subprocess.run(
        ["/bin/sh", "-c", "nvidia-smi --query-gpu=index --format=csv,noheader -lms 50 | head -n 3"],
        cwd=inst,
        env=e,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert res.stdout.splitlines() == ["0", "1", "0"]
    assert "Traceback" not in res.stderr and "Error" not in res.stderr


def test_loop_ends_when_the_instance_powers_off(sh: Shell) -> None:
    proc = subprocess.Popen(
        [
            str(sh.root / "bin" / "nvidia-smi"),
            "--query-gpu=index",
            "--format=csv,noheader",
            "-lms",
            "100",
        ],
        cwd=sh.root,
        env=sh.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)
    schedule_poweroff(sh.root, datetime.now(UTC))
    out, err = proc.communicate(timeout=5)
    assert proc.returncode != 0 and "powered off" in err


# --------------------------------------------------------------------------- power


def test_shutdown_schedules_and_cancels(sh: Shell) -> None:
    before = datetime.now(UTC)
    res = sh.run("shutdown", "-h", "+1")
    assert res.returncode == 0 and res.stdout == ""
    assert re.fullmatch(
        r"Shutdown scheduled for \w{3} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, use 'shutdown -c' to cancel\.\n",
        res.stderr,
    ), res.stderr
    st = power_state(sh.root)
    assert st.status == "scheduled" and st.command == "shutdown -h +1"
    assert timedelta(seconds=55) < st.scheduled_at - before < timedelta(seconds=65)
    assert sh.run("shutdown", "--show").stderr.startswith("Shutdown scheduled for")
    # later than the scheduled time it reads as off since then, with nothing running
    assert power_state(sh.root, st.at + timedelta(hours=3)) == state.PowerState(
        "off", st.at, st.command, st.requested_at
    )
    res = sh.run("shutdown", "-c")
    assert res.returncode == 0
    assert power_state(sh.root).status == "running"
    assert sh.run("shutdown", "--show").stderr == "No scheduled shutdown.\n"


def test_past_schedule_is_off_since_then(inst: Path) -> None:
    t0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    st = schedule_poweroff(inst, t0 + timedelta(minutes=30), command="shutdown -h +30", now=t0)
    assert st.status == "scheduled" and st.scheduled_at == t0 + timedelta(minutes=30)
    off = power_state(inst, t0 + timedelta(days=2))
    assert off.is_off and off.off_since == t0 + timedelta(minutes=30) and off.scheduled_at is None
    assert power_state(inst, t0 + timedelta(minutes=29)).status == "scheduled"
    assert cancel_poweroff(inst, t0 + timedelta(days=2)) is False  # too late to cancel
    assert power_state(inst).is_off
    with pytest.raises(SandboxStateError):
        schedule_poweroff(inst, t0)
    power_on(inst)
    assert power_state(inst).status == "running"


def test_shutdown_times() -> None:
    now = datetime(2026, 1, 5, 10, 0, 30, tzinfo=UTC)
    assert parse_time("now", now) == now
    assert parse_time("+30", now) == now + timedelta(minutes=30)
    assert parse_time("0", now) == now
    hhmm = parse_time("09:15", now)  # local time; tomorrow when already past
    assert now < hhmm <= now + timedelta(days=1)
    assert hhmm.astimezone().strftime("%H:%M") == "09:15"
    with pytest.raises(ShutdownError):
        parse_time("soon", now)


def test_shutdown_now_kills_loads_and_nvidia_smi_refuses(sh: Shell) -> None:
    proc, pid = sh.load("--gpus", "0", "--mem", "1G")
    res = sh.run("shutdown", "-h", "now")
    assert res.returncode == 0
    assert proc.wait(timeout=5) != 0
    st = power_state(sh.root)
    assert st.is_off and st.off_since <= datetime.now(UTC)
    res = sh.run("nvidia-smi")
    assert res.returncode != 0 and "powered off" in res.stderr and res.stdout == ""
    res = sh.run("gpu-load", "--mem", "1G")
    assert res.returncode == 1 and "powered off" in res.stderr
    assert sh.run("shutdown", "-c").returncode == 1
    power_on(sh.root)
    assert sh.smi("-L").stdout.count("GPU ") == 2


def test_poweroff_shim(sh: Shell) -> None:
    assert sh.run("poweroff").returncode == 0
    assert power_state(sh.root).is_off
    assert sh.run("poweroff").returncode == 1


def test_scheduled_poweroff_stops_loads_by_itself(sh: Shell) -> None:
    proc, pid = sh.load("--gpus", "1", "--mem", "1G")
    schedule_poweroff(sh.root, datetime.now(UTC) + timedelta(seconds=0.3))
    assert proc.wait(timeout=5) == 0  # the load notices the power-off time by itself
    assert not (sh.root / ".sandbox" / "procs" / f"{pid}.json").exists()


def test_enforce_power_kills_registered_processes(sh: Shell) -> None:
    proc, pid = sh.load("--gpus", "0", "--mem", "1G")
    t = datetime.now(UTC)
    assert enforce_power(sh.root).status == "running"
    assert proc.poll() is None
    # An off state the process has not seen yet: enforce_power kills it at once.
    (sh.root / ".sandbox" / "power.json").write_text(
        json.dumps({"poweroff_at": (t - timedelta(hours=1)).isoformat()})
    )
    st = enforce_power(sh.root)
    assert st.is_off and st.off_since == t - timedelta(hours=1)
    assert proc.wait(timeout=5) != 0
    assert live_processes(sh.root) == []
