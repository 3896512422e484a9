"""The GPU catalog: compare cards, check whether a job fits, and what it will cost.

Four tabs, each usable by keyboard alone at 80×24 (keys 1–4):

* Cards — the table (most important columns first). `s` cycles the sort column, `S` reverses
  it; `f` moves to the filter bar (min VRAM, architecture, provider, interconnect), `escape`
  back; `space` marks a card (2–4), `v` compares them; `enter` costs the card, `n` rents it.
* Compare — the marked cards side by side, a bar per figure, the best of each row marked.
* Fit — model (built in, or a parameter count with its shape), job, precision, context, batch →
  the VRAM breakdown with every assumption, and which cards fit with how many GPUs, cheapest
  first (`enter` costs that card at that count, `n` rents it).
* Cost — card × GPUs × hours → the cost on each provider's billing rule, per second/minute/
  started hour, and where a provider sells packages, the break-even against hourly.

Prices are reference prices with their date and source, never live quotes; the screen says so.
Everything here is computed in-process from package data (no SSH or HTTP).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Label, Select, Static, TabbedContent, TabPane

from gputui.catalog import (
    MODELS,
    PRECISIONS,
    CatalogError,
    GpuSpec,
    PriceRow,
    load_prices,
    load_specs,
)
from gputui.catalog.fit import CUDA_CONTEXT_BYTES, FRAGMENTATION, GIB
from gputui.format import short_gpu
from gputui.i18n import N_, _, pad_cells, shown, truncate_cells
from gputui.services import catalog as svc
from gputui.ui.base import BaseScreen
from gputui.ui.catalog_views import (  # noqa: F401 - bar, compare_table: tested from here
    CUSTOM,
    EIGHTHS,
    FIGURES,
    JOBS,
    MARK,
    MAX_BAR,
    MAX_HOURS,
    MAX_MARKED,
    TABS,
    _price,
    bar,
    check_hours,
    compare_table,
    compare_view,
    in_currency,
)

FIT_COLUMNS = [
    ("gpu", "GPU"),
    ("count", N_("GPUs")),
    ("hourly", N_("$/h")),
    ("where", N_("Cheapest at")),
    ("as_of", N_("As of")),
    ("need", N_("GiB/GPU need/usable")),
    ("link", N_("Link")),
    ("notes", N_("Notes")),
]
COST_COLUMNS = [
    ("provider", N_("Provider")),
    ("tier", N_("Tier")),
    # what tells one provider's rows of a card apart, on an 80-column screen: its 1×, 2× and 8×
    # listings, and the dated sources of one offer
    ("sizes", N_("Sold as")),
    ("cost", N_("Cost")),
    ("as_of", N_("As of")),
    ("billing", N_("Billing")),
    ("package", N_("Package")),
    ("rate", N_("$/h")),
    ("billed", N_("Billed h")),
    ("second", N_("If /s")),
    ("minute", N_("If /min")),
    ("hour", N_("If /h")),
    ("notes", N_("Notes")),
]
AS_OF_CELLS = 18  # a longer "as of" is cut in the middle: a catalog's commit id stays seen
# the Cost tab's package column (the JSON keeps the keys)
PACKAGES = {"hourly": N_("hourly"), "spot": N_("spot"), "daily": N_("daily"),
            "weekly": N_("weekly"), "monthly": N_("monthly")}
# the Fit tab's number fields, as their error names them
FIT_FIELDS = {"#fit-context": N_("context"), "#fit-batch": N_("batch"),
              "#fit-layers": N_("layers"), "#fit-kv": N_("kv heads"), "#fit-hd": N_("head dim")}


class CatalogScreen(BaseScreen):
    TITLE = N_("GPU catalog")
    BINDINGS = [
        Binding("1", "tab('cards')", N_("Cards"), show=False),
        Binding("2", "tab('compare')", N_("Compare"), show=False),
        Binding("3", "tab('fit')", N_("Fit"), show=False),
        Binding("4", "tab('cost')", N_("Cost"), show=False),
        Binding("s", "sort", N_("Sort")),
        Binding("S", "reverse", N_("Reverse sort"), show=False),
        Binding("f", "filter", N_("Filter")),
        Binding("space", "mark", N_("Mark")),
        Binding("v", "compare", N_("Compare")),
        Binding("x", "clear_marks", N_("Clear marks"), show=False),
        Binding("n", "new_instance", N_("Rent this")),
        Binding("y", "currency", N_("¥/$ view"), show=False),
        Binding("escape", "back", N_("Back to the table"), show=False),
    ]
    DEFAULT_CSS = """
    CatalogScreen TabbedContent { height: 1fr; }
    CatalogScreen TabPane { padding: 0; height: 1fr; }
    CatalogScreen #cards-status, CatalogScreen #cards-detail { height: 1; padding: 0 1; color: $text-muted; }
    CatalogScreen .bar { height: 1; padding: 0 1; }
    CatalogScreen .bar Label { width: auto; padding: 0 1 0 0; }
    CatalogScreen .bar Input { margin-right: 1; }
    CatalogScreen .bar Select { margin-right: 1; }
    CatalogScreen #f-vram { width: 6; }
    CatalogScreen #f-arch { width: 16; }
    CatalogScreen #f-provider { width: 13; }
    CatalogScreen #f-link { width: 12; }
    CatalogScreen #cards { height: 1fr; }
    CatalogScreen #compare { height: 1fr; padding: 0 1; }
    CatalogScreen #fit-model { width: 22; }
    CatalogScreen #fit-job { width: 15; }
    CatalogScreen #fit-prec { width: 15; }
    CatalogScreen #fit-context { width: 8; }
    CatalogScreen #fit-batch { width: 5; }
    CatalogScreen #fit-params { width: 12; }
    CatalogScreen #fit-layers { width: 8; }
    CatalogScreen #fit-kv { width: 10; }
    CatalogScreen #fit-hd { width: 10; }
    CatalogScreen #fit-error, CatalogScreen #cost-error { color: $error; padding: 0 1; height: auto; }
    CatalogScreen #fit-breakdown { height: 45%; padding: 0 1; border-top: solid $primary; }
    CatalogScreen #fit-table { height: 1fr; }
    CatalogScreen #cost-card { width: 26; }
    CatalogScreen #cost-count { width: 5; }
    CatalogScreen #cost-hours { width: 9; }
    CatalogScreen #cost-table { height: 1fr; }
    CatalogScreen #cost-notes { height: auto; max-height: 40%; padding: 0 1; color: $text-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.specs: dict[str, GpuSpec] = load_specs()
        self.rows: list[PriceRow] = []
        self.cards: list[svc.CardRow] = []  # shown, in order
        self.sort_key = svc.DEFAULT_SORT
        self.sort_reverse = False
        self.filters = svc.Filters()
        self.marked: list[str] = []  # card keys, in marking order
        self.fit_answer: svc.FitAnswer | None = None
        self.cost_answer: svc.CostAnswer | None = None
        self._built: set[str] = set()  # tabs other than Cards made so far

    # -- layout -------------------------------------------------------------------------------

    def compose_body(self) -> ComposeResult:
        rows = self._load_rows()
        with TabbedContent(initial="cards-tab", id="tabs"):
            with TabPane(_("1 Cards"), id="cards-tab"):
                yield Static("", id="cards-status")
                with Horizontal(classes="bar", id="filters"):
                    yield Label(_("VRAM≥"))
                    yield Input(id="f-vram", compact=True, type="number", placeholder="GiB")
                    yield Label(_("Arch"))
                    yield Select(
                        [(a, a) for a in svc.architectures(self.specs)],
                        id="f-arch",
                        compact=True,
                        prompt=_("any"),
                    )
                    yield Label(_("Provider"))
                    yield Select(
                        [(p, p) for p in svc.providers(rows)],
                        id="f-provider",
                        compact=True,
                        prompt=_("any"),
                    )
                    yield Label(_("Link"))
                    yield Select(
                        [("NVLink", "nvlink"), (_("PCIe only"), "pcie")],
                        id="f-link",
                        compact=True,
                        prompt=_("any"),
                    )
                yield DataTable(id="cards", cursor_type="row", zebra_stripes=True)
                yield Static("", id="cards-detail")
            # The other tabs are built on their first visit (build_tab): composing and styling
            # all four at once made the Catalog the one slow screen switch.
            yield TabPane(_("2 Compare"), id="compare-tab")
            yield TabPane(_("3 Fit"), id="fit-tab")
            yield TabPane(_("4 Cost"), id="cost-tab")

    def _tab_widgets(self, name: str) -> list[Widget]:
        """The widgets of a tab other than Cards, made when the tab is first shown."""
        if name == "compare":
            return [VerticalScroll(Static("", id="compare-body"), id="compare")]
        if name == "fit":
            return [
                Horizontal(
                    Label(_("Model")),
                    Select(
                        [(m.name, key) for key, m in MODELS.items()]
                        + [(_("Custom: params →"), CUSTOM)],
                        id="fit-model",
                        compact=True,
                        allow_blank=False,
                        value="qwen2.5-7b",
                    ),
                    Label(_("Job")),
                    Select([(_(label), v) for label, v in JOBS], id="fit-job", compact=True, allow_blank=False,
                           value="inference"),
                    Label(_("As")),
                    Select(
                        [(p.label, k) for k, p in PRECISIONS.items()],
                        id="fit-prec",
                        compact=True,
                        allow_blank=False,
                        value="bf16",
                    ),
                    classes="bar",
                ),
                Horizontal(
                    Label(_("Context")),
                    Input("4096", id="fit-context", compact=True, type="integer"),
                    Label(_("Batch")),
                    Input("1", id="fit-batch", compact=True, type="integer"),
                    Input(id="fit-params", compact=True, placeholder=_("params 7e9")),
                    Input(id="fit-layers", compact=True, type="integer", placeholder=_("layers")),
                    Input(id="fit-kv", compact=True, type="integer", placeholder=_("kv heads")),
                    Input(id="fit-hd", compact=True, type="integer", placeholder=_("head dim")),
                    classes="bar",
                ),
                Static("", id="fit-error"),
                VerticalScroll(Static("", id="fit-body"), id="fit-breakdown"),
                DataTable(id="fit-table", cursor_type="row", zebra_stripes=True),
            ]
        return [
            Horizontal(
                Label("GPU"),
                Select(
                    [(short_gpu(s.name), k) for k, s in self.specs.items()],
                    id="cost-card",
                    compact=True,
                    allow_blank=False,
                    value=self._first_priced(self.rows),
                ),
                Label(_("GPUs")),
                Input("1", id="cost-count", compact=True, type="integer"),
                Label(_("Hours")),
                Input("10", id="cost-hours", compact=True, type="number"),
                classes="bar",
            ),
            Static("", id="cost-error"),
            DataTable(id="cost-table", cursor_type="row", zebra_stripes=True),
            Static("", id="cost-notes"),
        ]

    async def build_tab(self, name: str) -> None:
        """Make a tab's widgets on its first visit (the Cards tab is made with the screen)."""
        if name == "cards" or name in self._built:
            return
        self._built.add(name)
        await self.query_one(f"#{name}-tab", TabPane).mount_all(self._tab_widgets(name))
        if name == "fit":
            fit = self.query_one("#fit-table", DataTable)
            for key, label in FIT_COLUMNS:
                fit.add_column(in_currency(label, self.currency), key=key)
            self.update_fit()
        elif name == "cost":
            cost = self.query_one("#cost-table", DataTable)
            for key, label in COST_COLUMNS:
                cost.add_column(in_currency(label, self.currency), key=key)
            self.update_cost()
        else:
            self.update_compare()

    def _load_rows(self) -> list[PriceRow]:
        if not self.rows:
            try:
                self.rows = svc.catalog_prices(self.gapp.config)
            except CatalogError as exc:  # a bad [[prices]] row in config.toml
                self.rows = load_prices()
                self._price_error = _("config.toml prices ignored: {error}").format(error=exc)
        return self.rows

    _price_error: str | None = None

    def _first_priced(self, rows: Sequence[PriceRow]) -> str:
        priced = {r.gpu for r in rows}
        return next((k for k in self.specs if k in priced), next(iter(self.specs)))

    def on_mount(self) -> None:
        super().on_mount()
        if self._price_error:
            self.notify(self._price_error, severity="error", timeout=10)
        self.refresh_cards()
        self.query_one("#cards", DataTable).focus()
        self.load_provider_offers()

    @work(exclusive=True, group="offers", exit_on_error=False)
    async def load_provider_offers(self) -> None:
        """Providers publish their own offers into the same table (the sandbox's list prices,
        a real cloud's live ones); a provider that cannot answer is said once, not fatal."""
        from gputui.models import utcnow

        today = utcnow().date().isoformat()
        extra: list[PriceRow] = []
        for name, provider in self.gapp.services.providers.items():
            try:
                offers = await provider.offers()
            except Exception as exc:  # a cloud that is down or refuses the key
                self.notify(_("{provider}: offers unavailable: {error}").format(provider=name, error=exc),
                            severity="warning")
                continue
            extra.extend(svc.offer_price_rows(offers, today))
        if not extra:
            return
        self.rows = [*self._load_rows(), *extra]
        self.query_one("#f-provider", Select).set_options(
            [(p, p) for p in svc.providers(self.rows)])
        self.refresh_cards()

    # -- cards ----------------------------------------------------------------------------------

    def refresh_cards(self) -> None:
        """Rebuild the table from the filters and the sort, keeping the cursor on its card."""
        table = self.query_one("#cards", DataTable)
        current = self.current_card_key()
        try:
            cards = svc.card_rows(self._view_rows(), self.filters, self.specs,
                                  currency=self.currency)
        except CatalogError as exc:
            self.query_one("#cards-status", Static).update(Text(f"⚠ {exc}", style="bold"))
            return
        self.cards = svc.sort_cards(cards, self.sort_key, self.sort_reverse)
        table.clear(columns=True)
        table.add_column(" ", key="mark")
        active = svc.get_column(self.sort_key)
        for col in svc.COLUMNS:
            label = in_currency(col.label, self.currency) + (
                f" {self._arrow()}" if col is active else "")
            table.add_column(label, key=col.key)
        for card in self.cards:
            texts = [str(shown(col.show(card))) for col in svc.COLUMNS]
            cells: list[str | Text] = [
                Text(c, justify="right") if col.numeric else c
                for c, col in zip(texts, svc.COLUMNS, strict=True)
            ]
            table.add_row(MARK if card.key in self.marked else " ", *cells, key=card.key)
        if current is not None and any(c.key == current for c in self.cards):
            table.move_cursor(row=table.get_row_index(current))
        self._update_status()
        self._update_detail()

    currency: str = "USD"  # the price view: y switches ¥/$

    def _view_rows(self) -> list[PriceRow]:
        money = self.gapp.config.money
        return svc.rows_in_currency(self.rows, self.currency, money.cny_per_usd, money.rate_note)

    def _tab_rows(self) -> list[PriceRow]:
        """The Fit and Cost tabs' rows: each in its own currency in the $ view (as ever), all in
        ¥ in the ¥ view (converted only through the configured rate), as the Cards tab."""
        return self.rows if self.currency == "USD" else self._view_rows()

    def action_currency(self) -> None:
        self.currency = "CNY" if self.currency == "USD" else "USD"
        money = self.gapp.config.money
        how = (_("other prices converted at ¥{rate}/$ ({note})").format(
                   rate=money.cny_per_usd, note=money.rate_note or _("your config"))
               if money.cny_per_usd
               else _("no rate configured ([money] cny_per_usd): only prices quoted in it"))
        self.notify(_("prices in {symbol}: {how}").format(
            symbol="¥" if self.currency == "CNY" else "$", how=how))
        self.refresh_cards()
        # the other tabs in the same currency, their headings with it
        for name, columns in (("fit", FIT_COLUMNS), ("cost", COST_COLUMNS)):
            if name in self._built:
                table = self.query_one(f"#{name}-table", DataTable)
                table.clear(columns=True)
                for key, label in columns:
                    table.add_column(in_currency(label, self.currency), key=key)
        self.update_fit()
        self.update_cost()
        self.update_compare()

    def _arrow(self) -> str:
        return "▼" if svc.get_column(self.sort_key).descending != self.sort_reverse else "▲"

    def _update_status(self) -> None:
        col = svc.get_column(self.sort_key)
        parts = [
            _("{shown}/{total} cards").format(shown=len(self.cards), total=len(self.specs)),
            _("by {column} {arrow}").format(column=in_currency(col.label, self.currency),
                                            arrow=self._arrow()),
        ]
        if self.marked:
            parts.append(_("{n} marked").format(n=len(self.marked)))
        if self.currency != "USD":
            parts.append(_("prices in {currency}").format(currency=self.currency))
        parts.append(_("dated reference prices, not live quotes"))
        self.query_one("#cards-status", Static).update(" · ".join(parts))

    def _update_detail(self) -> None:
        card = self.current_card()
        detail = self.query_one("#cards-detail", Static)
        if card is None:
            detail.update(_("No card matches these filters.") if not self.cards else "")
            return
        s = card.spec
        price = (
            _("{price}/GPU·h as of {date} ({where})").format(
                price=svc._money(card.lowest.price_per_gpu_hour, 2, card.lowest.currency),
                date=card.lowest.as_of, where=shown(card.lowest.label))
            if card.lowest
            else _("no reference price")
        )
        detail.update(
            f"▸ {short_gpu(s.name)} · {price} · {svc.link_label(s)} · {s.architecture}"
        )

    def current_card_key(self) -> str | None:
        try:
            table = self.query_one("#cards", DataTable)
        except Exception:
            return None
        if table.row_count == 0 or table.cursor_row < 0:
            return None
        return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value

    def current_card(self) -> svc.CardRow | None:
        key = self.current_card_key()
        return next((c for c in self.cards if c.key == key), None)

    @on(DataTable.RowHighlighted, "#cards")
    def _highlighted(self) -> None:
        self._update_detail()

    @on(DataTable.RowSelected, "#cards")
    async def _card_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            await self.show_cost(event.row_key.value)

    @on(DataTable.HeaderSelected, "#cards")
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key in svc.COLUMN_BY_KEY:
            if key == self.sort_key:
                self.sort_reverse = not self.sort_reverse
            else:
                self.sort_key, self.sort_reverse = key, False
            self.refresh_cards()

    # -- filters --------------------------------------------------------------------------------

    @on(Input.Changed, "#f-vram")
    @on(Select.Changed, "#f-arch, #f-provider, #f-link")
    def filters_changed(self) -> None:
        raw = self.query_one("#f-vram", Input).value.strip()
        try:
            vram = float(raw) if raw else None
            if vram is not None and not vram >= 0:
                raise ValueError
        except ValueError:
            self.query_one("#cards-status", Static).update(
                Text(_("⚠ VRAM≥ wants a number of GiB (got {value})").format(value=repr(raw)),
                     style="bold")
            )
            return

        def val(sel: str) -> str | None:
            v = self.query_one(sel, Select).value
            return v if isinstance(v, str) else None

        self.filters = svc.Filters(vram or None, val("#f-arch"), val("#f-provider"), val("#f-link"))
        self.refresh_cards()

    # -- actions --------------------------------------------------------------------------------

    def _tab(self) -> str:
        active = self.query_one(TabbedContent).active
        return active.removesuffix("-tab") if active else "cards"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("sort", "reverse", "filter", "mark", "clear_marks"):
            try:
                return self._tab() == "cards"
            except Exception:
                return True
        return True

    @on(TabbedContent.TabActivated)
    async def _tab_changed(self) -> None:
        self.refresh_bindings()
        await self.build_tab(self._tab())  # a tab reached by its header rather than 1-4
        if self._tab() == "compare":
            self.update_compare()

    async def action_tab(self, name: str) -> None:
        await self.build_tab(name)
        self.query_one(TabbedContent).active = f"{name}-tab"
        focus = {
            "cards": "#cards",
            "compare": "#compare",
            "fit": "#fit-model",
            "cost": "#cost-table",
        }[name]
        self.query_one(focus).focus()
        if name == "compare":
            self.update_compare()

    def visible_sort_keys(self) -> list[str]:
        """The sortable columns a reader can see now (a narrow pane shows the first few; the
        rest are a scroll away): `s` cycles through these, never through hidden ones."""
        table = self.query_one("#cards", DataTable)
        left, right = int(table.scroll_x), int(table.scroll_x) + (table.size.width or 80)
        x, keys = 0, []
        for column in table.columns.values():
            width = column.get_render_width(table)
            if x >= left and x + width <= right and column.key.value != "mark":
                keys.append(str(column.key.value))
            x += width
        known = [c.key for c in svc.COLUMNS]
        return [k for k in known if k in keys] or known

    def action_sort(self) -> None:
        keys = self.visible_sort_keys()
        at = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_key = keys[(at + 1) % len(keys)]
        self.sort_reverse = False
        self.refresh_cards()
        self._to_top()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.refresh_cards()
        self._to_top()

    def _to_top(self) -> None:
        """A new order is read from the top: the best card first, in view."""
        table = self.query_one("#cards", DataTable)
        if table.row_count:
            table.move_cursor(row=0)
            table.scroll_home(animate=False)

    def action_filter(self) -> None:
        self.query_one("#f-vram", Input).focus()

    def action_back(self) -> None:
        main = {
            "cards": "#cards",
            "compare": "#compare",
            "fit": "#fit-table",
            "cost": "#cost-table",
        }[self._tab()]
        self.query_one(main).focus()

    def action_mark(self) -> None:
        key = self.current_card_key()
        if key is None:
            return
        if key in self.marked:
            self.marked.remove(key)
        elif len(self.marked) >= MAX_MARKED:
            self.notify(
                _("Compare takes at most {n} cards: unmark one first (space).").format(
                    n=MAX_MARKED),
                severity="warning",
            )
            return
        else:
            self.marked.append(key)
        table = self.query_one("#cards", DataTable)
        table.update_cell(key, "mark", MARK if key in self.marked else " ")
        self._update_status()
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)

    def action_clear_marks(self) -> None:
        self.marked.clear()
        self.refresh_cards()

    async def action_compare(self) -> None:
        if len(self.marked) < 2:
            self.notify(_("Mark 2–4 cards with space first, then press v."), severity="warning")
        await self.action_tab("compare")

    def action_new_instance(self) -> None:
        """Open New instance with the card under the cursor (cards, fit or cost tab)."""
        key = self._card_for_action()
        count = self._count_for_action()
        self.gapp.action_goto("create")
        screen = self.app.screen
        if key is not None and hasattr(screen, "preselect"):
            self.preselect_when_ready(screen, self.specs[key].name, count)

    @work(exclusive=True, group="preselect", exit_on_error=False)
    async def preselect_when_ready(self, screen: Screen, name: str, count: int | None = None) -> None:
        """Choose the card on the New-instance screen once its offers are listed: a choice
        made while it is still mounting would be reset by its GPU select mounting."""
        for _attempt in range(100):  # 5 s at most; the sandbox lists its offers at once
            if screen.is_mounted and getattr(screen, "offers", None):
                try:
                    ready = screen.query_one("#offer").is_mounted
                except Exception:
                    ready = False
                if ready:
                    screen.preselect(name, count)  # type: ignore[attr-defined]
                    return
            await asyncio.sleep(0.05)
        self.notify(
            _("New instance: choose the {gpu} yourself (its offers did not load).").format(
                gpu=name),
            severity="warning",
        )

    def _count_for_action(self) -> int | None:
        """The GPU count the fit or cost view arrived at (it goes with the card to New)."""
        tab = self._tab()
        try:
            if tab == "fit":
                table = self.query_one("#fit-table", DataTable)
                if table.row_count and table.cursor_row >= 0:
                    row_key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key
                    return int(str(table.get_cell(row_key, "count")).strip().rstrip("×"))
            if tab == "cost":
                return int(self.query_one("#cost-count", Input).value)
        except (ValueError, KeyError, LookupError):
            return None
        return None

    def _card_for_action(self) -> str | None:
        tab = self._tab()
        if tab == "fit":
            table = self.query_one("#fit-table", DataTable)
            if table.row_count and table.cursor_row >= 0:
                return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
            return None
        if tab == "cost":
            value = self.query_one("#cost-card", Select).value
            return value if isinstance(value, str) else None
        if tab == "compare":
            return self.marked[0] if self.marked else self.current_card_key()
        return self.current_card_key()

    # -- compare --------------------------------------------------------------------------------

    def marked_cards(self) -> list[svc.CardRow]:
        rows = {c.key: c for c in svc.card_rows(self._view_rows(), svc.Filters(), self.specs,
                                                 currency=self.currency)}
        return [rows[k] for k in self.marked if k in rows]

    def update_compare(self) -> None:
        if "compare" not in self._built:
            return
        body = self.query_one("#compare-body", Static)
        cards = self.marked_cards()
        if len(cards) < 2:
            body.update(
                _("Mark 2–4 cards with [b]space[/b] in the Cards tab ([b]1[/b]), then press "
                  "[b]v[/b] to see them side by side.")
            )
            return
        # the pane's width (the screen's less its padding of 1 a side), known at once: the pane's
        # own size is 0 until its first layout, and which of the two an update saw depended on
        # timing (the bars' lengths with it)
        width = (self.size.width or self.app.size.width) - 2
        body.update(compare_view(cards, width - 2, self.currency))

    def on_resize(self) -> None:
        super().on_resize()
        if self.is_mounted and self.marked and "compare" in self._built:
            self.update_compare()

    # -- fit -------------------------------------------------------------------------------------

    @on(Select.Changed, "#fit-model, #fit-job, #fit-prec")
    @on(Input.Changed, "#fit-context, #fit-batch, #fit-layers, #fit-kv, #fit-hd")
    def _fit_changed(self) -> None:
        self.update_fit()

    @on(Input.Changed, "#fit-params")
    def _params_changed(self, event: Input.Changed) -> None:
        model = self.query_one("#fit-model", Select)
        if event.value.strip() and model.value != CUSTOM:
            model.value = CUSTOM  # its Changed recomputes
            return
        self.update_fit()

    def _int(self, sel: str, default: int | None) -> int | None:
        raw = self.query_one(sel, Input).value.strip()
        if not raw:
            return default
        try:
            return int(raw)
        except ValueError:
            raise CatalogError(_("{field} must be a whole number").format(
                field=_(FIT_FIELDS.get(sel, sel)))) from None

    def update_fit(self) -> None:
        if "fit" not in self._built:
            return
        error = self.query_one("#fit-error", Static)
        body = self.query_one("#fit-body", Static)
        table = self.query_one("#fit-table", DataTable)
        model = self.query_one("#fit-model", Select).value
        job = self.query_one("#fit-job", Select).value
        prec = self.query_one("#fit-prec", Select).value
        try:
            custom = model == CUSTOM
            params = self.query_one("#fit-params", Input).value.strip()
            if custom and not params:
                raise CatalogError(_(
                    "Custom model: give its parameter count (e.g. 13e9 or 13B), "
                    "and its layers, kv heads and head dim if you know them"
                ))
            answer = svc.fit(
                None if custom else str(self._model_name(model)),
                job=str(job),
                precision=str(prec),
                context=self._int("#fit-context", 4096) or 0,
                batch=self._int("#fit-batch", 1) or 0,
                params=params if custom else None,
                layers=self._int("#fit-layers", None) if custom else None,
                kv_heads=self._int("#fit-kv", None) if custom else None,
                head_dim=self._int("#fit-hd", None) if custom else None,
                prices=self._tab_rows(),
                currency=self.currency,
            )
        except (CatalogError, ValueError) as exc:
            self.fit_answer = None
            error.update(f"⚠ {shown(exc)}")
            error.display = True
            body.update("")
            table.clear()
            return
        error.update("")
        error.display = False
        self.fit_answer = answer
        body.update(self._fit_text(answer))
        table.clear()
        for o in answer.options:
            if o.fits:
                count = str(o.count)
                need = f"{o.need_gib_per_gpu:.1f}/{o.usable_gib:.1f}"
            else:
                count = "✗"
                need = f"{o.need_gib_per_gpu:.1f}/{o.usable_gib:.1f} (8×)"
            table.add_row(
                short_gpu(o.name),
                Text(count, justify="right"),
                Text(svc._money(o.hourly, currency=self.currency), justify="right"),
                shown(o.quote.row.label) if o.quote
                else (_("no price") if o.fits else _("does not fit")),
                o.quote.row.as_of if o.quote else "—",
                need,
                svc.link_label(self.specs[o.card]),
                "; ".join(str(shown(w)) for w in o.warnings),
                key=o.card,
            )

    def _model_name(self, key: object) -> str:
        return MODELS[str(key)].name

    def _fit_text(self, answer: svc.FitAnswer) -> Text:
        e = answer.estimate
        fitting = answer.fitting
        out = Text()
        out.append(
            _("{model} · {params:.2f} B params · {job} · {precision} · {context} tokens × "
              "{batch}").format(model=e.model, params=e.params / 1e9, job=_(svc.job_label(e.job)),
                                precision=e.precision, context=f"{e.context:,}", batch=e.batch)
            + "\n"
        )
        out.append(_("Needs {gib:.1f} GiB on one GPU").format(gib=e.total_gib), style="bold")
        if fitting:
            # a card to rent as its row reads (no "pays for 8", no spot) where there is one
            cheapest = answer.cheapest_text()
            where = _(", cheapest {what}").format(what=cheapest) if cheapest else ""
            out.append(_("; fits {n} of {total} cards{where}").format(
                n=len(fitting), total=len(answer.options), where=where) + "\n")
        else:
            out.append(_("; fits no card on up to 8 GPUs") + "\n", style="bold")
        for note in e.notes:
            out.append(f"⚠ {shown(note)}\n", style="bold")
        top = max((p.bytes for p in e.all_parts), default=0)
        for p in e.all_parts:
            if not p.bytes:
                continue  # listed with its reason under the assumptions
            out.append(f"{pad_cells(_(svc.part_label(p.name)), 12)}{p.gib:>8.2f} GiB ")
            out.append(bar(p.bytes, top, 20).ljust(20))
            if p.name == "overhead":  # a fixed part on each GPU plus a share of the rest
                where = " " + _("{gib} GiB on every GPU + {share} of each GPU's share").format(
                    gib=f"{CUDA_CONTEXT_BYTES / GIB:g}", share=f"{FRAGMENTATION:.0%}") + "\n"
            else:
                where = " " + (_("split over GPUs") if p.split else _("on every GPU")) + "\n"
            out.append(where, style="dim")
        out.append(_("Assumptions") + "\n", style="bold")
        for p in e.all_parts:
            out.append(_("{part}: ").format(part=_(svc.part_label(p.name))), style="bold dim")
            out.append(f"{shown(p.assumption)}\n", style="dim")
        out.append(
            _("Cards below: the fewest GPUs (1/2/4/8) each fits on, cheapest first; "
              "{note}.").format(note=_(svc.PRICE_NOTE)),
            style="dim",
        )
        return out

    @on(DataTable.RowSelected, "#fit-table")
    async def _fit_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        option = next(
            (o for o in (self.fit_answer.options if self.fit_answer else []) if o.card == key), None
        )
        if key and option is not None:
            await self.show_cost(key, option.count if option.fits else None)

    # -- cost ------------------------------------------------------------------------------------

    async def show_cost(self, key: str, count: int | None = None) -> None:
        await self.build_tab("cost")
        self.query_one("#cost-card", Select).value = key
        if count:
            self.query_one("#cost-count", Input).value = str(count)
        self.update_cost()
        await self.action_tab("cost")

    @on(Select.Changed, "#cost-card")
    @on(Input.Changed, "#cost-count, #cost-hours")
    def _cost_changed(self) -> None:
        self.update_cost()

    def update_cost(self) -> None:
        if "cost" not in self._built:
            return
        error = self.query_one("#cost-error", Static)
        notes = self.query_one("#cost-notes", Static)
        table = self.query_one("#cost-table", DataTable)
        card = self.query_one("#cost-card", Select).value
        table.clear()
        try:
            count_raw = self.query_one("#cost-count", Input).value.strip() or "1"
            try:
                count = int(count_raw)
            except ValueError:
                raise CatalogError(_("GPUs must be a whole number (got {value})").format(
                    value=repr(count_raw))) from None
            hours = check_hours(self.query_one("#cost-hours", Input).value)
            answer = svc.cost(str(card), count=count, hours=hours, prices=self._tab_rows())
        except (CatalogError, ValueError, ArithmeticError) as exc:
            self.cost_answer = None
            error.update(f"⚠ {shown(exc)}")
            error.display = True
            notes.update("")
            return
        error.update("")
        error.display = False
        self.cost_answer = answer
        for i, c in enumerate(answer.costs):
            cells = [str(shown(cell)) for cell in svc.cost_cells(c)]
            cells[3] = _(PACKAGES.get(c.row.package, c.row.package))
            cells[-1] = "; ".join(str(shown(n)) for n in c.notes)
            (provider, tier, sizes, package, billing, cost, billed, rate, sec, minute, hour, as_of,
             nts) = cells
            table.add_row(
                provider,
                tier,
                Text(sizes, justify="right"),
                Text(cost, justify="right"),
                Text(truncate_cells(as_of, AS_OF_CELLS, where="middle")),
                billing,
                package,
                Text(rate, justify="right"),
                Text(billed, justify="right"),
                Text(sec, justify="right"),
                Text(minute, justify="right"),
                Text(hour, justify="right"),
                nts,
                key=str(i),
            )
        lines = []
        if not answer.costs:
            lines.append(
                _("No reference price for the {spec_name}: add one under [[prices]] in "
                  "config.toml.").format(spec_name=answer.spec.name)
            )
        else:
            lines.append(
                _("{count}× {gpu} for {hours} h, cheapest first: {note}.").format(
                    count=answer.count, gpu=answer.spec.name, hours=answer.hours,
                    note=_(svc.PRICE_NOTE))
            )
        lines.extend(_("Break-even: {statement}").format(statement=shown(b.statement))
                     for b in answer.break_evens)
        notes.update(Text("\n".join(lines)))
