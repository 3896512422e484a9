"""The catalog screen's pure parts: its constants, the Cost tab's hours check, and the
Compare tab's table of bars (tested directly; the screen is in `catalog.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gputui.catalog import CatalogError
from gputui.format import short_gpu
from gputui.i18n import N_, _, cell_len, pad_cells, shown
from gputui.services import catalog as svc

TABS = ("cards", "compare", "fit", "cost")
MAX_MARKED = 4
MAX_BAR = 24  # cells: wider bars add nothing
MARK = "●"
EIGHTHS = " ▏▎▍▌▋▊▉"
JOBS = [(N_("inference"), "inference"), ("LoRA", "lora"), ("QLoRA", "qlora"),
        (N_("full (Adam)"), "full")]
CUSTOM = "custom"


MAX_HOURS = 24 * 366  # a year: beyond it, a typo, not a plan


def check_hours(raw: str) -> str:
    """The Cost tab's hours, or CatalogError saying what is wrong: 0 hours would read $0.00
    despite a billing minimum, and 99,999,999 hours is a typo."""
    from decimal import Decimal, InvalidOperation

    text = raw.strip()
    if not text:
        raise CatalogError(_("Hours: give how long you will rent it, e.g. 10 (or 0.5)"))
    try:
        hours = Decimal(text)
    except InvalidOperation:
        raise CatalogError(_("Hours: {text} is not a number of hours (e.g. 10 or 0.5)").format(
            text=repr(text))) from None
    if not hours.is_finite() or hours <= 0:
        raise CatalogError(_("Hours: {text} h is not a rental; give more than 0 (billing has "
                             "a minimum charge, e.g. 60 s)").format(text=text))
    if hours > MAX_HOURS:
        raise CatalogError(_("Hours: {text} h is over a year ({limit} h); give a shorter "
                             "time").format(text=text, limit=f"{MAX_HOURS:,}"))
    return text


def bar(value: float, top: float, width: int) -> str:
    """A horizontal bar of `width` cells, `value` of `top`, to an eighth of a cell."""
    if width <= 0 or top <= 0 or value <= 0:
        return ""
    eighths = round(min(value / top, 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (EIGHTHS[part] if part else "")


# Compare: (label, value, shown, higher is better)
def _price(row: svc.CardRow) -> Decimal | None:
    return row.perf.usd_per_gpu_hour


FIGURES = [
    (N_("VRAM GiB"), lambda r: r.spec.vram_gb, lambda r: f"{r.spec.vram_gb:g}", True),
    (
        N_("Bandwidth GB/s"),
        lambda r: r.spec.memory_bandwidth_gbs,
        lambda r: f"{r.spec.memory_bandwidth_gbs:,.0f}",
        True,
    ),
    ("BF16 TFLOPS", lambda r: r.spec.bf16_tflops, lambda r: svc._fig(r.spec.bf16_tflops), True),
    ("FP8 TFLOPS", lambda r: r.spec.fp8_tflops, lambda r: svc._fig(r.spec.fp8_tflops), True),
    ("FP32 TFLOPS", lambda r: r.spec.fp32_tflops, lambda r: svc._fig(r.spec.fp32_tflops), True),
    (
        "NVLink GB/s",
        lambda r: r.spec.nvlink_gbs,
        lambda r: f"{r.spec.nvlink_gbs:g}" if r.spec.has_nvlink else f"PCIe {r.spec.pcie_gen}",
        True,
    ),
    (N_("TDP W"), lambda r: r.spec.tdp_w, lambda r: f"{r.spec.tdp_w:,.0f}", False),
    (N_("$/GPU·h"), _price, lambda r: svc._money(_price(r), 2, svc._cur(r)), False),
    (
        N_("$/BF16 TF·h"),
        lambda r: r.perf.usd_per_bf16_tflop_hour,
        lambda r: svc._money(r.perf.usd_per_bf16_tflop_hour, 4, svc._cur(r)),
        False,
    ),
    (
        N_("$/GiB VRAM·h"),
        lambda r: r.perf.usd_per_gb_vram_hour,
        lambda r: svc._money(r.perf.usd_per_gb_vram_hour, 4, svc._cur(r)),
        False,
    ),
    (
        N_("GB/s per $/h"),
        lambda r: r.perf.bandwidth_gbs_per_usd_hour,
        lambda r: (
            "—"
            if r.perf.bandwidth_gbs_per_usd_hour is None
            else f"{r.perf.bandwidth_gbs_per_usd_hour:,.0f}"
        ),
        True,
    ),
]


def in_currency(label: str, currency: str) -> str:
    """A heading in the interface's language, its "$" the view's currency sign (¥ view:
    "¥/GPU·h", "¥/卡·时")."""
    text = _(label)
    return text.replace("$", "¥") if currency == "CNY" else text


def compare_table(cards: Sequence[svc.CardRow], width: int, currency: str = "USD") -> Table:
    """The marked cards side by side: a row per figure, a bar per card scaled to the largest
    of the row (so lengths compare), the best of each row in bold with ◆."""
    n = max(1, len(cards))
    label_w = max(15, *(cell_len(in_currency(label, currency)) for label, *_rest in FIGURES))
    value_w = 8
    cell = max(10, min((width - label_w - 2) // n - 1, MAX_BAR + value_w + 2))
    bar_w = max(2, cell - value_w - 2)
    table = Table(box=None, expand=False, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("", width=label_w, no_wrap=True)
    for c in cards:
        table.add_column(Text(short_gpu(c.spec.name), style="bold"), width=cell, no_wrap=True)
    for label, value, show, higher in FIGURES:
        vals = [value(c) for c in cards]
        nums = [float(v) for v in vals if v is not None and float(v) > 0]
        top = max(nums) if nums else 0.0
        floats = [float(v) if v is not None else 0.0 for v in vals]
        best = (max(nums) if higher else min(nums)) if nums else None
        cells: list[Text] = []
        for c, v in zip(cards, vals, strict=True):
            f = float(v) if v is not None else 0.0
            is_best = best is not None and f == best and len(set(floats)) > 1
            text = Text()
            text.append(bar(f, top, bar_w).ljust(bar_w), style="bold" if is_best else "")
            text.append(" " + show(c).rjust(value_w - 1), style="bold" if is_best else "")
            text.append("◆" if is_best else " ")
            cells.append(text)
        table.add_row(Text(pad_cells(in_currency(label, currency), label_w)), *cells)
    return table


def compare_view(cards: Sequence[svc.CardRow], width: int, currency: str = "USD") -> Group:
    """The compare table and, under it, what the marks mean and where each price is from."""
    notes = Text(in_currency(N_("Lower is better for TDP and the $ rows; ◆ = best of the row."),
                             currency), style="dim")
    for c in cards:
        if c.lowest:
            notes.append(
                "\n" + _("{gpu}: {price}/GPU·h at {where}, as of {date}").format(
                    gpu=short_gpu(c.spec.name),
                    price=svc._money(c.lowest.price_per_gpu_hour, 2, c.lowest.currency),
                    where=shown(c.lowest.label), date=c.lowest.as_of),
                style="dim",
            )
        else:
            notes.append("\n" + _("{gpu}: no reference price").format(gpu=short_gpu(c.spec.name)),
                         style="dim")
    notes.append(
        "\n" + _("Prices: {note}. Tensor figures are dense (no sparsity).").format(
            note=_(svc.PRICE_NOTE)), style="dim"
    )
    return Group(compare_table(cards, width, currency), Text(""), notes)
