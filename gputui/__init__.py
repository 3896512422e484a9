"""gputui: a keyboard-driven console for rented GPUs."""

import os as _os

__version__ = "0.1.0"

# pydantic looks for third-party plugins through package metadata on first validation, which
# costs a noticeable share of a short command's start-up; gputui uses none.
_os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
