"""New instance: provider, offer, GPUs, image, disk, label, and the release timer — with the cost
up to the release time shown before anything is rented. Where a provider says when a card is sold
out (AutoDL), "Wait up to" keeps trying for that long (services/waiting.py, as `create --wait`)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Checkbox, Input, Label, Select, Static

from gputui.format import default_label, format_money, format_remaining, gpu_name
from gputui.i18n import N_, _, ngettext, shown, truncate_cells
from gputui.models import InstanceStatus, Lease, Offer
from gputui.services.waiting import MAX_WAIT, MIN_BACKOFF_S, WaitPlan, command_backoff
from gputui.ui.base import BaseScreen
from gputui.ui.dialogs import ConfirmScreen, parse_release, passed_clock_time
from gputui.ui.widgets import Note, TickBox

COUNTS = [1, 2, 4, 8]
NODES = [1, 2, 3, 4, 8]  # a Slurm allocation's --nodes (the GPUs are split over them)
# what services.create reports (English words), as the progress line shows them
STEPS = {"requested": N_("requested"), "booting": N_("booting"), "running": N_("running"),
         "arming the release timer": N_("arming the release timer")}


def offer_price(offer: Offer) -> str:
    """An offer's price per GPU-hour in its own currency (AutoDL's in yuan), or "price on
    creation" where the provider's list has none (AutoDL's Pro API: the instance's snapshot
    has it)."""
    if not offer.price_known:
        return _("price on creation")
    return format_money(offer.price_per_gpu_hour, offer.billing.currency) + "/GPU·h"


class CreateScreen(BaseScreen):
    TITLE = N_("New instance")
    BINDINGS = [
        Binding("ctrl+s", "create", N_("Create")),
        Binding("escape", "back", N_("Back"), show=False),  # while waiting: stop waiting
    ]
    DEFAULT_CSS = """
    CreateScreen #form { padding: 0 1; height: auto; max-height: 60%; }
    /* one line a field, so that at 80x24 the summary, errors and progress below stay in view */
    CreateScreen .row { height: 1; }
    CreateScreen .row Label { width: 12; }
    /* the focused field: its label reversed and a marker (visible in 16 colours and without) */
    CreateScreen .row:focus-within Label { text-style: reverse bold; }
    CreateScreen .row:focus-within { background: $boost; }
    CreateScreen .row Input, CreateScreen .row Select { width: 1fr; }
    CreateScreen #idle-util, CreateScreen #idle-minutes { width: 10; }
    CreateScreen #slurm-row { display: none; }
    CreateScreen #slurm-row.shown { display: block; }
    CreateScreen #nodes-label { width: auto; padding: 0 1; }
    CreateScreen #slurm-row #nodes { width: 8; }
    CreateScreen #idle-note { width: 1fr; color: $text-muted; padding-left: 1; }
    CreateScreen #no-timer { width: auto; height: 1; border: none; padding: 0; margin-left: 1; }
    CreateScreen #outcome { height: auto; max-height: 60%; border-top: solid $primary; }
    CreateScreen #summary { padding: 0 1; height: auto; }
    CreateScreen #error { color: $error; text-style: bold; padding: 0 1; height: auto; }
    CreateScreen #progress { color: $success; text-style: bold; padding: 0 1; height: auto; }
    CreateScreen #wait { width: 16; }
    CreateScreen #wait-note { width: 1fr; color: $text-muted; padding-left: 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.offers: list[Offer] = []
        self.busy = False
        self.waiting: WaitPlan | None = None  # while a "Wait up to" rental waits for a card
        self._next_try: float | None = None  # (monotonic) when the next try is made
        self._waited_gpu = ""

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="form"):
            with Horizontal(classes="row"):
                yield Label(_("Provider"))
                providers = [(_(p.label) if p.label else n, n) for n, p in self.gapp.services.providers.items()
                             if p.capabilities.rentable]
                yield Select(providers, id="provider", compact=True, prompt=_("no provider"),
                             value=providers[0][1] if providers else Select.NULL)
            with Horizontal(classes="row"):
                yield Label("GPU")
                yield Select([], id="offer", compact=True, prompt=_("choose a GPU"))
            with Horizontal(classes="row"):
                yield Label(_("GPUs"))
                yield Select([(str(c), c) for c in COUNTS], id="count", value=1,
                             compact=True, allow_blank=False)
            with Horizontal(classes="row", id="slurm-row"):  # slurm only: which cluster, nodes
                yield Label(_("Cluster"))
                yield Select([], id="cluster", compact=True, prompt=_("no cluster"))
                yield Label(_("Nodes"), id="nodes-label")
                yield Select([(str(n), n) for n in NODES], id="nodes", value=1, compact=True,
                             allow_blank=False)
            with Horizontal(classes="row"):
                yield Label(_("Image"))
                yield Select([], id="image", compact=True, prompt=_("choose a GPU first"))
            with Horizontal(classes="row"):
                yield Label(_("Disk GB"))
                yield Input("50", id="disk", compact=True, type="number")
            with Horizontal(classes="row"):
                yield Label(_("Task label"))
                yield Input(placeholder=_("e.g. qwen-lora"), id="name", compact=True, max_length=64)
            with Horizontal(classes="row"):
                yield Label(_("Release in"))
                yield Input(id="release", compact=True, placeholder=_("2h, 90m or 18:30"))
                yield TickBox(_("No timer"), id="no-timer", compact=True)
            with Horizontal(classes="row"):
                yield Label(_("Idle off"))
                yield Input(id="idle-util", compact=True, placeholder=_("util %"), type="number")
                yield Input(id="idle-minutes", compact=True, placeholder=_("minutes"), type="integer")
                # (the "%" goes in as a value: "% f" would read as a printf placeholder)
                yield Static(_("optional: all GPUs under util {pct} for N min").format(pct="%"),
                             id="idle-note")
            yield from self.compose_wait_row()
        # outside the scrolling form: what a key did is always in view
        with VerticalScroll(id="outcome", can_focus=False):
            yield Note("", id="error")
            yield Note("", id="progress")
            yield Static("", id="summary")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#release", Input).value = self.gapp.config.lease.default_release
        self.load_offers()
        self.show_wait_row()
        self.query_one("#offer", Select).focus()

    @on(Select.Changed, "#provider")
    def provider_changed(self) -> None:
        self.load_offers()
        self.show_wait_row()

    @work(exclusive=True, group="offers", exit_on_error=False)
    async def load_offers(self) -> None:
        name = self.query_one("#provider", Select).value
        if not isinstance(name, str):
            return
        try:
            self.offers = await self.gapp.services.offers(name)
        except Exception as exc:
            self.query_one("#error", Static).update(
                _("cannot list offers: {error}").format(error=escape(str(shown(exc)))))
            return
        self._fill_clusters()
        self._fill_offer_options()
        if self._preselect:
            self.call_after_refresh(self.preselect, self._preselect)
        self.update_summary()

    def _fill_offer_options(self) -> None:
        select = self.query_one("#offer", Select)
        select.set_options([
            (f"{gpu_name(o.gpu)} · "
             + (f"{o.vram_gb:g} GiB · " if o.vram_gb is not None else "")  # (a Slurm gres type)
             + offer_price(o)
             + (" · " + _("derived") if (o.source or "").startswith("derived") else "")
             + ("" if o.available else " · " + _("sold out")), o.offer_id)
            for o in self._cluster_offers()
        ])

    # -- slurm: the cluster and the nodes -------------------------------------------------------

    def _is_slurm(self) -> bool:
        return self.provider_name() == "slurm"

    def _fill_clusters(self) -> None:
        """A Slurm provider's clusters (its offers' regions) in the Cluster field, shown only
        for it; the GPU field then lists the chosen cluster's offers."""
        row = self.query_one("#slurm-row")
        row.set_class(self._is_slurm(), "shown")
        if not self._is_slurm():
            return
        clusters = sorted({o.region for o in self.offers if o.region})
        select = self.query_one("#cluster", Select)
        current = select.value
        with select.prevent(Select.Changed):
            select.set_options([(c, c) for c in clusters])
            if clusters:
                select.value = current if current in clusters else clusters[0]

    def _cluster_offers(self) -> list[Offer]:
        if not self._is_slurm():
            return self.offers
        cluster = self.query_one("#cluster", Select).value
        return [o for o in self.offers if o.region == cluster]

    def _slurm_nodes(self) -> int:
        value = self.query_one("#nodes", Select).value
        return value if self._is_slurm() and isinstance(value, int) and value > 0 else 1

    @on(Select.Changed, "#cluster")
    def cluster_changed(self) -> None:
        self._fill_offer_options()
        self.update_summary()

    _preselect: str | None = None

    _preselect_count: int | None = None

    def preselect(self, gpu_name: str, count: int | None = None) -> None:
        """Open with a card (and the GPU count the catalog's fit or cost view chose); applied
        once the offers are in. The rest of the form starts from the defaults."""
        from gputui.catalog.match import catalog_aliases, match_gpu

        if count is not None:
            self._preselect_count = count
        self._preselect = gpu_name
        if not self.offers:
            return
        names = [o.gpu for o in self.offers]
        try:
            name = match_gpu(gpu_name, names, aliases=catalog_aliases(names))
        except ValueError:
            self._preselect = None
            self.query_one("#error", Static).update(
                _("{gpu} is not offered by this provider").format(gpu=escape(gpu_name)))
            return
        offer = next(o for o in self.offers if o.gpu == name)
        self.reset_form()
        self.query_one("#offer", Select).value = offer.offer_id
        self._preselect = None
        if self._preselect_count:
            self.call_after_refresh(self._set_count, self._preselect_count)
            self._preselect_count = None

    def counts(self, *also: int) -> list[int]:
        """The GPU counts to offer: the usual sizes up to the provider's most (AutoDL: 1–4)
        and any size its offer or the catalog asked for within that."""
        most = self.gapp.services.capabilities(self.provider_name()).max_gpus
        usual = COUNTS if most >= max(COUNTS) else list(range(1, most + 1))
        return sorted({*usual, *(c for c in also if 1 <= c <= most)})

    def provider_name(self) -> str:
        value = self.query_one("#provider", Select).value
        return value if isinstance(value, str) else ""

    def _set_count(self, count: int) -> None:
        select = self.query_one("#count", Select)
        offer = self.selected_offer()
        counts = self.counts(count, *([offer.gpu_count] if offer else []))
        select.set_options([(str(c), c) for c in counts])
        select.value = count if count in counts else counts[-1]
        self.update_summary()

    def reset_form(self) -> None:
        """Back to the defaults: after a rental, and when the catalog sends a card."""
        self.query_one("#release", Input).value = self.gapp.config.lease.default_release
        self.query_one("#no-timer", Checkbox).value = False
        self.query_one("#disk", Input).value = "50"
        self.query_one("#name", Input).value = ""
        for sel in ("#idle-util", "#idle-minutes", "#wait"):
            self.query_one(sel, Input).value = ""
        self.query_one("#error", Static).update("")

    def selected_offer(self) -> Offer | None:
        value = self.query_one("#offer", Select).value
        return next((o for o in self.offers if o.offer_id == value), None)

    @on(Select.Changed, "#offer")
    def offer_changed(self) -> None:
        offer = self.selected_offer()
        if offer is not None:
            counts = self.counts(offer.gpu_count)
            count = self.query_one("#count", Select)
            count.set_options([(str(c), c) for c in counts])
            count.value = offer.gpu_count  # the offer's own size (Lambda sells fixed sizes)
        image = self.query_one("#image", Select)
        images = offer.images if offer else []
        image.set_options([(i, i) for i in images])
        if images:
            image.value = images[0]
        if offer is not None:
            self.load_images(offer)
        self.update_summary()

    @work(exclusive=True, group="images", exit_on_error=False)
    async def load_images(self, offer: Offer) -> None:
        """The provider's images by readable name (AutoDL: the account's private images and the
        base images gputui knows — `gputui images`); the offer's own ids if it has none or
        they cannot be read."""
        from gputui.services.images import list_images

        try:
            found = await list_images(self.gapp.services, offer.provider)
        except Exception as exc:
            self.query_one("#error", Static).update(
                _("cannot list images: {error}").format(error=escape(str(shown(exc)))))
            return
        usable = [i for i in found if i.state == "done"]
        if not usable or self.selected_offer() is not offer:
            return
        options = [(truncate_cells(i.readable + ("" if i.kind == "base" else " · " + _("private")),
                                   60), i.id) for i in usable]
        ids = [i.id for i in usable]
        extra = [(i, i) for i in offer.images if i not in ids]
        select = self.query_one("#image", Select)
        current = select.value
        select.set_options(options + extra)
        select.value = current if current in ids or current in offer.images else (
            offer.images[0] if offer.images else ids[0])

    @on(Select.Changed, "#count")
    @on(Input.Changed)
    @on(Checkbox.Changed)
    def inputs_changed(self) -> None:
        self.query_one("#release", Input).disabled = self.query_one("#no-timer", Checkbox).value
        self.update_summary()

    def _release_at(self, now: datetime) -> datetime | None:
        if self.query_one("#no-timer", Checkbox).value:
            return None
        return parse_release(self.query_one("#release", Input).value, now)

    def update_summary(self) -> None:
        summary = self.query_one("#summary", Static)
        error = self.query_one("#error", Static)
        offer = self.selected_offer()
        if offer is None:
            summary.update(_("Choose a GPU to see the price and what the job will cost."))
            return
        count = _count(self.query_one("#count", Select).value)
        rule = offer.billing.model_copy(update={"price_per_hour": offer.price_per_gpu_hour * count})
        now = self.gapp.now()
        known = offer.price_known
        lines = [
            (_("[b]{price}/h[/b] for {count}× {gpu}").format(
                price=format_money(rule.price_per_hour, rule.currency), count=count,
                gpu=escape(gpu_name(offer.gpu))) if known else
             _("[b]price on creation[/b] for {count}× {gpu}").format(count=count,
                                                                     gpu=escape(gpu_name(offer.gpu))))
            + " · " + _(BILLED[rule.granularity.value])
            + (_(", {seconds}s minimum").format(seconds=rule.minimum_seconds)
               if rule.minimum_seconds else "")
            + (" · " + _("storage {price}/GB-month").format(
                price=format_money(rule.storage_per_gb_month, rule.currency))
               if rule.storage_per_gb_month else ""),
        ]
        if offer.source and known:  # (unknown: the line below says so in the interface's words)
            source = truncate_cells(offer.source, 60)
            lines.append(_("[dim]list price from {source}{date}[/dim]").format(
                source=escape(source), date=f" ({offer.as_of})" if offer.as_of else ""))
        problems: list[str] = []
        try:
            release_at = self._release_at(now)
        except ValueError as exc:
            error.update(_("Release: {problem}").format(problem=escape(str(shown(exc)))))
            summary.update("\n".join(lines))
            return
        try:
            disk = self._disk()
        except ValueError as exc:
            problems.append(str(shown(exc)))
            disk = None
        if release_at is None:
            lines.append(_("[b reverse] NO TIMER [/] bills until you release it by hand"))
        else:
            passed = passed_clock_time(self.query_one("#release", Input).value, release_at, now)
            if passed:
                problems.append(_("Release: {problem}").format(problem=passed) + ".")
            seconds = (release_at - now).total_seconds()
            if not known:
                lines.append(_("Released at {when} (in {left}) · cost unknown until it is "
                               "created (no price is known for it yet)").format(
                    when=_weekday_time(release_at), left=format_remaining(seconds)))
            elif disk is None:
                lines.append(_("Released at {when} (in {left}) · fix the disk size for a "
                               "cost").format(when=_weekday_time(release_at),
                                              left=format_remaining(seconds)))
            else:
                projected = rule.compute_cost(seconds) + rule.storage_cost(disk, seconds)
                lines.append(
                    _("Released at {when} (in {left}) · projected cost [b]{cost}[/b]").format(
                        when=_weekday_time(release_at), left=format_remaining(seconds),
                        cost=format_money(projected, rule.currency))
                )
        try:
            limit = self.wait_limit()
        except ValueError as exc:
            problems.append(str(shown(exc)))
            limit = None
        if limit is not None:
            lines.append(_("If it is sold out: tries again for up to {limit}, at least {gap} s "
                           "apart; Esc stops waiting").format(
                limit=format_remaining(limit.total_seconds()), gap=f"{MIN_BACKOFF_S:.0f}"))
        error.update(escape("\n".join(problems)))
        summary.update("\n".join(lines))

    def _default_name(self, offer: Offer) -> str:
        """The card's short name, numbered when that is taken: 4090, 4090-2, ..."""
        return self.gapp.services.free_name(default_label(offer.gpu))

    def _disk(self) -> float:
        """The disk size typed, or ValueError with the sentence to show."""
        text = self.query_one("#disk", Input).value.strip()
        try:
            disk = float(text)
        except ValueError:
            raise ValueError(_("Disk: give a size in GB, between 1 and 100000.")) from None
        if not 1 <= disk <= 100_000:
            raise ValueError(_("Disk: {size} GB is not a size; give between 1 and 100000 "
                               "GB.").format(size=text))
        return disk

    # -- creating -----------------------------------------------------------------------------------

    def action_create(self) -> None:
        if self.busy:
            return
        error = self.query_one("#error", Static)
        offer = self.selected_offer()
        if offer is None:
            error.update(_("Choose a GPU first."))
            return
        try:
            release_at = self._release_at(self.gapp.now())
        except ValueError as exc:
            error.update(_("Release: {problem}").format(problem=escape(str(shown(exc)))))
            return
        util_text = self.query_one("#idle-util", Input).value.strip()
        minutes_text = self.query_one("#idle-minutes", Input).value.strip()
        idle_util = idle_minutes = None
        if util_text or minutes_text:
            try:
                idle_util, idle_minutes = float(util_text), int(minutes_text)
                if not (0 < idle_util <= 100 and 1 <= idle_minutes <= 1440):
                    raise ValueError
            except ValueError:
                error.update(_("Idle off: give both a utilisation (1-100 %) and minutes "
                               "(1-1440)."))
                return
        try:
            disk = self._disk()
            limit = self.wait_limit()
        except ValueError as exc:
            error.update(escape(str(shown(exc))))
            return
        if limit is not None:  # (the row is there only where the provider can say "sold out")
            lease = Lease(instance_id="pending", release_at=release_at,
                          no_timer_confirmed=release_at is None,
                          idle_util_pct=idle_util, idle_minutes=idle_minutes)
            relative = release_at is not None and ":" not in self.query_one("#release",
                                                                            Input).value
            span = release_at - self.gapp.now() if relative and release_at else None
            if release_at is None:
                def confirmed_waiting(yes: bool | None) -> None:
                    if yes:
                        self.rent_waiting(offer, lease, disk, limit, None)

                self.app.push_screen(ConfirmScreen(
                    _("[b]No release timer[/b]\n\nThis instance will bill until you release it "
                      "by hand. It will carry a warning badge for as long as it runs."),
                    _("Rent without a timer"), _("Go back")), confirmed_waiting)
                return
            self.rent_waiting(offer, lease, disk, limit, span)
            return
        lease = Lease(instance_id="pending", release_at=release_at,
                      no_timer_confirmed=release_at is None,
                      idle_util_pct=idle_util, idle_minutes=idle_minutes)
        if release_at is None:
            def confirmed(yes: bool | None) -> None:
                if yes:
                    self.rent(offer, lease, disk)

            self.app.push_screen(ConfirmScreen(
                _("[b]No release timer[/b]\n\nThis instance will bill until you release it by "
                  "hand. It will carry a warning badge for as long as it runs."),
                _("Rent without a timer"), _("Go back")), confirmed)
            return
        passed = passed_clock_time(self.query_one("#release", Input).value, release_at,
                                   self.gapp.now())
        if passed:
            def tomorrow(yes: bool | None) -> None:
                if yes:
                    self.rent(offer, lease, disk)

            self.app.push_screen(ConfirmScreen(
                _("[b]Release tomorrow?[/b]") + f"\n\n{escape(passed)}.",
                _("Rent until tomorrow"), _("Go back")), tomorrow)
            return
        self.rent(offer, lease, disk)

    @work(exclusive=True, group="create", exit_on_error=False)
    async def rent(self, offer: Offer, lease: Lease, disk: float) -> None:
        from gputui.services.hub import CreateRequest

        self.busy = True
        progress = self.query_one("#progress", Static)
        error = self.query_one("#error", Static)
        steps: list[str] = []

        def line() -> str:
            return " → ".join(_(STEPS.get(s, s)) for s in steps)

        def say(step: str) -> None:
            steps.append(step)
            progress.update(line() + (" …" if step != "running" else " ✓"))

        name = self.query_one("#name", Input).value.strip() or self._default_name(offer)
        count = _count(self.query_one("#count", Select).value)
        image = self.query_one("#image", Select).value
        try:
            request = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=name,
                                    disk_gb=disk, image=image if isinstance(image, str) else None,
                                    nodes=self._slurm_nodes())
            inst = await self.gapp.services.create(offer.provider, offer, request, lease=lease,
                                                   progress=say)
            say("arming the release timer")
            await self.gapp.leases.arm(inst)
            steps.pop()  # armed: back to "… → running ✓" (was "… → running → running ✓")
            progress.update(line() + " ✓")
        except Exception as exc:
            error.update(_("Could not create: {error}").format(error=escape(str(shown(exc)))))
            self.busy = False
            return
        self.busy = False
        self.notify(_("{name} is running: {count}× {gpu}").format(
            name=inst.name, count=count, gpu=gpu_name(offer.gpu)), title=_("Created"))
        self.reset_form()
        self.query_one("#progress", Static).update("")
        self.app.call_later(self.gapp.action_goto, "home")

    # -- waiting for a sold-out card ("Wait up to", where the provider says "sold out") ---------

    #: the gap after each refused try (tests make it short; never under 20 s here otherwise),
    #: and the clock the time left is counted on (a snapshot stops it)
    wait_backoff = staticmethod(command_backoff)
    wait_clock = staticmethod(time.monotonic)

    def compose_wait_row(self) -> ComposeResult:
        with Horizontal(classes="row", id="wait-row"):
            yield Label(_("Wait up to"))
            yield Input(id="wait", compact=True, placeholder=_("e.g. 2h"))
            yield Static(_("optional: if the card is sold out, keep trying this long"),
                         id="wait-note")

    def show_wait_row(self) -> None:
        """The row only where a create refused for stock says so (AutoDL)."""
        can = self.gapp.services.capabilities(self.provider_name()).sold_out_refusals
        self.query_one("#wait-row").display = can
        if not can:
            self.query_one("#wait", Input).value = ""

    def wait_limit(self) -> timedelta | None:
        """How long to wait for a sold-out card (None: no waiting), or ValueError with the
        sentence to show."""
        from gputui.config import parse_duration

        if not self.query_one("#wait-row").display:
            return None
        text = self.query_one("#wait", Input).value.strip()
        if not text:
            return None
        try:
            limit = parse_duration(text)
        except ValueError as exc:
            raise ValueError(_("Wait up to: {problem}").format(problem=shown(exc))) from None
        if not timedelta(seconds=1) <= limit <= MAX_WAIT:
            raise ValueError(_("Wait up to: wait between 1 s and {days} days, not {value}")
                             .format(days=MAX_WAIT.days, value=repr(text)))
        return limit

    def action_back(self) -> None:
        """Esc: while waiting for a card, stop waiting (nothing is rented); else back Home."""
        if self.waiting is not None:
            self.workers.cancel_group(self, "create")
            return
        self.gapp.action_goto("home")

    def _wait_line(self) -> None:
        """The tries so far and the time left, each second while waiting."""
        plan = self.waiting
        if plan is None or plan.started is None:
            return
        left = format_remaining(max(0.0, plan.left()))
        now = plan.clock()
        if self._next_try is not None and self._next_try > now:
            text = _("No {gpu} free yet: {tries} · next try in {seconds} s · {left} left · "
                     "Esc stops waiting").format(
                gpu=escape(self._waited_gpu), tries=_tries(plan.tries),
                seconds=f"{self._next_try - now:.0f}", left=left)
        else:
            text = _("Asking for a {gpu}: try {n} · {left} left · Esc stops waiting").format(
                gpu=escape(self._waited_gpu), n=plan.tries, left=left)
        self.query_one("#progress", Static).update(text)

    def _stopped_waiting(self, tries: int, name: str) -> str:
        """What Esc did: its record ended as failed (stopped between tries: nothing was
        rented), or it is kept (stopped while the provider was asked: found by name later)."""
        mine = [i for i in self.gapp.services.store.instances_sync() if i.name == name]
        record = max(mine, key=lambda i: i.created_at, default=None)
        if record is None or record.status == InstanceStatus.FAILED:
            return _("Stopped waiting for a card after {tries}: nothing was rented.").format(
                tries=_tries(tries))
        return _("Stopped waiting during try {n}, while the provider was asked: Home lists "
                 "{name} until its answer is known (if it was made, it is rented).").format(
            n=tries, name=escape(name))

    @work(exclusive=True, group="create", exit_on_error=False)
    async def rent_waiting(self, offer: Offer, lease: Lease, disk: float, limit: timedelta,
                           span: timedelta | None) -> None:
        """Rent, and while the provider says the card is sold out, try again after the backoff
        until `limit` (each try a create that is refused or exists: never two). `span`: a
        relative release timer, counted from the try that rents."""
        from gputui.services.hub import CreateRequest
        from gputui.services.waiting import WaitExpired, create_waiting

        progress = self.query_one("#progress", Static)
        error = self.query_one("#error", Static)
        name = self.query_one("#name", Input).value.strip() or self._default_name(offer)
        count = _count(self.query_one("#count", Select).value)
        image = self.query_one("#image", Select).value

        async def sleep(delay: float) -> None:
            self._next_try = plan.clock() + delay
            self._wait_line()
            try:
                await asyncio.sleep(delay)
            finally:
                self._next_try = None
            self._wait_line()

        plan = WaitPlan(limit=limit, backoff=self.wait_backoff, sleep=sleep,
                        clock=self.wait_clock)
        steps: list[str] = []

        def say(step: str) -> None:
            if step in STEPS:  # the tries are told by the line each second
                steps.append(step)
                if step != "requested":
                    progress.update(" → ".join(_(STEPS[s]) for s in steps) + " …")

        self.busy, self.waiting, self._waited_gpu = True, plan, gpu_name(offer.gpu)
        error.update("")
        ticker = self.set_interval(1.0, self._wait_line)
        try:
            request = CreateRequest(offer_id=offer.offer_id, gpu_count=count, name=name,
                                    disk_gb=disk, image=image if isinstance(image, str) else None)
            try:
                inst = await create_waiting(self.gapp.services, offer.provider, offer, request,
                                            plan, lease=lease, keep_span=span, progress=say)
            finally:
                ticker.stop()
                self.waiting = None
            progress.update(" → ".join(_(STEPS[s]) for s in steps)
                            + " → " + _(STEPS["arming the release timer"]) + " …")
            await self.gapp.leases.arm(inst)
        except asyncio.CancelledError:
            self.busy = False
            progress.update("")
            error.update(self._stopped_waiting(plan.tries, name))
            raise
        except WaitExpired as exc:
            self.busy = False
            progress.update("")
            error.update(escape(str(shown(exc))))
            return
        except Exception as exc:
            self.busy = False
            progress.update("")
            error.update(_("Could not create: {error}").format(error=escape(str(shown(exc)))))
            return
        self.busy = False
        self.notify(_("{name} is running: {count}× {gpu}").format(
            name=inst.name, count=count, gpu=gpu_name(offer.gpu)), title=_("Created"))
        self.reset_form()
        progress.update("")
        self.app.call_later(self.gapp.action_goto, "home")


BILLED = {"second": N_("billed per second"), "minute": N_("billed per minute"),
          "hour": N_("billed per hour")}
# a weekday as the summary shows it (strftime's %a is the C locale's English)
WEEKDAYS = (N_("Mon"), N_("Tue"), N_("Wed"), N_("Thu"), N_("Fri"), N_("Sat"), N_("Sun"))


def _weekday_time(when: datetime) -> str:
    """'Sun 14:00' in the local time zone, the weekday in the interface language."""
    local = when.astimezone()
    return f"{_(WEEKDAYS[local.weekday()])} {local:%H:%M}"


def _tries(n: int) -> str:
    """"1 try" / "3 tries"."""
    return ngettext("{n} try", "{n} tries", n).format(n=n)


def _count(value: object) -> int:
    """The GPU count a Select holds (1 when it holds nothing)."""
    return value if isinstance(value, int) and value > 0 else 1
