"""Errors of the catalog. All are ValueErrors with a one-line message fit to show a user."""

from __future__ import annotations

from gputui.errors import BadInput
from gputui.i18n import _


class CatalogError(BadInput, ValueError):
    """Bad catalog data or bad input (an override row, negative hours...)."""


class UnknownGpu(CatalogError):
    def __init__(self, query: str, suggestions: list[str] | None = None) -> None:
        self.query = query
        self.suggestions = list(suggestions or [])
        hint = _("; did you mean {names}?").format(names=", ".join(self.suggestions)) \
            if self.suggestions else ""
        super().__init__(_("unknown GPU {query}").format(query=repr(query)) + hint)


class AmbiguousGpu(CatalogError):
    def __init__(self, query: str, candidates: list[str]) -> None:
        self.query = query
        self.candidates = list(candidates)
        super().__init__(
            _("GPU name {query} is ambiguous: it matches {names}").format(
                query=repr(query), names=", ".join(self.candidates))
        )


class FitError(CatalogError):
    """The fit estimator cannot answer the question as asked (unknown model, context too long...)."""
