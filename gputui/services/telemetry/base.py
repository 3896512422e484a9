"""Telemetry: the stream intervals, the local machine's id, and the diagnoses shown for a failed stream."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gputui.i18n import N_
from gputui.nvidia.diagnose import Diagnosis
from gputui.nvidia.nvsmi import (
    sanitize,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


MIN_INTERVAL = 0.5
MAX_INTERVAL = 10.0
#: What +/- step through in the monitor.
INTERVAL_STEPS: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0)
#: The instance id under which `start_local()` writes this machine's GPUs.
LOCAL_ID = "local"


def clamp_interval(seconds: float) -> float:
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return 1.0
    if value != value:  # NaN
        return 1.0
    return round(min(MAX_INTERVAL, max(MIN_INTERVAL, value)), 2)


def step_interval(current: float, direction: int) -> float:
    """The next step up (+1) or down (-1) from `current` in INTERVAL_STEPS."""
    if direction > 0:
        return next((s for s in INTERVAL_STEPS if s > current + 1e-9), INTERVAL_STEPS[-1])
    return next((s for s in reversed(INTERVAL_STEPS) if s < current - 1e-9), INTERVAL_STEPS[0])


# --------------------------------------------------------------------------------------------
# Diagnoses
# --------------------------------------------------------------------------------------------


def diagnosis_text(diag: Diagnosis) -> str:
    """The one-line form of a diagnosis (what the store keeps, what commands print with
    --json): English; `Diagnosis.line()` is the same in the interface language."""
    text = f"{diag.problem} Fix: {diag.fix}"
    if diag.detail:
        text += f" (said: {diag.detail})"
    return text


# The problem and fix of each diagnosis below are constant text (so that `Diagnosis.problem_text`
# can show them in the interface language); what the SSH layer or the exception said goes in
# `detail`, shown after them as it was said.


def ssh_diagnosis(exc: BaseException) -> Diagnosis:
    """A connection problem as a diagnosis (the SSH layer's messages are already one line)."""
    from gputui.remote.ssh import (
        AuthRefused,
        HostKeyChanged,
        LinkUnreachable,
        UnknownHostKey,
    )

    message = sanitize(str(exc), 300) or type(exc).__name__
    if isinstance(exc, AuthRefused):
        return Diagnosis(
            code="ssh-auth",
            problem=N_("The instance refused the login."),
            fix=N_("Check the SSH key or password for this instance (re-add it with "
                   "`gputui add-ssh` if the platform changed it)."),
            detail=message,
        )
    if isinstance(exc, HostKeyChanged | UnknownHostKey):
        return Diagnosis(
            code="ssh-host-key",
            problem=N_("The instance's host key cannot be trusted."),
            fix=N_("If the machine was re-imaged, remove its old key and accept the new one "
                   "(`gputui ssh NAME --accept-new-host-key`); otherwise do not connect."),
            detail=message,
        )
    if isinstance(exc, LinkUnreachable):
        return Diagnosis(
            code="ssh-unreachable",
            problem=N_("The instance cannot be reached."),
            fix=N_("Check that it is running (`gputui instances`) and that its SSH port is "
                   "open; the monitor keeps retrying."),
            detail=message,
        )
    return Diagnosis(
        code="ssh-error",
        problem=N_("SSH to the instance failed."),
        fix=N_("The monitor keeps retrying; check the instance is running and reachable."),
        detail=message,
    )


def _internal_diagnosis(exc: BaseException) -> Diagnosis:
    return Diagnosis(
        code="internal",
        problem=N_("Telemetry failed."),
        fix=N_("The monitor keeps retrying. If this persists, report it with ~/.local/state "
               "gputui error.log."),
        detail=f"{type(exc).__name__}: {sanitize(str(exc), 200)}",
    )


def _service_diagnosis(message: str) -> Diagnosis:
    """`message`: a service's error, already in the interface language."""
    return Diagnosis(
        code="unavailable",
        problem=sanitize(message, 300).rstrip(".") + ".",
        fix=N_("Check the instance in Home (is it running?); the monitor keeps retrying."),
    )
