"""AutoDL's API through the provider, against the emulator: the envelope and its HTTP-200
failures, milliyuan, NullTime and +08:00 times, the token, retries, and a create that is never
retried blindly."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.errors import BadInput
from gputui.models import Instance, InstanceStatus
from gputui.providers.autodl import (
    AutoDLAuthError,
    AutoDLError,
    AutoDLProvider,
    parse_time,
    yuan,
)
from gputui.providers.base import CreateRequest, ProviderContext, ProviderError
from tests.providers.autodl_emulator import TEST_TOKEN, AutoDLEmulator

FAST = dict(token=TEST_TOKEN, env={}, poll_interval=0.03, backoff=0.01, backoff_max=0.05,
            timeout=3.0, max_attempts=4, ssh_first_wait=0.05, ssh_timeout=10, find_interval=0.05,
            stop_timeout=10)


def make(tmp_path: Path, emu: AutoDLEmulator, **kw: object) -> AutoDLProvider:
    ctx = ProviderContext(tmp_path, Config(), None)
    return AutoDLProvider(ctx, base_url=emu.base_url, **{**FAST, **kw})


def record(name: str = "job", our_id: str = "abc123") -> Instance:
    from gputui.models import BillingRule

    return Instance(id=our_id, name=name, provider="autodl", gpu="GeForce RTX 4090 D (China SKU)",
                    billing=BillingRule(price_per_hour=Decimal("0"), currency="CNY"))


@pytest.fixture
async def emu():
    async with AutoDLEmulator(creating_s=0.1, starting_s=0.1, shutting_s=0.1) as e:
        yield e


def test_money_and_times_read_as_autodl_writes_them():
    assert yuan(1880) == Decimal("1.88") and yuan("312400") == Decimal("312.4")
    assert yuan(None) is None and yuan(True) is None and yuan("x") is None
    want = datetime(2026, 8, 23, 2, 0, tzinfo=UTC)
    assert parse_time({"Time": "2026-08-23T10:00:00+08:00", "Valid": True}) == want
    assert parse_time({"Time": "2026-08-23T10:00:00+08:00", "Valid": False}) is None
    assert parse_time("2026-08-23T10:00:00+08:00") == want
    assert parse_time("2026-08-23 10:00:00") == want  # no offset: China Standard Time
    assert parse_time("2026-08-23T10:00:00.123456789+08:00").replace(microsecond=0) == want
    assert parse_time(None) is None and parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time({"Time": "0001-01-01T00:00:00Z", "Valid": False}) is None


async def test_balance_in_yuan_and_the_bare_token(tmp_path: Path, emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    wallet = await p.balance()
    assert wallet["balance"] == Decimal("312.4") and wallet["vouchers"] == Decimal("20")
    assert wallet["lifetime_spend"] == Decimal("1024.5") and wallet["currency"] == "CNY"
    assert emu.auth_headers[-1] == TEST_TOKEN[:6]  # no "Bearer " prefix
    await p.close()


async def test_bad_token_is_bad_input_and_never_shown(tmp_path: Path, emu: AutoDLEmulator):
    p = make(tmp_path, emu, token="wrong-token-0123456789abcdef")
    with pytest.raises(AutoDLAuthError) as err:
        await p.balance()
    assert isinstance(err.value, BadInput) and "HTTP 401" in str(err.value)
    assert "wrong-token" not in str(err.value) and "wrong-token" not in repr(p)
    none = AutoDLProvider(ProviderContext(tmp_path, Config(), None), env={},
                          base_url=emu.base_url)
    with pytest.raises(AutoDLAuthError, match="no token"):
        await none.balance()
    await p.close()


@pytest.mark.parametrize(("msg", "kind", "words"), [
    ("余额不足，请充值后再试", "balance", "balance is too low"),
    ("暂无库存，请稍后再试", "stock", "no stock"),
    ("资源不足", "stock", "no stock"),
    ("实例不存在", "not_found", "not found"),
    ("请求参数错误", "params", "refused as invalid"),
    ("请先完成实名认证", "identity", "identity verification"),
    ("不支持的启动模式", "boot_mode", "unsupported boot mode"),
    ("\x1b[31m奇怪的错误\x1b[0m", "other", "AutoDL refused it"),
])
async def test_http_200_failures_become_clear_lines(tmp_path: Path, emu: AutoDLEmulator,
                                                    msg: str, kind: str, words: str):
    p = make(tmp_path, emu)
    emu.refuse("/wallet/balance", msg)
    with pytest.raises(AutoDLError) as err:
        await p.balance()
    assert err.value.kind == kind and words in str(err.value)
    assert "\x1b" not in str(err.value)  # the platform's words, made safe for a terminal
    assert emu.count("/wallet/balance") == 1  # a logical failure is not retried
    await p.close()


async def test_unverified_account_is_named(tmp_path: Path):
    async with AutoDLEmulator(unverified_tokens=["unverified-token-0123456789"]) as emu:
        p = make(tmp_path, emu, token="unverified-token-0123456789")
        with pytest.raises(AutoDLError, match="实名认证"):
            await p.list_instances()
        await p.close()


async def test_429_and_5xx_are_retried_for_reads(tmp_path: Path, emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    emu.fail("/wallet/balance", 429)
    emu.fail("/wallet/balance", 502)
    assert (await p.balance())["balance"] == Decimal("312.4")
    assert emu.count("/wallet/balance") == 3
    emu.fail("/wallet/balance", 503, times=10)
    with pytest.raises(AutoDLError, match="gave up after 4 tries"):
        await p.balance()
    await p.close()


async def test_offers_are_the_pro_specs_in_yuan(tmp_path: Path, emu: AutoDLEmulator):
    offers = await make(tmp_path, emu).offers()
    ids = {o.offer_id for o in offers}
    assert ids == {"h800", "v-48g", "4090D", "v-48g-350w", "pro6000-p", "v-32g-p", "5090-p"}
    assert all(o.billing.currency == "CNY" for o in offers)
    five = next(o for o in offers if o.offer_id == "5090-p")
    assert five.price_per_gpu_hour == Decimal("2.78") and "2026-09" in five.source \
        and "weak" in five.source
    d = next(o for o in offers if o.offer_id == "4090D")
    assert d.gpu == "GeForce RTX 4090 D (China SKU)" and "live price" in d.source


async def test_create_boot_reads_live_price_and_waits_for_sshd(tmp_path: Path,
                                                               emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    inst = await p.create(CreateRequest(offer_id="4090D", gpu_count=2, name="job", disk_gb=80),
                          record())
    assert inst.status == InstanceStatus.BOOTING and inst.billing.currency == "CNY"
    [body] = emu.bodies
    assert body["req_gpu_amount"] == 2 and body["expand_system_disk_by_gb"] == 50
    assert body["instance_name"] == "job.gputui-abc123" and body["cuda_v_from"] == 118
    booted = await p.boot(inst)
    assert booted.status == InstanceStatus.RUNNING
    assert booted.billing.price_per_hour == Decimal("3.76")  # the snapshot's payg_price
    assert booted.ssh is None or booted.ssh.password_file is None
    await p.close()


async def test_lost_create_answer_is_found_by_name_not_created_twice(tmp_path: Path,
                                                                     emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    emu.fail("/instance/pro/create", 502, after=True)  # done, then the answer is lost
    inst = await p.create(CreateRequest(offer_id="4090D", name="job"), record())
    assert emu.count("/instance/pro/create") == 1
    assert inst.provider_id in emu.instances and len(emu.instances) == 1
    # an answer that comes too late: the same
    emu.delay("/instance/pro/create", 1.0)
    q = make(tmp_path, emu, timeout=0.3)
    inst2 = await q.create(CreateRequest(offer_id="4090D", name="job2"), record("job2", "def456"))
    assert len(emu.bodies) == 2 and len(emu.instances) == 2  # one create each
    assert emu.instances[inst2.provider_id].name == "job2.gputui-def456"
    await p.close()
    await q.close()


async def test_lost_create_that_never_happened_is_not_retried(tmp_path: Path,
                                                              emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    emu.fail("/instance/pro/create", 500)  # refused before anything was made
    with pytest.raises(ProviderError) as err:
        await p.create(CreateRequest(offer_id="4090D", name="job"), record())
    assert err.value.outcome_unknown and "not created again" in str(err.value)
    assert emu.count("/instance/pro/create") == 1 and emu.instances == {}
    await p.close()


async def test_sold_out_and_refusals_at_create(tmp_path: Path):
    async with AutoDLEmulator(sold_out=["h800"], balance=Decimal("0")) as emu:
        p = make(tmp_path, emu)
        with pytest.raises(AutoDLError, match="no stock") as err:
            await p.create(CreateRequest(offer_id="h800", name="job"), record())
        assert "暂无库存" in str(err.value)
        with pytest.raises(AutoDLError, match="balance is too low"):
            await p.create(CreateRequest(offer_id="4090D", name="job"), record())
        assert emu.instances == {}
        # and the minimum balance refuses before asking to create at all
        with pytest.raises(AutoDLError, match="below the minimum ¥5.00"):
            await p.check_request(CreateRequest(offer_id="4090D", name="job"))
        await p.close()


async def test_unknown_status_is_kept(tmp_path: Path, emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    inst = await p.boot(await p.create(CreateRequest(offer_id="4090D", name="job"), record()))
    item = (await p.find(uuid=inst.provider_id)) or {}
    item["status"] = "migrating"
    kept = await p._apply(inst, item)
    assert kept.status == InstanceStatus.RUNNING and "migrating" in (kept.status_detail or "")
    await p.close()


async def test_a_rate_limited_create_was_not_processed_and_is_sent_again(tmp_path: Path,
                                                                          emu: AutoDLEmulator):
    p = make(tmp_path, emu)
    emu.fail("/instance/pro/create", 429)  # refused before anything was done
    inst = await p.create(CreateRequest(offer_id="4090D", name="job"), record())
    assert emu.count("/instance/pro/create", 429) == 1 and len(emu.instances) == 1
    assert inst.provider_id in emu.instances
    await p.close()
