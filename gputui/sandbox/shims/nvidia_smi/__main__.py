"""``python -m gputui.sandbox.shims.nvidia_smi``: what a sandbox instance's bin/nvidia-smi runs."""

from .cli import _quiet_exit, main

_quiet_exit(main())
