"""`gputui notify test`: one notification to every configured URL, and what each said."""

from __future__ import annotations

import argparse

from gputui.cli.output import EXIT_BAD_INPUT, CommandError, add_json, print_json
from gputui.i18n import _


def cmd_notify(args: argparse.Namespace) -> int:
    from gputui.services.notify import configured_urls, send_test

    if not 0.5 <= args.timeout <= 120:
        raise CommandError(_("--timeout: {timeout:g} s is outside 0.5-120 s").format(
            timeout=args.timeout), EXIT_BAD_INPUT)
    urls = configured_urls(args.config)
    if not urls:
        raise CommandError(_("no notification URL: add urls = [\"...\"] (Apprise URLs) under "
                             "[notify] in config.toml (chmod 600), or set GPUTUI_NOTIFY_URLS"),
                           EXIT_BAD_INPUT)
    results = send_test(urls, timeout=args.timeout)
    ok = all(r.ok for r in results)
    if args.json:
        print_json({"ok": ok, "results": [r.as_dict() for r in results]})
    else:
        words = {"ok": _("ok"), "refused": _("refused"), "timeout": _("timed out"),
                 "invalid": _("not a valid Apprise URL")}
        for r in results:
            line = f"{r.url}: {words[r.status]}"
            if r.reason and r.status != "invalid":
                line += f" — {r.reason}"
            elif r.reason:
                line += f" ({r.reason})"
            print(line)
    return 0 if ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("notify", help=_("notifications to your phone or chat (Apprise)"),
                       description=_(
                           "test sends one notification to every URL in [notify] urls "
                           "(config.toml) and GPUTUI_NOTIFY_URLS, and says per URL (masked) "
                           "what happened. Exit 0 when all took it, 1 when any did not, 2 "
                           "when none is configured."))
    s.add_argument("action", choices=["test"], metavar="{test}")
    s.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help=_("how long to wait for each service (default 10)"))
    add_json(s)
    s.set_defaults(handler=cmd_notify)
