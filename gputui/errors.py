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

import errno
import os
import re

from gputui.i18n import N_, Deferred, shown

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
        # A `Deferred` message stays one: English as a string (what the store, logs and JSON
        # keep; wrapping it as `ServiceError(str(exc))` keeps it too), translated where shown
        # (`one_line`, `shown`), with every value from outside sanitised.
        message = self.args[0] if len(self.args) == 1 else None
        if isinstance(message, Deferred):
            return _clean_deferred(message)
        return _clean(super().__str__())

    def translated(self) -> str:
        """The message in the interface language (one line, sanitised)."""
        return _clean(str(shown(str(self))))


def _clean(text: str) -> str:
    from gputui.sanitize import sanitize

    return sanitize(" ".join(text.split()), 2000)


def _clean_deferred(message: Deferred) -> Deferred:
    """`message` with its values sanitised and on one line (the template is our own text)."""
    params: dict[str, object] = {}
    for key, value in message.params.items():
        if isinstance(value, BaseException):  # another error: ours translate too
            value = said(value)
        if isinstance(value, Deferred):
            params[key] = _clean_deferred(value)
        else:  # a leading space kept: "{line}{said}" with said " [...]"
            text, cleaned = str(value), _clean(str(value))
            params[key] = (" " + cleaned if text.startswith(" ") else cleaned) if cleaned else ""
    if isinstance(message, _WithoutPrefix):
        return _WithoutPrefix(message.template, message.prefix, **params)
    return Deferred(message.template, **params)


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
    """The user-facing line for an error (no class names for our own errors), in the interface
    language: our own words translated, text from outside as it came (sanitised)."""
    if isinstance(exc, GputuiError):
        return exc.translated()
    from gputui.sanitize import sanitize

    if isinstance(exc, LookupError) and exc.args:  # KeyError quotes its argument
        return sanitize(" ".join(str(exc.args[0]).split()), 2000)
    return sanitize(" ".join(f"{type(exc).__name__}: {exc}".split()), 2000)


# The system's words for the network errors a user meets most (os.strerror is English).
_OS_REASONS = {
    errno.ECONNREFUSED: N_("Connection refused"),
    errno.ECONNRESET: N_("Connection reset by peer"),
    errno.EHOSTUNREACH: N_("No route to host"),
    errno.ENETUNREACH: N_("Network is unreachable"),
    errno.ETIMEDOUT: N_("Connection timed out"),
    errno.EADDRNOTAVAIL: N_("Cannot assign requested address"),
    errno.ENOENT: N_("No such file or directory"),
    errno.EACCES: N_("Permission denied"),
    errno.EISDIR: N_("Is a directory"),
    errno.ENOTDIR: N_("Not a directory"),
    errno.ENOSPC: N_("No space left on device"),
}


def os_reason(exc: OSError) -> str:
    """Why an OSError happened, in words a person reads (translated where shown): the
    system's message for its errno, or its text."""
    if exc.errno in _OS_REASONS and os.strerror(exc.errno) == _OS_REASONS[exc.errno]:
        return Deferred(_OS_REASONS[exc.errno])
    if exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


def without_prefix(text: str, prefix: str) -> str:
    """`text` less a leading `prefix` ("lambda: "), keeping a `Deferred` one translatable (the
    catalog knows the whole template: it is translated whole, then the prefix comes off)."""
    if isinstance(text, Deferred) and text.template.startswith(prefix):
        return _WithoutPrefix(text.template, prefix, **text.params)
    return text.removeprefix(prefix)


class _WithoutPrefix(Deferred):
    prefix: str

    def __new__(cls, template: str, prefix: str, /, **params: object) -> _WithoutPrefix:
        whole = template.format(**params) if params else template
        obj = str.__new__(cls, whole.removeprefix(prefix))
        obj.template, obj.params, obj.prefix = template, params, prefix
        return obj

    def __reduce__(self):  # copies keep the template and the prefix
        return (_rebuild_without_prefix, (self.template, self.prefix, self.params))

    def translated(self) -> str:
        # "lambda: " is "lambda：" in Chinese: the name, then either colon
        name = self.prefix.rstrip(": ")
        return re.sub(r"^" + re.escape(name) + r"\s*[:：]\s*", "", super().translated())


def said(exc: BaseException) -> str:
    """What `exc` says, still translatable where it was our own words (a `Deferred`), also when
    it came wrapped in a plain exception such as `ValueError(Deferred(...))`."""
    if isinstance(exc, GputuiError):
        return str(exc)
    if len(exc.args) == 1 and isinstance(exc.args[0], Deferred):
        return exc.args[0]
    return str(exc)


def _rebuild_without_prefix(template: str, prefix: str, params: dict[str, object]
                            ) -> _WithoutPrefix:
    return _WithoutPrefix(template, prefix, **params)


def clean_message(text: str) -> str:
    """`text` sanitised for a terminal and on one line, a `Deferred` staying one (its values
    sanitised, so that it still translates where shown): for notices and link states that
    carry our words around text from outside."""
    return _clean_deferred(text) if isinstance(text, Deferred) else _clean(text)
