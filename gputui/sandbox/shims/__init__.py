"""Shims that make a sandbox instance folder look like a rented GPU box.

Each bin/ wrapper of an instance runs ``python -m gputui.sandbox.shims.<module>``
(see ``state.SHIMS``). Everything in this package is stdlib only and imports nothing heavy:
``nvidia-smi -lms`` starts it often. Keep ``gputui/__init__.py`` and
``gputui/providers/__init__.py`` free of heavy imports too, since ``-m`` runs them first.

The instance format and its API (create_instance_dir, power_state, enforce_power, ...) live
in ``state``; the live numbers in ``sim``.
"""
