"""Errors in two languages: what is stored (the state DB, JSON, logs, a link's state) stays
English, what a person reads is in the interface language, and text from outside is sanitised
and never translated."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import asyncssh
import pytest

from gputui.errors import BadInput, GputuiError, one_line, os_reason, said, without_prefix
from gputui.i18n import N_, Deferred, set_language, shown
from gputui.models import LinkState, SSHEndpoint
from gputui.providers.base import ProviderError
from gputui.remote.hostkeys import KnownHosts
from gputui.remote.ssh import HostKeyChanged, Link
from gputui.services.errors import ServiceError


@pytest.fixture(autouse=True)
def chinese():
    set_language("zh")
    yield
    set_language("en")


def refused(where: str = "root@h:22") -> ProviderError:
    return ProviderError(Deferred(N_("cannot reach {where}: {reason}"), where=where,
                                  reason=os_reason(ConnectionRefusedError(errno.ECONNREFUSED, ""))))


def test_stored_in_english_shown_in_chinese():
    exc = refused()
    assert str(exc) == "cannot reach root@h:22: Connection refused"
    assert json.loads(json.dumps({"error": str(exc)})) == {"error": str(exc)}
    assert one_line(exc) == "无法连接 root@h:22：连接被拒绝"


def test_wrapping_as_another_error_keeps_it_translatable():
    wrapped = ServiceError(str(refused()))
    assert str(wrapped) == "cannot reach root@h:22: Connection refused"
    assert one_line(wrapped) == "无法连接 root@h:22：连接被拒绝"
    outer = ProviderError(Deferred(N_("{provider}: cannot stop and start instances"),
                                   provider=refused()))  # an error as a value translates too
    assert one_line(outer) == "无法连接 root@h:22：连接被拒绝：不能关机和开机实例"
    # a provider's prefix taken off (said once, not twice): still translated whole
    bare = without_prefix(str(ProviderError(Deferred(
        N_("lambda: {name}: not launched yet"), name="box"))), "lambda: ")
    assert bare == "box: not launched yet"
    assert one_line(BadInput(bare)) == "box：尚未启动"
    inner = ValueError(Deferred(N_("{url} is not an http(s) URL"), url="'ftp://x'"))
    assert shown(said(inner)) == "'ftp://x' 不是 http(s) 网址"


def test_text_from_outside_is_sanitised_and_not_translated():
    exc = ProviderError(Deferred(N_("cannot reach {where}: {reason}"), where="h\x1b]52;c;ZXZpbA==\x07",
                                 reason="Connection refused\n\x1b[2Jrm -rf"))
    for line in (str(exc), one_line(exc)):
        assert "\x1b" not in line and "\n" not in line and "\x07" not in line
    assert one_line(exc) == "无法连接 h：Connection refused rm -rf"  # their words, as they came


def test_plain_messages_are_unchanged():
    assert one_line(GputuiError("a plain\nmessage")) == "a plain message"


async def test_a_changed_host_key_link_state_english_error_chinese(tmp_path: Path):
    key, other = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    server = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key],
                                   authorized_client_keys=None)
    port = server.sockets[0].getsockname()[1]
    known = KnownHosts(tmp_path / "known_hosts")
    known.add("127.0.0.1", port, other)
    link = Link(SSHEndpoint(host="127.0.0.1", port=port, user="root"), known_hosts=known,
                config=None, agent_path=None, client_keys=None)
    try:
        with pytest.raises(HostKeyChanged) as err:
            await link.connect(timeout=30)
        # the link's state (what the store records and the console reads) stays English
        assert link.state == LinkState.FAILED and "HOST KEY CHANGED" in (link.detail or "")
    finally:
        await link.close()
        server.close()
        await server.wait_closed()
    assert link.last_error is not None and "HOST KEY CHANGED" in str(link.last_error)
    assert one_line(err.value).startswith(f"root@127.0.0.1:{port} 的主机密钥已改变：应为 SHA256:")
    assert "拒绝连接" in one_line(err.value)
    assert known.host_keys("127.0.0.1", port)[0].public_data == other.public_data  # kept


def test_shown_gives_an_error_as_its_line_in_the_interface_language():
    exc = refused()
    assert f"box: {shown(exc)}" == "box: 无法连接 root@h:22：连接被拒绝"
    plain = ValueError("not ours")
    assert shown(plain) is plain


def test_clean_message_keeps_our_words_translatable():
    from gputui.errors import clean_message

    text = clean_message(Deferred(N_("{name}: connection lost: {reason}"), name="box",
                                  reason="\x1b[31mreset\n"))
    assert text == "box: connection lost: reset"
    assert shown(text) == "box：连接断开：reset"
    assert clean_message("a\x1b[2J\nb") == "a b"
