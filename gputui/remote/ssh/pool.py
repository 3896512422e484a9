"""`LinkPool`: one `Link` per instance id, shared by every service."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gputui.models import LinkState, SSHEndpoint
from gputui.remote.hostkeys import (
    KnownHosts,
)

from .link import Link, StateCallback


class LinkPool:
    """One Link per instance id, shared by every service.

    `link_options` are defaults for every Link (known_hosts is required); `on_state` gets
    (instance_id, state, detail) so one store callback serves every link.
    """

    def __init__(
        self,
        *,
        known_hosts: KnownHosts,
        on_state: Callable[[str, LinkState, str | None], Awaitable[None] | None] | None = None,
        **link_options: Any,
    ):
        self.known_hosts = known_hosts
        self._on_state = on_state
        self._options = link_options
        self._links: dict[str, Link] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    def get(self, instance_id: str, endpoint: SSHEndpoint, **options: Any) -> Link:
        """The instance's Link (created on first use; not connected until used). A changed
        endpoint (host, port, user, key) replaces the old link."""
        link = self._links.get(instance_id)
        if link is not None and not link.closed and link.endpoint == endpoint:
            if options.get("password") is not None:
                link.set_password(options["password"])
            if options.get("accept_new_host_key"):
                link.accept_new_host_key = True
            return link
        if link is not None:
            self._retire(link)
        merged = {**self._options, **options}
        if self._on_state is not None and "on_state" not in options:
            merged["on_state"] = self._bind(instance_id)
        link = Link(endpoint, known_hosts=self.known_hosts, name=instance_id, **merged)
        self._links[instance_id] = link
        return link

    def set_keepalive(self, interval: float, count_max: int) -> None:
        """Keepalives of every link, open or made later."""
        self._options.update(keepalive_interval=interval, keepalive_count_max=count_max)
        for link in self._links.values():
            link.set_keepalive(interval, count_max)

    def peek(self, instance_id: str) -> Link | None:
        return self._links.get(instance_id)

    def _bind(self, instance_id: str) -> StateCallback:
        cb = self._on_state
        assert cb is not None

        def _on_state(state: LinkState, detail: str | None) -> Awaitable[None] | None:
            return cb(instance_id, state, detail)

        return _on_state

    def _retire(self, link: Link) -> None:
        task = asyncio.ensure_future(link.close())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self, instance_id: str) -> None:
        link = self._links.pop(instance_id, None)
        if link is not None:
            await link.close()

    async def close_all(self) -> None:
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
        if self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self._links

    def __len__(self) -> int:
        return len(self._links)
