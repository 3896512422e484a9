"""Home: the instances, their countdown to release, and what each has cost so far."""

from __future__ import annotations

from datetime import datetime

from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from gputui.models import Instance, Lease
from gputui.services.views import format_money, format_remaining
from gputui.store import InstanceChanged, LeaseChanged, LinkChanged
from gputui.ui.base import BaseScreen, StoreEvent

EMPTY_HINT = (
    "No instances yet. Press [b]n[/b] to rent one (the sandbox needs no account), "
    "[b]g[/b] to compare GPUs, [b]?[/b] for every key."
)

COLUMNS = [
    ("name", "Name"),
    ("provider", "Provider"),
    ("gpu", "GPU"),
    ("status", "Status"),
    ("link", "Link"),
    ("release", "Release in"),
    ("rate", "$/h"),
    ("cost", "Cost"),
]


class HomeScreen(BaseScreen):
    TITLE = "Instances"
    DEFAULT_CSS = """
    HomeScreen #hint { padding: 1 2; color: $text-muted; }
    HomeScreen DataTable { height: 1fr; }
    """

    def compose_body(self) -> ComposeResult:
        yield Static(EMPTY_HINT, id="hint")
        yield DataTable(id="instances", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self._instances: dict[str, Instance] = {}
        self._leases: dict[str, Lease] = {}
        self.reload()
        self.set_interval(1.0, self.tick)

    def reload(self) -> None:
        store = self.gapp.store
        self._instances = {i.id: i for i in store.instances_sync(live_only=True)}
        self._leases = {lease.instance_id: lease for lease in store.leases_sync()}
        table = self.query_one(DataTable)
        for key in [k.value for k in list(table.rows)]:
            if key not in self._instances:
                table.remove_row(key)
        for inst in self._instances.values():
            self._put_row(inst)
        self.query_one("#hint").display = not self._instances

    def _cells(self, inst: Instance, now: datetime) -> dict[str, str]:
        lease = self._leases.get(inst.id)
        if lease is None or lease.state != "active":
            release = "-"
        elif lease.release_at is None:
            release = "⚠ no timer"
        else:
            release = format_remaining(lease.remaining(now))
        link, _detail = self.gapp.store.link(inst.id)
        provider = inst.provider + (" (sim)" if inst.provider == "sandbox" else "")
        return {
            "name": inst.name,
            "provider": provider,
            "gpu": f"{inst.gpu_count}× {inst.gpu}",
            "status": inst.status.value,
            "link": link.value if link.value != "unknown" else "-",
            "release": release,
            "rate": format_money(inst.billing.price_per_hour, inst.billing.currency),
            "cost": format_money(inst.accrued(now), inst.billing.currency),
        }

    def _put_row(self, inst: Instance) -> None:
        table = self.query_one(DataTable)
        cells = self._cells(inst, self.gapp.now())
        if inst.id in {k.value for k in table.rows}:
            for key, value in cells.items():
                table.update_cell(inst.id, key, value)
        else:
            table.add_row(*cells.values(), key=inst.id)

    def tick(self) -> None:
        table = self.query_one(DataTable)
        now = self.gapp.now()
        for inst in self._instances.values():
            cells = self._cells(inst, now)
            for key in ("release", "cost", "link"):
                table.update_cell(inst.id, key, cells[key])

    def on_store_event(self, message: StoreEvent) -> None:
        if isinstance(message.event, InstanceChanged | LeaseChanged | LinkChanged):
            self.reload()

    def selected_instance(self) -> Instance | None:
        table = self.query_one(DataTable)
        if not self._instances or table.cursor_row < 0:
            return None
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        return self._instances.get(key)
