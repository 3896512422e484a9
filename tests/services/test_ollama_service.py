"""The Ollama service: its pure parts checked exactly, the systemd path's command sequence,
and end to end on sandbox instances over real SSH."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gputui.cli.ollama_report import ollama_command
from gputui.config import Config
from gputui.models import Instance
from gputui.providers.base import CreateRequest
from gputui.remote.ollama_client import InstalledModel, PullProgress, RunningModel
from gputui.sandbox.shims import state
from gputui.services import ollama as svc_mod
from gputui.services.hub import ServiceError, Services
from gputui.services.ollama import (
    DROPIN_DIR,
    DROPIN_NAME,
    INSTALL_COMMAND,
    FitRefused,
    ModelEstimate,
    OllamaService,
    OllamaServiceError,
    check_fit,
    cuda_visible_value,
    estimate_model,
    nohup_start_command,
    parse_gpu_rows,
    parse_probe,
    placement_report,
    probe_script,
    restart_warning,
    selection_of,
    stop_process_command,
    systemd_apply_commands,
    systemd_dropin,
)
from gputui.store import SessionStore

UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
UUID1 = "GPU-66666666-7777-8888-9999-000000000000"
GPU_ROWS = (f"0, {UUID0}, NVIDIA GeForce RTX 4090, 24564, 0, 24269\n"
            f"1, {UUID1}, NVIDIA GeForce RTX 4090, 24564, 4000, 20269\n")
GIB = 1 << 30


# --------------------------------------------------------------------------- pure parts


def test_systemd_dropin_content_is_exact():
    assert systemd_dropin({"CUDA_VISIBLE_DEVICES": f"{UUID1}"}) == (
        "# Written by gputui: the GPUs Ollama may use.\n"
        f"# To undo: rm {DROPIN_DIR}/{DROPIN_NAME} && systemctl daemon-reload "
        "&& systemctl restart ollama\n"
        "[Service]\n"
        f'Environment="CUDA_VISIBLE_DEVICES={UUID1}"\n'
    )
    with pytest.raises(OllamaServiceError):
        systemd_dropin({"CUDA_VISIBLE_DEVICES": 'x"\nExecStart=/bin/evil'})


def test_systemd_command_sequence_is_exact():
    dropin = systemd_dropin({"CUDA_VISIBLE_DEVICES": f"{UUID0},{UUID1}"})
    path = "/etc/systemd/system/ollama.service.d/zz-gputui-gpus.conf"
    assert systemd_apply_commands(dropin) == [
        "mkdir -p /etc/systemd/system/ollama.service.d",
        "printf '%s' '" + dropin + "' | tee " + path + " > /dev/null",
        "systemctl daemon-reload",
        "systemctl restart ollama.service",
    ]
    assert systemd_apply_commands(dropin, sudo=True) == [
        "sudo -n mkdir -p /etc/systemd/system/ollama.service.d",
        "printf '%s' '" + dropin + "' | sudo -n tee " + path + " > /dev/null",
        "sudo -n systemctl daemon-reload",
        "sudo -n systemctl restart ollama.service",
    ]
    # all GPUs again: our drop-in goes
    assert systemd_apply_commands(None) == [
        f"rm -f {path}", "systemctl daemon-reload", "systemctl restart ollama.service"]


def test_the_printf_command_writes_the_dropin_byte_for_byte(tmp_path: Path):
    dropin = systemd_dropin({"CUDA_VISIBLE_DEVICES": UUID1})
    cmds = systemd_apply_commands(dropin, dropin_dir=str(tmp_path / "d"))
    for cmd in cmds[:2]:
        subprocess.run(["/bin/sh", "-c", cmd], check=True, timeout=10)
    assert (tmp_path / "d" / DROPIN_NAME).read_text() == dropin


def test_nohup_and_stop_commands():
    cmd = nohup_start_command("/usr/local/bin/ollama", {
        "OLLAMA_HOST": "0.0.0.0:11434", "OLLAMA_KEEP_ALIVE": "-1",
        "CUDA_VISIBLE_DEVICES": f"{UUID1}"})
    assert cmd == (
        'mkdir -p "$HOME/.ollama"; cd "$HOME" || exit 1; '
        "nohup env OLLAMA_HOST=0.0.0.0:11434 OLLAMA_KEEP_ALIVE=-1 "
        f"CUDA_VISIBLE_DEVICES={UUID1} /usr/local/bin/ollama serve "
        '>> "$HOME/.ollama/gputui-serve.log" 2>&1 < /dev/null & '
        'echo $! > "$HOME/.ollama/gputui-serve.pid"; echo $!'
    )
    unset = nohup_start_command("ollama", {"CUDA_VISIBLE_DEVICES": None})
    assert "nohup env -u CUDA_VISIBLE_DEVICES ollama serve" in unset
    with pytest.raises(OllamaServiceError):
        nohup_start_command("ollama", {"BAD NAME": "x"})
    # stop: TERM, wait until gone (a zombie is gone), KILL after the grace time
    child = subprocess.Popen(["sleep", "30"])
    t0 = time.monotonic()
    subprocess.run(["/bin/sh", "-c", stop_process_command(child.pid, grace_s=5)], check=True,
                   timeout=20)
    assert time.monotonic() - t0 < 3
    assert child.wait(5) == -signal.SIGTERM
    stubborn = subprocess.Popen(["/bin/sh", "-c", "trap '' TERM; sleep 30"])
    time.sleep(0.2)
    subprocess.run(["/bin/sh", "-c", stop_process_command(stubborn.pid, grace_s=0.5)],
                   check=True, timeout=20)
    assert stubborn.wait(5) == -signal.SIGKILL


def test_probe_parsing():
    probe = parse_probe(
        "uid=0\nhome=/root\nbin=/usr/local/bin/ollama\nlogin_host=\nunit=ollama.service\n"
        "unit_active=active\nunit_pid=812\nunit_env=OLLAMA_HOST=0.0.0.0\n"
        "unit_env=PATH=/usr/bin\ndropin=1\npid=812\nenv_readable=1\n"
        f"env=CUDA_VISIBLE_DEVICES={UUID1}\nenv=OLLAMA_KEEP_ALIVE=1h\nenv=\x1b[31mBAD=1\n")
    assert probe.managed_by == "systemd" and probe.running and probe.installed
    assert probe.pid == 812 and probe.dropin and probe.uid == 0
    assert probe.server_env == {"OLLAMA_HOST": "0.0.0.0", "PATH": "/usr/bin",
                                "CUDA_VISIBLE_DEVICES": UUID1, "OLLAMA_KEEP_ALIVE": "1h"}
    plain = parse_probe("uid=1000\nbin=/usr/bin/ollama\npid=4242\nenv=OLLAMA_HOST=:11500\n")
    assert plain.managed_by == "process" and plain.server_env == {"OLLAMA_HOST": ":11500"}
    stopped = parse_probe("uid=0\nbin=/usr/bin/ollama\nclient_version=0.6.2\n")
    assert not stopped.running and stopped.installed and stopped.client_version == "0.6.2"
    missing = parse_probe("uid=0\nbin=\n")
    assert not missing.installed and missing.managed_by is None
    # the probe never spells the server's command line, so it cannot find itself
    assert "ollama serve" not in probe_script() and " serve" not in probe_script()


def test_gpu_rows_selection_and_uuids():
    gpus = parse_gpu_rows(GPU_ROWS + "garbage\n2, [N/A], NVIDIA A100, 40960, [N/A], [N/A]\n")
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[1].memory_free_mib == 20269 and gpus[1].short_name == "RTX 4090"
    assert gpus[2].uuid is None and gpus[2].memory_free_mib is None
    two = gpus[:2]
    assert selection_of(None, two) == [0, 1]
    assert selection_of("1", two) == [1]
    assert selection_of(UUID1, two) == [1]
    assert selection_of("GPU-6666", two) == [1]  # a unique UUID prefix, as CUDA takes it
    assert selection_of(f"{UUID1},{UUID0}", two) == [1, 0]
    assert selection_of("1,7,0", two) == [1]  # CUDA stops at the first unknown entry
    assert selection_of("", two) == [] and selection_of("-1", two) == []
    assert cuda_visible_value(two, [1]) == UUID1
    assert cuda_visible_value(two, [0, 1]) == f"{UUID0},{UUID1}"
    with pytest.raises(OllamaServiceError, match="no GPU 5"):
        cuda_visible_value(two, [5])


def _est(model: str, weights_gb: float, kv_gb: float = 1.0) -> ModelEstimate:
    return ModelEstimate(model, int(weights_gb * 1e9), int(kv_gb * 1e9), 256 << 20, 4096, 1,
                         "installed")


def test_fit_check_verdicts_and_what_would_fit():
    gpus = parse_gpu_rows(GPU_ROWS)  # 25.4 GB and 21.3 GB free
    small = _est("qwen2.5:7b", 4.7, 0.3)
    fit = check_fit(small, gpus, [1])
    assert fit.verdict == "fits" and fit.gpu == 1 and fit.ok
    big = _est("llama3.1:70b", 42.5, 1.3)
    spread = check_fit(big, gpus, [0, 1])
    assert spread.verdict == "spread" and spread.ok
    one = check_fit(big, gpus, [0], candidates=[small, _est("qwen2.5:32b", 19.9, 1.1), big])
    assert one.verdict == "spill" and not one.ok
    assert one.would_fit == ("qwen2.5:32b", "qwen2.5:7b")
    assert one.better_selection == (0, 1)
    assert "needs about" in one.message and "would fit: qwen2.5:32b, qwen2.5:7b" in one.message
    assert one.message.endswith("or select GPUs 0,1")
    huge = check_fit(_est("qwen2.5:72b", 60), gpus, [0, 1])
    assert huge.verdict == "spill" and huge.better_selection is None
    assert check_fit(small, gpus, [1], loaded=True).verdict == "loaded"
    unknown = ModelEstimate("mystery:1b", None, 0, 0, 4096, 1, "unknown")
    assert check_fit(unknown, gpus, [1]).verdict == "unknown"


def test_estimates_come_from_the_server_or_the_catalog():
    installed = InstalledModel("qwen2.5:7b", size=4_683_087_332, digest="x")
    est = estimate_model("qwen2.5:7b", installed=installed, info=None, context=4096, parallel=1)
    assert est.weights == 4_683_087_332 and est.source == "installed"
    assert est.kv == 2 * 28 * 4 * 128 * 2 * 4096  # the catalog's shape
    before = estimate_model("llama3.1:70b", installed=None, info=None, context=8192, parallel=2)
    assert before.source == "catalog" and 40e9 < (before.weights or 0) < 46e9
    assert before.kv == 2 * 80 * 8 * 128 * 2 * 8192 * 2
    assert estimate_model("who:7b", installed=None, info=None, context=4096,
                          parallel=1).weights is None


def test_placement_report_flags_memory_outside_the_selection():
    gpus = parse_gpu_rows(GPU_ROWS)
    apps = (f"4242, {UUID0}, /usr/local/bin/ollama, 5059\n"
            f"4242, {UUID1}, /usr/local/bin/ollama, 100\n"
            f"999, {UUID1}, python train.py, 20000\n")
    running = [RunningModel("qwen2.5:7b", size=5_300_000_000, size_vram=5_300_000_000)]
    report = placement_report(apps, gpus, [1], running, server_pid=4242)
    assert not report.ok and report.outside == (0,)
    assert report.per_gpu_mib == {0: 5059.0, 1: 100.0}  # the training job is not Ollama's
    assert report.message.startswith("MISMATCH")
    ok = placement_report(f"4242, {UUID1}, ollama, 5059\n", gpus, [1], running, server_pid=4242)
    assert ok.ok and "as selected" in ok.message
    partly = placement_report("", gpus, [1], [RunningModel("m", size=10, size_vram=4)],
                              server_pid=None)
    assert partly.on_cpu == ("m",) and not partly.ok
    hidden = placement_report("", gpus, [1], running, server_pid=4242)  # a container's view
    assert hidden.ok and hidden.unverified and "not verified" in hidden.message


def test_restart_warning():
    assert "nothing is lost" in restart_warning([])
    assert "(a:1b, b:2b)" in restart_warning([RunningModel("a:1b", 1, 1),
                                              RunningModel("b:2b", 1, 1)])


# --------------------------------------------------------------------------- systemd path


@dataclass
class _Result:
    exit_status: int
    stdout: str
    stderr: str = ""


class _FakeClient:
    async def version(self) -> str:
        return "0.6.5"

    async def aclose(self) -> None:
        pass


class RecordingService(OllamaService):
    """A host where Ollama runs under systemd: commands are recorded, not run."""

    def __init__(self) -> None:
        super().__init__(services=None)  # type: ignore[arg-type]
        self.commands: list[str] = []
        self.visible = "0"

    async def _sh(self, inst: Instance, command: str, *, timeout: float = 60.0) -> Any:
        self.commands.append(command)
        if command.startswith("uid=") or "@@gputui-gpus@@" in command or "sv=serve" in command:
            probe = ("uid=1000\nhome=/home/me\nbin=/usr/local/bin/ollama\nunit=ollama.service\n"
                     "unit_active=active\nunit_pid=812\npid=812\n"
                     f"unit_env=OLLAMA_HOST=0.0.0.0\nunit_env=CUDA_VISIBLE_DEVICES={self.visible}\n")
            return _Result(0, probe + "@@gputui-gpus@@\n" + GPU_ROWS)
        if "tee /etc/systemd" in command:
            self.visible = UUID1
        return _Result(0, "")

    async def _client(self, inst: Instance, status: Any) -> Any:
        return _FakeClient()


async def test_systemd_path_runs_exactly_the_command_sequence():
    svc = RecordingService()
    inst = Instance(id="i1", name="box", provider="ssh", gpu="RTX 4090", gpu_count=2,
                    billing={"price_per_hour": "1"})
    new = await svc.apply_gpus(inst, [1])
    actions = [c for c in svc.commands if "@@gputui-gpus@@" not in c]
    dropin = systemd_dropin({"CUDA_VISIBLE_DEVICES": UUID1})
    assert actions == systemd_apply_commands(dropin, sudo=True)  # uid 1000: through sudo -n
    assert new.managed_by == "systemd" and new.selected == [1] and new.version == "0.6.5"


# --------------------------------------------------------------------------- end to end


@pytest.fixture
async def services(gputui_home: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Services]:
    monkeypatch.setitem(state.SHIMS, "ollama", "ollama_shim")
    # The sandbox sessions inherit this process's environment: quick simulated pulls.
    monkeypatch.setenv("GPUTUI_SANDBOX_OLLAMA_TIME_SCALE", "0.2")
    for name in ("OLLAMA_HOST", "CUDA_VISIBLE_DEVICES", "OLLAMA_KEEP_ALIVE"):
        monkeypatch.delenv(name, raising=False)
    store = SessionStore(gputui_home / "state.db")
    hub = Services(store, Config(), state_dir=gputui_home, sandbox_boot_seconds=0,
                   link_options={"connect_timeout": 5.0, "backoff_initial": 0.05,
                                 "backoff_max": 0.2})
    yield hub
    for inst in store.instances_sync(live_only=True):
        try:
            await hub.release(inst, "manual")
        except ServiceError:
            pass
    await hub.close()


async def rent(hub: Services, count: int = 2) -> Instance:
    offer = await hub.find_offer("sandbox", "RTX 4090")
    return await hub.create("sandbox", offer,
                            CreateRequest(offer_id=offer.offer_id, gpu_count=count,
                                          name=hub.free_name("llm")))


async def compute_apps(hub: Services, inst: Instance) -> list[tuple[int, str, int]]:
    out = await hub.run(inst, "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_gpu_memory "
                              "--format=csv,noheader,nounits")
    rows = []
    for line in out.stdout.strip().splitlines():
        pid, uuid, mib = (x.strip() for x in line.split(","))
        rows.append((int(pid), uuid, int(mib)))
    return rows


async def test_gpu_1_of_2_pull_and_load_lands_on_gpu_1_only(services: Services):
    inst = await rent(services)
    svc = OllamaService(services)
    first = await svc.status(inst)
    assert first.installed and not first.running and first.state == "stopped"
    started = await svc.start(inst)
    assert started.reachable and started.version and started.managed_by == "process"
    assert started.port != 11434  # the sandbox instance's own port, read from the server's env
    st = await svc.apply_gpus(inst, [1])
    assert st.selected == [1] and st.visible_devices == st.gpus[1].uuid  # by UUID
    assert st.pid != started.pid
    seen: list[PullProgress] = []
    fractions: list[float] = []

    def progress(p: PullProgress) -> None:
        seen.append(p)
        fractions.append(p.fraction)

    done = await svc.pull(inst, "qwen2.5:7b", progress)
    assert done.done and 4.6e9 < done.total < 4.8e9 and fractions[-1] == 1.0
    assert len(seen) > 5 and sum(0 < f < 1 for f in fractions) >= 5  # a live bar
    assert [m.name for m in await svc.models(inst)] == ["qwen2.5:7b"]
    result = await svc.load(inst, "qwen2.5:7b")
    assert result.fit.verdict == "fits" and result.fit.gpu == 1
    assert result.placement.ok and set(result.placement.per_gpu_mib) == {1}
    apps = await compute_apps(services, inst)
    assert [(pid, uuid) for pid, uuid, _ in apps] == [(st.pid, st.gpus[1].uuid)]
    assert apps[0][2] > 4500
    (running,) = await svc.running(inst)
    assert running.processor == "100% GPU"
    await svc.unload(inst, "qwen2.5:7b")
    assert await compute_apps(services, inst) == []
    await svc.delete(inst, "qwen2.5:7b")
    with pytest.raises(OllamaServiceError, match="no model"):
        await svc.delete(inst, "qwen2.5:7b")
    await svc.close()


async def test_both_gpus_hold_a_model_larger_than_one_card_and_overflow_is_refused_first(
    services: Services, capsys: pytest.CaptureFixture[str]
):
    inst = await rent(services)
    svc = OllamaService(services)
    await svc.start(inst)
    st = await svc.apply_gpus(inst, [0, 1])
    await svc.pull(inst, "llama3.1:70b")
    result = await svc.load(inst, "llama3.1:70b")
    assert result.fit.verdict == "spread"
    per_gpu = result.placement.per_gpu_mib
    card_mib = st.gpus[0].memory_total_mib or 0
    assert set(per_gpu) == {0, 1} and all(mib < card_mib for mib in per_gpu.values())
    assert sum(per_gpu.values()) > card_mib  # more than one card holds
    apps = await compute_apps(services, inst)
    assert {uuid for _, uuid, _ in apps} == {g.uuid for g in st.gpus}
    # Back to GPU 1 only (the restart unloads the 70b), then a model too large for it:
    # refused by the fit check, before anything is sent to the server.
    running = await svc.running(inst)
    assert "llama3.1:70b" in restart_warning(running)
    await svc.apply_gpus(inst, [1])
    assert await svc.running(inst) == []
    fit = await svc.fit_check(inst, "qwen2.5:72b")  # before the pull: the catalog's estimate
    assert fit.verdict == "spill" and fit.estimate is not None
    assert fit.estimate.source == "catalog" and fit.better_selection == (0, 1)
    await svc.pull(inst, "qwen2.5:72b")
    with pytest.raises(FitRefused) as refused:
        await svc.load(inst, "qwen2.5:72b")
    assert refused.value.fit.would_fit and "qwen2.5:72b needs about" in str(refused.value)
    assert await compute_apps(services, inst) == []
    # the command prints the warning and says how to force it
    assert await ollama_command(services, inst, "load", "qwen2.5:72b", False) == 1
    err = capsys.readouterr().err
    assert err.startswith("not loaded: qwen2.5:72b needs about") and "--force" in err
    # forced, the server answers with Ollama's own error
    with pytest.raises(OllamaServiceError, match="requires more system memory"):
        await svc.load(inst, "qwen2.5:72b", force=True)
    await svc.close()


async def test_pull_cancel_and_resume(services: Services, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPUTUI_SANDBOX_OLLAMA_TIME_SCALE", "4")  # ~1 s for qwen2.5:7b
    inst = await rent(services, count=1)
    svc = OllamaService(services)
    await svc.start(inst)
    started = asyncio.Event()
    seen: list[PullProgress] = []

    def progress(p: PullProgress) -> None:
        seen.append(p)
        if p.completed > 0:
            started.set()

    task = asyncio.create_task(svc.pull(inst, "qwen2.5:7b", progress))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cut = seen[-1].completed
    assert 0 < cut < seen[-1].total
    assert await svc.models(inst) == []  # not installed
    firsts: list[int] = []

    def again(p: PullProgress) -> None:
        if p.completed and not firsts:
            firsts.append(p.completed)

    await asyncio.sleep(0.3)  # the server notices the closed connection at its next line
    done = await svc.pull(inst, "qwen2.5:7b", again)
    assert done.done and firsts and firsts[0] >= cut  # resumed, not restarted
    await svc.close()


async def test_nohup_server_survives_the_ssh_session_and_is_found_per_instance(
    services: Services,
):
    a = await rent(services, count=1)
    b = await rent(services, count=1)
    svc = OllamaService(services)
    st = await svc.start(a)
    await svc.close()
    await services.links.close(a.id)  # the SSH connection goes away
    again = OllamaService(services)
    after = await again.status(a)
    assert after.reachable and after.pid == st.pid
    # without the pid file the probe scans /proc, and still picks a's own server...
    await services.run(a, 'rm -f "$HOME/.ollama/gputui-serve.pid"')
    assert (await again.probe(a)).pid == st.pid
    # ...and on b (same machine, same loopback) finds neither a's server nor itself
    other = await again.probe(b)
    assert other.pid is None and not other.running
    # the command's view, as JSON
    assert await ollama_command(services, a, "status", None, True) == 0
    await again.close()


async def test_not_installed_says_how_to_install(services: Services,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]):
    monkeypatch.delitem(state.SHIMS, "ollama")
    inst = await rent(services, count=1)
    # the simulated cloud (its own process) installed its tools: this machine has no ollama
    (services.provider("sandbox").instance_root(inst.id) / "bin" / "ollama").unlink()
    svc = OllamaService(services)
    st = await svc.status(inst)
    assert not st.installed and st.state == "not installed"
    assert st.as_dict()["install_command"] == INSTALL_COMMAND
    with pytest.raises(OllamaServiceError, match="not installed"):
        await svc.start(inst)
    assert await ollama_command(services, inst, "status", None, False) == 0
    assert INSTALL_COMMAND in capsys.readouterr().out
    await svc.close()


async def test_ollama_command_json_and_text(services: Services,
                                            capsys: pytest.CaptureFixture[str]):
    inst = await rent(services)
    await ollama_command(services, inst, "start", None, False)
    capsys.readouterr()
    assert await ollama_command(services, inst, "gpus", "1", True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["selected"] == [1] and data["unloaded"] == []
    assert await ollama_command(services, inst, "pull", "qwen2.5:0.5b", False) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "pulled qwen2.5:0.5b (0.4 GiB)" and "pulling manifest" in out.err
    assert await ollama_command(services, inst, "load", "qwen2.5:0.5b", True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["loaded"] and data["placement"]["ok"] and data["placement"]["per_gpu_mib"].keys() == {"1"}
    assert await ollama_command(services, inst, "ps", None, False) == 0
    assert "100% GPU" in capsys.readouterr().out
    assert await ollama_command(services, inst, "list", None, True) == 0
    assert [m["name"] for m in json.loads(capsys.readouterr().out)] == ["qwen2.5:0.5b"]
    assert await ollama_command(services, inst, "unload", "qwen2.5:0.5b", False) == 0
    assert await ollama_command(services, inst, "rm", "qwen2.5:0.5b", False) == 0
    assert capsys.readouterr().out == "unloaded qwen2.5:0.5b\ndeleted qwen2.5:0.5b\n"
    with pytest.raises(ServiceError, match="unknown action"):
        await ollama_command(services, inst, "dance", None, False)
    with pytest.raises(ServiceError, match="give a model"):
        await ollama_command(services, inst, "pull", None, False)
    assert svc_mod.parse_gpu_selection("all") is None and svc_mod.parse_gpu_selection("1, 0") == [1, 0]
    # all GPUs again: CUDA_VISIBLE_DEVICES unset
    assert await ollama_command(services, inst, "gpus", "all", True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["selected"] == [0, 1] and data["cuda_visible_devices"] is None
    assert await ollama_command(services, inst, "stop", None, False) == 0
    st = await OllamaService(services).status(inst)
    assert not st.running
