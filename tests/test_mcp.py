"""`gputui mcp`, driven as an agent drives it: the SDK's own stdio client against the sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from gputui.models import utcnow
from tests.conftest import REPO

SECRET = "secret_lambda_key_0123456789abcdef"


def _prepare(home: Path, config: str | None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (home / "config.toml").write_text(config)
        (home / "config.toml").chmod(0o600)


@asynccontextmanager
async def agent(home: Path, config: str | None = None, env_extra: dict | None = None):
    _prepare(home, config)
    env = {"GPUTUI_HOME": str(home), "PYTHONPATH": str(REPO),
           "PATH": os.environ.get("PATH", ""), **(env_extra or {})}
    params = StdioServerParameters(command=sys.executable, args=["-m", "gputui", "mcp"],
                                   env=env, cwd=str(home))
    with (home / "mcp.err").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def data(result) -> object:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        sc = result.structured_content
        return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
    return json.loads(result.content[0].text)


def instances(home: Path) -> list[dict]:
    from gputui.services.views import instance_view
    from gputui.store import SessionStore

    store = SessionStore(home / "state.db")
    try:
        return [instance_view(i, store.get_lease_sync(i.id))
                for i in store.instances_sync(live_only=True)]
    finally:
        store.close()


async def test_an_agent_rents_runs_and_releases_with_the_stricter_rules(gputui_home: Path):
    async with agent(gputui_home) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"list_instances", "offers", "fit", "cost_estimate", "create", "extend",
                "release", "run_command", "smi_snapshot", "ollama_list", "ollama_pull",
                "ollama_load"} <= tools

        offers = data(await session.call_tool("offers", {"provider": "sandbox"}))
        assert any("4090" in o["gpu"] and o["currency"] == "USD" for o in offers)

        made = data(await session.call_tool("create", {"gpu": "RTX 4090", "name": "agent-1"}))
        assert made["name"] == "agent-1" and made["status"] == "running"
        assert "ssh" not in made  # no way in that bypasses the tools
        left = datetime.fromisoformat(made["release_at"]) - utcnow()
        assert timedelta(hours=1, minutes=58) < left <= timedelta(hours=2)  # the default timer

        run = data(await session.call_tool("run_command", {
            "name": "agent-1", "command": "nvidia-smi -L; printf '\\033[2Jx\\n'; exit 3"}))
        assert run["exit_status"] == 3 and "RTX 4090" in run["stdout"]
        assert "\x1b" not in run["stdout"]

        smi = data(await session.call_tool("smi_snapshot", {"name": "agent-1"}))
        assert len(smi["gpus"]) == 1 and "4090" in smi["gpus"][0]["name"]

        pulled = data(await session.call_tool("ollama_pull", {"name": "agent-1",
                                                               "model": "qwen2.5:0.5b"}))
        assert pulled["pulled"] and pulled["bytes"] > 300_000_000
        loaded = data(await session.call_tool("ollama_load", {
            "name": "agent-1", "model": "qwen2.5:0.5b", "gpus": [0]}))
        assert loaded["loaded"], loaded
        have = data(await session.call_tool("ollama_list", {"name": "agent-1"}))
        assert [m["name"] for m in have["models"]] == ["qwen2.5:0.5b"]
        assert [m["name"] for m in have["loaded"]] == ["qwen2.5:0.5b"]

        ext = data(await session.call_tool("extend", {"name": "agent-1", "by": "30m"}))
        assert datetime.fromisoformat(ext["release_at"]) - datetime.fromisoformat(
            made["release_at"]) == timedelta(minutes=30)

        listed = data(await session.call_tool("list_instances", {}))
        assert [i["name"] for i in listed] == ["agent-1"]

        # release needs confirm: true; without it nothing happens
        with pytest.raises(MCPError, match="confirm: true"):
            await session.call_tool("release", {"name": "agent-1"})
        assert [i["name"] for i in instances(gputui_home)] == ["agent-1"]
        gone = data(await session.call_tool("release", {"name": "agent-1", "confirm": True}))
        assert gone["released"] and gone["currency"] == "USD"
    assert instances(gputui_home) == []


async def test_bad_input_is_an_error_and_nothing_is_started_or_spent(gputui_home: Path):
    config = '[mcp]\nconfirm_over = { USD = "1" }\n'
    async with agent(gputui_home, config) as session:
        cases = [
            ("create", {}, "gpu: field required"),
            ("create", {"gpu": 4090}, "gpu: input should be a valid string"),
            ("launch_everything", {}, "unknown tool"),
            ("create", {"gpu": "RTX 4090", "release_after": "0s"}, "release_after"),
            ("create", {"gpu": "RTX 4090", "release_after": "400d"}, "release_after"),
            ("create", {"gpu": "RTX 4090", "release_after": "never"}, "release_after"),
            ("create", {"gpu": "RTX 4090", "count": -3}, "count"),
            ("create", {"gpu": "RTX 4090", "count": 100000}, "count"),
            ("create", {"gpu": "RTX 9999"}, "unknown GPU"),
            ("create", {"gpu": "RTX 4090", "provider": "nope"}, "provider"),
            # 8 × H100 for 2 h is far over the 1 USD cap: needs confirm
            ("create", {"gpu": "H100 SXM", "count": 8, "release_after": "2h"}, "confirm: true"),
            ("extend", {"name": "nosuch"}, "no instance named"),
            ("release", {"name": "nosuch", "confirm": True}, "no instance named"),
            ("run_command", {"name": "nosuch", "command": "true"}, "no instance named"),
            ("cost_estimate", {"gpu": "RTX 4090", "hours": -1}, "hours"),
            ("cost_estimate", {"gpu": "RTX 4090", "hours": 1e308}, "hours"),
        ]
        for tool, args, text in cases:
            with pytest.raises(MCPError) as caught:  # a JSON-RPC error, one line
                await session.call_tool(tool, args)
            assert caught.value.code == -32602, (tool, args)
            assert text in caught.value.message and "\n" not in caught.value.message, (
                tool, args, caught.value.message)
    assert instances(gputui_home) == []
    assert not (gputui_home / "sandbox" / "instances").exists() or not any(
        (gputui_home / "sandbox" / "instances").iterdir())


async def test_results_never_carry_secrets(gputui_home: Path):
    config = f'[providers.lambda]\nenabled = false\napi_key = "{SECRET}"\n'
    async with agent(gputui_home, config) as session:
        made = data(await session.call_tool("create", {"gpu": "RTX 4090",
                                                       "release_after": "10m"}))
        assert made["name"] == "agent-4090"  # says who rented it (then agent-4090-2, ...)
        run = data(await session.call_tool("run_command", {
            "name": made["name"], "command": f"echo key={SECRET}; echo {SECRET} >&2"}))
        assert SECRET not in json.dumps(run) and "key=***" in run["stdout"]
        listed = await session.call_tool("list_instances", {})
        assert SECRET not in json.dumps(listed.model_dump())
        # no [mcp] local_folder: pulls land only in the folder the server was started in
        with pytest.raises(MCPError, match="outside the folder gputui mcp may use"):
            await session.call_tool("pull", {"name": made["name"], "remote": ".bashrc",
                                             "local": str(gputui_home.parent / "x")})
        data(await session.call_tool("run_command", {"name": made["name"],
                                                     "command": "echo 5 > note.txt"}))
        data(await session.call_tool("pull", {"name": made["name"], "remote": "note.txt"}))
        assert (gputui_home / "note.txt").read_text() == "5\n"
        data(await session.call_tool("release", {"name": made["name"], "confirm": True}))


async def test_on_lambda_create_warns_that_no_daemon_keeps_the_deadline(gputui_home: Path):
    """Lambda (its emulator): only a local release keeps the deadline there. Without a daemon
    the agent is told so; the API key never shows in a result."""
    from tests.providers.lambda_emulator import TEST_KEY, LambdaEmulator

    async with LambdaEmulator(request_interval=0, launch_interval=0, boot_seconds=0.15,
                              terminate_seconds=0.3, gone_seconds=0.3) as emu:
        config = (f'[providers.lambda]\nenabled = true\nbase_url = "{emu.base_url}"\n'
                  f'api_key = "{TEST_KEY}"\n')
        async with agent(gputui_home, config) as session:
            results = []
            made = await session.call_tool("create", {"gpu": "A10", "provider": "lambda",
                                                      "name": "lam", "confirm": True})
            results.append(made)
            item = data(made)
            assert item["status"] == "running" and item["provider"] == "lambda"
            assert "no gputui daemon runs" in item["warning"]
            results.append(await session.call_tool("list_instances", {}))
            results.append(await session.call_tool("release", {"name": "lam", "confirm": True}))
            assert data(results[-1])["released"]
            assert all(TEST_KEY not in json.dumps(r.model_dump()) for r in results)


async def _until_finished(session, name: str, deadline_s: float = 120) -> dict:
    import asyncio
    import time

    end = time.monotonic() + deadline_s
    while True:
        queue = data(await session.call_tool("jobs_list", {"name": name}))
        if queue["finished"] or time.monotonic() > end:
            return queue
        await asyncio.sleep(0.3)


async def test_an_agent_pushes_queues_reads_and_pulls_inside_its_folders(gputui_home: Path,
                                                                         tmp_path: Path):
    """Push a project, queue two runs (one fails), read the queue and a log, pull the result,
    then when-done release with a pull; paths outside the local folder or the instance's home
    are refused, secrets masked."""
    work = tmp_path / "work"
    (work / "proj").mkdir(parents=True)
    (work / "proj" / "train.py").write_text(
        "import os\nos.makedirs('out', exist_ok=True)\n"
        "open('out/result.txt', 'w').write('loss 0.125\\n')\nprint('trained')\n")
    outside = tmp_path / "outside"
    config = (f'[mcp]\nlocal_folder = "{work}"\n'
              f'[providers.lambda]\nenabled = false\napi_key = "{SECRET}"\n')
    async with agent(gputui_home, config) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"jobs_add", "jobs_list", "jobs_log", "jobs_cancel", "when_done", "push",
                "pull"} <= tools
        data(await session.call_tool("create", {"gpu": "RTX 4090", "name": "trainer",
                                                "count": 2}))
        pushed = data(await session.call_tool("push", {"name": "trainer", "local": "proj"}))
        assert pushed["files"] == 1 and pushed["target"] == "proj"
        added = data(await session.call_tool("jobs_add", {
            "name": "trainer", "cwd": "~/proj", "label": "sweep",
            "commands": ["python3 train.py",
                         f"echo key={SECRET}; printf '\\033[31mboom\\n'; exit 3",
                         "python3 -c \"print(('y' * 999 + chr(10)) * 100, end='')\""]}))
        assert added["ids"] == ["1", "2", "3"]

        queue = await _until_finished(session, "trainer")
        runs = {r["id"]: r for r in queue["runs"]}
        assert queue["finished"] and runs["1"]["status"] == "succeeded", queue
        assert runs["2"]["status"] == "failed" and runs["2"]["exit_code"] == 3
        assert [runs["1"]["name"], runs["2"]["name"]] == ["sweep-1", "sweep-2"]
        assert runs["1"]["currency"] == "USD" and runs["1"]["cost"] is not None
        assert SECRET not in json.dumps(queue) and "key=***" in runs["2"]["command"]

        log = data(await session.call_tool("jobs_log", {"name": "trainer", "job": 2}))
        assert "key=***" in log["lines"] and "boom" in log["lines"], log
        assert SECRET not in json.dumps(log) and "\x1b" not in json.dumps(log)
        assert "trained" in data(await session.call_tool("jobs_log", {
            "name": "trainer", "job": "1"}))["lines"]
        big = data(await session.call_tool("jobs_log", {"name": "trainer", "job": 3,
                                                        "lines": 5000}))
        assert big["truncated"] and 50 <= len(big["lines"]) < 100  # the tail, 64k at most
        assert sum(len(line) + 1 for line in big["lines"]) <= 64_000

        got = data(await session.call_tool("pull", {"name": "trainer",
                                                    "remote": "proj/out"}))
        assert got["files"] == 1
        assert (work / "out" / "result.txt").read_text() == "loss 0.125\n"

        # a run queued and cancelled
        [long] = data(await session.call_tool("jobs_add", {"name": "trainer",
                                                           "command": "sleep 300"}))["ids"]
        later = data(await session.call_tool("when_done", {
            "name": "trainer", "policy": "keep", "pull": "proj/out", "to": "later"}))
        assert later["outcome"] is None and "no gputui daemon runs" in later["warning"]
        assert later["pulls"] == [{"remote": "proj/out", "local": str(work / "later")}]
        cancelled = data(await session.call_tool("jobs_cancel", {"name": "trainer",
                                                                 "job": long}))
        assert cancelled["cancelled"]
        queue = await _until_finished(session, "trainer")
        assert {r["id"]: r["status"] for r in queue["runs"]}[long] == "cancelled"

        # bad input: a JSON-RPC error, one line; nothing queued, written or released
        cases = [
            ("pull", {"name": "trainer", "remote": "/etc/passwd"}, "outside the instance"),
            ("pull", {"name": "trainer", "remote": "../../x"}, "outside the instance"),
            ("pull", {"name": "trainer", "remote": "proj/out", "local": str(outside)},
             "outside the folder"),
            ("pull", {"name": "trainer", "remote": "proj/out", "local": "../outside"},
             "outside the folder"),
            ("pull", {"name": "trainer", "remote": "proj/out", "local": "~/stolen"},
             "outside the folder"),
            ("pull", {"name": "trainer", "remote": "nothing-here"}, "no such file"),
            ("push", {"name": "trainer", "local": "/etc/hostname"}, "outside the folder"),
            ("push", {"name": "trainer", "local": "proj", "remote": "/etc/proj"},
             "outside the instance"),
            ("push", {"name": "trainer", "local": "missing"}, "no such file"),
            ("push", {"name": "nosuch", "local": "proj"}, "no instance named"),
            ("jobs_add", {"name": "trainer"}, "give command"),
            ("jobs_add", {"name": "trainer", "command": "x", "commands": ["y"]}, "not both"),
            ("jobs_add", {"name": "trainer", "commands": []}, "commands: 1-"),
            ("jobs_add", {"name": "trainer", "command": "  "}, "command: give"),
            ("jobs_add", {"name": "trainer", "command": "true", "gpus": [5]}, "gpus"),
            ("jobs_add", {"name": "trainer", "command": "true", "retries": -1}, "retries"),
            ("jobs_add", {"name": "trainer", "command": "true", "cwd": "/etc"}, "cwd"),
            ("jobs_add", {"name": "nosuch", "command": "true"}, "no instance named"),
            ("jobs_log", {"name": "trainer", "job": "abc"}, "not a job id"),
            ("jobs_log", {"name": "trainer", "job": 99}, "no job 99"),
            ("jobs_log", {"name": "trainer", "job": 1, "lines": 0}, "lines"),
            ("jobs_cancel", {"name": "trainer", "job": -1}, "not a job id"),
            ("when_done", {"name": "trainer", "policy": "explode"}, "policy"),
            ("when_done", {"name": "trainer", "policy": "keep", "grace": "forever"}, "grace"),
            ("when_done", {"name": "trainer", "policy": "keep", "to": "x"}, "to: needs pull"),
            ("when_done", {"name": "trainer", "policy": "keep", "pull": "/etc"},
             "outside the instance"),
            ("when_done", {"name": "trainer", "policy": "keep", "pull": "proj",
                           "to": str(outside)}, "outside the folder"),
            ("when_done", {"name": "trainer", "policy": "release"}, "confirm: true"),
        ]
        for tool, args, text in cases:
            with pytest.raises(MCPError) as caught:
                await session.call_tool(tool, args)
            assert caught.value.code == -32602, (tool, args, caught.value.message)
            assert text in caught.value.message and "\n" not in caught.value.message, (
                tool, args, caught.value.message)
        assert not outside.exists() and not (tmp_path / "stolen").exists()
        assert not (work / "nothing-here").exists()
        queue = data(await session.call_tool("jobs_list", {"name": "trainer"}))
        assert len(queue["runs"]) == 4  # nothing queued
        assert queue["when_done"]["policy"] == "keep"  # the refused release changed nothing
        assert [i["name"] for i in instances(gputui_home)] == ["trainer"]

        # the queue has ended: when_done release (with a pull) is carried out at once
        (work / "out" / "result.txt").unlink()
        done = data(await session.call_tool("when_done", {
            "name": "trainer", "policy": "release", "pull": "~/proj/out", "to": "final",
            "confirm": True}))
        assert done["outcome"] == "released", done
        assert (work / "final" / "result.txt").read_text() == "loss 0.125\n"
    assert instances(gputui_home) == []


async def test_a_long_command_is_logged_cut_and_other_calls_are_answered_meanwhile(
        gputui_home: Path):
    """A 200 kB run_command was logged whole through Rich at INFO: minutes of layout on stderr,
    and a `release` sent meanwhile went unanswered. Now the log holds its first 200
    characters and its size, and the release is answered at once."""
    import asyncio
    import time

    config = f'[providers.lambda]\nenabled = false\napi_key = "{SECRET}"\n'
    async with agent(gputui_home, config) as session:
        for name in ("busy", "spare", "other"):
            data(await session.call_tool("create", {"gpu": "RTX 4090", "name": name,
                                                    "release_after": "10m"}))
        started = time.monotonic()
        data(await session.call_tool("release", {"name": "other", "confirm": True}))
        alone = time.monotonic() - started  # a release with nothing else going on

        # a shell script of 100 kB: a comment that size, then a few seconds of work
        command = f"echo start {SECRET}\n#{'x' * 100_000}\nsleep 4; echo done"
        long = asyncio.create_task(session.call_tool("run_command", {
            "name": "busy", "command": command, "timeout_s": 120}))
        await asyncio.sleep(1.0)  # the long call is in, and logged
        assert not long.done()
        started = time.monotonic()
        gone = data(await session.call_tool("release", {"name": "spare", "confirm": True}))
        meanwhile = time.monotonic() - started
        assert gone["released"]
        assert not long.done(), "the release was answered only after the long call ended"
        assert meanwhile < alone + 1.0, (meanwhile, alone)
        run = data(await long)
        assert run["exit_status"] == 0 and "done" in run["stdout"], run
        assert "start ***" in run["stdout"]
        # 200 kB: more than a shell takes as one argument (it fails), logged cut all the same
        huge = f"echo {SECRET} #{'y' * 200_000}"
        started = time.monotonic()
        result = await session.call_tool("run_command", {"name": "busy", "command": huge})
        print(result)
        assert time.monotonic() - started < alone + 5
        data(await session.call_tool("release", {"name": "busy", "confirm": True}))
    log = (gputui_home / "mcp.err").read_text()
    assert "x" * 1000 not in log and "y" * 1000 not in log and len(log) < 100_000
    for text, mark in ((command, "echo start"), (huge, "y" * 50)):
        [line] = [ln for ln in log.splitlines() if mark in ln and "Command:" in ln]
        size = re.fullmatch(r".*\u2026 \((\d+) bytes\)", line)  # the logged message's size
        assert size and 0 <= int(size[1]) - len(text.encode()) < 100 and len(line) < 400, line
    assert "echo start *** #xxxx" in log and "echo *** #yyyy" in log
    assert SECRET not in log and "\x1b" not in log


def _files_gputui_wrote(home: Path) -> dict[str, bytes]:
    """Every file under the state folder (the database, its journal, the MCP server's stderr,
    when-done records...) but config.toml, which holds the key, and the sandbox's instances
    (the instance's own disk: its queue holds the command as given)."""
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*")
            if p.is_file() and p.name != "config.toml" and "sandbox" not in p.parts}


async def test_a_key_never_reaches_a_log_the_database_or_an_export(gputui_home: Path,
                                                                   tmp_path: Path):
    """The drill's leaks: a key split by an escape sequence passed the mask (masked before the
    escape was stripped); the server's stderr printed commands whole; `run_costs` in the
    state database and `costs --runs --json` kept a run's command with the key in clear."""
    import subprocess

    from tests.conftest import GPUTUI, run_gputui_env

    work = tmp_path / "work"
    work.mkdir()
    config = (f'[mcp]\nlocal_folder = "{work}"\n'
              f'[providers.lambda]\nenabled = false\napi_key = "{SECRET}"\n')
    # printf writes the key with an escape sequence inside it: the command holds no key, the
    # output holds it split; a terminal (and the sanitiser) would join it again
    split = SECRET[:9] + "\\033[0m" + SECRET[9:]
    async with agent(gputui_home, config) as session:
        data(await session.call_tool("create", {"gpu": "RTX 4090", "name": "keeper"}))
        run = data(await session.call_tool("run_command", {
            "name": "keeper", "command": f"printf 'a={split}\\n'; printf 'b={split}\\n' >&2"}))
        assert run["stdout"] == "a=***" and run["stderr"] == "b=***", run
        added = data(await session.call_tool("jobs_add", {
            "name": "keeper", "label": "leaky",
            "commands": [f"echo key={SECRET}", f"printf 'c={split}\\n'"]}))
        queue = await _until_finished(session, "keeper")  # records the runs' costs
        assert [r["status"] for r in queue["runs"]] == ["succeeded", "succeeded"], queue
        assert queue["runs"][0]["command"] == "echo key=***"
        log = data(await session.call_tool("jobs_log", {"name": "keeper",
                                                        "job": added["ids"][1]}))
        assert log["lines"] == ["c=***"], log
        out = await asyncio.to_thread(subprocess.run, [*GPUTUI, "costs", "--runs", "--json"],
                                      env=run_gputui_env(gputui_home), capture_output=True,
                                      text=True, timeout=60)
        runs = json.loads(out.stdout)
        assert [r["command"] for r in runs] == ["echo key=***", f"printf 'c={split}\\n'"]
        assert [r["label"] for r in runs] == ["leaky-1", "leaky-2"]
        listed = await asyncio.to_thread(subprocess.run, [*GPUTUI, "jobs", "keeper", "--json"],
                                         env=run_gputui_env(gputui_home), capture_output=True,
                                         text=True, timeout=60)
        assert json.loads(listed.stdout)[0]["command"] == "echo key=***", listed.stdout
        assert SECRET not in listed.stdout + listed.stderr
        data(await session.call_tool("release", {"name": "keeper", "confirm": True}))
    wrote = _files_gputui_wrote(gputui_home)
    assert "state.db" in wrote and "mcp.err" in wrote
    assert b"Command: printf" in wrote["mcp.err"]  # commands are logged, masked
    leaks = [name for name, blob in wrote.items() if SECRET.encode() in blob]
    assert leaks == [], leaks
    assert SECRET not in out.stdout + out.stderr

    # a row stored before commands were masked on the way in: masked on the way out
    from gputui.store import SessionStore

    store = SessionStore(gputui_home / "state.db")
    try:
        store.record_run_cost_sync("old", "1", {
            "instance_id": "old", "instance": "old", "job_id": "1", "label": "x",
            "command": f"echo {SECRET[:9]}\x1b[1m{SECRET[9:]}", "status": "succeeded",
            "exit_code": 0, "gpu": "RTX 4090", "gpus": None, "gpu_count": 1,
            "started_at": utcnow().isoformat(), "ended_at": utcnow().isoformat(),
            "seconds": 1.0, "rate_per_hour": "1", "cost": "0.01", "currency": "USD"}, 0.0)
    finally:
        store.close()
    out = await asyncio.to_thread(subprocess.run, [*GPUTUI, "costs", "--runs", "--json"],
                                  env=run_gputui_env(gputui_home), capture_output=True,
                                  text=True, timeout=60)
    old = json.loads(out.stdout)[0]
    assert old["command"] == "echo ***" and SECRET not in out.stdout, old


async def test_links_in_the_local_folder_lead_nowhere_outside_it(gputui_home: Path,
                                                                tmp_path: Path):
    """The drill: a symlinked sub-folder of the local folder let `pull` write outside it, and
    `push` of a folder holding a file link uploaded the link's target. Local paths are
    resolved, links followed to the end, before the check; links that stay inside work."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "proj").mkdir(parents=True)
    outside.mkdir()
    (outside / "id_ed25519").write_text("PRIVATE KEY\n")
    (work / "proj" / "train.py").write_text("print('hi')\n")
    (work / "proj" / "key").symlink_to(outside / "id_ed25519")  # a file link out
    (work / "inside").mkdir()
    (work / "inside" / "real.txt").write_text("fine\n")
    (work / "tidy").mkdir()
    (work / "tidy" / "alias.txt").symlink_to(work / "inside" / "real.txt")  # stays inside
    (work / "dest").mkdir()
    (work / "dest" / "out").symlink_to(outside, target_is_directory=True)  # a folder link out
    (work / "hop").symlink_to(work / "inside", target_is_directory=True)
    (work / "inside" / "door").symlink_to(outside, target_is_directory=True)  # out, two links on
    config = f'[mcp]\nlocal_folder = "{work}"\n'
    async with agent(gputui_home, config) as session:
        data(await session.call_tool("create", {"gpu": "RTX 4090", "name": "box"}))
        data(await session.call_tool("run_command", {
            "name": "box", "command": "mkdir -p res/out && echo won > res/out/x.txt"}))
        cases = [
            ("push", {"name": "box", "local": "proj"}, "proj/key is a link to"),
            ("pull", {"name": "box", "remote": "res", "local": "dest"}, "dest/out is a link to"),
            ("pull", {"name": "box", "remote": "res", "local": "hop/door/new"},
             "(it leads to "),
            ("pull", {"name": "box", "remote": "res/out", "local": "hop"},
             "inside/door is a link to"),
            ("when_done", {"name": "box", "policy": "keep", "pull": "res", "to": "dest"},
             "dest/out is a link to"),
        ]
        for tool, args, text in cases:
            with pytest.raises(MCPError) as caught:
                await session.call_tool(tool, args)
            assert caught.value.code == -32602, (tool, args, caught.value.message)
            assert text in caught.value.message and str(outside) in caught.value.message, (
                tool, caught.value.message)
        assert sorted(p.name for p in outside.iterdir()) == ["id_ed25519"]  # nothing written
        listing = data(await session.call_tool("run_command", {
            "name": "box", "command": "ls proj 2>&1; cat proj/key 2>&1; true"}))
        assert "PRIVATE" not in listing["stdout"]
        # links that stay inside the folder are followed as before
        pushed = data(await session.call_tool("push", {"name": "box", "local": "tidy"}))
        assert pushed["files"] == 1
        got = data(await session.call_tool("run_command", {"name": "box",
                                                           "command": "cat tidy/alias.txt"}))
        assert got["stdout"] == "fine"
        data(await session.call_tool("pull", {"name": "box", "remote": "res/out",
                                              "local": "inside/got"}))
        assert (work / "inside" / "got" / "x.txt").read_text() == "won\n"
        data(await session.call_tool("release", {"name": "box", "confirm": True}))


async def test_control_characters_are_refused_coming_in_and_cleaned_going_out(
        gputui_home: Path, tmp_path: Path):
    """The drill: when_done took pull paths holding an OSC 52 clipboard write and a window
    title, which `gputui jobs` then printed raw. Every entry (MCP tools, `when-done --pull`,
    labels) refuses control characters; what was stored before is cleaned on the way out."""
    import subprocess

    from tests.conftest import GPUTUI, run_gputui_env

    work = tmp_path / "work"
    work.mkdir()
    osc52, title = "out\x1b]52;c;ZXZpbA==\x07", "\x1b]0;pwned\x07res"
    async with agent(gputui_home, f'[mcp]\nlocal_folder = "{work}"\n') as session:
        data(await session.call_tool("create", {"gpu": "RTX 4090", "name": "esc"}))
        cases = [
            ("when_done", {"name": "esc", "policy": "keep", "pull": osc52}, "pull"),
            ("when_done", {"name": "esc", "policy": "keep", "pull": "res", "to": title}, "to"),
            ("jobs_add", {"name": "esc", "command": "true", "label": "a\x1b[31m"}, "label"),
            ("jobs_add", {"name": "esc", "command": "echo \x1b]0;t\x07"}, "command"),
            ("jobs_add", {"name": "esc", "commands": ["true", "echo \x9b2J"]}, "commands.1"),
            ("jobs_add", {"name": "esc", "command": "true", "cwd": "a\u202eb"}, "cwd"),
            ("push", {"name": "esc", "local": "x\x07"}, "local"),
            ("pull", {"name": "esc", "remote": osc52}, "remote"),
            ("create", {"gpu": "RTX 4090", "name": "n\x1b[8m"}, "name"),
            ("run_command", {"name": "esc", "command": "printf \x1b]52;c;eA==\x07"}, "command"),
        ]
        for tool, args, field in cases:
            with pytest.raises(MCPError) as caught:
                await session.call_tool(tool, args)
            assert caught.value.code == -32602, (tool, args, caught.value.message)
            assert caught.value.message == (f"{tool}: {field}: control characters (an escape, "
                                            "a BEL...) are not allowed"), caught.value.message
        # a shell script's own line breaks and tabs are no control characters to refuse
        added = data(await session.call_tool("jobs_add", {
            "name": "esc", "command": "echo a\n\techo b", "label": "two lines"}))
        queue = await _until_finished(session, "esc")
        assert [r["status"] for r in queue["runs"]] == ["succeeded"] and added["ids"] == ["1"]
        assert queue["when_done"] is None  # nothing refused was kept
        # a when-done record written before paths were checked (by hand here)
        data(await session.call_tool("when_done", {"name": "esc", "policy": "keep",
                                                   "pull": "res", "to": "res"}))
    [record] = (gputui_home / "jobs").glob("*.json")
    rec = json.loads(record.read_text())
    rec["pulls"] = [{"remote": osc52, "local": str(work / title)}]
    record.write_text(json.dumps(rec))
    env = run_gputui_env(gputui_home)

    def gputui(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*GPUTUI, *args], env=env, capture_output=True, text=True,
                              timeout=120)

    shown = await asyncio.to_thread(gputui, "jobs", "esc")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert f"(pull out -> {work / 'res'} first)" in shown.stdout, shown.stdout  # escapes gone
    # the command line refuses them too: one line, exit 2, nothing changed
    for args in (("when-done", "keep", "--pull", osc52),
                 ("when-done", "keep", "--pull", "res", "--to", title),
                 ("add", "--name", "x\x1b[2J", "--", "true")):
        out = await asyncio.to_thread(gputui, "jobs", "esc", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "control characters are not allowed" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "\x1b" not in out.stderr
    assert json.loads(record.read_text())["pulls"] == rec["pulls"]  # unchanged
    out = await asyncio.to_thread(gputui, "run", "esc", "--pull", osc52, "--", "true")
    assert out.returncode == 2 and "--pull: control characters" in out.stderr, out.stderr
    listed = json.loads((await asyncio.to_thread(gputui, "jobs", "esc", "--json")).stdout)
    assert len(listed) == 1  # `run` queued nothing


async def test_only_json_true_confirms(gputui_home: Path):
    """The drill: `confirm` took "true", "yes" and 1. Only JSON true confirms; anything else
    is an invalid-params error and nothing is released, extended or rented."""
    config = '[mcp]\nconfirm_over = { USD = "1" }\n'
    async with agent(gputui_home, config) as session:
        made = data(await session.call_tool("create", {"gpu": "RTX 4090", "name": "sure",
                                                       "release_after": "10m"}))
        for value in ("true", "yes", 1, "1", "True", 1.0, [True], {"value": True}):
            for tool, args in (
                    ("release", {"name": "sure"}),
                    ("when_done", {"name": "sure", "policy": "release"}),
                    ("extend", {"name": "sure", "by": "1h"}),
                    ("create", {"gpu": "H100 SXM", "count": 8, "release_after": "2h"})):
                with pytest.raises(MCPError) as caught:
                    await session.call_tool(tool, {**args, "confirm": value})
                assert caught.value.code == -32602, (tool, value)
                assert caught.value.message.startswith(f"{tool}: confirm: "), (
                    tool, value, caught.value.message)
        assert [i["name"] for i in instances(gputui_home)] == ["sure"]
        assert instances(gputui_home)[0]["release_at"] == made["release_at"]
        gone = data(await session.call_tool("release", {"name": "sure", "confirm": True}))
        assert gone["released"]
    assert instances(gputui_home) == []


async def test_an_unknown_price_is_null_and_renting_it_needs_confirm(gputui_home: Path,
                                                                    tmp_path: Path):
    """AutoDL's 4090D has no sourced price: `offers` said "0" and `create` spent "0" without a
    question. The price reads null (price_known false) and renting it needs confirm: true."""
    from tests.providers.autodl_emulator import AutoDLEmulator
    from tests.providers.test_autodl_cli import TEST_TOKEN

    async with AutoDLEmulator(ssh_root=tmp_path / "boxes", creating_s=0.1, starting_s=0.1,
                              ssh_delay=0.2, shutting_s=0.1) as emu:
        env = {"AUTODL_TOKEN": TEST_TOKEN, "AUTODL_API_BASE": emu.base_url}
        async with agent(gputui_home, env_extra=env) as session:
            offers = data(await session.call_tool("offers", {"provider": "autodl"}))
            d = next(o for o in offers if "4090 D" in o["gpu"] or "4090D" in o["gpu"])
            assert d["price_known"] is False and d["price_per_gpu_hour"] is None, d
            assert all(o["price_per_gpu_hour"] != "0" for o in offers), offers
            with pytest.raises(MCPError) as caught:
                await session.call_tool("create", {"provider": "autodl", "gpu": d["gpu"],
                                                   "release_after": "10m"})
            assert "price is not known" in caught.value.message
            assert "confirm: true" in caught.value.message
        assert instances(gputui_home) == []
