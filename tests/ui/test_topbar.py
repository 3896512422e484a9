"""Issue 27: the top bar is drawn line by line — the line before the clock laid out and styled
once — and a second that changes only the clock repaints only the clock's cells. What the
renter reads must be the whole, current line every time: the clock, the meter when it moves,
a new title, a new width."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from textual.app import App, ComposeResult
from textual.geometry import Region

from gputui.ui.widgets import TopBar

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
USD = (("USD", Decimal("2.76"), Decimal("0.04")),)


class BarApp(App):
    def compose(self) -> ComposeResult:
        yield TopBar()


def drawn(bar: TopBar) -> str:
    return bar.render_line(0).text


async def test_a_second_repaints_the_clock_alone_and_the_line_reads_whole():
    app = BarApp()
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.query_one(TopBar)
        bar.title = "Instances"
        bar.tick(Decimal("2.76"), Decimal("0.04"), 4, T0, USD)
        await pilot.pause()
        first = drawn(bar)
        clock = T0.astimezone().strftime("%H:%M:%S")
        assert first.rstrip().endswith(clock) and "4 live $2.76/h · $0.04 so far" in first
        assert len(first) == 78  # the content width: the clock ends at the padding

        repaints: list[tuple[Region, ...]] = []
        refresh = bar.refresh

        def counted(*regions, **kwargs):
            repaints.append(regions)
            return refresh(*regions, **kwargs)

        bar.refresh = counted  # type: ignore[method-assign]
        later = T0 + timedelta(seconds=1)
        bar.tick(Decimal("2.76"), Decimal("0.04"), 4, later, USD)
        await pilot.pause()
        second = drawn(bar)
        new_clock = later.astimezone().strftime("%H:%M:%S")
        assert second == first.replace(clock, new_clock)
        assert repaints == [(Region(78 - 8, 0, 8, 1),)]  # the clock's eight cells only

        # the meter moves: the whole line is drawn again, with the new figure
        repaints.clear()
        bar.tick(Decimal("2.76"), Decimal("0.05"), 4, later + timedelta(seconds=1), USD)
        await pilot.pause()
        assert "$0.05 so far" in drawn(bar) and "$0.04" not in drawn(bar)
        assert () in repaints  # (a whole-widget repaint)
        bar.refresh = refresh  # type: ignore[method-assign]

        # a new title and a new width: the line is laid out again, the clock still last
        bar.title = "Costs"
        await pilot.pause()
        assert drawn(bar).startswith("gputui · Costs")
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        bar.tick(Decimal("2.76"), Decimal("0.05"), 4, later + timedelta(seconds=2), USD)
        await pilot.pause()
        wide = drawn(bar)
        assert len(wide) == 118
        assert wide.endswith((later + timedelta(seconds=2)).astimezone().strftime("%H:%M:%S"))


async def test_a_theme_change_recolours_the_bar():
    """The bar's colours are worked out once and kept: a new theme must still reach it."""
    from gputui.ui.theming import load_themes

    app = BarApp()
    async with app.run_test(size=(80, 24)) as pilot:
        for theme in load_themes().themes.values():
            app.register_theme(theme)
        app.theme = "gputui-dark"
        bar = app.query_one(TopBar)
        bar.tick(Decimal("2.76"), Decimal("0.04"), 4, T0, USD)
        await pilot.pause()
        dark = {seg.style.bgcolor for seg in bar.render_line(0) if seg.style}
        app.theme = "gputui-light"
        await pilot.pause()
        light = {seg.style.bgcolor for seg in bar.render_line(0) if seg.style}
        assert dark and light and dark.isdisjoint(light), (dark, light)
