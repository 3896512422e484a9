"""Ollama end to end from a shell, as the issue describes it: choose GPU 1 of a 2-GPU sandbox
instance, pull and load a model, and `gputui smi NAME --json` shows its memory on GPU 1 only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import GPUTUI, run_gputui_env


def gputui(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = run_gputui_env(home)
    env["GPUTUI_SANDBOX_OLLAMA_TIME_SCALE"] = "0.1"  # quick simulated downloads
    for name in ("OLLAMA_HOST", "CUDA_VISIBLE_DEVICES", "OLLAMA_KEEP_ALIVE"):
        env.pop(name, None)
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, env=env, timeout=120)


def test_model_lands_on_the_selected_gpu(gputui_home: Path):
    made = gputui(gputui_home, "create", "--gpu", "RTX 4090", "--count", "2", "--name", "serve")
    assert made.returncode == 0, made.stderr
    for args in (("start",), ("gpus", "1"), ("pull", "qwen2.5:0.5b"), ("load", "qwen2.5:0.5b")):
        out = gputui(gputui_home, "ollama", "serve", *args)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    smi = json.loads(gputui(gputui_home, "smi", "serve", "--json").stdout)
    by_gpu = {g["index"]: g for g in smi["gpus"]}
    uuid_to_index = {g["uuid"]: g["index"] for g in smi["gpus"]}
    [proc] = smi["processes"]
    gpu = proc.get("gpu_index", uuid_to_index.get(proc.get("gpu_uuid")))
    assert gpu == 1 and proc["used_memory_mib"] > 300
    assert by_gpu[0]["memory_used_mib"] == 0 and by_gpu[1]["memory_used_mib"] >= proc["used_memory_mib"]
    status = json.loads(gputui(gputui_home, "ollama", "serve", "status", "--json").stdout)
    assert "CUDA_VISIBLE_DEVICES" in json.dumps(status)
