"""The Lambda API key never shows: not in logs, exceptions, repr()s, the state database, exports
or the screen; a config.toml holding it must be 0600."""

from __future__ import annotations

import json
import logging
import os
import pickle
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.providers.base import CreateRequest, ProviderContext, ProviderError
from gputui.providers.lambda_cloud import (
    ApiKey,
    LambdaProvider,
    lambda_enabled,
    mask_key,
    resolve_key,
)
from gputui.services.costs import export_rows, to_csv
from gputui.services.hub import ServiceError, Services
from gputui.store import SessionStore
from tests.providers.lambda_emulator import TEST_KEY, LambdaEmulator

SECRET_PART = TEST_KEY[8:-6]  # any long run of the key counts as a leak


def leaks(text: str) -> bool:
    return TEST_KEY in text or SECRET_PART in text


def test_mask_shows_a_hint_only():
    assert mask_key(TEST_KEY) == "sec…ba98"
    assert mask_key("short") == "…****" and mask_key(None) == "(none)"
    key = ApiKey(TEST_KEY)
    assert not leaks(repr(key)) and not leaks(str(key)) and not leaks(f"{key}")
    assert key.reveal() == TEST_KEY
    with pytest.raises(TypeError):
        pickle.dumps(key)
    with pytest.raises(ValueError):
        ApiKey("two words")
    assert key.scrub(f"bad header: Authorization: Bearer {TEST_KEY}") == \
        "bad header: Authorization: Bearer sec…ba98"
    assert "c2stbGl2ZS0xMjM0NTY3ODkwOg==" not in key.scrub("Basic c2stbGl2ZS0xMjM0NTY3ODkwOg==")


async def test_key_never_leaks_through_a_whole_flow(gputui_home: Path,
                                                    caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    async with LambdaEmulator(request_interval=0, launch_interval=0, boot_seconds=0.1,
                              terminate_seconds=0.1, gone_seconds=0.1) as emu:
        svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
        ctx = ProviderContext(gputui_home, svc.config, svc)
        provider = LambdaProvider(ctx, base_url=emu.base_url, env={"LAMBDA_API_KEY": TEST_KEY},
                                  poll_interval=0.03, request_interval=0, launch_interval=0,
                                  backoff=0.01, backoff_max=0.02, timeout=0.5)
        svc.providers["lambda"] = provider
        texts = [repr(provider), str(provider), provider.key_hint, provider.label,
                 repr(provider.__dict__.get("_client"))]
        try:
            # the server echoes the credential back in an error; retries log their reason
            emu.fail("/instance-types", 400, body={"error": {
                "code": "global/invalid-parameters",
                "message": f"Malformed header: Authorization: Bearer {TEST_KEY}"}})
            with pytest.raises(ServiceError) as err:
                await svc.offers("lambda")
            texts += [str(err.value), repr(err.value)]
            emu.fail("/instance-types", 500, times=2, body={"error": {
                "code": "global/internal-error", "message": f"key {TEST_KEY} broke us"}})
            emu.delay("/instance-types", 0.8)
            offer = await svc.find_offer("lambda", "A10")
            inst = await svc.create("lambda", offer, CreateRequest(offer_id=offer.offer_id,
                                                                   name="job"))
            texts += [repr(inst), inst.model_dump_json(), repr(provider._http())]
            await svc.refresh(inst)
            await svc.release(inst, "manual")
            rows = export_rows(svc.store.ledger_sync(), await svc.store.instances())
            texts += [to_csv(rows), json.dumps(rows, default=str)]
            bad = LambdaProvider(ctx, base_url=emu.base_url, api_key="secret_wrong_0123456789abcdef")
            with pytest.raises(ProviderError) as err401:
                await bad.offers()
            await bad.close()
            texts.append(str(err401.value))
        finally:
            await svc.close()
    assert "sec…ba98" in provider.key_hint and "LAMBDA_API_KEY" in provider.key_hint
    assert "sec…ba98" in texts[5]  # the echoed key is shown masked
    for text in texts:
        assert not leaks(text), text
    assert not leaks(caplog.text)
    assert "retrying" in caplog.text  # the retries were logged, and the log is clean
    for path, data in _files(gputui_home):  # state.db, its -wal, keys …
        assert TEST_KEY.encode() not in data, path
    assert [e.end_reason for e in SessionStore(gputui_home / "state.db").ledger_sync()] == ["manual"]


def _files(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def test_a_config_file_holding_the_key_must_be_0600(gputui_home: Path):
    cfg = Config()
    cfg.providers.lambda_cloud.api_key = TEST_KEY
    path = gputui_home / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[providers.lambda]\napi_key = "x"\n')
    os.chmod(path, 0o644)
    key, source, warnings = resolve_key(cfg, env={}, config_file=path)
    assert key is not None and key.reveal() == TEST_KEY and "config.toml" in source
    [warning] = warnings
    assert "readable by others" in warning and f"chmod 600 {path}" in warning
    assert not leaks(warning)
    provider = LambdaProvider(ProviderContext(gputui_home, cfg, None), env={}, config_file=path)
    assert provider.warnings == [warning]
    os.chmod(path, 0o600)
    assert resolve_key(cfg, env={}, config_file=path)[2] == []
    # the environment wins, and then the file's mode is not the key's business
    os.chmod(path, 0o644)
    env_key, env_source, env_warnings = resolve_key(
        cfg, env={"LAMBDA_API_KEY": "secret_from_env_0123456789"}, config_file=path)
    assert env_key.reveal() == "secret_from_env_0123456789" and env_source == "LAMBDA_API_KEY"
    assert env_warnings == []


def test_the_provider_is_registered_when_enabled_or_a_key_is_set():
    cfg = Config()
    assert lambda_enabled(cfg, env={}) is False
    assert lambda_enabled(cfg, env={"LAMBDA_API_KEY": "  "}) is False
    assert lambda_enabled(cfg, env={"LAMBDA_API_KEY": TEST_KEY}) is True
    cfg.providers.lambda_cloud.enabled = True
    assert lambda_enabled(cfg, env={}) is True
