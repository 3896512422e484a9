"""Images and the ways into a box: `gputui images`, `gputui image save`, `gputui forward`."""

from __future__ import annotations

import argparse
import sys

from gputui.cli.output import EXIT_BAD_INPUT, CommandError, print_json, run_async
from gputui.format import short_gpu
from gputui.i18n import N_, _, cell_len, pad_cells, shown

KIND = {"private": N_("private"), "base": N_("base")}
STATE = {"done": N_("ready"), "saving": N_("saving"), "failed": N_("failed")}


def cmd_images(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services.images import image_providers, list_images

        names = [args.provider] if args.provider else image_providers(services)
        if not names:
            raise CommandError(_("no provider that takes an image is configured (AutoDL: set "
                                 "AUTODL_TOKEN)"), EXIT_BAD_INPUT)
        rows = []
        for name in names:
            for img in await list_images(services, name):
                rows.append(img)
        if args.json:
            print_json([img.as_dict() for img in rows])
            return 0
        if not rows:
            print(_("no images"))
            return 0
        headers = [_("PROVIDER"), _("KIND"), _("NAME"), _("STATE"), _("ID")]
        cells = [[img.provider, _(KIND[img.kind]), img.readable, _(STATE[img.state]), img.id]
                 for img in rows]
        widths = [max(cell_len(h), *(cell_len(r[i]) for r in cells))
                  for i, h in enumerate(headers)]
        for line in [headers, *cells]:
            print("  ".join(pad_cells(c, w) for c, w in zip(line, widths, strict=True)).rstrip())
        bases = [img for img in rows if img.kind == "base"]
        if bases:
            print(_("Base images: gputui's table, from {source} ({date}); the provider's console "
                    "lists more — give any by its id.").format(source=bases[0].source,
                                                             date=bases[0].as_of))
        return 0

    return run_async(args, body)


def cmd_image_save(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        from gputui.services.images import check_image_name, save_image

        name = check_image_name(args.image)
        inst = services.store.find_instance_sync(args.name)
        if not args.json:
            print(_("Saving {name} as image {image}: an image holds the system disk only — "
                    "files on the data disk (/root/autodl-tmp) are not in it.").format(
                name=inst.name, image=name), file=sys.stderr)
        progress = None if args.json else (
            lambda m: print(f"  {shown(m)}", file=sys.stderr, flush=True))
        img = await save_image(services, inst, name, progress)
        if args.json:
            print_json(img.as_dict())
        else:
            print(_("Image {image} saved ({id}); create from it with `gputui create --provider "
                    "{provider} --gpu {gpu} --image {quoted}`").format(
                image=img.name or name, id=img.id, provider=inst.provider,
                gpu=_quote(short_gpu(inst.gpu)), quoted=_quote(img.name or img.id)))
        return 0

    return run_async(args, body)


def cmd_forward(args: argparse.Namespace) -> int:
    async def body(services) -> int:
        import asyncio
        import signal

        from gputui.services.images import addresses, check_port, forward

        seconds = _seconds(args.seconds) if args.seconds else None
        remote = check_port(args.port, "PORT")
        local = None if args.local is None else check_port(args.local, "--local")
        inst = services.store.find_instance_sync(args.name)
        port, link = await forward(services, inst, remote, local)
        print(_("Forwarding http://127.0.0.1:{local} → {name}:{remote} over SSH (Ctrl-C "
                "stops)").format(local=port, name=inst.name, remote=remote), flush=True)
        if port != (local or remote):
            print(_("(port {remote} is in use on this machine: {local} instead)").format(
                remote=remote, local=port), flush=True)
        try:
            published = await addresses(services, inst)
        except Exception as exc:  # the forward works without them
            published = []
            print(_("(the provider's addresses could not be read: {error})").format(
                error=shown(exc)), file=sys.stderr)
        for what, url in published:
            print(_("{what}: {url}").format(what=what, url=url), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            if seconds:
                await asyncio.wait_for(stop.wait(), seconds)
            else:
                await stop.wait()
        except TimeoutError:
            pass
        await link.close_forward(remote)
        print(_("forward closed"), file=sys.stderr)
        return 0

    return run_async(args, body)


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _seconds(text: str) -> float:
    from gputui.config import lease_span

    return lease_span(text, "--for").total_seconds()


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("images", help=_("images to create from: your private ones and the "
                                        "base ones gputui knows"))
    s.add_argument("--provider", help=_("one provider (default: every one that takes an image)"))
    s.add_argument("--json", action="store_true", help=_("print a JSON list"))
    s.set_defaults(handler=cmd_images)

    s = sub.add_parser("image", help=_("save an instance as an image"))
    acts = s.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = acts.add_parser("save", help=_("save an instance's system disk as a private image "
                                       "(waits until it is saved)"))
    a.add_argument("name", help=_("instance name or id"))
    a.add_argument("image", help=_("the image's name"))
    a.add_argument("--json", action="store_true", help=_("print the image as JSON"))
    a.set_defaults(handler=cmd_image_save)

    s = sub.add_parser("forward", help=_("reach a port of an instance from this machine (an SSH "
                                         "local forward: 6006 TensorBoard, 8888 Jupyter)"))
    s.add_argument("name", help=_("instance name or id"))
    s.add_argument("port", help=_("the port on the instance"))
    s.add_argument("--local", metavar="PORT",
                   help=_("the port on this machine (default: the same, or a free one)"))
    s.add_argument("--for", dest="seconds", metavar="DURATION",
                   help=_("stop after this long (e.g. 2h); default: until Ctrl-C"))
    s.set_defaults(handler=cmd_forward)
