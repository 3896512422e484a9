"""AutoDL images, prices and ways in, against the emulator as a renter uses them:
`gputui images` (private + the dated base table, readable names), `gputui image save` (polls to
saved, says the data disk is not in it; a lost answer saves once; a failed save is said),
`create --image` by readable name, the 4090D's price (never ¥0.00: unknown until a live
`payg_price` is seen, then that price with its date, on New and in `gputui cost`), and
`gputui forward` showing the snapshot's Jupyter and service_6006/6008 addresses."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from gputui.config import Config
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.store import SessionStore
from tests.conftest import GPUTUI
from tests.providers.autodl_emulator import AutoDLEmulator
from tests.providers.autodl_fixtures import attach
from tests.providers.test_autodl_cli import env_for, gputui, one_line_exit_2

BASE_ID = "base-image-l2t43iu6uk"
BASE_NAME = "PyTorch 2.0.0 · CUDA 11.8 · Python 3.8"


@pytest.fixture
async def emu(tmp_path: Path):
    async with AutoDLEmulator(ssh_root=tmp_path / "boxes", creating_s=0.1, starting_s=0.1,
                              ssh_delay=0.2, shutting_s=0.1, image_save_s=0.6) as e:
        yield e


@pytest.fixture
async def svc(gputui_home: Path, emu: AutoDLEmulator):
    s = Services(SessionStore(gputui_home / "state.db"), Config(), state_dir=gputui_home)
    attach(s, emu)
    yield s
    await s.close()


async def rent(svc: Services, name: str = "train"):
    offer = await svc.find_offer("autodl", "4090D")
    return await svc.create("autodl", offer, CreateRequest(offer_id=offer.offer_id, name=name))


# -- images --------------------------------------------------------------------------------------


async def test_images_lists_private_and_base_with_readable_names(gputui_home: Path,
                                                                 emu: AutoDLEmulator):
    mine = emu.add_image("qwen-env")
    emu.add_image("half-done", saved=False)
    emu.image_save_s = 3600  # still saving while the command runs
    env = env_for(gputui_home, emu)
    out = await gputui(env, "images", "--provider", "autodl", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["id"]: r for r in json.loads(out.stdout)}
    assert rows[mine]["kind"] == "private" and rows[mine]["readable"] == "qwen-env"
    assert rows[mine]["state"] == "done"
    [saving] = [r for r in rows.values() if r["name"] == "half-done"]
    assert saving["state"] == "saving"
    base = rows[BASE_ID]
    assert base["kind"] == "base" and base["readable"] == BASE_NAME
    assert base["as_of"] == "2026-08" and "autodl-pro-api.md" in base["source"]
    text = await gputui(env, "images", "--provider", "autodl")
    assert BASE_NAME in text.stdout and "qwen-env" in text.stdout and "saving" in text.stdout
    assert "2026-08" in text.stdout  # the base table says its date
    zh = await gputui({**env, "LANG": "zh_CN.UTF-8"}, "images", "--provider", "autodl")
    assert "私有" in zh.stdout and "基础镜像" in zh.stdout and "保存中" in zh.stdout


async def test_image_save_polls_to_saved_and_create_takes_its_name(
        gputui_home: Path, emu: AutoDLEmulator, svc: Services):
    inst = await rent(svc)
    await svc.close()
    env = env_for(gputui_home, emu)
    out = await gputui(env, "image", "save", "train", "qwen-env")
    assert out.returncode == 0, out.stderr
    assert "system disk only" in out.stderr and "/root/autodl-tmp" in out.stderr
    [(image_id, rec)] = emu.images.items()
    assert rec["instance"] == inst.provider_id and rec["name"] == "qwen-env"
    assert "saving" in out.stderr  # it waited while AutoDL said so
    assert f"Image qwen-env saved ({image_id})" in out.stdout
    listed = json.loads((await gputui(env, "images", "--provider", "autodl", "--json")).stdout)
    assert [r["state"] for r in listed if r["id"] == image_id] == ["done"]

    # the command it names, run as printed (the saved box's GPU; the default release timer)
    [command] = re.findall(r"`(gputui create [^`]+)`", out.stdout)
    made = await gputui(env, *shlex.split(command)[1:])
    assert made.returncode == 0, made.stderr
    assert emu.bodies[-1]["image_uuid"] == image_id
    made = await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D", "--name", "c",
                        "--image", "pytorch 2.0.0", "--release-after", "1h")
    assert made.returncode == 0, made.stderr
    assert emu.bodies[-1]["image_uuid"] == BASE_ID
    before = len(emu.bodies)
    line = one_line_exit_2(await gputui(env, "create", "--provider", "autodl", "--gpu", "4090D",
                                        "--image", "TensorFlow 9", "--release-after", "1h"))
    assert "no image is called 'TensorFlow 9'" in line and BASE_NAME in line
    assert len(emu.bodies) == before  # nothing asked of AutoDL
    zh = await gputui({**env, "LANG": "zh_CN.UTF-8"}, "image", "save", "train", "env-2")
    assert zh.returncode == 0, zh.stderr
    assert "系统盘" in zh.stderr and "镜像" in zh.stdout


async def test_an_image_still_saving_is_refused_for_create(gputui_home: Path,
                                                           emu: AutoDLEmulator):
    emu.add_image("later", saved=False)
    emu.image_save_s = 3600
    line = one_line_exit_2(await gputui(env_for(gputui_home, emu), "create", "--provider",
                                        "autodl", "--gpu", "4090D", "--image", "later"))
    assert "not saved yet" in line and emu.bodies == []


async def test_a_lost_save_answer_saves_once_and_a_failed_save_is_said(
        emu: AutoDLEmulator, svc: Services):
    inst = await rent(svc)
    from gputui.services.images import save_image

    emu.fail("/instance/pro/image/save", 502, after=True)  # saved, but the answer is lost
    img = await save_image(svc, inst, "one")
    assert len(emu.images) == 1 and img.id in emu.images and img.state == "done"

    emu.image_save_s = 3600
    task = asyncio.create_task(save_image(svc, inst, "two"))
    for _ in range(400):  # until AutoDL has the second image (polling the emulator's record)
        if len(emu.images) >= 2:
            break
        await asyncio.sleep(0.05)
    emu.fail_image(next(k for k, v in emu.images.items() if v["name"] == "two"))
    with pytest.raises(Exception, match="saving image 'two' failed at AutoDL"):
        await task
    from gputui.services.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="1 to 64 characters"):
        await save_image(svc, inst, "x" * 65)


# -- prices ---------------------------------------------------------------------------------------


async def test_the_4090d_price_is_never_zero(gputui_home: Path, emu: AutoDLEmulator,
                                            svc: Services):
    env = env_for(gputui_home, emu)
    [offer] = [o for o in await svc.offers("autodl") if o.offer_id == "4090D"]
    assert not offer.price_known
    cost = await gputui(env, "cost", "4090D", "--hours", "2")
    assert cost.returncode == 0 and "¥0.00" not in cost.stdout
    assert "No reference price" in cost.stdout
    await rent(svc)  # its snapshot's payg_price (¥1.88) is read at boot
    [offer] = [o for o in await svc.offers("autodl") if o.offer_id == "4090D"]
    assert offer.price_known and str(offer.price_per_gpu_hour) == "1.88"
    assert "last live payg_price seen" in (offer.source or "")
    cost = await gputui(env, "cost", "4090D", "--hours", "2")
    assert cost.returncode == 0, cost.stderr
    [row] = [ln for ln in cost.stdout.splitlines() if ln.startswith("autodl")]
    assert "¥3.76" in row and "¥1.88" in row and "last seen" in row
    as_json = json.loads((await gputui(env, "cost", "4090D", "--hours", "2", "--json")).stdout)
    [c] = [c for c in as_json["costs"] if c["provider"] == "autodl"]
    assert "last live price seen at autodl (4090D, instance train)" in json.dumps(c)
    # a spec with neither a sourced nor a seen price stays unknown
    [h800] = [o for o in await svc.offers("autodl") if o.offer_id == "h800"]
    assert not h800.price_known


# -- ways in ---------------------------------------------------------------------------------------


async def test_forward_shows_the_published_addresses(gputui_home: Path, emu: AutoDLEmulator,
                                                     svc: Services):
    inst = await rent(svc)
    await svc.close()
    env = env_for(gputui_home, emu)
    out = await gputui(env, "forward", "train", "6006", "--local", "0", "--for", "1s")
    assert out.returncode == 2 and "--local: give a port between 1 and 65535" in out.stderr
    out = await gputui(env, "forward", "train", "6006", "--for", "1s")
    assert out.returncode == 0, out.stderr
    assert "→ train:6006 over SSH" in out.stdout
    uuid = inst.provider_id
    assert f"Jupyter: https://{uuid}-jupyter.westb.seetacloud.com:8443" in out.stdout
    assert f"service_6006: https://{uuid}-6006.westb.seetacloud.com:8443" in out.stdout
    assert f"service_6008: http://{uuid}-6008.westb.seetacloud.com:8443" in out.stdout
    assert "token" not in out.stdout.lower()


async def test_forward_reaches_a_server_on_the_autodl_box(gputui_home: Path,
                                                          emu: AutoDLEmulator, svc: Services):
    """Over the password-auth link the emulator's box gives: a tiny HTTP server started there is
    fetched through the forward, then Ctrl-C ends it."""
    inst = await rent(svc)
    port = _free_port()
    await svc.run(inst, f"echo hello-autodl > hello.txt; nohup python3 -m http.server {port} "
                        f"--bind 127.0.0.1 >/dev/null 2>&1 & echo $! > srv.pid")
    await svc.close()
    root = emu.instances[inst.provider_id or ""].root
    assert root is not None
    try:
        await _fetch_through_forward(env_for(gputui_home, emu), "train", port, "hello-autodl")
    finally:
        _stop_server(root / "srv.pid")


def _stop_server(pid_file: Path) -> None:
    """The test's own HTTP server, by the pid it wrote."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _fetch_through_forward(env: dict[str, str], name: str, port: int, want: str) -> None:
    import urllib.request

    proc = await asyncio.to_thread(
        subprocess.Popen, [*GPUTUI, "forward", name, str(port)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)  # type: ignore[union-attr]
        assert "http://127.0.0.1:" in first, first + (proc.stderr.read() if proc.poll() else "")  # type: ignore[union-attr]
        local = int(first.split("http://127.0.0.1:")[1].split()[0])
        assert local != port  # the same number is taken here (the box is this machine)

        def fetch() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=20) as r:
                return r.read().decode()

        for _ in range(50):
            try:
                body = await asyncio.to_thread(fetch)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("nothing answered through the forward")
        assert body.strip() == want
        proc.send_signal(signal.SIGINT)
        rc = await asyncio.to_thread(proc.wait, 30)
        assert rc == 0, proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


# -- the console's New screen ------------------------------------------------------------------------


async def test_new_offers_readable_images_and_never_a_zero_price(
        gputui_home: Path, emu: AutoDLEmulator, svc: Services):
    """New with AutoDL chosen: the 4090D reads "price on creation" (no ¥0.00 anywhere) until a
    live payg_price was seen, then ¥1.88 with where it was seen; the image list holds the
    account's saved image and the base image by readable name."""
    from textual.widgets import Select, Static

    from gputui.app import GpuTuiApp
    from gputui.ui.create import CreateScreen
    from tests.ui.waits import shown, until

    emu.add_image("qwen-env")

    async def new_screen(check) -> None:  # noqa: ANN001
        app = GpuTuiApp(config=Config(), store=svc.store, services=svc, remember_theme=False,
                        background=False)
        async with app.run_test(size=(80, 24)) as pilot:
            app.action_goto("create")
            new = await shown(pilot, CreateScreen)
            new.query_one("#provider", Select).value = "autodl"
            await until(pilot, lambda: any(o.provider == "autodl" for o in new.offers),
                        "AutoDL's offers")
            new.query_one("#offer", Select).value = "4090D"
            await until(pilot, lambda: any("qwen-env" in str(label) for label, _v in
                                           new.query_one("#image", Select)._options),
                        "the images by name")
            await check(pilot, new, str(new.query_one("#summary", Static).render()),
                        {v: str(label) for label, v in new.query_one("#offer", Select)._options},
                        {v: str(label) for label, v in new.query_one("#image", Select)._options})

    async def unknown(pilot, new, summary, offers, images) -> None:  # noqa: ANN001
        assert "price on creation" in offers["4090D"] and "¥0.00" not in offers["4090D"]
        assert "price on creation" in summary and "¥0.00" not in summary
        assert "cost unknown until it is created" in summary
        assert images[BASE_ID] == BASE_NAME
        assert new.query_one("#image", Select).value == BASE_ID

    await new_screen(unknown)
    await rent(svc)

    async def seen(pilot, new, summary, offers, images) -> None:  # noqa: ANN001
        assert "¥1.88/GPU·h" in offers["4090D"]
        assert "¥1.88/h" in summary and "last live payg_price seen" in summary
        assert "¥0.00" not in summary

    await new_screen(seen)
