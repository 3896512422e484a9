"""`gputui smi` and `gputui doctor`: one-shot snapshots (NVML here, a sandbox over SSH, saved
captures) and the checklist, as text and JSON."""

from __future__ import annotations

import asyncio
import ctypes
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.cli import smi_report as smi
from gputui.nvidia.diagnose import DIAGNOSES
from gputui.services import smi as smi_service
from gputui.services.hub import Services
from gputui.services.smi import Check, Facts, evaluate_checks
from tests.conftest import GPUTUI, REPO, run_gputui_env
from tests.services.test_telemetry_support import (
    DRIVER_MESSAGE,
    break_nvidia_smi,
    instance_root,
    make_services,
    rent,
    start_load,
)
from tests.shared import capture

GPU_KEYS = {"index", "name", "uuid", "utilization_gpu", "memory_used_mib", "memory_total_mib",
            "temperature_c", "power_draw_w", "power_limit_w"}


def nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


no_nvml = pytest.mark.skipif(nvml_present(), reason="libnvidia-ml.so.1 is installed here")


@pytest.fixture
async def services(gputui_home: Path):
    svc = make_services(gputui_home)
    yield svc
    await svc.close()


fixture = capture


# -- smi --local -----------------------------------------------------------------------------


@no_nvml
def test_smi_local_without_nvml_is_one_diagnosis_line_and_exit_1() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert smi.smi_local(out=out, err=err) == 1
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gputui: NVML unavailable: ")
    assert "libnvidia-ml.so.1" in lines[0] and "not found" in lines[0] and "Fix:" in lines[0]
    # no GPUs to read, but the machine itself still can be: its host vitals on stdout
    assert out.getvalue().startswith("host: CPU ") and " cores" in out.getvalue()
    out = io.StringIO()
    assert smi.smi_local(as_json=True, out=out, err=io.StringIO()) == 1
    data = json.loads(out.getvalue())
    assert data["gpus"] == [] and data["diagnosis"]["code"] == "nvml-library-missing"


@no_nvml
def test_smi_local_in_a_fresh_process_has_no_traceback() -> None:
    code = "import sys; from gputui.cli.smi_report import smi_local; sys.exit(smi_local())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "NVML Shared Library Not Found" in done.stderr
    assert done.stderr.count("\n") == 1


@no_nvml
def test_gputui_smi_local_command(gputui_home: Path) -> None:
    done = subprocess.run([*GPUTUI, "smi", "--local"], capture_output=True, text=True,
                          env=run_gputui_env(gputui_home), timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "libnvidia-ml.so.1" in done.stderr and "not found" in done.stderr


# -- smi NAME ----------------------------------------------------------------------------------


async def test_smi_remote_snapshot_text_and_json(services: Services):
    inst = await rent(services, count=2, name="snap")
    pid = await start_load(services, inst, "--gpus 1 --mem 6G --util 90 --seconds 30")
    out = io.StringIO()
    assert await smi.smi_remote(services, "snap", out=out) == 0
    text = out.getvalue()
    assert text.splitlines()[0] == "snap  driver 570.124.06  CUDA 12.8"
    assert "[0] NVIDIA GeForce RTX 4090" in text and "[1] NVIDIA GeForce RTX 4090" in text
    assert f"/{pid}(6144M)" in text
    out = io.StringIO()
    assert await smi.smi_remote(services, "snap", as_json=True, out=out) == 0
    data = json.loads(out.getvalue())
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    for gpu in data["gpus"]:
        assert GPU_KEYS <= set(gpu)
    assert data["gpus"][0]["memory_total_mib"] == 24564
    assert data["gpus"][0]["mig_mode"] is None  # [N/A] -> null
    assert data["gpus"][1]["utilization_gpu"] >= 80
    (proc,) = data["processes"]
    assert proc["pid"] == pid and proc["gpu_index"] == 1 and proc["used_memory_mib"] == 6144
    assert proc["name"] == "python train.py" and proc["gpu_uuid"].startswith("GPU-")
    # the host's vitals beside the GPUs: two readings of /proc, the rented disk from df
    host = data["host"]
    assert host is not None and 0 <= host["cpu_pct"] <= 100 and host["cpu_cores"] >= 1
    assert host["mem_total_mib"] > 0 and 0 <= host["mem_pct"] <= 100
    assert host["load1"] is not None and host["net_rx_bps"] is not None
    (disk,) = host["disks"]
    assert disk["mount"] == "/" and disk["size_kib"] == round(inst.disk_gb * 1e9 / 1024)
    assert 0 <= disk["used_pct"] < 1  # a fresh instance folder on a rented disk
    assert "host: CPU " in text and " cores" in text and "/ 0% (" in text


async def test_smi_remote_with_a_broken_driver_prints_the_diagnosis(services: Services):
    inst = await rent(services, count=1, name="broken")
    break_nvidia_smi(instance_root(services, inst), DRIVER_MESSAGE, 9)
    out, err = io.StringIO(), io.StringIO()
    assert await smi.smi_remote(services, "broken", out=out, err=err) == 1
    line = err.getvalue().strip()
    assert "\n" not in line and "kernel module is not loaded" in line and "modprobe" in line
    assert "Traceback" not in line


async def test_smi_remote_unknown_or_released_instance_is_a_one_line_error(services: Services):
    from gputui.services.hub import ServiceError

    with pytest.raises(LookupError):
        await smi.smi_remote(services, "nope")
    inst = await rent(services, count=1, name="gone")
    await services.release(inst, "manual")
    with pytest.raises(ServiceError, match="released"):
        await smi.smi_remote(services, "gone")


# -- smi --input -------------------------------------------------------------------------------


@pytest.mark.parametrize("name,gpus", [
    ("netdata-go.d.plugin__tesla-p100.csv", 1),
    ("netdata-go.d.plugin__a100-sxm4-mig.xml", 1),
    ("telegraf__rtx-3080-v13.xml", 1),
    ("nvidia-htop__FAKE_STDIN_NEW_FORMAT", 2),
])
def test_smi_input_reads_saved_captures(name: str, gpus: int) -> None:
    path = fixture(name)
    out = io.StringIO()
    assert smi.smi_input(path, as_json=True, out=out, err=io.StringIO()) == 0
    data = json.loads(out.getvalue())
    assert len(data["gpus"]) == gpus
    for gpu in data["gpus"]:
        assert GPU_KEYS <= set(gpu)
    out = io.StringIO()
    assert smi.smi_input(path, out=out) == 0
    assert "[0] " in out.getvalue()


def test_smi_input_mig_and_processes() -> None:
    out = io.StringIO()
    assert smi.smi_input(fixture("netdata-go.d.plugin__a100-sxm4-mig.xml"), as_json=True,
                         out=out) == 0
    gpu = json.loads(out.getvalue())["gpus"][0]
    assert [m["profile"] for m in gpu["mig_devices"]] == ["3g.20gb", "3g.20gb"]
    out = io.StringIO()
    assert smi.smi_input(fixture("nvidia-htop__FAKE_STDIN_NEW_FORMAT"), as_json=True,
                         out=out) == 0
    procs = json.loads(out.getvalue())["processes"]
    assert {"pid", "gpu_index", "used_memory_mib", "name"} <= set(procs[0])
    assert any(p["pid"] == 1032 and p["gpu_index"] == 0 for p in procs)


def test_smi_input_errors(tmp_path: Path) -> None:
    err = io.StringIO()
    assert smi.smi_input(tmp_path / "missing.csv", err=err) == 1
    assert "cannot read" in err.getvalue()
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nworld\n")
    err = io.StringIO()
    assert smi.smi_input(junk, err=err) == 1 and "no GPU readings" in err.getvalue()
    failed = tmp_path / "failed.txt"
    failed.write_text(DRIVER_MESSAGE + "\n")
    err = io.StringIO()
    assert smi.smi_input(failed, err=err) == 1 and "modprobe" in err.getvalue()


# -- doctor ----------------------------------------------------------------------------------------


@no_nvml
def test_doctor_local_here_says_what_and_how_to_fix() -> None:
    out = io.StringIO()
    code = smi.doctor_local(out=out)
    lines = out.getvalue().strip().splitlines()
    assert code == 1
    assert lines[0] == "gputui doctor: this machine"
    by_name = {line.split(":")[0].split(None, 1)[1]: line for line in lines[1:]}
    assert set(by_name) >= {"nvml", "nvidia-smi", "driver", "CUDA_VISIBLE_DEVICES", "container",
                            "pytorch", "leftover processes"}
    assert by_name["nvml"].startswith("FAIL") and "libnvidia-ml.so.1" in by_name["nvml"]
    assert "fix:" in by_name["nvml"]
    for line in lines[1:]:
        assert line.split()[0] in ("ok", "WARN", "FAIL")
    out = io.StringIO()
    smi.doctor_local(as_json=True, out=out)
    data = json.loads(out.getvalue())
    assert data["ok"] is False and data["target"] == "this machine"
    assert all({"name", "status", "message", "fix"} <= set(c) for c in data["checks"])


async def test_doctor_remote_on_a_sandbox_with_a_leftover(services: Services,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inst = await rent(services, count=2, name="doc")
    pid = await start_load(services, inst, "--gpus 0 --mem 4G --util 0 --seconds 30")
    out = io.StringIO()
    assert await smi.doctor_remote(services, "doc", out=out) == 0
    text = out.getvalue()
    assert "ok    nvidia-smi:" in text and "2 GPU(s)" in text
    assert "ok    driver: driver 570.124.06, CUDA 12.8" in text
    assert "ok    CUDA_VISIBLE_DEVICES: not set" in text
    leftover = next(line for line in text.splitlines() if "leftover processes" in line)
    assert leftover.startswith("WARN") and f"PID {pid}" in leftover
    assert f"gputui ssh doc -- kill {pid}" in leftover


async def test_doctor_remote_with_a_broken_driver_fails_with_the_fix(services: Services):
    inst = await rent(services, count=1, name="doc2")
    break_nvidia_smi(instance_root(services, inst), DRIVER_MESSAGE, 9)
    out = io.StringIO()
    assert await smi.doctor_remote(services, "doc2", as_json=True, out=out) == 1
    checks = {c["name"]: c for c in json.loads(out.getvalue())["checks"]}
    assert checks["nvidia-smi"]["status"] == "fail"
    assert "exit status 9" in checks["nvidia-smi"]["message"]
    assert "modprobe" in checks["nvidia-smi"]["fix"]


# -- the checklist with fixed facts -----------------------------------------------------------------


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def working(**kw) -> Facts:
    from gputui.models import GpuSample

    facts = Facts("box", remote=True, smi_path="/usr/bin/nvidia-smi", smi_rc=0,
                  driver_version="535.104.05", cuda_version="12.2",
                  samples=[GpuSample(index=0, utilization_gpu=50), GpuSample(index=1)],
                  torch={"installed": False})
    for k, v in kw.items():
        setattr(facts, k, v)
    return facts


def test_cpu_only_torch_is_named() -> None:
    c = by_name(evaluate_checks(working(torch={"installed": True, "version": "2.4.0+cpu",
                                               "cuda": None})))["pytorch"]
    assert c.status == "fail" and "CPU-only" in c.message and "download.pytorch.org" in c.fix


def test_torch_newer_than_the_driver_is_cuda_driver_insufficient() -> None:
    c = by_name(evaluate_checks(working(torch={"installed": True, "version": "2.5.0",
                                               "cuda": "12.4", "available": False,
                                               "warnings": []})))["pytorch"]
    assert c.status == "fail"
    assert "CUDA driver version is insufficient for CUDA runtime version" in c.message
    ok = by_name(evaluate_checks(working(torch={"installed": True, "version": "2.5.0",
                                                "cuda": "12.1", "available": True,
                                                "count": 2})))["pytorch"]
    assert ok.status == "ok" and "sees 2 GPU(s)" in ok.message


def test_visible_devices_and_containers() -> None:
    c = by_name(evaluate_checks(working(env={"CUDA_VISIBLE_DEVICES": ""})))
    assert c["CUDA_VISIBLE_DEVICES"].status == "warn"
    c = by_name(evaluate_checks(working(env={"CUDA_VISIBLE_DEVICES": "0,3"})))
    assert c["CUDA_VISIBLE_DEVICES"].status == "warn" and "3" in c["CUDA_VISIBLE_DEVICES"].message
    broken = working(smi_rc=255, smi_output="Failed to initialize NVML: Unknown Error",
                     samples=[], driver_version=None, cuda_version=None,
                     container=["dockerenv"], devices=[])
    c = by_name(evaluate_checks(broken))
    assert c["nvidia-smi"].status == "fail" and "Unknown Error" in c["nvidia-smi"].message
    assert c["container"].status == "fail" and "--gpus all" in c["container"].fix
    missing = working(smi_path=None, smi_rc=127, samples=[], driver_version=None,
                      cuda_version=None)
    c = by_name(evaluate_checks(missing))
    assert c["nvidia-smi"].message == DIAGNOSES["nvidia-smi-missing"].problem
    assert c["driver"].status == "fail"


def test_remote_output_is_parsed_into_facts() -> None:
    probe = json.dumps({"installed": True, "version": "2.3.1", "cuda": None})
    text = "\n".join([
        "@@gputui smi_path", "/usr/bin/nvidia-smi",
        "@@gputui smi", "Failed to initialize NVML: Driver/library version mismatch",
        "@@gputui smi_rc 18",
        "@@gputui env", "CUDA_VISIBLE_DEVICES=<unset>", "NVIDIA_VISIBLE_DEVICES=all",
        "@@gputui container", "dockerenv",
        "@@gputui dev", "nvidia0", "nvidiactl",
        "@@gputui torch", probe,
        "@@gputui end",
    ])
    facts = smi_service.parse_remote("box", text)
    assert facts.smi_rc == 18 and facts.env["CUDA_VISIBLE_DEVICES"] is None
    assert facts.env["NVIDIA_VISIBLE_DEVICES"] == "all" and facts.devices == ["nvidia0",
                                                                              "nvidiactl"]
    c = by_name(evaluate_checks(facts))
    assert c["nvidia-smi"].status == "fail" and "mismatch" in c["nvidia-smi"].message
    assert "Reboot" in c["nvidia-smi"].fix
    assert c["pytorch"].status == "warn" and "CPU-only" in c["pytorch"].message


async def test_doctor_names_gputuis_own_ollama_and_queue_runs_not_as_leftovers(
        services: Services, monkeypatch: pytest.MonkeyPatch):
    """Issue 29.6: the doctor said "WARN leftover processes … PID 1653 (ollama) 5059 MiB … kill
    them" of the Ollama gputui had loaded a model into. gputui's own Ollama and the queue's
    running runs are named as such; only a true leftover is to be killed."""
    from gputui.services.jobs import JobService, JobSpec
    from gputui.services.ollama import OllamaService

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inst = await rent(services, count=2, name="own")
    ollama = OllamaService(services)
    await ollama.start(inst)
    st = await ollama.apply_gpus(inst, [0])
    await ollama.pull(inst, "qwen2.5:0.5b")
    await ollama.load(inst, "qwen2.5:0.5b")
    jobs = JobService(services)
    [run] = await jobs.add(inst, [JobSpec("gpu-load --gpus 1 --mem 2G --util 0 --seconds 60",
                                          name="train")])

    async def doctor() -> str:
        out = io.StringIO()
        assert await smi.doctor_remote(services, "own", out=out) == 0
        return next(line for line in out.getvalue().splitlines()
                    if "leftover processes" in line)

    for _ in range(100):  # the run's process is on the GPU
        line = await doctor()
        if "queue run" in line:
            break
        await asyncio.sleep(0.1)
    assert line.startswith("ok ") and "kill" not in line, line
    assert f"PID {st.pid} (gputui's Ollama, holding the models it loaded)" in line
    assert f"(gputui queue run {run}: train, running)" in line
    # a true leftover beside them: only that one is to be killed
    pid = await start_load(services, inst, "--gpus 1 --mem 1G --util 0 --seconds 30")
    line = await doctor()
    assert line.startswith("WARN") and f"PID {pid} " in line
    assert f"gputui ssh own -- kill {pid}`" in line
    assert "gputui's own: " in line and f"PID {st.pid} (gputui's Ollama" in line
    await jobs.cancel(inst, run)
    await ollama.close()


def test_a_process_that_outlived_its_queue_run_is_a_leftover(tmp_path: Path) -> None:
    """The runner's GPUTUI_JOB_ID is inherited by whatever a run starts: a process still on
    the GPU after its run ended is a leftover; one of a running run is gputui's own."""
    from gputui.models import GpuSample, ProcessSample
    from gputui.services.smi import _local_own

    def proc(pid: int, cmdline: str, env: dict[str, str]) -> None:
        d = tmp_path / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in env.items()))

    for job, status in (("3", "running"), ("2", "failed")):
        run = tmp_path / "runs" / job
        run.mkdir(parents=True)
        (run / "state.json").write_text(json.dumps({"status": status, "pid": 1}))
        proc(int(job) * 100, "python train.py", {
            "GPUTUI_JOB_ID": job, "GPUTUI_JOB_NAME": f"run{job}\x1b[31m",
            "GPUTUI_JOB_DIR": str(run)})
    proc(400, "/usr/local/bin/ollama runner --model x", {"HOME": "/root"})
    proc(500, "python other.py", {"HOME": "/root"})
    own = _local_own([200, 300, 400, 500, 600], tmp_path)
    assert set(own) == {300, 400}
    assert own[300].kind == "job" and own[300].job_id == "3" and "\x1b" not in own[300].job_name
    assert own[400].kind == "ollama"
    facts = working(
        samples=[GpuSample(index=0, utilization_gpu=0)], own=own, processes=[
            ProcessSample(pid=p, gpu_index=0, name="python", used_memory_mib=2048)
            for p in (200, 300, 400, 500)])
    check = by_name(evaluate_checks(facts))["leftover processes"]
    assert check.status == "warn" and "kill 200 500`" in check.fix
    assert "PID 300 (gputui queue run 3: run3, running)" in check.message
    assert "PID 400 (gputui's Ollama" in check.message
    # the remote script's lines say the same
    text = ("@@gputui own\n200\t2\trun2\tfailed\tpython train.py\n300\t3\trun3\trunning\tpython x\n"
            "400\t\t\t\t/usr/bin/ollama serve\n500\t\t\t\tpython other.py\n@@gputui end\n")
    assert set(smi_service.parse_remote("box", text).own) == {300, 400}
