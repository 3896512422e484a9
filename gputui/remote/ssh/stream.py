"""`LineStream`: the lines of a long-running remote command."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType


class LineStream:
    """What `Link.stream_lines` returns: an async iterator of lines that is also an async
    context manager (leaving it stops the remote command at once)."""

    def __init__(self, gen: AsyncIterator[str]):
        self._gen = gen

    def __aiter__(self) -> LineStream:
        return self

    async def __anext__(self) -> str:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        aclose = getattr(self._gen, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> LineStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
