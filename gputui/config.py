"""Settings: where things live, and `config.toml` (read with tomllib, written with tomli-w).

A bad config file is reported as one line — file, key, what is wrong — by `ConfigError`;
the command line turns it into exit code 2.
"""

from __future__ import annotations

import os
import re
import tomllib
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gputui.errors import BadInput
from gputui.i18n import N_, _, ngettext
from gputui.paths import (  # noqa: F401 (where things live: imported from here too)
    APP_NAME,
    CONFIG_NAME,
    STATE_NAME,
    _private_mkdir,
    config_dir,
    config_path,
    ensure_state_dir,
    state_dir,
    state_path,
)


class ConfigError(BadInput):
    """A problem with a settings file, said in one line."""


_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*(?:d|天))?\s*(?:(\d+(?:\.\d+)?)\s*(?:h|小时|时))?\s*"
                       r"(?:(\d+(?:\.\d+)?)\s*(?:m(?:in)?|分钟|分))?\s*"
                       r"(?:(\d+(?:\.\d+)?)\s*(?:s|秒钟|秒))?\s*$", re.I)


def parse_duration(text: str) -> timedelta:
    """`2h`, `90m`, `1h30m`, `1d`, `45s` — or as the console writes them in Chinese, `1小时`,
    `1小时30分`, `90分钟`, `2天`, `45秒`; a bare number is minutes. ValueError if it is not a
    duration or is too long to be one (it never overflows)."""
    raw = text.strip()
    if not raw:
        raise ValueError(_("empty duration"))
    try:
        if re.fullmatch(r"\d+(\.\d+)?", raw):
            return timedelta(minutes=float(raw))
        m = _DURATION.match(raw)
        if not m or not any(m.groups()):
            raise ValueError(_("{value} is not a duration (try 2h, 90m, 1h30m)").format(
                value=repr(text)))
        d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        return timedelta(days=d, hours=h, minutes=mi, seconds=s)
    except OverflowError:
        raise ValueError(_("{value} is far too long (at most {days} days)").format(
            value=repr(text), days=MAX_LEASE.days)) from None


# -- limits: one set, checked at every entry point (flags, config.toml, the console's forms) ------

MIN_LEASE = timedelta(seconds=1)  # a release timer: create --release-after, extend, default_release
MAX_LEASE = timedelta(days=366)  # a year, from now
MAX_IDLE = timedelta(hours=24)  # --idle SPAN@PCT%
MAX_WARN_MINUTES = 24 * 60  # lease.warn_minutes: each between 1 minute and a day before
MAX_JOB_HOURS = 100_000  # `cost --hours`: about eleven years of running


def lease_span(text: str, field: str) -> timedelta:
    """A release timer's length, or BadInput naming the field."""
    try:
        delta = parse_duration(text)
    except ValueError as exc:
        raise BadInput(_("{field}: {problem}").format(field=field, problem=exc)) from None
    check_lease_span(delta, field, text)
    return delta


def check_lease_span(delta: timedelta, field: str, text: str | None = None) -> None:
    if not MIN_LEASE <= delta <= MAX_LEASE:
        if text is not None:
            raise BadInput(_("{field}: {value} must be between 1 second and a year ({days} "
                             "days)").format(field=field, value=repr(text), days=MAX_LEASE.days))
        raise BadInput(_("{field}: must be between 1 second and a year ({days} days)").format(
            field=field, days=MAX_LEASE.days))


def check_release_at(at: datetime, field: str, now: datetime | None = None) -> datetime:
    """A release time: in the future, at most a year away. Returned in UTC."""
    from gputui.models import as_utc, utcnow

    now = as_utc(now or utcnow())
    at = as_utc(at)
    if at <= now:
        raise BadInput(_("{field}: the release time is in the past").format(field=field))
    if at - now > MAX_LEASE:
        raise BadInput(_("{field}: the release time is more than a year away (at most {days} "
                         "days)").format(field=field, days=MAX_LEASE.days))
    return at


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class UISettings(_Section):
    theme: str = "gputui-dark"
    refresh_seconds: float = Field(default=1.0, ge=0.5, le=10)


class LeaseSettings(_Section):
    default_release: str = "2h"
    warn_minutes: list[int] = Field(default_factory=lambda: [10, 1])

    @field_validator("default_release")
    @classmethod
    def _duration(cls, v: str) -> str:
        delta = parse_duration(v)
        if not MIN_LEASE <= delta <= MAX_LEASE:
            raise ValueError(_("{value} must be between 1 second and a year ({days} days)").format(
                value=repr(v), days=MAX_LEASE.days))
        return v

    @field_validator("warn_minutes")
    @classmethod
    def _warnings(cls, v: list[int]) -> list[int]:
        if len(v) > 10:
            raise ValueError(_("at most 10 warnings"))
        for minutes in v:
            if not 1 <= minutes <= MAX_WARN_MINUTES:
                raise ValueError(_("{minutes} is not between 1 and {max} minutes").format(
                    minutes=minutes, max=MAX_WARN_MINUTES))
        return v


class BudgetSettings(_Section):
    currency: Literal["USD", "CNY"] = "USD"  # the caps are in this currency; never mixed
    daily: Decimal | None = Field(default=None, ge=0)
    monthly: Decimal | None = Field(default=None, ge=0)
    per_instance: Decimal | None = Field(default=None, ge=0)
    release_at_cap: bool = False


class McpSettings(_Section):
    """`gputui mcp` (agents): stricter than the command line."""

    default_release: str = "2h"  # every create sets a timer; this when the agent gives none
    max_release: str = "24h"  # the longest timer an agent may set or extend to
    # Spending more than this (per currency) needs `confirm: true`; a currency not listed
    # always needs it.
    confirm_over: dict[str, Decimal] = Field(
        default_factory=lambda: {"USD": Decimal("10"), "CNY": Decimal("70")})
    # The one local folder `push` reads from and `pull` (and a when-done pull) writes into;
    # unset: the folder `gputui mcp` was started in.
    local_folder: str | None = None

    @field_validator("default_release", "max_release")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v


class SandboxSettings(_Section):
    enabled: bool = True


LAMBDA_KEY_ENV = "LAMBDA_API_KEY"


class LambdaSettings(_Section):
    enabled: bool = False
    base_url: str | None = None
    api_key: str | None = None  # prefer LAMBDA_API_KEY; a file holding it must be 0600

    def wanted(self, env: Any = None) -> bool:
        """Use the provider? When `[providers.lambda] enabled` or `LAMBDA_API_KEY` is set."""
        env = os.environ if env is None else env
        return bool(self.enabled or (env.get(LAMBDA_KEY_ENV) or "").strip())


AUTODL_TOKEN_ENV = "AUTODL_TOKEN"


class AutoDLSettings(_Section):
    enabled: bool = False
    base_url: str | None = None
    token: str | None = None  # prefer AUTODL_TOKEN; a file holding it must be 0600
    min_balance: Decimal = Field(default=Decimal("5"), ge=0)  # ¥: create refuses below this
    image: str = "base-image-l2t43iu6uk"  # PyTorch 2.0.0, CUDA 11.8, Ubuntu 20.04
    cuda_v_from: int = Field(default=118, ge=0)
    at_deadline: Literal["release", "stop"] = "release"
    # power a stopped instance on and off shortly before AutoDL's 15-day wipe (`gputui keep`)
    keep_stopped: bool = False

    def wanted(self, env: Any = None) -> bool:
        """Use the provider? When `[providers.autodl] enabled` or `AUTODL_TOKEN` is set."""
        env = os.environ if env is None else env
        return bool(self.enabled or self.token or (env.get(AUTODL_TOKEN_ENV) or "").strip())


class SlurmClusterSettings(_Section):
    """`[providers.slurm.NAME]`: a Slurm cluster reached over SSH through its login node."""

    login: str  # the login node's ssh line, e.g. "ssh -p 22 user@login.example.org"
    partition: str | None = None  # unset: the cluster's default partition
    account: str | None = None  # sbatch --account
    price_per_gpu_hour: Decimal = Field(ge=0)  # what a GPU-hour costs this renter
    currency: Literal["USD", "CNY"] = "USD"
    # The allocation's small CPU and memory request, per GPU (it must fit the node).
    cpus_per_gpu: int = Field(default=1, ge=1, le=256)
    mem_per_gpu_mb: int = Field(default=4096, ge=64, le=4_000_000)

    @field_validator("login")
    @classmethod
    def _login(cls, v: str) -> str:
        from gputui.remote.sshline import parse_ssh_line

        parse_ssh_line(v)  # ValueError: one line saying what is wrong
        return v


class MoneySettings(_Section):
    """How currencies are combined: never, unless the user sets a rate (and it is shown)."""

    cny_per_usd: Decimal | None = Field(default=None, gt=0)  # e.g. 7.1: ¥ per $1
    rate_note: str | None = None  # where the rate came from, e.g. "my bank, 2026-11-30"


NOTIFY_URLS_ENV = "GPUTUI_NOTIFY_URLS"  # space-separated Apprise URLs (cron, CI)
# What can be sent; `run_failed` only when asked for (`run_failed = true`, or listed in events).
NOTIFY_EVENTS = ("queue_ended", "run_failed", "deadline_warning", "released", "still_billing",
                 "release_held", "budget", "wallet_low", "wipe_soon", "card_found")
NotifyEventKind = Literal["queue_ended", "run_failed", "deadline_warning", "released",
                          "still_billing", "release_held", "budget", "wallet_low", "wipe_soon",
                          "card_found"]
_APPRISE_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")


class NotifySettings(_Section):
    """`[notify]`: the renter's phone or chat, through Apprise URLs. The URLs carry tokens: a
    file holding them must be 0600 (or use GPUTUI_NOTIFY_URLS); never shown unmasked."""

    urls: list[str] = Field(default_factory=list)
    events: list[NotifyEventKind] | None = None  # unset: every event (run_failed: opt-in)
    run_failed: bool = False
    wallet_low_hours: float = Field(default=3.0, gt=0, le=720)

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        out = []
        for i, url in enumerate(v):
            url = url.strip()
            if not _APPRISE_URL.match(url):  # never the URL itself in the message: a secret
                raise ValueError(_("urls[{index}] is not an Apprise URL (service://...)").format(
                    index=i))
            out.append(url)
        return out

    def wants(self, kind: str) -> bool:
        """Whether the renter asked for events of this kind."""
        if self.events is not None:
            return kind in self.events or (kind == "run_failed" and self.run_failed)
        return kind != "run_failed" or self.run_failed


class ProviderSettings(_Section):
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    # `lambda` is a Python keyword, so the attribute has another name.
    lambda_cloud: LambdaSettings = Field(default_factory=LambdaSettings, alias="lambda")
    autodl: AutoDLSettings = Field(default_factory=AutoDLSettings)
    slurm: dict[str, SlurmClusterSettings] = Field(default_factory=dict)  # by cluster name

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class PriceOverride(BaseModel):
    """A `[[prices]]` row. The catalog checks the rest of its fields (package, gpu_counts,
    region, note, ...) when it applies the row, and names a bad one."""

    model_config = ConfigDict(extra="allow", defer_build=True)
    provider: str
    gpu: str
    price_per_gpu_hour: Decimal = Field(ge=0)
    currency: str = "USD"
    granularity: Literal["second", "minute", "hour"] = "second"
    minimum_seconds: int = Field(default=0, ge=0)
    storage_per_gb_month: Decimal = Field(default=Decimal(0), ge=0)
    tier: str = "user"
    source: str = "config.toml"
    as_of: str | None = None


class Config(_Section):
    # The interface language; unset: the locale decides (zh_CN... gives Chinese, else English).
    language: Literal["zh", "en"] | None = None
    ui: UISettings = Field(default_factory=UISettings)
    lease: LeaseSettings = Field(default_factory=LeaseSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    providers: ProviderSettings = Field(default_factory=ProviderSettings)
    money: MoneySettings = Field(default_factory=MoneySettings)
    prices: list[PriceOverride] = Field(default_factory=list)
    mcp: McpSettings = Field(default_factory=McpSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)


def known_secrets(config: Config | None, env: Any = None) -> list[str]:
    """The secrets gputui holds (API keys and tokens, from config.toml and the environment):
    what `gputui.sanitize.mask_secrets` keeps out of everything shown, stored or logged."""
    env = os.environ if env is None else env
    found = [env.get(LAMBDA_KEY_ENV), env.get(AUTODL_TOKEN_ENV)]
    if config is not None:
        found += [config.providers.lambda_cloud.api_key, config.providers.autodl.token]
    return [s.strip() for s in found if s and len(s.strip()) >= 6]


def default_config() -> Config:
    """The defaults, built without running validators (they are known good): a command that
    finds no config file pays nothing for it."""
    return Config.model_construct(
        language=None,
        ui=UISettings.model_construct(),
        lease=LeaseSettings.model_construct(),
        budget=BudgetSettings.model_construct(),
        providers=ProviderSettings.model_construct(
            sandbox=SandboxSettings.model_construct(),
            lambda_cloud=LambdaSettings.model_construct(),
            autodl=AutoDLSettings.model_construct(),
            slurm={},
        ),
        money=MoneySettings.model_construct(),
        prices=[],
        mcp=McpSettings.model_construct(),
        notify=NotifySettings.model_construct(),
    )


# Pydantic's own messages for the mistakes a config file holds most, as templates (its English
# text exactly), so that they can be shown in the interface language.
_PYDANTIC = {
    "missing": N_("Field required"),
    "string_type": N_("Input should be a valid string"),
    "int_type": N_("Input should be a valid integer"),
    "int_parsing": N_("Input should be a valid integer, unable to parse string as an integer"),
    "int_from_float": N_("Input should be a valid integer, got a number with a fractional part"),
    "float_type": N_("Input should be a valid number"),
    "float_parsing": N_("Input should be a valid number, unable to parse string as a number"),
    "finite_number": N_("Input should be a finite number"),
    "decimal_parsing": N_("Input should be a valid decimal"),
    "decimal_type": N_("Decimal input should be an integer, float, string or Decimal object"),
    "bool_type": N_("Input should be a valid boolean"),
    "bool_parsing": N_("Input should be a valid boolean, unable to interpret input"),
    "list_type": N_("Input should be a valid list"),
    "dict_type": N_("Input should be a valid dictionary"),
    "literal_error": N_("Input should be {expected}"),
    "greater_than": N_("Input should be greater than {gt}"),
    "greater_than_equal": N_("Input should be greater than or equal to {ge}"),
    "less_than": N_("Input should be less than {lt}"),
    "less_than_equal": N_("Input should be less than or equal to {le}"),
}


def _problem(err: Any) -> str:
    """What is wrong with one value, in the interface language where we know pydantic's words
    (its message as it is otherwise)."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    template = _PYDANTIC.get(err["type"])
    if template is None:
        return msg
    ctx = {k: str(v) for k, v in (err.get("ctx") or {}).items()}
    try:
        if template.format(**ctx) != msg:  # another pydantic's wording: keep its own
            return msg
        return _(template).format(**ctx)
    except (KeyError, IndexError, ValueError):
        return msg


def _where(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def load_config(path: Path | None = None) -> Config:
    """Read config.toml; a missing file gives the defaults."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return default_config()
    except OSError as exc:
        raise ConfigError(_("{path}: cannot read: {problem}").format(
            path=path, problem=exc.strerror or exc)) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(_("{path}: not UTF-8 text").format(path=path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(_("{path}: not valid TOML: {problem}").format(
            path=path, problem=exc)) from None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = _where(err["loc"])
        msg = _problem(err)
        if err["type"] == "extra_forbidden":
            msg = _("unknown key")
        more = exc.error_count() - 1
        extra = ngettext(" (and {n} more problem)", " (and {n} more problems)",
                         more).format(n=more) if more else ""
        raise ConfigError(_("{path}: key '{key}': {problem}").format(
            path=path, key=where, problem=msg) + extra) from None
    if config.providers.lambda_cloud.api_key and _readable_by_others(path):
        raise ConfigError(_("{path}: key 'providers.lambda.api_key': the file holds an API key "
                            "and others can read it; run chmod 600 {path}").format(path=path))
    if config.providers.autodl.token and _readable_by_others(path):
        raise ConfigError(_("{path}: key 'providers.autodl.token': the file holds an AutoDL "
                            "token and others can read it; run chmod 600 {path}").format(path=path))
    if config.notify.urls and _readable_by_others(path):
        raise ConfigError(_("{path}: key 'notify.urls': the file holds notification URLs (they "
                            "carry tokens) and others can read it; run chmod 600 {path}").format(
                                path=path))
    return config


def _readable_by_others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & 0o077)
    except OSError:
        return False


def _toml_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_toml_ready(v) for v in value]
    if isinstance(value, Decimal):
        return float(value)
    return value


def write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only, atomically."""
    _private_mkdir(path.parent)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_config(config: Config, path: Path | None = None) -> Path:
    import tomli_w

    path = path or config_path()
    data = _toml_ready(config.model_dump(mode="python", by_alias=True))
    write_private(path, tomli_w.dumps(data).encode())
    return path


def set_theme(name: str, path: Path | None = None) -> None:
    """Remember the chosen theme; a broken config is left as it is."""
    try:
        cfg = load_config(path)
    except ConfigError:
        return
    cfg.ui.theme = name
    save_config(cfg, path)


def set_budget(daily: Decimal | None, monthly: Decimal | None, per_instance: Decimal | None,
               release_at_cap: bool, path: Path | None = None) -> Config:
    """Write the budget caps (None: no cap) to the config file, keeping everything else in it;
    a config that cannot be read raises ConfigError and is left as it is."""
    cfg = load_config(path)
    cfg.budget = cfg.budget.model_copy(update={  # its currency and the rest kept
        "daily": daily, "monthly": monthly, "per_instance": per_instance,
        "release_at_cap": release_at_cap})
    save_config(cfg, path)
    return cfg


def set_language_setting(language: str, path: Path | None = None) -> Path:
    """Write `language = "zh"` (or "en") at the top level of the config file, every other line
    of it kept as it is (comments too); a config that cannot be read raises ConfigError and is
    left as it is."""
    path = path or config_path()
    load_config(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    setting = f'language = "{language}"\n'
    lines = text.splitlines(keepends=True)
    for i, raw in enumerate(lines):
        stripped = raw.strip()
        if stripped.startswith("["):  # top-level keys come before the first table
            lines.insert(i, setting)
            break
        if re.match(r"language\s*=", stripped):
            lines[i] = setting
            break
    else:
        lines.insert(0, setting)
    new = "".join(lines)
    try:
        ok = tomllib.loads(new).get("language") == language
    except tomllib.TOMLDecodeError:
        ok = False
    if ok:
        write_private(path, new.encode("utf-8"))
    else:  # a layout the line edit cannot follow: the whole file written from its values
        cfg = load_config(path)
        cfg.language = language  # type: ignore[assignment]
        save_config(cfg, path)
    return path
