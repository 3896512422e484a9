"""`--wait` on `create` and `start`: the tries and the time left on stderr, one line when the
limit comes or on Ctrl-C (the services do the waiting: gputui/services/waiting.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from typing import Any

from gputui.cli.output import EXIT_BAD_INPUT, CommandError, status_text
from gputui.i18n import Deferred, _, ngettext, shown
from gputui.services.waiting import MAX_WAIT


def wait_limit(text: str, flag: str = "--wait") -> timedelta:
    """`--wait 2h`: how long to keep trying (bad: one line, exit 2)."""
    from gputui.config import parse_duration

    try:
        limit = parse_duration(text)
    except ValueError as exc:
        raise CommandError(_("{flag}: {problem}").format(flag=flag, problem=exc),
                           EXIT_BAD_INPUT) from None
    if not timedelta(seconds=1) <= limit <= MAX_WAIT:
        raise CommandError(_("{flag}: wait between 1 s and {days} days, not {value}").format(
            flag=flag, days=MAX_WAIT.days, value=repr(text)), EXIT_BAD_INPUT)
    return limit


def printer(args: argparse.Namespace):  # -> Callable[[str], None] | None
    if getattr(args, "json", False):
        return None

    def say(message: str) -> None:
        text = shown(message) if isinstance(message, Deferred) else status_text(message)
        print(f"  {text}", file=sys.stderr, flush=True)

    return say


def _interrupted(line: str) -> None:
    print(f"gputui: {line}", file=sys.stderr, flush=True)


async def create_wait(services: Any, args: argparse.Namespace, offer: Any, request: Any,
                      lease: Any) -> Any:
    """`create … --wait`: each try a create, refused for stock or done; never two."""
    from gputui.models import utcnow
    from gputui.services.waiting import WaitPlan, create_waiting

    plan = WaitPlan(limit=wait_limit(args.wait))
    keep_span = None
    if lease.release_at is not None and not args.release_at:  # --release-after / the default
        keep_span = lease.release_at - utcnow()
    try:
        return await create_waiting(services, args.provider, offer, request, plan, lease=lease,
                                    keep_span=keep_span, progress=printer(args))
    except asyncio.CancelledError:
        _interrupted(ngettext(
            "stopped waiting for a card after {tries} try (Ctrl-C); nothing was rented, unless "
            "that try's answer was lost: `gputui instances` shows {name} until that is known",
            "stopped waiting for a card after {tries} tries (Ctrl-C); nothing was rented, "
            "unless the last try's answer was lost: `gputui instances` shows {name} until that "
            "is known", plan.tries).format(tries=plan.tries, name=request.name)
                     if plan.tries else _("stopped (Ctrl-C); nothing was rented"))
        raise


async def start_wait(services: Any, args: argparse.Namespace, inst: Any) -> Any:
    """`start NAME --wait`: power on, and while its machine has no free GPU, try again."""
    from gputui.services.waiting import WaitPlan, start_waiting

    plan = WaitPlan(limit=wait_limit(args.wait))
    try:
        return await start_waiting(services, inst, plan, progress=printer(args))
    except asyncio.CancelledError:
        _interrupted(ngettext(
            "stopped waiting for a free GPU after {tries} try (Ctrl-C); {name} stays stopped",
            "stopped waiting for a free GPU after {tries} tries (Ctrl-C); {name} stays stopped",
            plan.tries).format(tries=plan.tries, name=inst.name))
        raise
