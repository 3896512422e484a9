"""The Monitor screen: `screen` (the screen and its keys), `overview` (every instance's GPUs),
`detail` (one instance) with `processes`, and `render` (pure formatting)."""

from gputui.format import fit_name
from gputui.ui.monitor.render import (
    bar,
    fmt_age,
    fmt_mem,
    fmt_power,
    gpu_panel_text,
    overview_columns,
    sparkline,
    state_label,
    status_text,
)
from gputui.ui.monitor.screen import MonitorScreen

__all__ = ["MonitorScreen", "bar", "fit_name", "fmt_age", "fmt_mem", "fmt_power",
           "gpu_panel_text", "overview_columns", "sparkline", "state_label", "status_text"]
