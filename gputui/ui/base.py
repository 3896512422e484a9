"""The frame every top-level screen shares: top bar, body, footer; store events as messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen

from gputui.i18n import N_
from gputui.ui.widgets import KeyFooter, TopBar

if TYPE_CHECKING:
    from gputui.app import GpuTuiApp
    from gputui.store import Event


def _freeze_heap() -> None:
    import gc

    gc.freeze()


class StoreEvent(Message):
    """A change in the session store, delivered to a screen on the UI's own loop."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class BaseScreen(Screen):
    # English, marked with N_() by each screen; the top bar, the help and the palette show it
    # (and every BINDINGS description) translated, at the moment they draw.
    TITLE: ClassVar[str] = ""
    # Help and quit come first in every footer, so a narrow pane never hides them.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "app.help", N_("Help"), key_display="?"),
        Binding("q", "app.quit", N_("Quit")),
    ]
    _unsubscribe: Callable[[], None] | None = None

    @property
    def gapp(self) -> GpuTuiApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield TopBar(id="topbar")
        yield from self.compose_body()
        yield KeyFooter(show_command_palette=False, compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    @property
    def top_bar(self) -> TopBar | None:
        """The screen's top bar (looked up once: the meter ticks it every second), or None
        while it is not mounted."""
        bar = self.__dict__.get("_top_bar")
        if bar is None or not bar.is_attached:
            try:
                bar = self._top_bar = self.query_one(TopBar)
            except Exception:  # noqa: BLE001 - not composed yet, or being taken down
                return None
        return bar

    def on_mount(self) -> None:
        # Textual calls this once for the class that defines it and again for each screen whose
        # own on_mount calls super().on_mount(): the second call must not subscribe twice or
        # start a second set of timers (Home ticked twice a second, and reloaded twice on
        # every store event)
        if self._base_mounted:
            return
        self._base_mounted = True
        self.query_one(TopBar).title = self.TITLE
        self.gapp.when_open(self._session_opened)

    _base_mounted = False

    def _session_opened(self) -> None:
        if not self.is_attached or self._unsubscribe is not None:  # gone, or already open
            return

        def forward(ev: Event) -> None:  # post_message is safe from any thread
            self.post_message(StoreEvent(ev))

        self._unsubscribe = self.gapp.store.subscribe(forward)
        self.gapp.refresh_meter(self)
        self.on_session_open()

    def on_session_open(self) -> None:
        """The settings and the store can be read (the console opens them after its first
        frame): a screen fills itself in here."""
        # a screen lives until the app ends: once drawn, its widgets leave the collector's
        # full passes too (see GpuTuiApp._freeze_heap)
        if getattr(self.gapp, "freeze_heap", False):
            self.call_after_refresh(_freeze_heap)

    def on_resize(self) -> None:
        self.gapp.refresh_meter(self)

    def on_second(self) -> None:
        """Called by the app's one-second tick while this screen is in view."""

    # A screen that draws the GPU streams; while none is in view they run at a slower pace.
    SHOWS_TELEMETRY = False

    # Two passes of Textual's on every switch to a screen already made (tens of ms each for a
    # screen of many widgets — Ollama, Jobs — where a bare app's switch takes ~50 ms):
    # - A screen first shown by switch_mode is never marked as styled for the app's current
    #   stylesheet (it is not mounted yet when Textual would mark it), so every later switch to
    #   it parsed the whole stylesheet again and restyled the app. Once in view its styles
    #   are current: it is marked so here; a theme or CSS change later still restyles it.
    # - Back in view, Textual restyles every widget on the screen, in case the app's own
    #   classes changed meanwhile (those are applied to the screens in view only). Where
    #   nothing that CSS reads of the app has changed since this screen left the view (the
    #   stylesheet, the theme, the app's classes and pseudo-classes), that pass is skipped;
    #   changes to the screen's own widgets are applied when they happen, in view or not.
    _left_with: tuple[object, ...] | None = None

    def _app_style_inputs(self) -> tuple[object, ...]:
        app = self.app
        return (app._css_update_count, app.theme, frozenset(app.classes),  # noqa: SLF001
                app.pseudo_classes)

    @on(events.ScreenSuspend)
    def _remember_app_styles(self) -> None:
        self._left_with = self._app_style_inputs()

    @on(events.ScreenResume)
    def _skip_restyle_when_unchanged(self, event: events.ScreenResume) -> None:
        if self._left_with is not None and self._left_with == self._app_style_inputs():
            event.refresh_styles = False
        self._css_update_count = self.app._css_update_count  # noqa: SLF001

    def on_screen_resume(self) -> None:
        self.gapp.refresh_meter(self)
        self.gapp.telemetry_in_view(self.SHOWS_TELEMETRY)

    def on_unmount(self) -> None:
        if self._unsubscribe:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            unsubscribe()
