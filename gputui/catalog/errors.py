"""Errors of the catalog. All are ValueErrors with a one-line message fit to show a user."""

from __future__ import annotations

from gputui.errors import BadInput


class CatalogError(BadInput, ValueError):
    """Bad catalog data or bad input (an override row, negative hours...)."""


class UnknownGpu(CatalogError):
    def __init__(self, query: str, suggestions: list[str] | None = None) -> None:
        self.query = query
        self.suggestions = list(suggestions or [])
        hint = f"; did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown GPU {query!r}{hint}")


class AmbiguousGpu(CatalogError):
    def __init__(self, query: str, candidates: list[str]) -> None:
        self.query = query
        self.candidates = list(candidates)
        super().__init__(
            f"GPU name {query!r} is ambiguous: it matches {', '.join(self.candidates)}"
        )


class FitError(CatalogError):
    """The fit estimator cannot answer the question as asked (unknown model, context too long...)."""
