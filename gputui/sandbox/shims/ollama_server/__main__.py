"""``python -m gputui.sandbox.shims.ollama_server serve``: what a sandbox ``ollama serve`` runs."""

import sys

from .cli import main

sys.exit(main())
