"""Bad settings end with one clear line (file, key, what is wrong) and exit code 2."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from gputui.config import Config, ConfigError, load_config, parse_duration, save_config

from .conftest import GPUTUI, run_gputui_env

BAD = [
    ("ui = [", "not valid TOML"),
    ("[ui]\ntheme = 3\n", "key 'ui.theme': Input should be a valid string"),
    ("[ui]\nrefresh_seconds = 0.01\n", "key 'ui.refresh_seconds'"),
    ("[ui]\ncolour = 'red'\n", "key 'ui.colour': unknown key"),
    ("[lease]\ndefault_release = 'soon'\n", "key 'lease.default_release'"),
    ("[budget]\ndaily = -5\n", "key 'budget.daily'"),
    ("[[prices]]\nprovider = 'x'\ngpu = 'RTX 4090'\nprice_per_gpu_hour = 'cheap'\n",
     "key 'prices[0].price_per_gpu_hour'"),
    ("[[prices]]\nprovider = 'x'\nprice_per_gpu_hour = 1\n", "key 'prices[0].gpu': Field required"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_config_is_one_clear_line(tmp_path: Path, text: str, expected: str):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert str(path) in msg and expected in msg and "\n" not in msg


def test_binary_config_is_refused(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


@pytest.mark.parametrize(("text", "expected"), BAD[:3])
def test_commands_exit_2_without_traceback(gputui_home: Path, text: str, expected: str):
    gputui_home.mkdir(parents=True)
    (gputui_home / "config.toml").write_text(text)
    out = subprocess.run([*GPUTUI, "instances"], capture_output=True, text=True,
                         env=run_gputui_env(gputui_home))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and expected in out.stderr


def test_config_init_path_and_roundtrip(gputui_home: Path):
    env = run_gputui_env(gputui_home)
    path = subprocess.run([*GPUTUI, "config", "path"], capture_output=True, text=True, env=env)
    assert path.stdout.strip() == str(gputui_home / "config.toml")
    init = subprocess.run([*GPUTUI, "config", "init"], capture_output=True, text=True, env=env)
    assert init.returncode == 0
    cfg_file = gputui_home / "config.toml"
    assert oct(cfg_file.stat().st_mode & 0o777) == "0o600"
    assert load_config(cfg_file) == Config()
    again = subprocess.run([*GPUTUI, "config", "init"], capture_output=True, text=True, env=env)
    assert again.returncode == 1 and "exists already" in again.stderr


def test_save_keeps_values(tmp_path: Path):
    cfg = Config()
    cfg.ui.theme = "gputui-light"
    cfg.lease.default_release = "90m"
    path = save_config(cfg, tmp_path / "c.toml")
    back = load_config(path)
    assert back.ui.theme == "gputui-light" and back.lease.default_release == "90m"


@pytest.mark.parametrize(("text", "delta"), [
    ("2h", timedelta(hours=2)), ("90m", timedelta(minutes=90)),
    ("1h30m", timedelta(minutes=90)), ("45", timedelta(minutes=45)), ("1d", timedelta(days=1)),
])
def test_durations(text: str, delta: timedelta):
    assert parse_duration(text) == delta


@pytest.mark.parametrize("text", ["", "soon", "2x", "h"])
def test_bad_durations(text: str):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_defaults_without_a_file_equal_the_validated_defaults(tmp_path: Path):
    assert load_config(tmp_path / "absent.toml").model_dump() == Config().model_dump()
