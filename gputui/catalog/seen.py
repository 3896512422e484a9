"""Live prices seen at a provider, remembered per spec: the fallback where no sourced reference
price exists (AutoDL's Pro API lists no prices; each instance's snapshot has its `payg_price`).

One small JSON file in the state folder (`seen_prices.json`), written atomically whenever a
provider reads a live price; read leniently (a missing or broken file is "nothing seen"). Each
entry keeps when it was seen and from which instance, so it is shown with its date — a last
sighting, never a quote.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

FILE_NAME = "seen_prices.json"


@dataclass(frozen=True)
class SeenPrice:
    provider: str
    offer_id: str  # the provider's spec id (AutoDL: gpu_spec_uuid)
    gpu: str  # the catalog card name the provider's offer carries
    price_per_gpu_hour: Decimal
    currency: str
    seen_at: datetime  # UTC
    instance: str  # the instance it was read from (our name)

    @property
    def date(self) -> str:
        return self.seen_at.date().isoformat()


def _path(state_dir: Path) -> Path:
    return Path(state_dir) / FILE_NAME


def _read(state_dir: Path) -> dict[str, dict[str, dict[str, str]]]:
    try:
        data = json.loads(_path(state_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def seen_prices(state_dir: Path | None) -> list[SeenPrice]:
    """Every price remembered (entries that do not read as one are left out)."""
    if state_dir is None:
        return []
    out: list[SeenPrice] = []
    for provider, specs in _read(state_dir).items():
        if not isinstance(specs, dict):
            continue
        for offer_id, e in specs.items():
            try:
                price = Decimal(str(e["price_per_gpu_hour"]))
                at = datetime.fromisoformat(str(e["seen_at"]))
                if not price.is_finite() or price <= 0:
                    continue
                out.append(SeenPrice(
                    provider=str(provider), offer_id=str(offer_id), gpu=str(e.get("gpu") or ""),
                    price_per_gpu_hour=price, currency=str(e.get("currency") or "USD"),
                    seen_at=at if at.tzinfo else at.replace(tzinfo=UTC),
                    instance=str(e.get("instance") or "")))
            except (KeyError, TypeError, ValueError, InvalidOperation):
                continue
    return out


def last_seen(state_dir: Path | None, provider: str, offer_id: str) -> SeenPrice | None:
    return next((p for p in seen_prices(state_dir)
                 if p.provider == provider and p.offer_id == offer_id), None)


def record_seen_price(state_dir: Path | None, *, provider: str, offer_id: str, gpu: str,
                      price_per_gpu_hour: Decimal, currency: str, instance: str,
                      at: datetime | None = None) -> None:
    """Remember a live price (per GPU-hour). Never raises: a price that cannot be remembered
    is only a lost hint."""
    if state_dir is None or price_per_gpu_hour <= 0:
        return
    data = _read(state_dir)
    specs = data.setdefault(provider, {})
    if not isinstance(specs, dict):
        specs = data[provider] = {}
    specs[offer_id] = {"price_per_gpu_hour": str(price_per_gpu_hour), "currency": currency,
                       "gpu": gpu, "instance": instance,
                       "seen_at": (at or datetime.now(UTC)).astimezone(UTC).isoformat(
                           timespec="seconds")}
    path = _path(state_dir)
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(prefix=".seen-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


__all__ = ["FILE_NAME", "SeenPrice", "last_seen", "record_seen_price", "seen_prices"]
