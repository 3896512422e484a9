"""What every command shares: exit codes, the one-line error, JSON output, the store and the
services it works on. Commands print; services never do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from typing import IO, TYPE_CHECKING

from gputui.errors import EXIT_BAD_INPUT, EXIT_ERROR, GputuiError, one_line
from gputui.format import end_reason_text, status_text
from gputui.i18n import _, shown

if TYPE_CHECKING:
    from gputui.models import Instance
    from gputui.services.hub import Services
    from gputui.store import SessionStore

__all__ = ["EXIT_BAD_INPUT", "EXIT_ERROR", "CommandError", "end_reason_text", "open_store",
           "print_json", "refresh_quietly", "report_unreadable", "run_async", "services_for",
           "status_text"]


class CommandError(GputuiError):
    """A one-line message for the user, and an exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = code

    @property
    def code(self) -> int:
        return self.exit_code


def print_json(data: object, out: IO[str] | None = None) -> None:
    """The one JSON output of every command: indented, ASCII only (no byte from outside can
    reach a terminal as a control sequence), values JSON lacks as strings."""
    out = out or sys.stdout
    json.dump(data, out, indent=2, default=str)
    out.write("\n")
    out.flush()


def open_store() -> SessionStore:
    from gputui.config import ensure_state_dir, state_path
    from gputui.store import SessionStore

    ensure_state_dir()
    return SessionStore(state_path())


def services_for(args: argparse.Namespace, store: SessionStore | None = None) -> Services:
    from gputui.services.hub import Services

    return Services(store or open_store(), args.config)


def run_async(args: argparse.Namespace, body: Callable[[Services], Awaitable[int]]) -> int:
    """Run `body(services)` on a fresh loop; always close links and servers afterwards."""
    import asyncio

    async def main() -> int:
        from gputui.store import Notice

        services = services_for(args)

        def show(event: object) -> None:
            if isinstance(event, Notice) and not getattr(args, "json", False):
                print(f"{_severity(event.severity)}: {shown(event.text)}", file=sys.stderr)

        services.store.subscribe(show)
        try:
            return await body(services)
        finally:
            await services.close()

    return asyncio.run(main())


def refresh_quietly(args: argparse.Namespace, store: SessionStore) -> None:
    """Bring live instances up to date with their providers (a power-off or a scheduled
    termination that happened while nothing ran). Providers that need the network are not
    asked here — except for a record a create left behind (Ctrl-C, a crash): that instance may
    be running and billing, so it is asked of its provider now, and armed once it runs.
    `gputui reap` does the full round."""
    if store.read_only is not None:  # nothing can be saved: show the state as last saved
        print(f"gputui: {store.path}: {store.read_only}; "
              + _("showing the state as last saved (changes are refused until there is room)"),
              file=sys.stderr)
        return
    live = store.instances_sync(live_only=True)
    if not live:
        return
    import asyncio

    from gputui.services.hub import ServiceError

    async def refresh() -> None:
        services = services_for(args, store)
        try:
            for inst in live:
                left = services.left_mid_create(inst)
                if not left and (not services.capabilities(inst.provider).local
                                 or services.creating(inst)):
                    continue  # (one being created now is the creator's to record)
                try:
                    fresh = await services.refresh(inst)
                except ServiceError as exc:
                    print(f"gputui: {inst.name}: {one_line(exc)}", file=sys.stderr)
                    continue
                if left:
                    await _settled(services, fresh)
        finally:
            await services.close()

    asyncio.run(refresh())


async def _settled(services: Services, inst: Instance) -> None:
    """A record left mid-create that its provider now shows running: its timer's layers are
    armed (as the create would have done), and the user is told that it bills."""
    from gputui.format import format_money
    from gputui.models import InstanceStatus

    if inst.status == InstanceStatus.RUNNING:
        from gputui.services.hub import ServiceError
        from gputui.services.leases import session_leases

        with contextlib.suppress(ServiceError):
            await session_leases(services).arm(inst)
        print("gputui: " + _("{name}: its create was interrupted; {provider} shows it running, "
                             "billing {rate}/h").format(
            name=inst.name, provider=inst.provider,
            rate=format_money(inst.billing.price_per_hour, inst.billing.currency)),
              file=sys.stderr)


def rent_terms(inst: object, lease: object) -> str:
    """What a new rental costs and when it ends, in one line: `gpu-1: billing $0.69/h; released
    at 16:30 (in 2h 00m) unless extended — gputui extend gpu-1 1h`."""
    from gputui.format import format_money, format_remaining, local_clock

    billing = inst.billing  # type: ignore[attr-defined]
    name = inst.name  # type: ignore[attr-defined]
    price = format_money(billing.price_per_hour, billing.currency)
    at = getattr(lease, "release_at", None) if lease is not None else None
    if at is None or getattr(lease, "state", "active") != "active":
        return _("{name}: billing {price}/h; no release time set — it bills until `gputui "
                 "release {name}`").format(name=name, price=price)
    return _("{name}: billing {price}/h; released at {time} (in {left}) unless extended — "
             "`gputui extend {name} 1h`").format(
        name=name, price=price, time=local_clock(at),
        left=format_remaining(lease.remaining()))  # type: ignore[attr-defined]


def report_unreadable(store: SessionStore) -> None:
    """Rows the store skipped because they cannot be read: one line each on stderr."""
    for message in store.unreadable.values():
        print("gputui: " + _("{message} — skipped and left untouched").format(message=message),
              file=sys.stderr)


def _severity(severity: object) -> str:
    words = {"information": _("information"), "warning": _("warning"), "error": _("error")}
    return words.get(str(severity), str(severity))


def add_json(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument("--json", action="store_true", help=help or _("print JSON"))


