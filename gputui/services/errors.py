"""The services' own errors (one line for the user), apart from the session so that every
service can raise them without importing the session."""

from __future__ import annotations

from gputui.errors import BadInput, GputuiError

__all__ = ["InvalidRequest", "ServiceError"]


class ServiceError(GputuiError):
    """A one-line message for the user. `kind`: what the provider said, where it says
    (AutoDL: "stock" for a sold-out spec or a machine with no free GPU)."""

    kind: str | None = None


class InvalidRequest(ServiceError, BadInput):
    """The request itself is wrong (unknown GPU or provider, a name in use): bad input."""
