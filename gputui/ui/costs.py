"""Costs: what is billing now (compute and storage apart), today's and this month's totals,
budgets, the ledger of ended instances, totals by period / GPU / task, and a spend chart."""

from __future__ import annotations

from decimal import Decimal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, DataTable, Static

from gputui.format import (
    end_reason_text,
    fit_name,
    format_money,
    format_remaining,
    short_gpu,
    status_text,
    sum_as_shown,
)
from gputui.i18n import N_, _, ngettext
from gputui.models import Instance, LedgerEntry
from gputui.services.costs import (
    currencies,
    daily_series,
    group_ledger,
    instance_cost,
    totals,
    totals_by_currency,
)
from gputui.store import InstanceChanged, LeaseChanged, LedgerChanged
from gputui.ui.base import BaseScreen, StoreEvent
from gputui.ui.widgets import LABEL_CELLS

# What matters most first: an 80-column pane cuts from the right, so the split of a total into
# compute and storage (and the provider) come last.
# Headers are translated where the table is made (`_()`); money cells carry their currency.
NOW_COLUMNS = [
    ("name", N_("Name")), ("state", N_("State")), ("rate", N_("Rate/h")),
    ("accrued", N_("Accrued")), ("release", N_("Release in")), ("projected", N_("At release")),
    ("gpu", N_("GPU")), ("compute", N_("Compute")), ("storage", N_("Storage")),
]
LEDGER_COLUMNS = [
    ("ended", N_("Ended")), ("name", N_("Task")), ("gpu", N_("GPU")), ("hours", N_("Hours")),
    ("total", N_("Total")), ("reason", N_("Reason")), ("compute", N_("Compute")),
    ("storage", N_("Storage")), ("provider", N_("Provider")),
]
GROUP_COLUMNS = [("key", N_("Group")), ("total", N_("Total")), ("count", N_("Instances")),
                 ("bar", "")]
GROUPINGS = ["day", "week", "month", "gpu", "task"]
GROUPING_LABELS = {"day": N_("day"), "week": N_("week"), "month": N_("month"),
                   "gpu": N_("GPU type"), "task": N_("task label")}


def bar(value: Decimal, top: Decimal, width: int) -> str:
    if top <= 0:
        return ""
    cells = float(value / top) * width
    full = int(cells)
    part = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < width else ""
    return ("█" * full + part.strip()).ljust(width)


class CostsScreen(BaseScreen):
    TITLE = N_("Costs")
    BINDINGS = [
        Binding("1", "view('now')", N_("Now")),
        Binding("2", "view('ledger')", N_("Ledger")),
        Binding("3", "view('totals')", N_("Totals")),
        Binding("4", "view('chart')", N_("Chart")),
        Binding("x", "export", N_("Export CSV")),
        Binding("B", "budgets", N_("Budgets")),
        Binding("b", "group", N_("Group by"), show=False),
    ]
    DEFAULT_CSS = """
    CostsScreen #totals { padding: 0 1; height: auto; background: $boost; }
    CostsScreen #views { height: 1fr; }
    CostsScreen DataTable { height: 1fr; }
    CostsScreen .note { padding: 0 1; color: $text-muted; height: auto; }
    CostsScreen #chart, CostsScreen #group-title { padding: 0 1; height: auto; }
    """

    def compose_body(self) -> ComposeResult:
        yield Static("", id="totals")
        with ContentSwitcher(initial="now", id="views"):
            with Vertical(id="now"):
                yield DataTable(id="now-table", cursor_type="row")
                yield Static(_("Nothing is billing. Ended instances are in the ledger (2)."),
                             id="now-empty", classes="note")
            with Vertical(id="ledger"):
                yield DataTable(id="ledger-table", cursor_type="row", zebra_stripes=True)
            with Vertical(id="totals-view"):
                yield Static("", id="group-title")
                yield DataTable(id="group-table", cursor_type="row")
            with Vertical(id="chart-view"):
                yield Static("", id="chart")

    def on_mount(self) -> None:
        super().on_mount()
        now_table = self.query_one("#now-table", DataTable)
        for key, label in NOW_COLUMNS:
            now_table.add_column(_(label), key=key)
        ledger = self.query_one("#ledger-table", DataTable)
        for key, label in LEDGER_COLUMNS:
            ledger.add_column(_(label), key=key)
        group = self.query_one("#group-table", DataTable)
        for key, label in GROUP_COLUMNS:
            group.add_column(_(label), key=key)
        self.grouping = "day"
        self._cells: dict[tuple[str, str], str | Text] = {}
        self.reload()
        self.set_interval(1.0, self.tick)

    # -- data ---------------------------------------------------------------------------------

    def reload(self) -> None:
        store = self.gapp.store
        self._instances: list[Instance] = store.instances_sync()
        self._leases = {le.instance_id: le for le in store.leases_sync()}
        self._ledger: list[LedgerEntry] = store.ledger_sync()
        self._fill_now()
        self._fill_ledger()
        self._fill_groups()
        self._fill_chart()
        self.tick()

    def _now_cells(self, inst: Instance) -> dict[str, str | Text]:
        now = self.gapp.now()
        cost = instance_cost(inst, self._leases.get(inst.id), now)
        cur = inst.billing.currency
        release = format_remaining(
            (cost.release_at - now).total_seconds() if cost.release_at else None)
        return {
            "name": Text(fit_name(inst.name, LABEL_CELLS)),
            "state": status_text(cost.billing_state),
            "rate": format_money(cost.rate, cur),
            "compute": format_money(cost.compute, cur),
            "storage": format_money(cost.storage, cur),
            "accrued": format_money(cost.accrued, cur),
            "release": release if cost.release_at else "⚠ " + _("no timer"),
            "projected": format_money(cost.projected, cur) if cost.projected is not None else "-",
            "gpu": Text(f"{inst.gpu_count}× {short_gpu(inst.gpu)}"),
        }

    def _fill_now(self) -> None:
        table = self.query_one("#now-table", DataTable)
        live = {i.id: i for i in self._instances if i.status.live}
        for row_key in list(table.rows):
            if row_key.value not in live:
                table.remove_row(row_key)
                for col, _label in NOW_COLUMNS:
                    self._cells.pop((str(row_key.value), col), None)
        for iid, inst in live.items():
            cells = self._now_cells(inst)
            if iid not in {k.value for k in table.rows}:
                table.add_row(*(cells[k] for k, _label in NOW_COLUMNS), key=iid)
                self._cells.update({(iid, k): v for k, v in cells.items()})
        self.query_one("#now-empty").display = not live

    def tick(self) -> None:
        """Once a second: only the cells whose text changed are redrawn."""
        table = self.query_one("#now-table", DataTable)
        for inst in self._instances:
            if not inst.status.live or inst.id not in {k.value for k in table.rows}:
                continue
            for key, value in self._now_cells(inst).items():
                if self._cells.get((inst.id, key)) != value:
                    self._cells[(inst.id, key)] = value
                    table.update_cell(inst.id, key, value, update_width=True)
        now = self.gapp.now()
        budget = self.gapp.config.budget
        bc = budget.currency  # caps are in one currency and count only what bills in it
        t = totals(self._instances, self._ledger, now, bc)
        caps = []
        if budget.daily is not None:
            caps.append(_("day cap {cap} ({share})").format(
                cap=format_money(budget.daily, bc), share=_pct(t.today, budget.daily)))
        if budget.monthly is not None:
            caps.append(_("month cap {cap} ({share})").format(
                cap=format_money(budget.monthly, bc), share=_pct(t.month, budget.monthly)))
        # one line per currency in use: ¥ and $ are never added together; the rate and the live
        # cost add up as the rows above read (each rounded once)
        live = [i for i in self._instances if i.status.live]
        lines = []
        for cur, c in totals_by_currency(self._instances, self._ledger, now).items():
            mine = [instance_cost(i, self._leases.get(i.id), now) for i in live
                    if i.billing.currency == cur]
            rate = sum_as_shown(x.rate for x in mine)
            accrued = sum_as_shown(x.accrued for x in mine)
            lines.append(_("[b]{rate}/h[/b] now · live {live} · today [b]{today}[/b] · this "
                           "month [b]{month}[/b]").format(
                rate=format_money(rate, cur), live=format_money(accrued, cur),
                today=format_money(c.today, cur), month=format_money(c.month, cur)))
        text = "\n".join(lines)
        text += "\n" + (" · ".join(caps) + " [dim]" + _("(B: change · x: CSV)") + "[/dim]"
                         if caps else
                         "[dim]" + _("no budget caps: B sets them · x exports CSV (or gputui "
                                     "costs --csv)") + "[/dim]")
        self.query_one("#totals", Static).update(text)

    def _fill_ledger(self) -> None:
        table = self.query_one("#ledger-table", DataTable)
        present = {k.value for k in table.rows}
        for e in reversed(self._ledger):  # newest first
            if e.instance_id in present:
                continue
            cells = {
                "ended": e.ended_at.astimezone().strftime("%m-%d %H:%M"), "name": Text(fit_name(e.name, LABEL_CELLS)),
                "gpu": Text(f"{e.gpu_count}× {short_gpu(e.gpu)}"),
                "hours": f"{e.running_seconds / 3600:.2f}",
                "total": format_money(e.total, e.currency),
                "reason": end_reason_text(e.end_reason),
                "compute": format_money(e.compute_cost, e.currency),
                "storage": format_money(e.storage_cost, e.currency), "provider": e.provider,
            }
            table.add_row(*(cells[k] for k, _label in LEDGER_COLUMNS), key=e.instance_id)
        if table.row_count and not present:
            table.move_cursor(row=0)

    def _fill_groups(self) -> None:
        table = self.query_one("#group-table", DataTable)
        table.clear()  # a regrouping is a new table; not redrawn on ticks
        cur = (currencies([], self._ledger) or ["USD"])[0]
        rows = group_ledger(self._ledger, self.grouping, cur)
        top = max((r[1] for r in rows), default=Decimal(0))
        for key, total, count in rows:
            table.add_row(Text(key), format_money(total, cur), str(count), bar(total, top, 20),
                          key=key)
        self.query_one("#group-title", Static).update(
            _("Ended instances by [b]{grouping}[/b] (b: group by {choices})").format(
                grouping=_(GROUPING_LABELS[self.grouping]),
                choices=" / ".join(_(GROUPING_LABELS[g]) for g in GROUPINGS)))

    def _fill_chart(self) -> None:
        cur = (currencies(self._instances, self._ledger) or ["USD"])[0]
        series = daily_series(self._ledger, self._instances, self.gapp.now(), currency=cur)
        top = max((v for _day, v in series), default=Decimal(0))
        lines = [_("[b]Spend per day, last 14 days[/b] (running instances included)"), ""]
        for day, value in series:
            lines.append(f"{day} {bar(value, top, 40)} {format_money(value, cur)}")
        self.query_one("#chart", Static).update("\n".join(lines))

    # -- actions -----------------------------------------------------------------------------------

    def action_view(self, name: str) -> None:
        target = {"now": "now", "ledger": "ledger", "totals": "totals-view", "chart": "chart-view"}[name]
        self.query_one(ContentSwitcher).current = target
        if name == "chart":
            self._fill_chart()

    def action_group(self) -> None:
        self.grouping = GROUPINGS[(GROUPINGS.index(self.grouping) + 1) % len(GROUPINGS)]
        self._fill_groups()
        self.action_view("totals")

    def on_store_event(self, message: StoreEvent) -> None:
        if isinstance(message.event, InstanceChanged | LeaseChanged | LedgerChanged):
            self.reload()


    def action_export(self) -> None:
        """The ledger and what is running, as `gputui costs --csv` writes it, to a file."""
        from gputui.config import state_dir, write_private
        from gputui.services.costs import export_rows, to_csv

        now = self.gapp.now()
        rows = export_rows(self._ledger, self._instances, now)
        path = state_dir() / "exports" / f"costs-{now.astimezone():%Y%m%d-%H%M%S}.csv"
        try:
            write_private(path, to_csv(rows).encode())
        except OSError as exc:
            self.notify(_("could not export: {error}").format(error=exc), severity="error")
            return
        self.notify(ngettext("Exported {n} row to {path} (the same as gputui costs --csv)",
                             "Exported {n} rows to {path} (the same as gputui costs --csv)",
                             len(rows)).format(n=len(rows), path=path),
                    title=_("Exported"), timeout=10)

    def action_budgets(self) -> None:
        from gputui.ui.dialogs import BudgetDialog

        budget = self.gapp.config.budget
        self.app.push_screen(BudgetDialog(budget, budget.currency), self._budgets_chosen)

    def _budgets_chosen(self, values: dict | None) -> None:
        if values is None:
            return
        from gputui.config import ConfigError, set_budget

        try:
            cfg = set_budget(values["daily"], values["monthly"], values["per_instance"],
                             bool(values["release_at_cap"]))
        except (ConfigError, OSError) as exc:
            self.notify(_("budget not saved: {error}").format(error=exc), severity="error",
                        timeout=10)
            return
        self.gapp.config.budget = cfg.budget
        self.notify(_("Budget caps saved to config.toml"), timeout=4)
        self.tick()


def _pct(spent: Decimal, cap: Decimal) -> str:
    if cap <= 0:
        return "-"
    return f"{spent / cap * 100:.0f} %"
