"""One error root for gputui, and the one place errors become exit codes.

Every error the program raises on purpose derives from `GputuiError`; its `str()` is one line
fit to show a user, and its `exit_code` says how a command ends when it escapes:

- `BadInput` (2): the request itself is wrong — a flag, a file, a field, an unknown name.
- `NotFound` (2): no such instance, model, job… (a kind of bad input).
- `GputuiError` and every other subclass (1): the request was fine but it failed (a provider,
  a link, the state folder).

Subsystems keep their own classes (`ProviderError`, `SSHLayerError`, `ServiceError`, …) for
callers that want to catch one kind, but all of them sit under this root, so a screen can catch
`GputuiError` instead of bare `Exception`, and `gputui.cli` maps them to exit codes here.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 70


class GputuiError(Exception):
    """Base of every error gputui raises on purpose; `str()` is one line for the user."""

    exit_code: int = EXIT_ERROR

    def __str__(self) -> str:
        # Messages often carry text from outside (a remote's stderr, an API's error body):
        # never an escape sequence or a control character on the way to a terminal.
        from gputui.sanitize import sanitize

        return sanitize(" ".join(super().__str__().split()), 2000)


class BadInput(GputuiError):
    """The request is wrong (a flag, a file, a field): exit 2, nothing was changed."""

    exit_code = EXIT_BAD_INPUT


class NotFound(BadInput):
    """No such thing (instance, model, job): exit 2."""


def exit_code(exc: BaseException) -> int:
    """The exit code a command ends with when `exc` escapes it."""
    if isinstance(exc, GputuiError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_INTERNAL


def one_line(exc: BaseException) -> str:
    """The user-facing line for an error (no class names for our own errors)."""
    if isinstance(exc, GputuiError):
        return str(exc)
    from gputui.sanitize import sanitize

    if isinstance(exc, LookupError) and exc.args:  # KeyError quotes its argument
        return sanitize(" ".join(str(exc.args[0]).split()), 2000)
    return sanitize(" ".join(f"{type(exc).__name__}: {exc}".split()), 2000)
