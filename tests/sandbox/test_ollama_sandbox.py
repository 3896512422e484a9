"""The sandbox's `ollama` shim and simulated server, run as real processes on an instance
folder (no SSH here; see test_ollama_service.py for the whole path)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gputui.catalog.fit import get_model
from gputui.sandbox.shims import ollama_server as srv
from gputui.sandbox.shims import state
from gputui.sandbox.shims.ollama_server import (
    GIB,
    GPU_OVERHEAD_BYTES,
    LIBRARY,
    LoadRefused,
    human_bytes,
    parse_duration,
    place,
)

RTX4090_MIB = 24564


# --------------------------------------------------------------------------- pure parts


def test_library_has_the_real_download_sizes():
    shown = {name: human_bytes(m.size) for name, m in LIBRARY.items()}
    assert shown["qwen2.5:0.5b"] == "398 MB"
    assert shown["qwen2.5:3b"] == "1.9 GB"
    assert shown["qwen2.5:7b"] == "4.7 GB"
    assert shown["qwen2.5:14b"] == "9.0 GB"
    assert shown["qwen2.5:32b"] == "20 GB"
    assert shown["qwen2.5:72b"] == "47 GB"
    assert shown["llama3.1:8b"] == "4.9 GB"
    assert shown["llama3.1:70b"] == "43 GB"
    assert LIBRARY["qwen2.5:latest"].size == LIBRARY["qwen2.5:7b"].size


def test_library_shapes_agree_with_the_catalog():
    for name, model in LIBRARY.items():
        if model.alias_of or name.startswith("llama3.2"):
            continue
        cat = get_model(name)
        assert (model.layers, model.embedding, model.heads, model.kv_heads) == (
            cat.layers, cat.hidden, cat.heads, cat.kv_heads), name
        assert model.head_dim == cat.head_dim, name
        assert model.parameter_count == cat.params, name
        assert model.kv_bytes(4096) == int(cat.kv_bytes_per_token(2) * 4096), name


def test_placement_follows_ollamas_scheduler():
    gib = GIB
    fixed = GPU_OVERHEAD_BYTES + gib // 8
    # fits on one: the GPU with the most free memory, nothing elsewhere
    p = place(5 * gib, gib // 8, [(0, 10 * gib), (1, 20 * gib)], spread=False, ram_free=0)
    assert p.gpus == {1: 5 * gib + fixed} and p.cpu == 0
    # OLLAMA_SCHED_SPREAD: over every GPU even when one would do
    p = place(6 * gib, gib // 8, [(0, 20 * gib), (1, 20 * gib)], spread=True, ram_free=0)
    assert set(p.gpus) == {0, 1} and p.cpu == 0
    # larger than one card: spread in proportion to free memory
    p = place(30 * gib, gib // 8, [(0, 20 * gib), (1, 20 * gib)], spread=False, ram_free=0)
    assert set(p.gpus) == {0, 1} and abs(p.gpus[0] - p.gpus[1]) <= 1 and p.cpu == 0
    assert p.vram == 30 * gib + 2 * fixed
    # too large for the GPUs: the rest in host memory, if there is room
    p = place(50 * gib, gib // 8, [(0, 20 * gib), (1, 20 * gib)], spread=False, ram_free=16 * gib)
    assert p.cpu == 50 * gib - 2 * (20 * gib - fixed) and p.vram == 40 * gib
    # ...else Ollama's error
    with pytest.raises(LoadRefused) as err:
        place(60 * gib, gib // 8, [(0, 20 * gib)], spread=False, ram_free=16 * gib)
    assert str(err.value).startswith("model requires more system memory (")
    assert str(err.value).endswith("than is available (16.0 GiB)")
    assert err.value.status == 500


def test_keep_alive_durations_as_go_parses_them():
    assert parse_duration(None, 300) == 300
    assert parse_duration("5m", 0) == 300
    assert parse_duration("1h30m", 0) == 5400
    assert parse_duration("-1", 0) == -1 and parse_duration(-1, 0) == -1
    assert parse_duration(0, 300) == 0 and parse_duration("0", 300) == 0
    assert parse_duration("250ms", 0) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        parse_duration("5 minutes", 0)
    with pytest.raises(ValueError):
        parse_duration("12x", 0)


# --------------------------------------------------------------------------- real processes


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(state.SHIMS, "ollama", "ollama_shim")
    return state.create_instance_dir(
        tmp_path / "inst", instance_id="olltest", gpu_name="NVIDIA GeForce RTX 4090",
        gpu_count=2, memory_total_mib=RTX4090_MIB, power_limit_w=450, tdp_w=450,
    )


def shell_env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "CUDA_"))}
    env.update(PATH=f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}", HOME=str(root),
               GPUTUI_SANDBOX_ROOT=str(root), GPUTUI_SANDBOX_OLLAMA_TIME_SCALE="0.2")
    env.update(extra)
    return env


def sh(root: Path, cmd: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", cmd], cwd=root, env=shell_env(root, **extra),
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def server(instance: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([str(instance / "bin" / "ollama"), "serve"], cwd=instance,
                            env=shell_env(instance, CUDA_VISIBLE_DEVICES="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if sh(instance, "ollama --version").stdout.startswith("ollama version is"):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the sandbox ollama server did not start: " + proc.stderr.read().decode())
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def test_cli_without_a_server_says_so(instance: Path):
    out = sh(instance, "ollama --version")
    assert out.stdout.splitlines() == ["Warning: could not connect to a running Ollama instance",
                                       f"Warning: client version is {srv.VERSION}"]
    out = sh(instance, "ollama list")
    assert out.returncode == 1
    assert out.stderr.strip() == "Error: could not connect to ollama app, is it running?"


def test_cli_round_trip_and_the_gpu_process(instance: Path, server: subprocess.Popen[bytes]):
    port = srv.sandbox_port(instance)
    assert port is not None and port != 11434  # each instance has its own
    environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    assert f"OLLAMA_HOST=127.0.0.1:{port}".encode() in environ  # readable by whoever looks
    pulled = sh(instance, "ollama pull qwen2.5:7b")
    assert pulled.returncode == 0, pulled.stderr
    lines = pulled.stdout.splitlines()
    assert lines[0] == "pulling manifest" and lines[-1] == "success"
    assert any(line.endswith("4.7 GB") for line in lines)
    listed = sh(instance, "ollama list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    assert listed[1].split()[:4] == ["qwen2.5:7b", listed[1].split()[1], "4.7", "GB"]
    ran = sh(instance, "ollama run qwen2.5:7b 'say hi'")
    assert ran.returncode == 0 and "simulated reply" in ran.stdout
    ps = sh(instance, "ollama ps").stdout.splitlines()
    assert ps[0].split() == ["NAME", "ID", "SIZE", "PROCESSOR", "UNTIL"]
    assert "100% GPU" in ps[1] and "minutes from now" in ps[1]
    apps = sh(instance, "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_gpu_memory "
                        "--format=csv,noheader,nounits").stdout.strip().splitlines()
    spec = state.load_instance(instance)
    assert len(apps) == 1
    pid, uuid, mib = (x.strip() for x in apps[0].split(","))
    assert int(pid) == server.pid and uuid == spec.gpus[1].uuid  # CUDA_VISIBLE_DEVICES=1
    assert 4900 < int(mib) < 5600
    assert sh(instance, "ollama stop qwen2.5:7b").returncode == 0
    assert sh(instance, "nvidia-smi --query-compute-apps=pid --format=csv,noheader").stdout == ""
    assert sh(instance, "ollama rm qwen2.5:7b").stdout.strip() == "deleted 'qwen2.5:7b'"
    gone = sh(instance, "ollama rm qwen2.5:7b")
    assert gone.returncode == 1 and gone.stderr.strip() == "Error: model 'qwen2.5:7b' not found"
    missing = sh(instance, "ollama pull nope:1b")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Error: pull model manifest: file does not exist"


def _post(port: int, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_a_load_that_does_not_fit_gets_ollamas_error(instance: Path, server: subprocess.Popen[bytes]):
    port = srv.sandbox_port(instance)
    assert port is not None
    assert sh(instance, "ollama pull qwen2.5:72b").returncode == 0
    # another job holds 20 GiB of the only visible GPU
    load = subprocess.Popen([str(instance / "bin" / "gpu-load"), "--gpus", "0", "--mem", "20G",
                             "--seconds", "60"], cwd=instance,
                            env=shell_env(instance, CUDA_VISIBLE_DEVICES="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert load.stdout is not None and load.stdout.readline().strip()
        status, body = _post(port, "/api/generate", {"model": "qwen2.5:72b"})
        assert status == 500
        assert body["error"].startswith("model requires more system memory (")
        # a model that fits next to it goes on the GPU; one a little too big spills to the CPU
        assert sh(instance, "ollama pull qwen2.5:3b && ollama pull qwen2.5:7b").returncode == 0
        assert _post(port, "/api/generate", {"model": "qwen2.5:3b"})[0] == 200
        assert _post(port, "/api/generate", {"model": "qwen2.5:7b"})[0] == 200
        ps = sh(instance, "ollama ps").stdout
        assert "100% GPU" in ps.splitlines()[2] or "100% GPU" in ps.splitlines()[1]
        assert "CPU/GPU" in ps
    finally:
        load.terminate()
        load.wait(10)


def test_gpu_uuids_in_cuda_visible_devices(instance: Path):
    spec = state.load_instance(instance)
    proc = subprocess.Popen(
        [str(instance / "bin" / "ollama"), "serve"], cwd=instance,
        env=shell_env(instance, CUDA_VISIBLE_DEVICES=spec.gpus[0].uuid, OLLAMA_HOST="127.0.0.1:0"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        # OLLAMA_HOST given: it is used as is (port 0 here: the log says which one it got)
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 10
        while "Listening on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline().decode()
        assert "Listening on 127.0.0.1:0" in line
        assert srv.sandbox_port(instance) is None  # no per-instance port taken
        rec = json.loads(next((instance / ".sandbox" / "procs").glob("*.json")).read_text())
        assert rec["kind"] == "ollama" and rec["gpus"] == {}  # registered: killed on release
    finally:
        proc.terminate()
        proc.wait(10)
    assert not list((instance / ".sandbox" / "procs").glob("*.json"))


def test_the_server_stops_when_the_instance_powers_off(instance: Path,
                                                       server: subprocess.Popen[bytes]):
    state.schedule_poweroff(instance, datetime.now(UTC) - timedelta(seconds=1),
                            command="shutdown -h now")
    assert server.wait(5) is not None
    assert not list((instance / ".sandbox" / "procs").glob("*.json"))


def test_server_module_refuses_unknown_arguments():
    out = subprocess.run([sys.executable, "-m", "gputui.sandbox.shims.ollama_server",
                          "bogus"], capture_output=True, text=True, timeout=30,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 2 and "usage" in out.stderr
