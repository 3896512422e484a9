"""Contract tests for the Lambda Cloud provider: every API call it makes, its success and each
documented error, against the local emulator (a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from gputui.config import Config
from gputui.models import Granularity, Instance, InstanceStatus
from gputui.providers.base import CreateRequest, ProviderContext, ProviderError
from gputui.providers.lambda_cloud import LambdaProvider, gpu_card, normalise_base_url
from gputui.services.hub import ServiceError, Services
from gputui.store import SessionStore
from tests.providers.lambda_emulator import _RATE_LIMITED_BODY, TEST_KEY, LambdaEmulator


@pytest.fixture
async def emu():
    async with LambdaEmulator(request_interval=0, launch_interval=0, boot_seconds=0.15,
                              terminate_seconds=0.2, gone_seconds=0.3) as e:
        yield e


def provider(state_dir: Path, emu: LambdaEmulator, services: object = None, **kw: object
             ) -> LambdaProvider:
    ctx = ProviderContext(state_dir, Config(), services)
    opts: dict = dict(api_key=TEST_KEY, base_url=emu.base_url, env={}, poll_interval=0.03,
                      request_interval=0, launch_interval=0, backoff=0.01, backoff_max=0.05,
                      timeout=2.0, max_attempts=4)
    opts.update(kw)
    return LambdaProvider(ctx, **opts)


@pytest.fixture
async def lam(gputui_home: Path, emu: LambdaEmulator):
    p = provider(gputui_home, emu)
    yield p
    await p.close()


@pytest.fixture
async def services(gputui_home: Path, emu: LambdaEmulator):
    svc = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    svc.providers["lambda"] = provider(gputui_home, emu, svc)
    yield svc
    await svc.close()


def blank(offer_gpu: str = "A10", region: str | None = None) -> Instance:
    from gputui.models import BillingRule

    return Instance(id="ours123", name="job", provider="lambda", gpu=offer_gpu, region=region,
                    billing=BillingRule(price_per_hour=Decimal("1.29"),
                                        granularity=Granularity.MINUTE))


async def launched(lam: LambdaProvider, type_name: str = "gpu_1x_a10", count: int = 1) -> Instance:
    inst = await lam.create(CreateRequest(offer_id=type_name, gpu_count=count, name="job"), blank())
    return await lam.boot(inst)


# -- GET /instance-types ------------------------------------------------------------------------


async def test_instance_types_become_offers_per_gpu_and_per_minute(lam: LambdaProvider):
    offers = await lam.offers()
    by_id = {o.offer_id: o for o in offers}
    sxm = by_id["gpu_8x_h100_sxm5@test-west-1"]
    assert sxm.gpu == "H100 80GB SXM5" and sxm.gpu_count == 8 and sxm.vram_gb == 80
    assert sxm.price_per_gpu_hour == Decimal("2.99")  # 2392 cents for the whole instance / 8
    assert sxm.billing.price_per_hour == Decimal("23.92")
    assert sxm.billing.granularity == Granularity.MINUTE
    assert sxm.billing.compute_cost(61) == Decimal("23.92") * 2 / 60  # started minutes
    # one offer per region with capacity
    assert {o.region for o in offers if o.gpu == "H100 80GB PCIe"} == {"test-east-1", "test-west-1"}
    # sold out: an empty regions_with_capacity_available
    sold = by_id["gpu_1x_a100_sxm4"]
    assert sold.available is False and sold.region is None and sold.gpu == "A100 40GB SXM4"
    # names mapped to catalog cards; unknown cards keep Lambda's words
    assert by_id["gpu_1x_a10@test-east-1"].gpu == "A10"
    assert by_id["gpu_2x_a6000@test-east-1"].gpu == "RTX A6000"
    assert by_id["gpu_1x_gh200@test-south-1"].gpu == "GH200 96GB"
    assert offers[-1] is sold  # available first


def test_gpu_descriptions_map_to_catalog_cards():
    assert gpu_card("H100 (80 GB SXM5)") == ("H100 80GB SXM5", 80)
    assert gpu_card("H100 (80 GB PCIe)")[0] == "H100 80GB PCIe"
    assert gpu_card("A100 (40 GB SXM4)")[0] == "A100 40GB SXM4"
    assert gpu_card("A100 (80 GB SXM4)")[0] == "A100 80GB SXM4"
    assert gpu_card("8x A10 (24 GB PCIe)")[0] == "A10"
    assert gpu_card("B200 (180 GB SXM6)")[0] == "B200 (HGX B200)"
    assert gpu_card("Tesla V100 (16 GB)") == ("Tesla V100 16GB", 16)  # not the 32GB card
    assert gpu_card("Quadro RTX 6000 (24 GB)")[0] == "Quadro RTX 6000 24GB"  # not the 6000 Ada


async def test_offers_match_typed_gpu_names(services: Services):
    assert (await services.find_offer("lambda", "h100 sxm")).offer_id == "gpu_8x_h100_sxm5@test-west-1"
    assert (await services.find_offer("lambda", "A10")).gpu == "A10"  # exact beats A100
    with pytest.raises(ServiceError, match="ambiguous"):
        await services.find_offer("lambda", "H100")


async def test_invalid_key_is_refused_once_never_retried(gputui_home: Path, emu: LambdaEmulator):
    bad = provider(gputui_home, emu, api_key="secret_wrong_000000000000000000000000")
    with pytest.raises(ProviderError) as err:
        await bad.offers()
    await bad.close()
    assert "API key was refused" in str(err.value) and "LAMBDA_API_KEY" in str(err.value)
    assert err.value.retryable is False and err.value.status == 401
    assert emu.count("GET", "/instance-types") == 1


async def test_inactive_account_is_a_clear_403(gputui_home: Path):
    async with LambdaEmulator(api_keys=(), inactive_keys=(TEST_KEY,), request_interval=0) as emu:
        p = provider(gputui_home, emu)
        with pytest.raises(ProviderError, match="account is inactive") as err:
            await p.offers()
        await p.close()
    assert err.value.status == 403 and emu.count("GET", "/instance-types") == 1


async def test_forbidden_is_not_retried(lam: LambdaProvider, emu: LambdaEmulator):
    emu.fail("/instance-types", 403, body={"error": {"code": "global/forbidden",
                                                     "message": "Key lacks the read scope."}})
    with pytest.raises(ProviderError, match="forbidden.*read scope"):
        await lam.offers()
    assert emu.count("GET", "/instance-types") == 1


async def test_no_key_says_where_to_put_one(gputui_home: Path, emu: LambdaEmulator):
    p = provider(gputui_home, emu, api_key=None)
    with pytest.raises(ProviderError, match="no API key — set LAMBDA_API_KEY"):
        await p.offers()
    assert emu.calls == []


# -- retries: 429 (non-JSON), 5xx, timeouts ------------------------------------------------------


async def test_429_with_an_html_body_is_backed_off_and_retried(lam: LambdaProvider,
                                                               emu: LambdaEmulator):
    emu.fail("/instance-types", 429, times=2, body=_RATE_LIMITED_BODY, content_type="text/html")
    assert await lam.offers()
    assert emu.count("GET", "/instance-types", 429) == 2
    assert emu.count("GET", "/instance-types", 200) == 1


async def test_the_emulators_rate_limit_and_retry_after(gputui_home: Path):
    async with LambdaEmulator(request_interval=0.15, retry_after=0.2) as emu:
        p = provider(gputui_home, emu)  # no client-side pacing: it must back off
        await p.offers()
        started = time.monotonic()
        await p.offers()
        assert time.monotonic() - started >= 0.2  # waited as Retry-After asked
        assert emu.count("GET", "/instance-types", 429) >= 1
        paced = provider(gputui_home, emu, request_interval=0.2)
        await paced.offers()
        n = emu.count("GET", "/instance-types", 429)
        await paced.offers()
        await paced.offers()
        assert emu.count("GET", "/instance-types", 429) == n  # paced: never refused
        await p.close()
        await paced.close()


async def test_5xx_is_retried_then_reported(lam: LambdaProvider, emu: LambdaEmulator):
    emu.fail("/instance-types", 502, times=1, body="<html>Bad Gateway</html>")
    emu.fail("/instance-types", 500, times=1)
    assert await lam.offers()
    emu.fail("/instance-types", 500, times=10)
    with pytest.raises(ProviderError, match="internal error") as err:
        await lam.offers()
    assert err.value.retryable
    assert emu.count("GET", "/instance-types", 500) == 1 + lam.max_attempts


async def test_upstream_provider_errors_are_transient(lam: LambdaProvider, emu: LambdaEmulator):
    emu.fail("/instance-types", 503, body={"error": {
        "code": "provider/internal-unavailable", "message": "Provider unavailable",
        "suggestion": "Try again shortly"}})
    assert await lam.offers()


async def test_a_timeout_is_retried(gputui_home: Path, emu: LambdaEmulator):
    p = provider(gputui_home, emu, timeout=0.2)
    emu.delay("/instance-types", 0.45)
    assert await p.offers()
    await asyncio.sleep(0.3)  # the late answer is logged when it is finally sent
    assert emu.count("GET", "/instance-types") == 2
    emu.delay("/instance-types", 0.45, times=2)
    with pytest.raises(ProviderError, match="no answer within 0.2 s") as err:
        await provider(gputui_home, emu, timeout=0.2, max_attempts=2).offers()
    assert err.value.retryable
    await p.close()


# -- POST /instance-operations/launch ---------------------------------------------------------------


async def test_launch_validation_follows_the_documented_errors(emu: LambdaEmulator):
    headers = {"Authorization": f"Bearer {TEST_KEY}"}
    async with httpx.AsyncClient(base_url=emu.base_url, headers=headers, timeout=5) as http:
        r = await http.post("/ssh-keys", json={"name": "k", "public_key": "ssh-ed25519 AAAAC3Nz x"})
        assert r.status_code == 200 and set(r.json()["data"]) == {"id", "name", "public_key"}

        async def launch(body: dict) -> tuple[int, str]:
            r = await http.post("/instance-operations/launch", json=body)
            return r.status_code, (r.json().get("error") or {}).get("code", "")

        ok = {"region_name": "test-east-1", "instance_type_name": "gpu_1x_a10",
              "ssh_key_names": ["k"]}
        assert await launch({"region_name": "test-east-1"}) == (400, "global/invalid-parameters")
        assert await launch({**ok, "ssh_key_names": ["k", "k"]}) == (400, "global/invalid-parameters")
        assert await launch({**ok, "name": "x" * 65}) == (400, "global/invalid-parameters")
        assert await launch({**ok, "tags": [{"key": "Bad Key", "value": "v"}]}) == (
            400, "global/invalid-parameters")
        assert await launch({**ok, "instance_type_name": "gpu_9x_nope"}) == (
            404, "global/object-does-not-exist")
        assert await launch({**ok, "ssh_key_names": ["missing"]}) == (
            404, "global/object-does-not-exist")
        assert await launch({**ok, "instance_type_name": "gpu_1x_a100_sxm4"}) == (
            400, "instance-operations/launch/insufficient-capacity")
        r = await http.post("/instance-operations/launch", json=ok)
        assert r.status_code == 200 and len(r.json()["data"]["instance_ids"]) == 1
        r = await http.get("/instances", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "global/invalid-api-key"
        # Basic auth as documented for curl's -u KEY:
        r = await http.get("/instances", auth=(TEST_KEY, ""))
        assert r.status_code == 200 and len(r.json()["data"]) == 1
        r = await http.get("/nothing-here")
        assert r.status_code == 404 and r.json()["error"]["code"] == "global/not-found"


async def test_create_sends_one_key_a_tag_and_the_region(lam: LambdaProvider, emu: LambdaEmulator):
    inst = await lam.create(CreateRequest(offer_id="gpu_1x_h100_pcie@test-west-1", name="train"),
                            blank())
    assert inst.status == InstanceStatus.BOOTING and inst.region == "test-west-1"
    assert inst.billing.price_per_hour == Decimal("3.29")
    [remote] = emu.instances.values()
    assert remote.region == "test-west-1" and remote.name == "train"
    assert remote.tags == [{"key": "gputui-id", "value": "ours123"}]
    assert remote.ssh_key_name.startswith("gputui-")
    assert emu.count("POST", "/ssh-keys") == 1


async def test_gpu_count_picks_the_matching_type_or_says_which_exist(lam: LambdaProvider):
    with pytest.raises(ProviderError, match="comes with 1 GPU"):
        await lam.create(CreateRequest(offer_id="gpu_1x_a10@test-east-1", gpu_count=2,
                                       name="x"), blank())


async def test_capacity_and_quota_errors_are_clear(services: Services, emu: LambdaEmulator):
    offer = await services.find_offer("lambda", "A10")
    emu.set_capacity("gpu_1x_a10", [])
    with pytest.raises(ServiceError, match="sold out in every region"):
        await services.create("lambda", offer, CreateRequest(offer_id=offer.offer_id, name="a"))
    emu.set_capacity("gpu_1x_a10", ["test-east-1"])
    emu.fail("/instance-operations/launch", 400, body={"error": {
        "code": "instance-operations/launch/insufficient-capacity",
        "message": "Not enough capacity to fulfill launch request."}})
    with pytest.raises(ServiceError, match="no capacity for that instance type"):
        await services.create("lambda", offer, CreateRequest(offer_id=offer.offer_id, name="b"))
    emu.quota = 0
    with pytest.raises(ServiceError, match="quota is reached"):
        await services.create("lambda", offer, CreateRequest(offer_id=offer.offer_id, name="c"))
    assert emu.instances == {}
    # each refusal is a failed record, not a live instance nobody watches
    assert [e.end_reason for e in services.store.ledger_sync()] == ["failed"] * 3
    assert await services.store.instances(live_only=True) == []


async def test_launch_rate_limit_is_backed_off(gputui_home: Path):
    async with LambdaEmulator(request_interval=0, launch_interval=0.2, boot_seconds=0) as emu:
        p = provider(gputui_home, emu, backoff=0.05, backoff_max=0.3)
        a = await launched(p)
        b = await launched(p)
        assert a.provider_id != b.provider_id
        assert emu.count("POST", "/instance-operations/launch", 429) >= 1
        assert len(emu.instances) == 2
        paced = provider(gputui_home, emu, launch_interval=0.25)
        await asyncio.sleep(0.25)
        before = emu.count("POST", "/instance-operations/launch", 429)
        await launched(paced)
        await launched(paced)
        assert emu.count("POST", "/instance-operations/launch", 429) == before
        await p.close()
        await paced.close()


async def test_a_lost_launch_answer_is_found_by_its_tag_not_launched_twice(
        gputui_home: Path, emu: LambdaEmulator):
    p = provider(gputui_home, emu, timeout=0.25)
    emu.fail("/instance-operations/launch", 500, after=True)  # launched, then the answer is lost
    inst = await launched(p)
    assert len(emu.instances) == 1 and inst.provider_id in emu.instances
    emu.delay("/instance-operations/launch", 0.45, after=True)  # launched, the client gave up
    other = await p.create(CreateRequest(offer_id="gpu_1x_a10", name="job"),
                           blank().model_copy(update={"id": "ours456"}))
    assert len(emu.instances) == 2 and other.provider_id in emu.instances
    await asyncio.sleep(0.3)  # the late answer is logged when it is finally sent
    assert emu.count("POST", "/instance-operations/launch") == 2
    await p.close()


# -- POST /ssh-keys, GET /ssh-keys ------------------------------------------------------------------


async def test_ssh_key_is_uploaded_once_and_reused(gputui_home: Path, emu: LambdaEmulator):
    a = provider(gputui_home, emu)
    name = await a.ensure_ssh_key()
    assert await a.ensure_ssh_key() == name
    b = provider(gputui_home, emu)  # another process, same key file: found by content
    assert await b.ensure_ssh_key() == name
    assert emu.count("POST", "/ssh-keys") == 1 and emu.count("GET", "/ssh-keys") == 2
    _, public = a.client_key()
    assert [k["public_key"] for k in emu.ssh_keys] == [public]
    assert (gputui_home / "lambda" / "id_ed25519").stat().st_mode & 0o077 == 0
    await a.close()
    await b.close()


async def test_ssh_key_already_there_under_another_name_is_used(lam: LambdaProvider,
                                                                emu: LambdaEmulator):
    _, public = lam.client_key()
    emu.ssh_keys.append({"id": "k1", "name": "my laptop", "public_key": public + " me@laptop"})
    assert await lam.ensure_ssh_key() == "my laptop"
    assert emu.count("POST", "/ssh-keys") == 0


async def test_ssh_key_name_clash_takes_another_name(lam: LambdaProvider, emu: LambdaEmulator):
    import hashlib

    _, public = lam.client_key()
    digest = hashlib.sha256(public.split()[1].encode()).hexdigest()[:12]
    emu.ssh_keys.append({"id": "k1", "name": f"gputui-{digest}",
                         "public_key": "ssh-ed25519 AAAAsomeoneelse"})
    assert await lam.ensure_ssh_key() == f"gputui-{digest}-2"


# -- GET /instances/{id}, terminate, restart ----------------------------------------------------------


async def test_boot_polls_to_active_with_ubuntu_at_ip_port_22(lam: LambdaProvider,
                                                              emu: LambdaEmulator):
    inst = await launched(lam)
    assert inst.status == InstanceStatus.RUNNING
    assert inst.ssh is not None and inst.ssh.user == "ubuntu" and inst.ssh.port == 22
    assert inst.ssh.host == emu.instances[inst.provider_id].ip
    assert inst.ssh.key_path == str(lam.key_path)
    # billing starts no later than Lambda's: at the last moment it was seen booting
    assert inst.running_since is not None
    assert inst.running_since <= emu.active_at(inst.provider_id)
    assert emu.count("GET", f"/instances/{inst.provider_id}") >= 2


async def test_terminate_is_confirmed_by_terminating_then_404(lam: LambdaProvider,
                                                              emu: LambdaEmulator):
    inst = await launched(lam)
    await lam.release(inst)
    assert emu.status(inst.provider_id) == "terminating"
    ended = await lam.refresh(inst)
    assert ended.status == InstanceStatus.RELEASED and ended.ended_at is not None
    await asyncio.sleep(0.25)
    assert emu.status(inst.provider_id) == "terminated"
    assert (await lam.refresh(inst)).status == InstanceStatus.RELEASED
    await asyncio.sleep(0.35)
    assert emu.status(inst.provider_id) is None  # the API answers 404 now
    gone = await lam.refresh(inst)
    assert gone.status == InstanceStatus.RELEASED and gone.status_detail == "gone at Lambda"
    await lam.release(inst)  # terminate of a 404: already done


async def test_terminate_errors_are_retried(lam: LambdaProvider, emu: LambdaEmulator):
    inst = await launched(lam)
    emu.fail("/instance-operations/terminate", 500)
    emu.fail("/instance-operations/terminate", 429, body="slow down", content_type="text/plain")
    await lam.release(inst)
    assert emu.status(inst.provider_id) == "terminating"
    assert emu.count("POST", "/instance-operations/terminate") == 3


async def test_terminate_accepted_but_not_shown_is_not_taken_as_done(lam: LambdaProvider,
                                                                     emu: LambdaEmulator):
    inst = await launched(lam)
    emu.fail("/instance-operations/terminate", 200, body={"data": {"terminated_instances": []}})
    with pytest.raises(ProviderError, match="still shows active") as err:
        await lam.release(inst)
    assert err.value.retryable


async def test_restart_keeps_billing_and_conflict_is_clear(lam: LambdaProvider,
                                                           emu: LambdaEmulator):
    inst = await launched(lam)
    again = await lam.restart(inst)
    assert again.status == InstanceStatus.RUNNING and again.status_detail == "restarting (still billing)"
    assert again.running_since == inst.running_since
    with pytest.raises(ProviderError, match="busy with another operation"):
        await lam.restart(inst)  # still booting from the restart: 409


async def test_unhealthy_and_preempted(lam: LambdaProvider, emu: LambdaEmulator):
    inst = await launched(lam)
    emu.set_unhealthy(inst.provider_id)
    sick = await lam.refresh(inst)
    assert sick.status == InstanceStatus.RUNNING and "unhealthy" in (sick.status_detail or "")
    emu.preempt(inst.provider_id)
    gone = await lam.refresh(sick)
    assert gone.status == InstanceStatus.RELEASED and gone.status_detail == "preempted by Lambda"
    assert gone.end_reason == "external"


async def test_unknown_instance_reads_as_gone(lam: LambdaProvider):
    inst = blank().model_copy(update={"provider_id": "0" * 32, "status": InstanceStatus.RUNNING})
    gone = await lam.refresh(inst)
    assert gone.status == InstanceStatus.RELEASED and gone.status_detail == "gone at Lambda"


# -- settings -------------------------------------------------------------------------------------


def test_base_url_from_env_config_or_default(gputui_home: Path):
    cfg = Config()
    cfg.providers.lambda_cloud.base_url = "https://config.example/api/v1/"
    ctx = ProviderContext(gputui_home, cfg, None)
    assert LambdaProvider(ctx, env={}).base_url == "https://config.example/api/v1"
    env = {"LAMBDA_API_BASE": "http://127.0.0.1:9999"}
    assert LambdaProvider(ctx, env=env).base_url == "http://127.0.0.1:9999/api/v1"
    assert LambdaProvider(ProviderContext(gputui_home, Config(), None), env={}).base_url == \
        "https://cloud.lambda.ai/api/v1"
    assert normalise_base_url("https://cloud.lambdalabs.com/api/v1") == \
        "https://cloud.lambdalabs.com/api/v1"
    with pytest.raises(ValueError):
        normalise_base_url("cloud.lambda.ai")


def test_capabilities_say_what_lambda_cannot_do():
    caps = LambdaProvider.capabilities
    assert caps.power_off_stops_billing is False  # billed until terminate, halted or not
    assert caps.scheduled_release is False  # no provider-side timer in API v1
    assert caps.simulated is False
