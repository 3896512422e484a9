"""nvidia-smi parsers against the real captures in ../shared/fixtures/nvidia-smi, plus fuzzing."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gputui.models import GpuSample
from gputui.nvidia import nvsmi
from gputui.nvidia.diagnose import diagnose_nvidia_smi
from gputui.nvidia.nvsmi import (
    COMPUTE_APPS_FIELDS,
    TELEMETRY_FIELDS,
    CsvStreamParser,
    NvsmiParseError,
    apply_gpu_list,
    assign_gpu_indices,
    canonical_field,
    compute_apps_command,
    parse_compute_apps_csv,
    parse_gpu_list,
    parse_query_gpu_csv,
    parse_table,
    parse_xml,
    query_gpu_command,
    sanitize,
    xml_samples,
)
from tests.shared import capture, captures_dir

# --------------------------------------------------------------------------------------------
# Fixture helpers (fixtures are read in place, never copied into the repo)
# --------------------------------------------------------------------------------------------

_RULE = "#" * 80


fixture_dir = captures_dir
fixture = capture


def read(name: str) -> str:
    return fixture(name).read_text(encoding="utf-8", errors="replace")


def sections(path: Path) -> list[dict[str, str | None]]:
    """Split an nvidia_gpu_exporter capture into its sections.

    Each section is headed by a rule of 80 '#', `# <state> :: <what>`, an optional
    `# $ <command>`, and another rule. Lines starting with '#' inside a section (pmon, dmon
    headers) stay in the body."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    out: list[dict] = []
    current: dict | None = None
    i = 0
    while i < len(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i] == _RULE and nxt.startswith("# ") and " :: " in nxt:
            state, what = nxt[2:].split(" :: ", 1)
            j = i + 2
            command = None
            if j < len(lines) and lines[j].startswith("# $ "):
                command = lines[j][4:].strip()
                j += 1
            if j < len(lines) and lines[j] == _RULE:
                j += 1
            current = {"state": state.strip(), "what": what.strip(), "command": command, "body": []}
            out.append(current)
            i = j
            continue
        if current is not None:
            current["body"].append(lines[i])
        i += 1
    for sec in out:
        sec["text"] = "\n".join(sec.pop("body")).strip("\n")
    return out


def section(name: str, state: str, what_prefix: str) -> str:
    for sec in sections(fixture(name)):
        if sec["state"] == state and sec["what"].startswith(what_prefix):
            return sec["text"]
    raise AssertionError(f"{name}: no section {state} :: {what_prefix}")


H100 = "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H100_MIG = "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200 = "nvidia_gpu_exporter__linux-x86_64__nvidia-h200__590.48.01.txt"
H200_MIG = "nvidia_gpu_exporter__linux-x86_64__nvidia-h200-mig__590.48.01.txt"
L40S = "nvidia_gpu_exporter__linux-x86_64__nvidia-l40s__595.80.txt"
RTX4080 = "nvidia_gpu_exporter__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"
RTX2080_595 = "nvidia_gpu_exporter__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt"
RTX2080_610 = "nvidia_gpu_exporter__linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt"
WIN_591 = "nvidia_gpu_exporter__windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt"
WIN_610 = "nvidia_gpu_exporter__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt"


def strings_of(obj: object) -> list[str]:
    """Every string inside a model / list / tuple, recursively."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, BaseModel):
        return [s for v in obj.__dict__.values() for s in strings_of(v)]
    if isinstance(obj, list | tuple):
        return [s for v in obj for s in strings_of(v)]
    if hasattr(obj, "__slots__"):  # ListedGpu
        return [s for name in obj.__slots__ for s in strings_of(getattr(obj, name))]
    return []


def assert_terminal_safe(obj: object) -> None:
    for text in strings_of(obj):
        for ch in text:
            cat = unicodedata.category(ch)
            assert cat not in ("Cc", "Cf", "Cs", "Zl", "Zp"), f"unsafe {ch!r} in {text!r}"
        assert len(text) <= nvsmi.MAX_TEXT_CHARS


# --------------------------------------------------------------------------------------------
# Every fixture parses with its parser(s)
# --------------------------------------------------------------------------------------------


def _parse_any(path: Path) -> int:
    """Parse one fixture file with the right parser(s); returns how many things it yielded."""
    name = path.name
    text = path.read_text(encoding="utf-8", errors="replace")
    if name == "SOURCES.md":
        return 1
    if name.endswith(".xml"):
        inv = parse_xml(path.read_bytes())
        samples = xml_samples(text)
        assert len(inv.gpus) == len(samples) >= 1
        assert_terminal_safe([inv, samples])
        return len(samples)
    if name.endswith(".csv"):
        samples = parse_query_gpu_csv(text)
        assert_terminal_safe(samples)
        return len(samples)
    if name.endswith("help-query-gpu.txt"):
        return len(re.findall(r'^"([\w.]+)"', text, re.M))
    if name.startswith("nvidia-htop__"):
        inv, samples, procs = parse_table(text)
        assert inv.driver_version and samples
        assert_terminal_safe([inv, samples, procs])
        return len(samples)
    if name.startswith("issue-excerpt__"):
        diag = diagnose_nvidia_smi(text, None)
        assert diag is not None
        return 1
    if name.startswith("nvidia_gpu_exporter__"):
        count = 0
        for sec in sections(path):
            what, body = sec["what"], sec["text"]
            if what.startswith("nvidia-smi (default table)"):
                inv, samples, procs = parse_table(body)
                assert inv.driver_version and inv.cuda_version and len(samples) == 1
                assert_terminal_safe([inv, samples, procs])
                count += 1
            elif what.startswith("query-gpu (csv"):
                parser = CsvStreamParser()
                samples = [s for line in body.splitlines() if (s := parser.feed(line))]
                assert len(samples) == 1 and parser.skipped == 0, what
                assert_terminal_safe(samples)
                count += 1
            elif what.startswith("query-compute-apps"):
                procs = parse_compute_apps_csv(body)
                assert_terminal_safe(procs)
                count += 1
            elif what.startswith("list (-L)"):
                listed = parse_gpu_list(body)
                assert listed and not listed[0].is_mig
                assert_terminal_safe(listed)
                count += 1
        return count
    raise AssertionError(f"no parser known for fixture {name}: add one to this test")


def test_every_fixture_parses() -> None:
    files = sorted(p for p in fixture_dir().iterdir() if p.is_file())
    assert len(files) >= 38
    for path in files:
        assert _parse_any(path) >= 1, path.name


def test_sections_splitter() -> None:
    secs = sections(fixture(H100))
    whats = [(s["state"], s["what"]) for s in secs]
    assert ("idle", "nvidia-smi (default table)") in whats
    assert ("load", "query-compute-apps (per-process)") in whats
    pmon = section(H100, "load", "pmon")
    assert pmon.startswith("# gpu")  # '#' lines inside a body stay in it
    assert secs[0]["command"] == "nvidia-smi --version"


# --------------------------------------------------------------------------------------------
# Multi-section captures
# --------------------------------------------------------------------------------------------


def test_h100_table_under_load() -> None:
    inv, samples, procs = parse_table(section(H100, "load", "nvidia-smi (default table)"))
    assert inv.driver_version == "590.48.01" and inv.cuda_version == "13.1"
    (gpu,) = samples
    assert gpu.index == 0 and gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_used_mib == 19818 and gpu.memory_total_mib == 81559
    assert gpu.power_draw_w == 629 and gpu.power_limit_w == 700
    assert gpu.temperature_c == 59 and gpu.fan_pct is None and gpu.pstate == "P0"
    assert gpu.utilization_gpu == 100 and gpu.mig_mode == "Disabled"
    assert gpu.timestamp == datetime(2026, 7, 14, 8, 12, 53, tzinfo=UTC)
    assert inv.gpus[0].pci_bus_id == "00000000:00:09.0"
    assert [(p.pid, p.used_memory_mib, p.name, p.kind) for p in procs] == [
        (11327, 2566, "/root/tools/memhog", "C"),
        (11328, 1542, "/root/tools/memhog", "C"),
        (11345, 15690, "./gpu_burn", "C"),
    ]
    assert inv.processes == procs


def test_h100_idle_table_has_no_processes() -> None:
    inv, samples, procs = parse_table(section(H100, "idle", "nvidia-smi (default table)"))
    assert procs == [] and samples[0].temperature_c == 41 and samples[0].power_draw_w == 69
    assert samples[0].memory_used_mib == 0


def test_h100_csv_and_compute_apps() -> None:
    (gpu,) = parse_query_gpu_csv(section(H100, "load", "query-gpu (csv"))
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu.memory_total_mib == 81559 and gpu.memory_used_mib == 19818
    assert gpu.power_draw_w == 631.95 and gpu.power_limit_w == 700
    assert gpu.utilization_gpu == 100 and gpu.utilization_memory == 11
    assert gpu.temperature_c == 59 and gpu.sm_clock_mhz == 1980 and gpu.fan_pct is None
    assert gpu.mig_mode == "Disabled" and gpu.pstate == "P0"
    assert gpu.timestamp == datetime(2026, 7, 14, 8, 12, 53, 353000, tzinfo=UTC)

    procs = parse_compute_apps_csv(section(H100, "load", "query-compute-apps"))
    assert [(p.pid, p.name, p.used_memory_mib) for p in procs] == [
        (11327, "/root/tools/memhog", 2566),
        (11328, "/root/tools/memhog", 1542),
        (11345, "./gpu_burn", 15690),
    ]
    assert all(p.gpu_index is None for p in procs)
    mapped = assign_gpu_indices(procs, [gpu])
    assert [p.gpu_index for p in mapped] == [0, 0, 0]
    by_map = parse_compute_apps_csv(
        section(H100, "load", "query-compute-apps"), uuid_to_index={gpu.uuid: 0}
    )
    assert [p.gpu_index for p in by_map] == [0, 0, 0]
    assert parse_compute_apps_csv(section(H100, "idle", "query-compute-apps")) == []


def test_h100_mig_capture() -> None:
    table = section(H100_MIG, "load", "nvidia-smi (default table)")
    inv, samples, procs = parse_table(table)
    assert samples[0].utilization_gpu is None  # N/A in MIG mode
    assert samples[0].mig_mode == "Enabled"
    migs = inv.gpus[0].mig_devices
    assert [(m.gi_id, m.ci_id, m.mig_index) for m in migs] == [
        (2, 0, 0),
        (3, 0, 1),
        (9, 0, 2),
        (10, 0, 3),
    ]
    assert [m.memory_total_mib for m in migs] == [40448, 20096, 9984, 9984]
    assert migs[0].memory_used_mib == 11091
    listed = parse_gpu_list(section(H100_MIG, "capabilities", "list (-L)"))
    assert [g.mig_profile for g in listed] == [None, "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert listed[1].uuid == "MIG-00000000-0000-0000-0000-000000000000"
    assert listed[1].parent_index == 0 and listed[1].is_mig
    # The profiles guessed from SMs and memory agree with what -L says.
    assert [m.profile for m in migs] == [g.mig_profile for g in listed[1:]]
    merged = apply_gpu_list(inv, listed)
    assert merged.gpus[0].uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert merged.gpus[0].mig_devices[3].uuid == "MIG-00000003-0000-0000-0000-000000000003"
    assert [p.pid for p in procs] == [21180, 21181, 21198]

    (csv_gpu,) = parse_query_gpu_csv(section(H100_MIG, "load", "query-gpu (csv"))
    assert csv_gpu.utilization_gpu is None and csv_gpu.mig_mode == "Enabled"
    assert csv_gpu.memory_used_mib == 11125


def test_h200_mig_compute_instance_profiles() -> None:
    inv, samples, _ = parse_table(section(H200_MIG, "load", "nvidia-smi (default table)"))
    migs = inv.gpus[0].mig_devices
    assert len(migs) == 5
    assert [(m.gi_id, m.ci_id) for m in migs] == [(2, 0), (2, 1), (3, 0), (9, 0), (10, 0)]
    # Compute-instance profiles cannot be told from the table; plain ones can.
    assert [m.profile for m in migs] == [None, None, "2g.35gb", "1g.18gb", "1g.18gb"]
    listed = parse_gpu_list(section(H200_MIG, "capabilities", "list (-L)"))
    merged = apply_gpu_list(inv, listed)
    assert [m.profile for m in merged.gpus[0].mig_devices] == [
        "1c.3g.71gb",
        "2c.3g.71gb",
        "2g.35gb",
        "1g.18gb",
        "1g.18gb",
    ]
    assert samples[0].memory_total_mib == 143771 and samples[0].power_draw_w == 295


def test_h200_and_l40s() -> None:
    inv, samples, procs = parse_table(section(H200, "load", "nvidia-smi (default table)"))
    assert samples[0].name == "NVIDIA H200" and samples[0].memory_used_mib == 32362
    assert [p.pid for p in procs] == [10291, 10293, 10309] and procs[2].used_memory_mib == 28234
    (gpu,) = parse_query_gpu_csv(section(L40S, "load", "query-gpu (csv"))
    assert gpu.name == "NVIDIA L40S" and gpu.memory_total_mib == 46068
    assert gpu.power_draw_w == 110.23 and gpu.power_limit_w == 350 and gpu.sm_clock_mhz == 2520


def test_rtx4080_desktop_processes() -> None:
    _, samples, procs = parse_table(section(RTX4080, "load", "nvidia-smi (default table)"))
    assert samples[0].name == "NVIDIA GeForce RTX 4080 ..."  # nvidia-smi's own truncation
    assert samples[0].fan_pct == 0 and samples[0].memory_total_mib == 16376
    assert [(p.pid, p.kind) for p in procs][:2] == [(2165, "C+G"), (2496, "G")]
    assert [p.pid for p in procs if p.kind == "C"] == [5021, 5022]
    listed = parse_gpu_list(section(RTX4080, "capabilities", "list (-L)"))
    assert listed[0].name == "NVIDIA GeForce RTX 4080 SUPER"


def test_driver_610_kmd_header() -> None:
    table = section(RTX2080_610, "load", "nvidia-smi (default table)")
    assert "KMD Version" in table and "Driver Version" not in table
    inv, samples, procs = parse_table(table)
    assert inv.driver_version == "610.57.04" and inv.cuda_version == "13.3"
    assert samples[0].power_draw_w == 97 and samples[0].power_limit_w == 250
    assert [p.pid for p in procs] == [1720, 4556, 28511, 28512]
    listed = parse_gpu_list(section(RTX2080_610, "capabilities", "list (-L)"))
    merged = apply_gpu_list(inv, listed)
    assert merged.gpus[0].name == "NVIDIA GeForce RTX 2080 SUPER"  # the truncated name, filled
    (gpu,) = parse_query_gpu_csv(section(RTX2080_610, "load", "query-gpu (csv"))
    assert gpu.sm_clock_mhz == 2070 and gpu.power_draw_w == 98.14


def test_driver_595_table() -> None:
    inv, samples, _ = parse_table(section(RTX2080_595, "idle", "nvidia-smi (default table)"))
    assert inv.driver_version == "595.71.05" and inv.cuda_version == "13.2"
    assert samples[0].pstate == "P8" and samples[0].memory_used_mib == 214


def test_windows_captures() -> None:
    inv, samples, procs = parse_table(section(WIN_610, "load", "nvidia-smi (default table)"))
    assert inv.driver_version == "610.62" and inv.cuda_version == "13.3"
    assert len(procs) == 21 and all(p.used_memory_mib is None for p in procs)
    assert procs[0].name == "C:\\Windows\\System32\\dwm.exe" and procs[0].kind == "C+G"
    assert samples[0].memory_used_mib == 1366
    apps = parse_compute_apps_csv(section(WIN_610, "load", "query-compute-apps"))
    assert apps and all(p.used_memory_mib is None for p in apps)
    assert any(p.name and p.name.endswith("ffmpeg.exe") for p in apps)

    inv, _, procs = parse_table(section(WIN_591, "load", "nvidia-smi (default table)"))
    assert inv.driver_version == "591.86" and inv.cuda_version == "13.1"
    assert [p.pid for p in procs][-2:] == [25704, 26660]


# --------------------------------------------------------------------------------------------
# Plain tables (nvidia-htop)
# --------------------------------------------------------------------------------------------


def test_old_table_layout_390() -> None:
    inv, samples, procs = parse_table(read("nvidia-htop__FAKE_STDIN"))
    assert inv.driver_version == "390.25" and inv.cuda_version is None
    assert len(samples) == 8 and [s.index for s in samples] == list(range(8))
    first = samples[0]
    assert first.name == "GeForce GTX 108..."
    assert (first.fan_pct, first.temperature_c, first.pstate) == (53, 75, "P2")
    assert (first.power_draw_w, first.power_limit_w) == (223, 250)
    assert (first.memory_used_mib, first.memory_total_mib) == (10807, 11178)
    assert first.utilization_gpu == 98 and first.mig_mode is None
    assert samples[7].power_draw_w == 249 and inv.gpus[4].pci_bus_id == "00000000:84:00.0"
    assert len(procs) == 13
    matlab = next(p for p in procs if p.pid == 4755)
    assert matlab.name == "...ware/MATLAB/matlab94/bin/glnxa64/MATLAB"
    assert matlab.used_memory_mib == 389 and matlab.gpu_index == 3
    assert procs[-1].pid == 9908 and procs[-1].gpu_index == 7


def test_new_table_layout_450() -> None:
    inv, samples, procs = parse_table(read("nvidia-htop__FAKE_STDIN_NEW_FORMAT"))
    assert inv.driver_version == "450.57" and inv.cuda_version == "11.0"
    assert [s.name for s in samples] == ["GeForce RTX 2070", "GeForce GTX 750 Ti"]
    assert samples[1].power_draw_w == 1 and samples[1].power_limit_w == 46
    assert samples[0].mig_mode is None  # "N/A"
    assert [(p.pid, p.kind, p.used_memory_mib) for p in procs][:2] == [
        (1032, "C", 745),
        (11021, "G", 244),
    ]
    assert len(procs) == 6


def test_long_pids() -> None:
    _, _, procs = parse_table(read("nvidia-htop__FAKE_STDIN_LONG_PIDS"))
    assert [p.pid for p in procs] == [1032, 1111021, 25544, 4755, 1114518, 13956]


def test_no_processes_346() -> None:
    inv, samples, procs = parse_table(read("nvidia-htop__FAKE_STDIN_NO_PROCESSES"))
    assert inv.driver_version == "346.46" and inv.cuda_version is None
    (gpu,) = samples
    assert gpu.name == "GRID K520" and gpu.memory_total_mib == 4095 and gpu.fan_pct is None
    assert inv.gpus[0].pci_bus_id == "0000:00:03.0"
    assert gpu.timestamp == datetime(2017, 3, 31, 17, 22, 46, tzinfo=UTC)
    assert procs == []


def test_docker_table_without_processes() -> None:
    inv, samples, procs = parse_table(read("nvidia-htop__FAKE_STDIN_NO_PROCESSES_DOCKER"))
    assert inv.cuda_version == "10.2"
    assert samples[0].memory_used_mib == 10916 and samples[0].utilization_gpu == 59
    assert samples[1].pstate == "P8"
    assert procs == []  # the PID namespace hides them


# --------------------------------------------------------------------------------------------
# XML
# --------------------------------------------------------------------------------------------


def test_a100_40gb_mig_xml() -> None:
    inv = parse_xml(read("netdata-go.d.plugin__a100-sxm4-mig.xml"))
    assert inv.driver_version == "510.47.03" and inv.cuda_version == "11.6"
    (gpu,) = inv.gpus
    assert gpu.name == "NVIDIA A100-SXM4-40GB" and gpu.mig_mode == "Enabled"
    assert len(gpu.mig_devices) == 2
    assert [(m.gi_id, m.ci_id, m.mig_index) for m in gpu.mig_devices] == [(1, 0, 0), (2, 0, 1)]
    assert [m.profile for m in gpu.mig_devices] == ["3g.20gb", "3g.20gb"]
    assert gpu.mig_devices[0].memory_total_mib == 19968
    assert gpu.mig_devices[0].memory_used_mib == 19
    assert gpu.ecc_mode == "Enabled" and gpu.pcie_gen == 4 and gpu.pcie_width == 16
    (sample,) = xml_samples(read("netdata-go.d.plugin__a100-sxm4-mig.xml"))
    assert sample.utilization_gpu is None and sample.power_draw_w == 66.92
    assert sample.power_limit_w == 400


def test_a100_80gb_mig_xml_v12() -> None:
    inv = parse_xml(read("telegraf__a100-sxm4-v12.xml"))
    (gpu,) = inv.gpus  # attached_gpus says 4; the capture kept one
    assert len(gpu.mig_devices) == 4
    assert [m.gi_id for m in gpu.mig_devices] == [3, 4, 5, 6]
    assert {m.profile for m in gpu.mig_devices} == {"1g.20gb"}
    assert gpu.power_limit_w == 500  # gpu_power_readings/current_power_limit
    assert gpu.memory_total_mib == 81920


def test_windows_xml_process_memory_is_none() -> None:
    inv = parse_xml(read("netdata-go.d.plugin__rtx-2080-win.xml"))
    assert len(inv.processes) == 26
    assert all(p.used_memory_mib is None for p in inv.processes)
    assert all(p.kind == "C+G" for p in inv.processes)
    assert inv.processes[0].pid == 7724
    assert inv.processes[0].name and inv.processes[0].name.endswith("PhoneExperienceHost.exe")
    assert sum(p.name is None for p in inv.processes) == 5  # empty <process_name/>
    assert inv.gpus[0].serial is None  # N/A


def test_trimmed_blackwell_xml_power_fallback() -> None:
    text = read("netdata__rtx-pro-6000-driver-580.xml")
    assert not text.lstrip().startswith("<?xml")
    inv = parse_xml(text)
    assert inv.driver_version is None and inv.gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell"
    (sample,) = xml_samples(text)
    assert sample.power_draw_w == 66.84  # power_draw N/A, instant_power_draw given
    assert sample.temperature_c == 37 and sample.fan_pct == 40 and sample.pstate == "P8"
    assert sample.timestamp is None


def test_oldest_dtd_v10_trimmed() -> None:
    text = read("telegraf__gtx-1070-ti.xml")
    inv = parse_xml(text)
    assert inv.driver_version is None and inv.cuda_version is None
    gpu = inv.gpus[0]
    assert gpu.name == "GeForce GTX 1070 Ti" and gpu.pcie_gen == 1 and gpu.pcie_width == 16
    (sample,) = xml_samples(text)
    assert sample.fan_pct == 100 and sample.memory_used_mib == 42 and sample.power_draw_w is None
    assert sample.sm_clock_mhz == 135


def test_v13_power_readings() -> None:
    text = read("telegraf__rtx-3080-v13.xml")
    inv = parse_xml(text)
    assert inv.driver_version == "595.58.03" and inv.cuda_version == "13.2"
    (sample,) = xml_samples(text)
    assert sample.power_draw_w == 142.33 and sample.power_limit_w == 320
    assert sample.utilization_gpu == 65 and sample.memory_used_mib == 9184
    assert sample.timestamp == datetime(2026, 4, 10, 10, 23, 1, tzinfo=UTC)


def test_tesla_t4_processes() -> None:
    inv = parse_xml(read("telegraf__tesla-t4.xml"))
    assert [(p.pid, p.name, p.used_memory_mib, p.kind) for p in inv.processes] == [
        (675, "/usr/lib/xorg/Xorg", 22, "G"),
        (5762, "python", 1005, "C"),
    ]
    assert inv.processes[1].gpu_uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    gpu = inv.gpus[0]
    assert gpu.ecc_mode == "Enabled" and gpu.pcie_width == 8 and gpu.power_limit_w == 70
    assert gpu.vbios == "90.04.84.00.06" and gpu.pci_bus_id == "00000000:00:1E.0"


def test_more_xml_values() -> None:
    assert parse_xml(read("telegraf__gtx-1660-ti.xml")).gpus[0].name == "Graphics Device"
    assert xml_samples(read("telegraf__quadro-p400.xml"))[0].power_draw_w is None
    p100 = xml_samples(read("netdata-go.d.plugin__tesla-p100.xml"))[0]
    assert (p100.power_draw_w, p100.temperature_c, p100.memory_total_mib) == (26.16, 38, 16384)
    laptop = parse_xml(read("netdata-go.d.plugin__rtx-3060.xml"))
    assert laptop.gpus[0].power_limit_w is None and laptop.processes[0].pid == 28543
    assert parse_xml(read("telegraf__rtx-3090-v12.xml")).gpus[0].power_limit_w == 200
    ada = parse_xml(read("telegraf__rtx-4000-sff-ada-v13.xml"))
    assert len(ada.processes) == 4 and ada.processes[0].name == "cosmic-comp"
    win = parse_xml(read("telegraf__rtx-3080-v12.xml"))
    assert win.driver_version == "536.40" and len(win.processes) == 5
    assert len(win.processes[2].name or "") <= nvsmi.MAX_TEXT_CHARS  # a 400-char msedge line


def test_xml_with_raw_control_characters_in_a_process_name() -> None:
    # nvidia-smi copies process names into its XML unescaped: one hostile name must not make
    # the whole report unreadable, nor reach the terminal.
    text = read("telegraf__tesla-t4.xml").replace(
        "<process_name>python</process_name>",
        "<process_name>\x1b]0;pwn\x07\x1b[31mpy&thon\x01&#27;\u202e</process_name>",
    )
    inv = parse_xml(text)
    assert inv.processes[1].name == "py&thon" and inv.processes[1].used_memory_mib == 1005


def test_xml_that_is_not_xml() -> None:
    with pytest.raises(NvsmiParseError):
        parse_xml("NVIDIA-SMI has failed because it couldn't communicate with the driver")
    with pytest.raises(NvsmiParseError):
        xml_samples("<html><body>not nvidia</body></html>")
    with pytest.raises(NvsmiParseError):
        parse_xml('<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>')
    assert parse_xml("<nvidia_smi_log/>").gpus == []


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


def test_p100_csv_with_units_in_header() -> None:
    (gpu,) = parse_query_gpu_csv(read("netdata-go.d.plugin__tesla-p100.csv"))
    assert gpu.index == 0  # no index field: position / uuid order
    assert gpu.name == "Tesla P100-PCIE-16GB"
    assert gpu.uuid == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"
    assert gpu.fan_pct is None  # [N/A]
    assert gpu.pstate == "P0" and gpu.memory_used_mib == 0 and gpu.memory_total_mib is None
    assert gpu.temperature_c == 37 and gpu.power_draw_w == 28.16 and gpu.sm_clock_mhz == 405


def test_telemetry_fields_are_real_nvidia_smi_fields() -> None:
    help_texts = [read("netdata-go.d.plugin__help-query-gpu.txt")]
    for name in (H100, RTX2080_610):
        help_texts.append(section(name, "capabilities", "help-query-gpu"))
    for text in help_texts:
        names = set(re.findall(r'^"([\w.]+)"', text, re.M))
        names |= set(re.findall(r'^"[\w.]+" or "([\w.]+)"', text, re.M))
        assert set(TELEMETRY_FIELDS) <= names
        # Every alias nvidia-smi documents resolves to the name it prints in the header.
        for canonical, alias in re.findall(r'^"([\w.]+)" or "([\w.]+)"', text, re.M):
            assert canonical_field(alias) == canonical, alias
    apps_help = section(H100, "capabilities", "help-query-compute-apps")
    app_names = set(re.findall(r'^"([\w.]+)"', apps_help, re.M))
    assert set(COMPUTE_APPS_FIELDS) <= app_names
    for canonical, alias in re.findall(r'^"([\w.]+)" or "([\w.]+)"', apps_help, re.M):
        assert canonical_field(alias, "apps") == canonical


def test_commands() -> None:
    assert query_gpu_command() == (
        "nvidia-smi --query-gpu=index,uuid,name,timestamp,utilization.gpu,utilization.memory,"
        "memory.used,memory.total,temperature.gpu,power.draw,power.limit,fan.speed,clocks.sm,"
        "pstate,mig.mode.current --format=csv,nounits -lms 1000"
    )
    assert query_gpu_command(None, ["index", "name"], header=False) == (
        "nvidia-smi --query-gpu=index,name --format=csv,noheader,nounits"
    )
    assert query_gpu_command(250, ["index"], units=True).endswith("--format=csv -lms 250")
    assert compute_apps_command() == (
        "nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_gpu_memory "
        "--format=csv,nounits"
    )
    with pytest.raises(ValueError):
        query_gpu_command(fields=["index; rm -rf /"])


def test_stream_header_then_lines_nounits() -> None:
    parser = CsvStreamParser()
    header = (
        "index, uuid, name, timestamp, utilization.gpu [%], utilization.memory [%], "
        "memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], "
        "power.limit [W], fan.speed [%], clocks.current.sm [MHz], pstate, mig.mode.current"
    )
    assert parser.feed(header) is None
    assert parser.fields[6] == "memory.used" and parser.fields[12] == "clocks.current.sm"
    line = (
        "1, GPU-abc, NVIDIA H100 80GB HBM3, 2026/07/14 08:12:53.353, 97, 11, 19818, 81559, 59, "
        "631.95, 700.00, [N/A], 1980, P0, Disabled"
    )
    sample = parser.feed(line + "\r\n")
    assert isinstance(sample, GpuSample)
    assert sample.index == 1 and sample.utilization_gpu == 97 and sample.memory_free_mib == 61741
    assert sample.power_draw_w == 631.95 and sample.fan_pct is None and sample.sm_clock_mhz == 1980
    assert parser.skipped == 0


def test_stream_noheader_with_units_and_na() -> None:
    parser = CsvStreamParser(TELEMETRY_FIELDS)
    sample = parser.feed(
        "0, GPU-x, Tesla T4, 2023/04/24 16:22:39.000, 45 %, 3 %, 1234 MiB, 15360 MiB, 40, "
        "26.78 W, 70.00 W, [Not Supported], 585 MHz, P0, [N/A]"
    )
    assert sample is not None
    assert sample.utilization_gpu == 45 and sample.memory_used_mib == 1234
    assert sample.power_limit_w == 70 and sample.fan_pct is None and sample.mig_mode is None
    mig = parser.feed(
        "0, GPU-x, NVIDIA A100, 2023/04/24 16:22:40, [N/A], [N/A], 38, 40960, 36, 66.92, 400.00, "
        "N/A, 1410, P0, Enabled"
    )
    assert mig is not None and mig.utilization_gpu is None and mig.mig_mode == "Enabled"
    unknown = parser.feed("0, GPU-x, X, , [Unknown Error], , , , , , , , , , ")
    assert unknown is not None and unknown.utilization_gpu is None and unknown.timestamp is None


def test_stream_skips_bad_lines() -> None:
    parser = CsvStreamParser()
    assert parser.feed("No devices were found") is None
    assert parser.feed("1, 2, 3") is None
    assert parser.feed("x" * 100_000) is None
    assert parser.feed(b"\xff\xfe garbage") is None
    assert parser.feed("") is None  # blank lines are not counted
    assert parser.skipped == 4
    assert parser.last_skipped == "\ufffd\ufffd garbage"  # kept, sanitised, for a diagnosis
    bad_index = ", ".join(["zero"] + ["1"] * (len(TELEMETRY_FIELDS) - 1))
    assert parser.feed(bad_index) is None and parser.skipped == 5


def test_stream_new_header_changes_order() -> None:
    parser = CsvStreamParser()
    parser.feed("uuid, memory.used [MiB]")
    a = parser.feed("GPU-a, 10 MiB")
    b = parser.feed("GPU-b, 20 MiB")
    a2 = parser.feed("GPU-a, 30 MiB")
    assert (a.index, b.index, a2.index) == (0, 1, 0)  # type: ignore[union-attr]
    assert a2.memory_used_mib == 30  # type: ignore[union-attr]
    parser.feed("pstate, temperature.gpu")
    c = parser.feed("P8, 33")
    assert c is not None and c.index == 0 and c.pstate == "P8" and c.temperature_c == 33


def test_stream_comma_in_name_and_escape_sequences() -> None:
    parser = CsvStreamParser(["index", "name", "memory.used"])
    sample = parser.feed("0, Evil, Inc \x1b[31mGPU\x1b[0m\x07, 5")
    assert sample is not None
    assert sample.name == "Evil, Inc GPU" and sample.memory_used_mib == 5
    osc = parser.feed("1, \x1b]0;owned\x07Card\u202e\u0085, 6")
    assert osc is not None and osc.name == "Card"


def test_power_draw_falls_back_to_instant() -> None:
    fields = ["index", "power.draw", "power.draw.instant", "power.draw.average"]
    (s,) = parse_query_gpu_csv("0, [N/A], 66.84, 60.00", fields)
    assert s.power_draw_w == 66.84


def test_compute_apps_aliases_and_na() -> None:
    text = "pid, gpu_uuid, name, used_memory [MiB]\n42, GPU-1, python, [N/A]\nbad line\n"
    (proc,) = parse_compute_apps_csv(text)
    assert (proc.pid, proc.gpu_uuid, proc.name, proc.used_memory_mib) == (
        42,
        "GPU-1",
        "python",
        None,
    )
    (p2,) = parse_compute_apps_csv("7, GPU-2, /bin/my, app, 100 MiB")  # comma in the name
    assert p2.name == "/bin/my, app" and p2.used_memory_mib == 100


def test_gpu_list_plain_and_old_mig_lines() -> None:
    text = (
        "GPU 0: Tesla K80 (UUID: GPU-1111)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2222)\n"
        "  MIG 3g.20gb Device 0: (UUID: MIG-GPU-2222/1/0)\n"
        "garbage\n"
    )
    listed = parse_gpu_list(text)
    assert [(g.index, g.name, g.uuid) for g in listed[:2]] == [
        (0, "Tesla K80", "GPU-1111"),
        (1, "NVIDIA A100-SXM4-40GB", "GPU-2222"),
    ]
    assert listed[2].parent_index == 1 and listed[2].mig_profile == "3g.20gb"


def test_sanitize() -> None:
    assert sanitize("a\x1b[2J\x1b[Hb") == "ab"
    assert sanitize("x\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\y") == "xlinky"
    assert sanitize("tab\there\nnewline") == "tab here newline"
    assert sanitize("\u202eevil\u200b") == "evil"
    assert sanitize("\x9b31mred") == "red"
    long = sanitize("n" * 1000)
    assert len(long) == nvsmi.MAX_TEXT_CHARS and long.endswith("\u2026")
    assert sanitize(b"bytes\xff") == "bytes\ufffd"


def test_hostile_table_names_are_sanitised() -> None:
    table = read("nvidia-htop__FAKE_STDIN_NEW_FORMAT").replace(
        "python3                           244MiB",
        "\x1b]0;pwn\x07\x1b[2Jevil\u202e           244MiB",
    )
    _, _, procs = parse_table(table)
    assert procs[1].name == "evil"


# --------------------------------------------------------------------------------------------
# Fuzzing
# --------------------------------------------------------------------------------------------

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
any_text = st.one_of(
    st.text(max_size=400),
    st.binary(max_size=400).map(lambda b: b.decode("latin-1")),
    st.text(alphabet=st.sampled_from(list(", []%\x1b\n\r\t0123456789.N/AMiBW|")), max_size=400),
    st.integers(1, 300_000).map(lambda n: "9," * n),
)


@FUZZ
@given(lines=st.lists(any_text, max_size=8))
def test_fuzz_csv_stream(lines: list[str]) -> None:
    parser = CsvStreamParser()
    for line in lines:
        out = parser.feed(line)
        assert out is None or isinstance(out, GpuSample)
        assert_terminal_safe(out)


@FUZZ
@given(
    index=st.integers(0, 64),
    pid=st.integers(0, 2**31),
    values=st.lists(
        st.text(max_size=40), min_size=len(TELEMETRY_FIELDS), max_size=len(TELEMETRY_FIELDS)
    ),
)
def test_fuzz_csv_values(index: int, pid: int, values: list[str]) -> None:
    cells = [str(index)] + [
        v.replace(",", "").replace("\n", "").replace("\r", "") for v in values[1:]
    ]
    parser = CsvStreamParser()
    out = parser.feed(", ".join(cells))
    assert out is None or isinstance(out, GpuSample)
    assert_terminal_safe(out)
    apps = parse_compute_apps_csv(", ".join([str(pid)] + cells[1:4]))
    assert_terminal_safe(apps)


@FUZZ
@given(text=any_text)
def test_fuzz_xml_garbage(text: str) -> None:
    try:
        inv = parse_xml(text)
    except NvsmiParseError:
        return
    assert_terminal_safe(inv)


xml_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=80,
)


@FUZZ
@given(name=xml_text, proc=xml_text, value=xml_text, mig=xml_text)
def test_fuzz_xml_hostile_values(name: str, proc: str, value: str, mig: str) -> None:
    doc = (
        "<?xml version='1.0'?><nvidia_smi_log><driver_version>{v}</driver_version>"
        "<gpu id='{v}'><product_name>{n}</product_name><uuid>{v}</uuid>"
        "<fb_memory_usage><total>{v}</total><used>12 MiB</used></fb_memory_usage>"
        "<temperature><gpu_temp>{v}</gpu_temp></temperature><fan_speed>{v}</fan_speed>"
        "<gpu_power_readings><power_draw>{v}</power_draw></gpu_power_readings>"
        "<mig_devices><mig_device><index>{m}</index><gpu_instance_id>{v}</gpu_instance_id>"
        "<device_attributes><shared><multiprocessor_count>{m}</multiprocessor_count></shared>"
        "</device_attributes></mig_device></mig_devices>"
        "<processes><process_info><pid>{v}</pid><process_name>{p}</process_name>"
        "<used_memory>{v}</used_memory><type>{v}</type></process_info>"
        "<process_info><pid>7</pid><process_name>{p}</process_name></process_info></processes>"
        "</gpu></nvidia_smi_log>"
    ).format(n=escape(name), p=escape(proc), v=escape(value, {"'": "&apos;"}), m=escape(mig))
    inv = parse_xml(doc)  # control characters XML forbids are dropped, not fatal
    samples = xml_samples(doc)
    assert len(inv.gpus) == 1 and len(samples) == 1
    assert_terminal_safe([inv, samples])


@FUZZ
@given(text=any_text)
def test_fuzz_table_and_list(text: str) -> None:
    result = parse_table(text)
    assert_terminal_safe(list(result))
    assert_terminal_safe(parse_gpu_list(text))
    diagnose_nvidia_smi(text, None)


@FUZZ
@given(name=st.text(max_size=60), proc=st.text(max_size=60))
def test_fuzz_table_hostile_names(name: str, proc: str) -> None:
    table = read("nvidia-htop__FAKE_STDIN_NEW_FORMAT")
    # A GPU name comes from the driver (no line breaks); a process name can hold anything.
    table = table.replace("GeForce RTX 2070   ", name.replace("|", "").replace("\n", "") + " ")
    table = table.replace("python3                      ", proc.replace("|", "") + " ")
    inv, samples, procs = parse_table(table)
    assert_terminal_safe([inv, samples, procs])
    assert [s.index for s in samples] == [0, 1]
    assert {1032, 25544, 4755} <= {p.pid for p in procs}  # rows with other names still read
