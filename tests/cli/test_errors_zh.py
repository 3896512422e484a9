"""The errors a user meets from the command line in Chinese: providers (the AutoDL emulator, the
simulated cloud), SSH (a refused port, a changed host key, a refused login, against real
in-process SSH servers), transfers and config.toml. Each is one line, our words in Chinese, what
came from outside as it came, and the same exit code as in English."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import asyncssh
import pytest

from tests.conftest import GPUTUI, run_gputui_env
from tests.providers.autodl_emulator import TEST_TOKEN, AutoDLEmulator
from tests.providers.lambda_emulator import LambdaEmulator


def _run(home: Path, args: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess:
    full = run_gputui_env(home)
    for secret in ("AUTODL_TOKEN", "LAMBDA_API_KEY"):  # no real provider from these tests
        full.pop(secret, None)
    full.update(env or {})
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True, env=full,
                          timeout=120, stdin=subprocess.DEVNULL)


async def both(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    """`both_sync` with the servers of this test's loop serving meanwhile."""
    return await asyncio.to_thread(both_sync, home, *args, env=env)


def both_sync(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    """The Chinese error line, and its exit code, which is the English one's."""
    en = _run(home, list(args), env)
    zh = _run(home, ["--lang", "zh", *args], env)
    for out in (en, zh):
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert lines[0].startswith("gputui: ")
    assert zh.returncode == en.returncode != 0, (en.stderr, zh.stderr)
    assert zh.stderr != en.stderr  # the line did change language
    return zh.stderr.strip(), zh.returncode


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- SSH --------------------------------------------------------------------------------------


@pytest.fixture
async def sshd():
    """A real SSH server on 127.0.0.1 that lets nobody in (no login method is accepted)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key],
                                   authorized_client_keys=None, password_auth=False,
                                   kbdint_auth=False)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, key
    finally:
        server.close()
        await server.wait_closed()


async def test_a_refused_port(gputui_home: Path):
    port = free_port()
    line, code = await both(gputui_home, "add-ssh", f"ssh -p {port} root@127.0.0.1",
                            "--price", "1", "--gpu", "RTX 3090")
    assert line == f"gputui: 无法连接 root@127.0.0.1:{port}：连接被拒绝"
    assert code == 1


def put_ssh_instance(home: Path, name: str, port: int, known_key: asyncssh.SSHKey) -> None:
    """A host added earlier (`known_key` on file for it), as `add-ssh` records it."""
    from datetime import timedelta
    from decimal import Decimal

    from gputui.models import BillingRule, Instance, Lease, SSHEndpoint, utcnow
    from gputui.store import SessionStore

    home.mkdir(parents=True, exist_ok=True)
    (home / "known_hosts").write_text(
        f"[127.0.0.1]:{port} {known_key.export_public_key().decode().strip()}\n")
    store = SessionStore(home / "state.db")
    inst = Instance(id=f"id-{name}", name=name, provider="ssh", gpu="RTX 3090",
                    billing=BillingRule(price_per_hour=Decimal("1.20")),
                    ssh=SSHEndpoint(host="127.0.0.1", port=port, user="root"),
                    provider_id=f"127.0.0.1:{port}", created_at=utcnow())
    inst.mark_running(utcnow())
    store.put_instance_sync(inst)
    store.put_lease_sync(Lease(instance_id=inst.id, release_at=utcnow() + timedelta(hours=2)))
    store.close()


async def test_a_changed_host_key_is_refused(gputui_home: Path, sshd):
    port, _key = sshd
    other = asyncssh.generate_private_key("ssh-ed25519")
    put_ssh_instance(gputui_home, "rig", port, known_key=other)
    line, code = await both(gputui_home, "ssh", "rig", "--", "true")
    assert line.startswith(f"gputui: rig: root@127.0.0.1:{port} 的主机密钥已改变：应为 SHA256:")
    assert "拒绝连接（可能是中间人攻击" in line and "known hosts" in line
    assert code == 1
    kept = await asyncio.to_thread((gputui_home / "known_hosts").read_text)
    assert other.export_public_key().decode().split()[1] in kept  # never replaced

    # adding it again with `add-ssh`: the same refusal, and nothing added
    line, code = await both(gputui_home, "add-ssh", f"ssh -p {port} root@127.0.0.1",
                            "--price", "1", "--gpu", "RTX 3090", "--name", "again")
    assert line.startswith(f"gputui: root@127.0.0.1:{port} 的主机密钥已改变：应为 SHA256:")
    assert code == 1


async def test_a_refused_login(gputui_home: Path, sshd, tmp_path: Path):
    port, _key = sshd
    password = tmp_path / "pw"
    password.write_text("not-the-password\n")
    password.chmod(0o600)
    line, code = await both(gputui_home, "add-ssh", f"ssh -p {port} root@127.0.0.1",
                            "--price", "1", "--gpu", "RTX 3090", "--accept-new-host-key",
                            "--password-file", str(password))
    assert line.startswith(f"gputui: root@127.0.0.1:{port} 拒绝登录（密码未被接受：")
    assert "not-the-password" not in line
    assert code == 1


# -- config.toml --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), [
    ("ui = [", "：不是有效的 TOML："),
    ("[ui]\nrefresh_seconds = 'fast'\n", "：键 'ui.refresh_seconds'：应为数字，无法把字符串解析为数字"),
    ("[budget]\ndaily = -5\n", "：键 'budget.daily'：应大于或等于 0"),
    ("[[prices]]\nprovider = 'x'\nprice_per_gpu_hour = 1\n", "：键 'prices[0].gpu'：缺少此项（必填）"),
    ("[ui]\ncolour = 'red'\n", "：键 'ui.colour'：未知的键"),
])
def test_a_broken_config_names_the_file_and_the_key(gputui_home: Path, text: str, words: str):
    gputui_home.mkdir(parents=True, exist_ok=True)
    cfg = gputui_home / "config.toml"
    cfg.write_text(text)
    line, code = both_sync(gputui_home, "instances")
    assert line.startswith(f"gputui: {cfg}") and words in line
    assert code == 2


# -- AutoDL (the emulator) ----------------------------------------------------------------------


@pytest.fixture
async def emu():
    async with AutoDLEmulator(unverified_tokens=["unverified-token-0123456789"]) as e:
        yield e


def autodl_env(emu: AutoDLEmulator, token: str | None) -> dict[str, str]:
    env = {"AUTODL_API_BASE": emu.base_url}
    if token is not None:
        env["AUTODL_TOKEN"] = token
    return env


async def test_autodl_without_a_token(gputui_home: Path, emu: AutoDLEmulator):
    line, code = await both(gputui_home, "create", "--provider", "autodl", "--gpu", "4090D",
                            env=autodl_env(emu, None))
    assert "未知或未启用的平台 'autodl'" in line and "autodl 需要令牌：设置 AUTODL_TOKEN" in line
    assert code == 2
    assert emu.instances == {}


async def test_autodl_refuses_the_token(gputui_home: Path, emu: AutoDLEmulator):
    token = "wrong-token-0123456789abcdef"
    line, code = await both(gputui_home, "create", "--provider", "autodl", "--gpu", "4090D",
                            env=autodl_env(emu, token))
    assert "令牌被拒绝（HTTP 401）——请在 AutoDL 控制台（设置 → 开发者 Token） 生成令牌并设置 AUTODL_TOKEN" in line
    assert token not in line
    assert code == 2
    assert emu.instances == {}


async def test_autodl_unverified_account_keeps_autodls_own_words(gputui_home: Path,
                                                                  emu: AutoDLEmulator):
    line, code = await both(gputui_home, "account", "--provider", "autodl",
                            env=autodl_env(emu, "unverified-token-0123456789"))
    assert line.startswith("gputui: autodl：读取钱包：账户未通过实名认证")
    assert line.endswith("[请先完成实名认证后再使用开发者API]")  # AutoDL's own message, as it came
    assert code == 1


async def test_autodl_refuses_what_autodl_would_refuse(gputui_home: Path, emu: AutoDLEmulator):
    line, code = await both(gputui_home, "create", "--provider", "autodl", "--gpu", "4090D",
                            "--count", "5", env=autodl_env(emu, TEST_TOKEN))
    assert line == "gputui: --count：AutoDL 专业版每台 1 到 4 块 GPU，而不是 5"
    assert code == 2
    assert emu.instances == {}


# -- Lambda (the emulator) -----------------------------------------------------------------------


@pytest.mark.parametrize(("key", "words"), [
    ("wrong-key-0123456789abcdef", "lambda：列出实例类型：API 密钥被拒绝（无效、过期或已删除）——请在 "
     "https://cloud.lambda.ai/api-keys 生成密钥并设置 LAMBDA_API_KEY"),
    ("inactive-key-0123456789", "lambda：列出实例类型：你的 Lambda 账户未激活——请在 Lambda 控制台"
     "验证邮箱并添加付款方式"),
])
async def test_lambda_refusals(gputui_home: Path, key: str, words: str):
    async with LambdaEmulator(inactive_keys=["inactive-key-0123456789"]) as emu:
        line, code = await both(gputui_home, "create", "--provider", "lambda", "--gpu",
                                "H100 PCIe", env={"LAMBDA_API_KEY": key,
                                                  "LAMBDA_API_BASE": emu.base_url})
        assert not emu.instances
    assert line == f"gputui: {words}" and key not in line
    assert code == 1


# -- transfers (the simulated cloud's instance, over real SSH and SFTP) -------------------------


@pytest.fixture
async def box(gputui_home: Path) -> str:
    out = await asyncio.to_thread(_run, gputui_home, [
        "create", "--provider", "sandbox", "--gpu", "RTX 4090", "--name", "box",
        "--release-after", "2h", "--json"], None)
    assert out.returncode == 0, out.stderr
    return "box"


async def test_transfer_errors(gputui_home: Path, box: str, tmp_path: Path):
    line, code = await both(gputui_home, "pull", box, "results/none.txt", str(tmp_path / "x"))
    assert line == "gputui: results/none.txt：实例上没有这个文件或目录"
    assert code == 2

    local = tmp_path / "data.txt"
    await asyncio.to_thread(local.write_text, "x")
    line, code = await both(gputui_home, "push", box, str(local), "../data.txt")
    assert line.startswith("gputui: ../data.txt：在实例的主目录（") and line.endswith("）之外")
    assert code == 2

    line, code = await both(gputui_home, "push", box, str(tmp_path / "missing"))
    assert line == f"gputui: {tmp_path / 'missing'}：没有这个文件或目录"
    assert code == 2

    line, code = await both(gputui_home, "push", "nope", str(local))
    assert line.startswith("gputui: 没有名为 'nope' 的实例")
    assert code == 2


def test_a_missing_password_file(gputui_home: Path, tmp_path: Path):
    missing = tmp_path / "no-such-pw"
    line, code = both_sync(gputui_home, "add-ssh", "ssh root@127.0.0.1", "--price", "1",
                           "--password-file", str(missing))
    assert line == f"gputui: --password-file: 没有那个文件或目录: {missing}"
    assert code == 2
