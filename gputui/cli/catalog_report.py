"""What `gputui catalog`, `gputui fit` and `gputui cost` print: tables, JSON and exit codes.
The choosing (filters, sorting, fit, job cost) is `gputui.services.catalog`'s; this module
only prints."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, TextIO

from gputui.cli.output import print_json
from gputui.errors import exit_code, one_line
from gputui.format import short_gpu
from gputui.i18n import N_, _, cell_len, pad_cells, shown
from gputui.services.catalog import (
    COLUMNS,
    DEFAULT_SORT,
    JOB_LABELS,
    PRICE_NOTE,
    CatalogError,
    Filters,
    _link_short,
    _money,
    _where_opt,
    card_rows,
    catalog_prices,
    cost,
    cost_cells,
    fit,
    get_column,
    part_label,
    sort_cards,
)

FIT_HEADERS = ("GPU", N_("GPUs"), N_("$/h"), N_("cheapest at"), N_("as of"), "GiB/GPU", N_("link"),
               N_("notes"))
COST_HEADERS = (N_("provider"), N_("tier"), N_("sold as"), N_("package"), N_("billed by"), N_("cost"),
                N_("billed h"), N_("$/h"), N_("if /second"), N_("if /minute"), N_("if /hour"),
                N_("as of"), N_("notes"))


def catalog_command(
    config: Any = None,
    *,
    sort: str = DEFAULT_SORT,
    reverse: bool = False,
    min_vram: float | None = None,
    arch: str | None = None,
    provider: str | None = None,
    interconnect: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """`gputui catalog`: the cards, filtered and sorted; `--json` a list of card objects."""
    out = out or sys.stdout
    get_column(sort)
    rows = catalog_prices(config)
    cards = sort_cards(
        card_rows(rows, Filters(min_vram, arch, provider, interconnect)), sort, reverse
    )
    if as_json:
        print_json([c.as_dict() for c in cards], out)
        return 0
    if not cards:
        print(_("No card matches those filters."), file=out)
        return 0
    _print_table(
        [_(c.label) for c in COLUMNS],
        [[c.show(card) for c in COLUMNS] for card in cards],
        [not c.numeric for c in COLUMNS],
        out,
    )
    col = get_column(sort)
    arrow = "▼" if col.descending != reverse else "▲"
    print(
        _("\n{n_cards} cards, by {title} {arrow}. Tensor figures are dense (no sparsity); {note}.").format(n_cards=len(cards), title=_(col.title), arrow=arrow, note=_(PRICE_NOTE)),
        file=out,
    )
    return 0


def fit_command(
    config: Any = None,
    model: str | None = None,
    *,
    job: str,
    precision: str,
    context: int = 4096,
    batch: int = 1,
    params: str | float | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    heads: int | None = None,
    lora_rank: int | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """`gputui fit`: the VRAM breakdown with its assumptions, and which cards fit."""
    out = out or sys.stdout
    answer = fit(
        model,
        job=job,
        precision=precision,
        context=context,
        batch=batch,
        params=params,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        heads=heads,
        lora_rank=lora_rank,
        prices=catalog_prices(config),
    )
    if as_json:
        print_json(answer.as_dict(), out)
        return 0
    e = answer.estimate
    print(
        _("{model} ({params:.2f} B params) · {job} · {precision} · {context:,} tokens × batch {batch}").format(model=e.model, params=e.params / 1e9, job=_(JOB_LABELS.get(e.job.value, e.job.value)), precision=e.precision, context=e.context, batch=e.batch),
        file=out,
    )
    print(_("Needs {total_gib:.1f} GiB on one GPU:").format(total_gib=e.total_gib), file=out)
    for part in e.all_parts:
        print(f"  {pad_cells(_(part_label(part.name)), 12)} {part.gib:>8.2f} GiB  "
              f"{shown(part.assumption)}", file=out)
    for note in e.notes:
        print(_("Note: {note}").format(note=shown(note)), file=out)
    print(file=out)
    fitting = answer.fitting
    if not fitting:
        print(_("It fits no card of the catalog on up to 8 GPUs."), file=out)
    else:
        _print_table(
            [_(h) for h in FIT_HEADERS],
            [
                [
                    short_gpu(o.name),
                    str(o.count),
                    _money(o.hourly),
                    _where_opt(o),
                    o.quote.row.as_of if o.quote else "—",
                    f"{o.need_gib_per_gpu:.1f}/{o.usable_gib:.1f}",
                    _link_short(o),
                    "; ".join(str(shown(w)) for w in o.warnings),
                ]
                for o in fitting
            ],
            [True, False, False, True, True, False, True, True],
            out,
        )
        cheapest = answer.cheapest_text(where=True)
        if cheapest:
            print(_("\nCheapest to rent for this job: {what}").format(what=cheapest), file=out)
    misses = [short_gpu(o.name) for o in answer.options if not o.fits]
    if misses:
        print(_("\nDoes not fit on 8 GPUs: {names}").format(names=", ".join(misses)), file=out)
    print(_("\nCheapest first; {note}.").format(note=_(PRICE_NOTE)), file=out)
    return 0


def cost_command(
    config: Any = None,
    gpu: str = "",
    *,
    count: int = 1,
    hours: float | str | Decimal,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """`gputui cost`: what `count` × `gpu` for `hours` costs on each provider and billing mode."""
    out = out or sys.stdout
    answer = cost(gpu, count=count, hours=hours, prices=catalog_prices(config))
    if as_json:
        print_json(answer.as_dict(), out)
        return 0
    print(_("{count}× {spec_name} for {hours} h").format(count=answer.count, spec_name=answer.spec.name, hours=answer.hours), file=out)
    if not answer.costs:
        print(
            _("No reference price for the {spec_name}: add one under [[prices]] in config.toml.").format(spec_name=answer.spec.name),
            file=out,
        )
        return 0
    _print_table(
        [_(h) for h in COST_HEADERS],
        [[str(shown(cell)) for cell in cost_cells(c)] for c in answer.costs],
        [True, True, False, True, True] + [False] * 6 + [True, True],
        out,
    )
    for b in answer.break_evens:
        print(_("Break-even: {statement}").format(statement=shown(b.statement)), file=out)
    print(_("\nCheapest first; {note}.").format(note=_(PRICE_NOTE)), file=out)
    return 0


def run_command(command: Callable[..., int], *args: Any, **kwargs: Any) -> int:
    """Call one of the commands above: its exit code, or on bad input (`CatalogError`) one line
    `gputui: <message>` on stderr and exit code 2."""
    try:
        return command(*args, **kwargs)
    except CatalogError as exc:  # the same line and code as `gputui.cli.main` gives
        print(f"gputui: {one_line(exc)}", file=sys.stderr)
        return exit_code(exc)



def _print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[bool], out: TextIO
) -> None:
    """Columns measured and padded by terminal cells (a Chinese character takes two)."""
    widths = [max(cell_len(h), *(cell_len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            pad_cells(c, w, "<" if lft else ">") for c, w, lft in zip(cells, widths, left, strict=True)
        ).rstrip()

    print(line(headers), file=out)
    for r in rows:
        print(line(r), file=out)
