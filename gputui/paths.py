"""Where things live: the config folder, the state folder and their files; and an early,
lenient read of a setting. Nothing here imports pydantic, so the console's first frame and
`gputui --help` do not wait for it (`gputui.config` validates the file)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

APP_NAME = "gputui"
CONFIG_NAME = "config.toml"
STATE_NAME = "state.db"


def _private_mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def config_dir() -> Path:
    home = os.environ.get("GPUTUI_HOME")
    if home:
        return Path(home).expanduser()
    from platformdirs import user_config_path

    return user_config_path(APP_NAME)


def state_dir() -> Path:
    home = os.environ.get("GPUTUI_HOME")
    if home:
        return Path(home).expanduser()
    from platformdirs import user_state_path

    return user_state_path(APP_NAME)


def config_path() -> Path:
    return config_dir() / CONFIG_NAME


def state_path() -> Path:
    return state_dir() / STATE_NAME


def ensure_state_dir() -> Path:
    return _private_mkdir(state_dir())


def early_setting(*keys: str) -> Any:
    """A value of config.toml (`early_setting("ui", "theme")`), read leniently before the file
    is validated: None where the file, the key or the file's syntax is missing or broken —
    `gputui.config.load_config` reports a broken file later, in one line."""
    try:
        data: Any = tomllib.loads(config_path().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
