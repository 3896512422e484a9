"""Contract tests of the Ollama client layer: the shapes of Ollama's docs/api.md replayed
through httpx.MockTransport, and the same contract against the sandbox's simulated server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gputui.remote.ollama_client import (
    OllamaClient,
    OllamaError,
    OllamaNotFound,
    OllamaUnreachable,
    PullEvent,
    PullProgress,
    normalize_name,
    parse_host,
)
from gputui.sandbox.shims import ollama_server

Handler = Callable[[httpx.Request], httpx.Response]

# Shapes as docs/api.md of ollama/ollama shows them.
TAGS = {
    "models": [
        {
            "name": "codellama:13b",
            "modified_at": "2023-11-04T14:56:49.277302595-07:00",
            "size": 7365960935,
            "digest": "9f438cb9cd581fc025612d27f7c1a6669ff83a8bb0ed86c94fcf4c5440555697",
            "details": {"format": "gguf", "family": "llama", "families": None,
                        "parameter_size": "13B", "quantization_level": "Q4_0"},
        }
    ]
}
PS = {
    "models": [
        {
            "name": "mistral:latest", "model": "mistral:latest", "size": 5137025024,
            "digest": "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8",
            "details": {"parent_model": "", "format": "gguf", "family": "llama",
                        "families": ["llama"], "parameter_size": "7.2B",
                        "quantization_level": "Q4_0"},
            "expires_at": "2024-06-04T14:38:31.83753-07:00",
            "size_vram": 2568512512,
        }
    ]
}
SHOW = {
    "modelfile": "FROM llama3.2", "parameters": "num_keep 24", "template": "{{ .Prompt }}",
    "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                "parameter_size": "8.0B", "quantization_level": "Q4_0"},
    "model_info": {
        "general.architecture": "llama", "general.file_type": 2,
        "general.parameter_count": 8030261248, "general.quantization_version": 2,
        "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
        "llama.block_count": 32, "llama.context_length": 8192,
        "llama.embedding_length": 4096, "llama.feed_forward_length": 14336,
    },
}
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


def ndjson(*lines: dict) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def mock(handler: Handler) -> OllamaClient:
    return OllamaClient("http://ollama.test", timeout=5, transport=httpx.MockTransport(handler))


async def test_tags_ps_show_version_parse_the_documented_shapes():
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if request.url.path == "/api/tags":
            return httpx.Response(200, json=TAGS)
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=PS)
        if request.url.path == "/api/show":
            assert json.loads(request.content)["model"] == "llama3.1:8b"
            return httpx.Response(200, json=SHOW)
        if request.url.path == "/api/version":
            return httpx.Response(200, json={"version": "0.6.5"})
        return httpx.Response(404, text="404 page not found")

    async with mock(handler) as client:
        (tag,) = await client.tags()
        assert tag.name == "codellama:13b" and tag.size == 7365960935
        assert tag.quantization == "Q4_0" and tag.family == "llama" and tag.short_id == "9f438cb9cd58"
        assert tag.modified_at is not None and tag.modified_at.year == 2023
        (run,) = await client.ps()
        assert run.name == "mistral:latest" and run.size_vram == 2568512512
        assert run.processor == "50%/50% CPU/GPU" and run.gpu_share == pytest.approx(0.5)
        info = await client.show("llama3.1:8b")
        assert (info.layers, info.kv_heads, info.heads, info.embedding) == (32, 8, 32, 4096)
        assert info.head_dim == 128 and info.context_length == 8192
        # 2 (K,V) x 32 layers x 8 kv heads x 128 x 2 bytes = 128 KiB per token
        assert info.kv_bytes(4096) == 131072 * 4096
        assert await client.version() == "0.6.5"
    assert ("GET", "/api/tags") in seen and ("POST", "/api/show") in seen


async def test_pull_stream_with_an_error_line_at_http_200_raises_the_error():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/pull"
        body = ndjson({"status": "pulling manifest"},
                      {"error": "pull model manifest: file does not exist"})
        return httpx.Response(200, content=body, headers={"content-type": "application/x-ndjson"})

    got: list[PullEvent] = []
    async with mock(handler) as client:
        with pytest.raises(OllamaError) as err:
            async for event in client.pull("nope:1b"):
                got.append(event)
    assert [e.status for e in got] == ["pulling manifest"]
    assert err.value.message == "pull model manifest: file does not exist"
    assert not isinstance(err.value, OllamaNotFound)


async def test_pull_progress_is_summed_per_layer_not_per_line():
    def handler(request: httpx.Request) -> httpx.Response:
        body = ndjson(
            {"status": "pulling manifest"},
            {"status": "pulling aaaaaaaaaaaa", "digest": D1, "total": 1000},
            {"status": "pulling aaaaaaaaaaaa", "digest": D1, "total": 1000, "completed": 400},
            {"status": "pulling aaaaaaaaaaaa", "digest": D1, "total": 1000, "completed": 1000},
            {"status": "pulling bbbbbbbbbbbb", "digest": D2, "total": 10, "completed": 10},
            {"status": "verifying sha256 digest"},
            {"status": "writing manifest"},
            {"status": "success"},
        )
        return httpx.Response(200, content=body)

    progress = PullProgress("m")
    fractions = []
    async with mock(handler) as client:
        async for event in client.pull("m"):
            fractions.append(progress.update(event).fraction)
    assert progress.done and progress.total == 1010 and progress.completed == 1010
    assert fractions[2] == pytest.approx(0.4)  # 400 of the 1000 known so far
    assert fractions == sorted(fractions) or fractions[-1] == 1.0


async def test_delete_404_is_not_found_and_200_is_fine():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "DELETE" and request.url.path == "/api/delete"
        name = json.loads(request.content)["model"]
        if name == "there:1b":
            return httpx.Response(200)
        return httpx.Response(404, json={"error": f"model '{name}' not found"})

    async with mock(handler) as client:
        await client.delete("there:1b")
        with pytest.raises(OllamaNotFound) as err:
            await client.delete("gone:1b")
    assert err.value.status == 404 and err.value.message == "model 'gone:1b' not found"


async def test_load_and_unload_send_keep_alive_without_a_prompt():
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        reason = "unload" if body.get("keep_alive") == 0 else "load"
        return httpx.Response(200, json={"model": body["model"], "created_at": "2024-09-12T03:54:03Z",
                                         "response": "", "done": True, "done_reason": reason})

    async with mock(handler) as client:
        await client.load("qwen2.5:7b", keep_alive="10m", num_ctx=8192)
        await client.unload("qwen2.5:7b")
    assert "prompt" not in bodies[0] and bodies[0]["keep_alive"] == "10m"
    assert bodies[0]["options"]["num_ctx"] == 8192
    assert bodies[1]["keep_alive"] == 0 and "prompt" not in bodies[1]


async def test_server_errors_and_unreachable_servers_are_one_line_errors():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": "model requires more system memory (25.7 GiB) "
                                                  "than is available (16.0 GiB)"})

    async with mock(handler) as client:
        with pytest.raises(OllamaError, match="more system memory") as err:
            await client.load("qwen2.5:72b")
    assert err.value.status == 500

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with mock(refuse) as client:
        with pytest.raises(OllamaUnreachable):
            await client.tags()
        with pytest.raises(OllamaUnreachable):
            await client.version()
        with pytest.raises(OllamaUnreachable):
            async for _ in client.pull("x"):
                pass


def test_names_and_hosts_as_ollama_reads_them():
    assert normalize_name("qwen2.5") == "qwen2.5:latest"
    assert normalize_name("registry.ollama.ai/library/qwen2.5:7b") == "qwen2.5:7b"
    assert normalize_name("me/model") == "me/model:latest"
    assert parse_host(None) == ("127.0.0.1", 11434)
    assert parse_host("0.0.0.0") == ("0.0.0.0", 11434)
    assert parse_host("http://10.0.0.2:11500") == ("10.0.0.2", 11500)
    assert parse_host(":11500") == ("127.0.0.1", 11500)
    assert parse_host("[::1]:9999") == ("::1", 9999)
    # the sandbox server's stdlib copies agree
    for text in (None, "0.0.0.0", "http://10.0.0.2:11500", ":11500", "[::1]:9999"):
        assert ollama_server.parse_host(text) == parse_host(text)
    for name in ("qwen2.5", "library/llama3.1:8b", "me/model"):
        assert ollama_server.normalize_name(name) == normalize_name(name)


# --------------------------------------------------------------------------- the same contract
# against the sandbox's simulated server (in-process, no GPUs: it only answers HTTP here)


@pytest.fixture
def sandbox_server(tmp_path: Path) -> Iterator[str]:
    env = {"OLLAMA_MODELS": str(tmp_path / "models"), "GPUTUI_SANDBOX_OLLAMA_TIME_SCALE": "0"}
    state = ollama_server.OllamaState(None, env)
    server = ollama_server.make_server(state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_sandbox_server_speaks_the_same_contract(sandbox_server: str):
    async with OllamaClient(sandbox_server, timeout=5) as client:
        assert await client.version() == ollama_server.VERSION
        assert await client.tags() == []
        with pytest.raises(OllamaError, match="file does not exist"):
            async for _ in client.pull("no-such-model:1b"):
                pass
        progress = PullProgress("qwen2.5:0.5b")
        statuses = []
        async for event in client.pull("qwen2.5:0.5b"):
            statuses.append(progress.update(event).status)
        assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
        assert "verifying sha256 digest" in statuses and "writing manifest" in statuses
        assert progress.done and progress.total == sum(s for _, _, s in ollama_server.layers_of(
            ollama_server.LIBRARY["qwen2.5:0.5b"]))
        (tag,) = await client.tags()
        assert tag.name == "qwen2.5:0.5b" and tag.size == progress.total
        assert tag.quantization == "Q4_K_M" and tag.family == "qwen2"
        info = await client.show("qwen2.5:0.5b")
        assert (info.layers, info.kv_heads, info.head_dim) == (24, 2, 64)
        await client.load("qwen2.5:0.5b", keep_alive=-1)
        (run,) = await client.ps()
        assert run.name == "qwen2.5:0.5b" and run.size_vram == 0  # no GPU here: all on the CPU
        assert run.expires_at is not None and run.expires_at.year > 2200  # "forever"
        await client.unload("qwen2.5:0.5b")
        assert await client.ps() == []
        with pytest.raises(OllamaNotFound):
            await client.show("qwen2.5:72b")
        with pytest.raises(OllamaNotFound):
            await client.load("qwen2.5:72b")
        await client.delete("qwen2.5:0.5b")
        with pytest.raises(OllamaNotFound, match="not found"):
            await client.delete("qwen2.5:0.5b")
    # raw HTTP: the error line really comes with HTTP 200, the 404 with a JSON body
    async with httpx.AsyncClient(base_url=sandbox_server, timeout=5) as http:
        resp = await http.post("/api/pull", json={"model": "nope:1b"})
        assert resp.status_code == 200
        assert [json.loads(x) for x in resp.text.splitlines()] == [
            {"status": "pulling manifest"}, {"error": "pull model manifest: file does not exist"}]
        resp = await http.request("DELETE", "/api/delete", json={"model": "nope:1b"})
        assert resp.status_code == 404 and resp.json() == {"error": "model 'nope:1b' not found"}
        assert (await http.get("/")).text == "Ollama is running"
