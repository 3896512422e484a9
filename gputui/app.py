"""The Textual App: screens (one mode each), bindings, command palette, themes, the meter."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING

from textual import events, work
from textual.app import App, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

if TYPE_CHECKING:
    from gputui.config import Config
    from gputui.models import Instance
    from gputui.services.hub import Services
    from gputui.services.leases import LeaseService
    from gputui.services.telemetry import TelemetryService
    from gputui.store import SessionStore

# Nothing imported here loads pydantic: the first frame is drawn before the session (config,
# store, services) is opened; see GpuTuiApp.open_session.
from gputui.format import sum_as_shown
from gputui.i18n import N_, _, current_language, set_language, shown
from gputui.paths import config_dir, early_setting
from gputui.ui.base import BaseScreen
from gputui.ui.help import HelpScreen
from gputui.ui.theming import DEFAULT_THEME, load_themes
from gputui.ui.widgets import size_note

# (mode, key, label, "module:Class", what it is for) — one key each, and a palette entry each.
# Screens are imported when first shown, so the first frame does not wait for all of them.
# Labels and descriptions are English (N_): the footer, the help and the palette translate them.
SCREENS: list[tuple[str, str, str, str, str]] = [
    ("home", "h", N_("Home"), "gputui.ui.home:HomeScreen",
     N_("Instances, release countdowns and costs")),
    ("catalog", "g", N_("Catalog"), "gputui.ui.catalog:CatalogScreen",
     N_("Compare GPUs, check a model fits")),
    ("create", "n", N_("New"), "gputui.ui.create:CreateScreen",
     N_("Rent an instance with a release timer")),
    ("monitor", "m", N_("Monitor"), "gputui.ui.monitor:MonitorScreen",
     N_("Live GPU telemetry over SSH")),
    ("jobs", "j", N_("Jobs"), "gputui.ui.jobs:JobsScreen", N_("Queue runs, follow logs, pull results")),
    ("ollama", "o", N_("Ollama"), "gputui.ui.ollama:OllamaScreen",
     N_("Ollama models and GPU selection")),
    ("costs", "c", N_("Costs"), "gputui.ui.costs:CostsScreen", N_("Running cost meter, budgets, ledger")),
]

# The interface languages the palette offers, each named in its own language.
LANGUAGE_NAMES: dict[str, str] = {"zh": "中文", "en": "English"}

# Textual's own palette entries, in the language of now (the palette shows what this yields).
_TEXTUAL_COMMANDS: dict[str, str] = {
    "Quit": N_("Quit"),
    "Quit the application as soon as possible": N_("Quit the application as soon as possible"),
    "Keys": N_("Keys"),
    "Show help for the focused widget and a summary of available keys":
        N_("Show help for the focused widget and a summary of available keys"),
    "Hide the keys and widget help panel": N_("Hide the keys and widget help panel"),
    "Minimize": N_("Minimize"),
    "Minimize the widget and restore to normal size":
        N_("Minimize the widget and restore to normal size"),
    "Maximize": N_("Maximize"),
    "Maximize the focused widget": N_("Maximize the focused widget"),
    "Screenshot": N_("Screenshot"),
    "Save an SVG 'screenshot' of the current screen":
        N_("Save an SVG 'screenshot' of the current screen"),
}


def _utcnow() -> datetime:
    return datetime.now(UTC)


def screen_class(spec: str) -> type[BaseScreen]:
    import importlib

    module, _sep, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _factory(spec: str) -> Callable[[], Screen]:
    return lambda: screen_class(spec)()


class GpuTuiApp(App[int]):
    TITLE = "gputui"
    MODES = {mode: _factory(spec) for mode, _k, _l, spec, _w in SCREENS}
    DEFAULT_MODE = "home"
    BINDINGS = [
        *[Binding(key, f"goto('{mode}')", label) for mode, key, label, _s, _w in SCREENS],
        Binding("question_mark", "help", N_("Help"), key_display="?", show=False),
        Binding("ctrl+p", "command_palette", N_("Palette"), show=False),
        Binding("q", "quit", N_("Quit"), show=False),
    ]
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        *,
        config: Config | None = None,
        theme_name: str | None = None,
        store: SessionStore | None = None,
        services: Services | None = None,
        remember_theme: bool = True,
        background: bool = True,
    ) -> None:
        super().__init__()
        # The session: the settings, the store and the services on them. Given (tests, tools)
        # they are used as they are and the session opens before the first frame; the
        # console's own start gives none, draws its first frame, then opens it (reading and
        # validating config.toml, the state database) — see open_session.
        self._config = config
        self._store = store
        self._services = services
        self._open_after_first_frame = config is None and store is None and services is None
        self.session_open = False
        self._when_open: list[Callable[[], None]] = []
        self.startup_error: Exception | None = None  # a broken config.toml: the app exits 2
        self.focus_instance: str | None = None  # set by Home's Enter, read by the Monitor
        self._closed = False
        self._background = background  # tests of pure layout turn the lease clock off
        # the console's heap is frozen for the collector once drawn (not in tests, which make
        # many apps in one process: frozen objects are never freed)
        self.freeze_heap = background
        self._remember_theme = remember_theme
        self._requested_theme = theme_name
        self._live: list[Instance] = []
        self._wallet: tuple[Decimal, str] | None = None  # (balance, currency), read now and then
        self._unsubscribe: Callable[[], None] | None = None
        self.now: Callable[[], datetime] = _utcnow  # tests freeze the clock here
        self._choose_theme()

    # -- the session ----------------------------------------------------------------------------

    @property
    def config(self) -> Config:
        if self._config is None:
            from gputui.config import load_config

            self._config = load_config()
        return self._config

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            from gputui.paths import ensure_state_dir, state_path
            from gputui.store import SessionStore

            ensure_state_dir()
            self._store = SessionStore(state_path())
        return self._store

    @property
    def services(self) -> Services:
        if self._services is None:
            from gputui.services.hub import Services

            self._services = Services(self.store, self.config)  # the session: owns services
            self._services.actor = "console"  # notifications say who released an instance
        return self._services

    def when_open(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the session is open (now, where it is)."""
        if self.session_open:
            callback()
        else:
            self._when_open.append(callback)

    # -- start-up -------------------------------------------------------------------------------

    def _choose_theme(self) -> None:
        """Themes are registered and chosen before the first frame (no restyle after it)."""
        loaded = load_themes([config_dir() / "themes"])
        for theme in loaded.themes.values():
            self.register_theme(theme)
        self._theme_warnings = list(loaded.warnings)
        configured = (self._config.ui.theme if self._config is not None
                      else early_setting("ui", "theme"))
        if not isinstance(configured, str):
            configured = None  # a broken file: open_session reports it
        wanted = self._requested_theme or configured or DEFAULT_THEME
        if wanted not in self.available_themes:
            self._theme_warnings.append(_("unknown theme {name}; using {default}").format(
                name=repr(wanted), default=DEFAULT_THEME))
            wanted = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        self.theme = wanted
        self._theme_chosen = wanted

    def on_mount(self) -> None:
        # Store events are published on whichever thread changed the store (a worker thread
        # for `await store.put_instance(...)`): they reach the App on its own loop, and the
        # services they drive are made here, on that loop.
        self._app_loop = asyncio.get_running_loop()
        self._app_thread = threading.get_ident()
        if self._open_after_first_frame:
            self.call_after_refresh(self.open_session)
        else:
            self.open_session()

    def open_session(self) -> None:
        """Read the settings and the state, start the clocks, and let the screens fill in."""
        from gputui.errors import GputuiError

        try:
            self._config = self.config  # validated here: a broken file is one line, exit code 2
            self._services = self.services
        except GputuiError as exc:
            self.startup_error = exc
            self.exit(return_code=2)
            return
        for warning in self._theme_warnings:
            self.notify(warning, severity="warning", timeout=8)
        if self._requested_theme and self._remember_theme:
            self._save_theme(self._theme_chosen)
        self.session_open = True
        if self.freeze_heap:  # the console itself (tests make many apps in one process)
            self.collect_when_idle()
        if self._background:
            self.telemetry.set_background(not self._telemetry_shown)
        self._reload_live()
        self.call_after_refresh(self._after_first_frame)
        self._unsubscribe = self.store.subscribe(self._on_store_event)
        self.set_interval(1.0, self._tick)
        self.set_interval(2.0, self.store.poll_external)
        if self._background:
            from gputui.services.queuewatch import session_queue_watch

            session_queue_watch(self.services)  # a queue that ends anywhere is said
            self.lease_clock()
            if "autodl" in self.services.providers:  # an account is configured
                self.account_clock()
            # once the first frame is up, the other screens' code and the catalog's data are
            # read in the background, so a screen's first opening does not wait for them
            self.set_timer(0.5, self._preload)
        waiting, self._when_open = self._when_open, []
        for callback in waiting:
            callback()

    def _after_first_frame(self) -> None:
        self._first_frame = True
        self.refresh_meter()  # with what it left out of the first frame

    @work(exclusive=True, group="account", exit_on_error=False)
    async def account_clock(self) -> None:
        """The provider's wallet for the top bar's runway, read every minute."""
        import asyncio

        while True:
            try:
                wallet = await self.services.account("autodl")
                if wallet.get("balance") is not None:
                    self._wallet = (wallet["balance"], wallet["currency"])
            except Exception as exc:  # the bar keeps the last reading; say why once
                if self._wallet is None:
                    self.notify(_("account balance: {problem}").format(problem=exc),
                                severity="warning")
            await asyncio.sleep(60.0)

    @work(thread=True, group="preload", exit_on_error=False)
    def _preload(self) -> None:
        import importlib

        for _mode, _key, _label, spec, _what in SCREENS:
            importlib.import_module(spec.partition(":")[0])
        from gputui.catalog.prices import load_prices
        from gputui.catalog.specs import load_specs

        load_specs()
        load_prices()
        if self.freeze_heap:
            self.call_from_thread(self._freeze_heap)

    def _freeze_heap(self) -> None:
        """What start-up made lives as long as the app: leave it out of the garbage collector's
        full passes (each walked every Textual and pydantic object: pauses of 100-250 ms in the
        middle of a screen switch)."""
        gc.collect()
        gc.freeze()

    @work(exclusive=True, group="leases", exit_on_error=False)
    async def lease_clock(self) -> None:
        """Layer 3 of auto-release: overdue instances go at start, the rest at their deadline.
        Every 30 s the providers are asked too (a power-off on the instance shows up)."""
        ticks = 0
        said: str | None = None  # a failure is said once, not every second, until it changes
        while True:
            try:
                await self.leases.tick(refresh=ticks % 30 == 0)
                said = None
            except Exception as exc:  # keep the clock alive; say what went wrong
                if str(exc) != said:
                    said = str(exc)
                    self.notify(_("auto-release check failed: {problem}").format(problem=exc),
                                severity="error")
            ticks += 1
            await asyncio.sleep(1.0)

    @cached_property
    def leases(self) -> LeaseService:
        """The session's lease service (the session makes it once and closes it)."""
        from gputui.services.leases import session_leases

        return session_leases(self.services)

    @cached_property
    def telemetry(self) -> TelemetryService:
        """The session's live GPU streams (made when first needed, on the App's loop: no
        instance, no cost at start-up; the session closes them, before its links)."""
        from gputui.services.telemetry import session_telemetry

        service = session_telemetry(self.services)
        service.set_background(not self._telemetry_shown)
        return service

    _telemetry_shown = False

    def telemetry_in_view(self, shown: bool) -> None:
        """A screen came into view that does (or does not) draw the GPU streams: off screen
        they sample at TelemetryService.BACKGROUND_INTERVAL, not every second."""
        self._telemetry_shown = shown
        if "telemetry" in self.__dict__:
            self.telemetry.set_background(not shown)

    async def on_unmount(self) -> None:
        if self._closed:  # subclasses may call this again; once is enough
            return
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._services is not None:
            await self._services.close()  # its services too (telemetry, leases), then its links

    def _save_theme(self, name: str) -> None:
        from gputui.config import set_theme

        self.config.ui.theme = name
        try:
            set_theme(name)
        except OSError as exc:
            self.notify(_("could not remember the theme: {problem}").format(problem=exc),
                        severity="warning")

    def _on_store_event(self, event: object) -> None:
        if threading.get_ident() != self._app_thread:
            if not self._app_loop.is_closed():
                self._app_loop.call_soon_threadsafe(self._on_store_event, event)
            return
        from gputui.store import InstanceChanged, Notice

        if isinstance(event, InstanceChanged):
            self._reload_live()
        elif isinstance(event, Notice):
            self.notify(event.text, severity=event.severity,  # type: ignore[arg-type]
                        timeout=12 if event.bell else 6)
            if event.bell:
                self.bell()

    def _reload_live(self) -> None:
        self._live = self.store.instances_sync(live_only=True)
        if self._background and (self._live or "telemetry" in self.__dict__):
            self.telemetry.sync(self._live)  # starts and stops the instances' streams

    # -- the meter ------------------------------------------------------------------------------

    def meter(self, by: tuple[tuple[str, Decimal, Decimal], ...] | None = None,
              ) -> tuple[Decimal, Decimal, int]:
        """Rate and accrued in the first currency in use (USD first), and the live count."""
        if by is None:
            by = self.meter_by_currency()
        _cur, rate, accrued = by[0] if by else ("USD", Decimal(0), Decimal(0))
        return rate, accrued, len([i for i in self._live if i.status.billing_compute])

    def meter_by_currency(self) -> tuple[tuple[str, Decimal, Decimal], ...]:
        """(currency, rate per hour, accrued) for each currency in use, USD first."""
        now = self.now()
        billing = [i for i in self._live if i.status.live]
        # a currency shows while one of its instances bills compute: a stopped one alone is
        # "nothing billing", never "1 live ¥0.00/h"
        computing = {i.billing.currency for i in billing if i.status.billing_compute}
        billing = [i for i in billing if i.billing.currency in computing]
        out = []
        for cur in sorted({i.billing.currency for i in billing}, key=lambda c: (c != "USD", c)):
            mine = [i for i in billing if i.billing.currency == cur]
            # each the sum of the figures Home shows per row, so the bar adds up as read
            rate = sum_as_shown(i.billing.price_per_hour for i in mine if i.status.billing_compute)
            out.append((cur, rate, sum_as_shown(i.accrued(now) for i in mine)))
        return tuple(out)

    def _base_screen(self) -> BaseScreen | None:
        """The screen in view; under a dialog, the one beneath (it still shows)."""
        try:
            stack = self.screen_stack
        except ScreenStackError:  # between two modes: the next tick draws it
            return None
        return next((s for s in reversed(stack) if isinstance(s, BaseScreen)), None)

    def refresh_meter(self, screen: Screen | None = None) -> None:
        if screen is None:
            # under a dialog, the screen beneath still shows its bar: keep it ticking
            screen = self._base_screen()
            if screen is None:
                return
        bar = screen.top_bar if isinstance(screen, BaseScreen) else None
        if bar is None:  # a modal screen has no top bar
            return
        by = self.meter_by_currency()  # (once: each instance's cost so far, summed as shown)
        rate, accrued, count = self.meter(by)
        bar.tick(rate, accrued, count, self.now(), by)
        bar.keeper = self.keeper_note()
        if self._wallet is not None:
            bar.wallet = (Decimal(str(self._wallet[0])), self._wallet[1])
        bar.size_note = size_note(self.size.width, self.size.height)

    def keeper_note(self) -> str:
        """"deadlines kept by the daemon" while a `gputui daemon` runs on this state (asked
        every 10 s: an open and a flock; Home asks as often for its own note)."""
        now = time.monotonic()
        if not getattr(self, "_first_frame", False):
            return ""  # asked once the first frame is up (the daemon module waits till then)
        if now - getattr(self, "_keeper_at", -10.0) >= 10.0:
            from gputui.services.daemon import daemon_status

            self._keeper_at = now
            self._keeper = daemon_status(self.services.state_dir) is not None
        return N_("deadlines kept by the daemon") if self._keeper else ""  # the bar translates

    def _tick(self) -> None:
        # one frame a second: the top bar's clock and the screen's own (Home's countdowns)
        # change in the same frame
        with self.batch_update():
            self.refresh_meter()
            screen = self._base_screen()
            if screen is not None and screen.is_mounted:
                screen.on_second()
        if self._collect_when_idle:
            self._idle_collect()

    # -- the garbage collector ------------------------------------------------------------------

    _collect_when_idle = False
    _last_key = 0.0
    _last_full_collection = 0.0
    #: a full collection waits for this many seconds without a key...
    IDLE_BEFORE_COLLECTING = 1.5
    #: ...comes at most this often (each walks the whole heap: while the console sits idle,
    #: every 10 s was a tenth of its work; young objects are collected as usual meanwhile)...
    COLLECT_AT_MOST_EVERY = 30.0
    #: ...and runs anyway after this many (a renter typing for minutes still gets one)
    COLLECT_AT_LEAST_EVERY = 60.0

    def collect_when_idle(self) -> None:
        """Full garbage collections (13-57 ms here with the console's heap) run while no key
        is coming, not in the middle of a screen switch: Python's own full passes are turned
        off (young objects are still collected as usual) and the 1 s tick runs one once the
        keyboard has been quiet for IDLE_BEFORE_COLLECTING seconds, at most every
        COLLECT_AT_MOST_EVERY seconds."""
        first, second, _third = gc.get_threshold()
        gc.set_threshold(first, second, 1_000_000)  # gen-1 passes before a full one: never
        self._collect_when_idle = True
        self._last_full_collection = time.monotonic()

    def _idle_collect(self) -> None:
        now = time.monotonic()
        since = now - self._last_full_collection
        quiet = now - self._last_key >= self.IDLE_BEFORE_COLLECTING
        if (quiet and since >= self.COLLECT_AT_MOST_EVERY) or since >= self.COLLECT_AT_LEAST_EVERY:
            gc.collect()
            self._last_full_collection = time.monotonic()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            self._last_key = time.monotonic()
        await super().on_event(event)

    def notify(self, message: str, *, title: str = "", severity: str = "information",  # type: ignore[override]
               timeout: float | None = None, markup: bool = True) -> None:
        """Notifications carry names and provider messages: never read them as markup. A
        `Deferred` message (a store notice, English where it is kept) shows translated."""
        super().notify(str(shown(message)), title=str(shown(title)),
                       severity=severity,  # type: ignore[arg-type]
                       timeout=timeout, markup=False)

    # -- actions --------------------------------------------------------------------------------

    def action_goto(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        groups: list[tuple[str, list[Binding]]] = [
            (N_("Everywhere"), [b for b in self.BINDINGS if isinstance(b, Binding)])]
        screen_bindings = [
            b
            for cls in type(self.screen).__mro__
            # BaseScreen's own (? and q) are listed with the keys that work everywhere
            if isinstance(cls, type) and issubclass(cls, BaseScreen) and cls is not BaseScreen
            for b in cls.__dict__.get("BINDINGS", [])
            if isinstance(b, Binding)
        ]
        if screen_bindings:
            title = _(self.screen.TITLE) if self.screen.TITLE else _("current")
            groups.insert(0, (_("On this screen ({title})").format(title=title), screen_bindings))
        self.push_screen(HelpScreen(groups))

    def _costs_action(self, action: str) -> Callable[[], None]:
        """Open Costs, then run one of its actions there."""
        def run() -> None:
            self.action_goto("costs")

            def when_there(tries: int = 0) -> None:
                try:
                    screen = self.screen
                except ScreenStackError:  # between two modes
                    screen = None
                if getattr(screen, "TITLE", "") == "Costs" and screen is not None \
                        and screen.is_mounted:
                    getattr(screen, f"action_{action}")()
                elif tries < 500:  # the switch is asynchronous
                    self.set_timer(0.01, lambda: when_there(tries + 1))
            when_there()
        return run

    def action_command_palette(self) -> None:
        """Textual's palette, its prompt in the language of now."""
        from textual.command import CommandPalette

        if self.use_command_palette and not CommandPalette.is_open(self):  # type: ignore[arg-type]
            self.push_screen(CommandPalette(placeholder=_("Search for commands…"),
                                            id="--command-palette"))

    def action_help_quit(self) -> None:
        """ctrl+c does not quit (it copies in a text field): say which key does, in plain text
        (Textual's own message is markup, and every notification here is shown literally)."""
        self.notify(_("Press q to quit gputui (ctrl+c copies in a text field)."),
                    title=_("Do you want to quit?"))

    def watch_theme(self, name: str) -> None:
        if (self.is_running and self.session_open and self._remember_theme
                and name != self.config.ui.theme):
            self._save_theme(name)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for mode, key, label, _screen, what in SCREENS:
            yield SystemCommand(_("Go to {screen}").format(screen=_(label)),
                                _("{what} (key {key})").format(what=_(what), key=key),
                                lambda m=mode: self.action_goto(m))
        yield SystemCommand(_("Help: keys"), _("Every key binding (key ?)"), self.action_help)
        yield SystemCommand(_("Costs: export CSV"), _("Ledger and running instances to a CSV file "
                            "(key x on Costs; gputui costs --csv)"), self._costs_action("export"))
        yield SystemCommand(_("Costs: budget caps"), _("Set the daily / monthly / per-instance caps "
                            "(key B on Costs)"), self._costs_action("budgets"))
        for lang, name in LANGUAGE_NAMES.items():
            # "Language" stays in the Chinese title too: whoever cannot read the language on
            # screen finds the way back by typing it
            yield SystemCommand(_("Language: {name}").format(name=name),
                                _("Show every screen in {name} (remembered in config.toml)")
                                .format(name=name),
                                lambda lang=lang: self.switch_language(lang))
        for name in sorted(self.available_themes):
            if name.startswith("gputui"):
                yield SystemCommand(_("Theme: {name}").format(name=name),
                                    _("Switch theme (remembered)"),
                                    lambda n=name: setattr(self, "theme", n))
        for command in super().get_system_commands(screen):
            # Textual's own theme picker offers themes that are not readable in 16 colours;
            # gputui's themes are listed above.
            if not command.title.lower().startswith("theme"):
                yield command._replace(
                    title=_(_TEXTUAL_COMMANDS.get(command.title, command.title)),
                    help=_(_TEXTUAL_COMMANDS.get(command.help, command.help)))

    # -- the language ---------------------------------------------------------------------------

    def switch_language(self, language: str) -> None:
        """Show the console in `language` from now on, and remember it in config.toml."""
        self._switch_language(language)

    @work(group="language", exit_on_error=False)
    async def _switch_language(self, language: str) -> None:
        # one switch at a time, each to its end (never cancelled half-way between two modes)
        lock = self.__dict__.setdefault("_language_lock", asyncio.Lock())
        async with lock:
            await self._switch_language_now(language)

    async def _switch_language_now(self, language: str) -> None:
        from gputui.config import ConfigError, set_language_setting

        before = current_language()
        lang = set_language(language)
        self.config.language = lang  # type: ignore[assignment]
        try:
            set_language_setting(lang)
        except (OSError, ConfigError) as exc:  # this session still switches
            self.notify(_("could not remember the language: {problem}").format(problem=exc),
                        severity="warning")
        if lang != before:
            await self.redraw_screens()
        self.notify(_("Language: {name}").format(name=LANGUAGE_NAMES[current_language()]))

    async def redraw_screens(self) -> None:
        """Every screen made again, so that each shows the language of now: the screens of the
        modes not in view are dropped (made afresh when next shown), the one in view replaced
        by a new one (its data read again from the store and the services, as at start-up);
        a dialog open on it closes."""
        current = self.current_mode
        made = [m for m in self._screen_stacks if m in self._modes and m != current]
        for mode in made:
            factory = self._modes[mode]
            await self.remove_mode(mode)
            self.add_mode(mode, factory)
        blank = "_relabel"
        self.add_mode(blank, Screen)
        try:
            await self.switch_mode(blank)
            factory = self._modes[current]
            await self.remove_mode(current)
            self.add_mode(current, factory)
            await self.switch_mode(current)
        finally:
            if self.current_mode != blank:
                await self.remove_mode(blank)
