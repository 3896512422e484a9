"""What the providers with a JSON API over HTTPS share: the secret key (never in a repr, log
line or pickle), and one httpx client per event loop that sends it.

A provider mixes in `KeyedHttpClient`, sets `base_url`, `timeout`, `connect_timeout`,
`_transport` and `_key`, and says how the key goes into a request (`_authorization`) and what
to raise when there is none (`_no_key_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING, Any, ClassVar

from gputui.i18n import N_, Deferred

if TYPE_CHECKING:
    import httpx


def mask_key(key: str | None) -> str:
    """`secret_abc…wxyz` → `sec…wxyz`: enough to tell keys apart, never enough to use one."""
    if not key:
        return "(none)"
    key = key.strip()
    if len(key) < 12:
        return "…" + "*" * 4
    return f"{key[:3]}…{key[-4:]}"


_CREDENTIAL = re.compile(r"\b(Bearer|Basic)\s+([A-Za-z0-9._~+/=-]{8,})", re.I)


class ApiKey:
    """The API key, kept out of every repr, str, log line and pickle."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        value = value.strip()
        if not value or any(c.isspace() or ord(c) < 32 for c in value):
            raise ValueError(Deferred(
                N_("an API key is one word with no spaces or control characters")))
        self._value = value

    def reveal(self) -> str:
        return self._value

    @property
    def masked(self) -> str:
        return mask_key(self._value)

    def scrub(self, text: str) -> str:
        """`text` with the key (and any bearer/basic credential) masked."""
        if self._value in text:
            text = text.replace(self._value, self.masked)
        return _CREDENTIAL.sub(lambda m: f"{m.group(1)} {mask_key(m.group(2))}", text)

    def __repr__(self) -> str:
        return f"ApiKey({self.masked})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an ApiKey is not picklable")


class KeyedHttpClient:
    """One `httpx.AsyncClient` per event loop (a client is bound to the loop that made it),
    made on first use, sending the key on every request and following no redirect (a
    redirect could carry the key elsewhere); closed with the provider."""

    base_url: str
    timeout: float
    connect_timeout: float
    _key: ApiKey | None
    _transport: httpx.AsyncBaseTransport | None
    _client: httpx.AsyncClient | None = None
    _client_loop: asyncio.AbstractEventLoop | None = None
    #: headers on every request besides the key's
    HEADERS: ClassVar[dict[str, str]] = {"Accept": "application/json", "User-Agent": "gputui"}

    def _authorization(self, key: ApiKey) -> str:
        """The Authorization header's value for `key`."""
        raise NotImplementedError

    def _no_key_error(self) -> Exception:
        """What to raise when a request is made with no key configured."""
        raise NotImplementedError

    def _scrub(self, text: str) -> str:
        return self._key.scrub(text) if self._key else text

    def _http(self) -> httpx.AsyncClient:
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._client_loop is not loop:
            if self._key is None:
                raise self._no_key_error()
            key, authorization = self._key, self._authorization

            class _KeyAuth(httpx.Auth):
                def auth_flow(self, request: httpx.Request) -> Any:
                    request.headers["Authorization"] = authorization(key)
                    yield request

            self._client = httpx.AsyncClient(
                base_url=self.base_url, auth=_KeyAuth(), transport=self._transport,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                headers=dict(self.HEADERS), follow_redirects=False,
            )
            self._client_loop = loop
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.aclose()
