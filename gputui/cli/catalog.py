"""Choosing a card: the catalog, will-it-fit, and cost estimates before renting."""

from __future__ import annotations

import argparse

from gputui.cli.output import (
    EXIT_BAD_INPUT,
    CommandError,
)
from gputui.i18n import _


def cmd_catalog(args: argparse.Namespace) -> int:
    from gputui.cli import catalog_report as svc

    return svc.run_command(
        svc.catalog_command, args.config, sort=args.sort, reverse=args.reverse,
        min_vram=args.min_vram, arch=args.arch, provider=args.provider,
        interconnect=args.interconnect, as_json=args.json,
    )


def cmd_fit(args: argparse.Namespace) -> int:
    from gputui.cli import catalog_report as svc

    if args.model and args.model_opt:
        raise CommandError(_("give the model once: MODEL or --model"), EXIT_BAD_INPUT)
    return svc.run_command(
        svc.fit_command, args.config, args.model or args.model_opt, job=args.job,
        precision=args.precision, context=args.context, batch=args.batch, params=args.params,
        layers=args.layers, kv_heads=args.kv_heads, head_dim=args.head_dim, heads=args.heads,
        lora_rank=args.lora_rank, as_json=args.json,
    )


def cmd_cost(args: argparse.Namespace) -> int:
    from gputui.cli import catalog_report as svc

    if args.gpu and args.gpu_opt:
        raise CommandError(_("give the GPU once: GPU or --gpu"), EXIT_BAD_INPUT)
    return svc.run_command(
        svc.cost_command, args.config, args.gpu or args.gpu_opt or "", count=args.count,
        hours=args.hours, as_json=args.json,
    )



def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("catalog", help=_("compare GPUs: specs, dated reference prices, $ per figure"))
    s.add_argument("--sort", default="price", metavar="COL",
                   help=_("name, vram, price (default), bandwidth, bf16, fp8, usd_per_tflop, "
                   "usd_per_gb, bw_per_usd, link, tdp, as_of, provider, arch; best first"))
    s.add_argument("--reverse", action="store_true", help=_("reverse the sort"))
    s.add_argument("--min-vram", type=float, metavar="GIB", help=_("at least this much memory (GiB)"))
    s.add_argument("--arch", metavar="NAME", help=_("architecture: ampere, ada, hopper, blackwell…"))
    s.add_argument("--provider", metavar="NAME", help=_("cards this provider prices (its prices only)"))
    s.add_argument("--interconnect", choices=["nvlink", "pcie"], help=_("NVLink, or PCIe only"))
    s.add_argument("--json", action="store_true", help=_("print a JSON list of cards"))
    s.set_defaults(handler=cmd_catalog)

    s = sub.add_parser("fit", help=_("will a model fit: VRAM breakdown, the cards it fits, cheapest first"))
    s.add_argument("model", nargs="?", help=_("built-in model: Qwen2.5-0.5B…72B, Llama-3.1-8B/70B"))
    s.add_argument("--model", dest="model_opt", metavar="NAME", help=_("the same, as an option"))
    s.add_argument("--params", metavar="N", help=_("or any model by its parameter count: 7e9, 13B"))
    s.add_argument("--layers", type=int, metavar="L", help=_("with --params: layers"))
    s.add_argument("--kv-heads", type=int, metavar="K", help=_("with --params: KV heads"))
    s.add_argument("--head-dim", type=int, metavar="D", help=_("with --params: head dimension"))
    s.add_argument("--heads", type=int, metavar="H", help=_("with --params: attention heads"))
    s.add_argument("--job", default="inference", metavar="JOB",
                   help=_("inference (default), lora, qlora or full (Adam)"))
    s.add_argument("--precision", default="bf16", metavar="P",
                   help=_("fp32, bf16 (default), fp16, fp8, int8, int4, nf4, q4_k_m, q5_k_m, q8_0"))
    s.add_argument("--context", type=int, default=4096, metavar="T", help=_("tokens (default 4096)"))
    s.add_argument("--batch", type=int, default=1, metavar="B", help=_("sequences (default 1)"))
    s.add_argument("--lora-rank", type=int, metavar="R", help=_("LoRA rank (default 16)"))
    s.add_argument("--json", action="store_true", help=_("print total_gib, breakdown_gib, fits as JSON (total_gb, breakdown: 10^9 bytes)"))
    s.set_defaults(handler=cmd_fit)

    s = sub.add_parser("cost", help=_("estimate before renting: N GPUs for H hours on each provider"))
    s.add_argument("gpu", nargs="?", help=_("GPU, matched loosely (4090, 'H100 SXM')"))
    s.add_argument("--gpu", dest="gpu_opt", metavar="NAME", help=_("the same, as an option"))
    s.add_argument("--count", type=int, default=1, help=_("GPUs (default 1)"))
    s.add_argument("--hours", required=True, help=_("running time in hours, e.g. 10 or 2.5"))
    s.add_argument("--json", action="store_true", help=_("print the costs as JSON"))
    s.set_defaults(handler=cmd_cost)
