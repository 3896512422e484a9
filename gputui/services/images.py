"""Images (the account's private ones and the base ones gputui knows, with readable names), saving
an instance as an image, and reaching an instance's ports: the SSH local forward and the
addresses a provider publishes (AutoDL's Jupyter and custom-service ports).

Used by `gputui images`, `gputui image save`, `create --image`, `gputui forward` and New.
Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.catalog.errors import CatalogError
from gputui.i18n import N_, Deferred, _
from gputui.models import Instance, InstanceStatus
from gputui.providers.base import ProviderError
from gputui.services.errors import InvalidRequest, ServiceError

if TYPE_CHECKING:
    from gputui.catalog.images import ImageInfo
    from gputui.services.hub import Services

MAX_PORT = 65535
IMAGE_NAME_MAX = 64


async def list_images(services: Services, provider: str) -> list[ImageInfo]:
    """The provider's images (private first, then base), each with a readable name."""
    try:
        return list(await services.provider(provider).images())
    except ProviderError as exc:
        raise _error(exc) from None


def image_providers(services: Services) -> list[str]:
    """The providers that take an image (those with a base table or an image API)."""
    from gputui.catalog.images import base_images

    with_table = {i.provider for i in base_images()}
    return [n for n in services.providers if n in with_table]


async def resolve_image(services: Services, provider: str, wanted: str | None) -> str | None:
    """`create --image` as typed — an id, or a readable name ('PyTorch 2.0.0', a private
    image's name) — as the id the provider takes. None: the provider's default."""
    from gputui.catalog.images import match_image

    if wanted is None or not wanted.strip():
        return None
    images = await list_images(services, provider)
    if not images:
        return wanted.strip()
    try:
        found = match_image(wanted, images)
    except CatalogError as exc:
        raise InvalidRequest(str(exc)) from None
    if found is not None and found.state != "done":
        raise InvalidRequest(Deferred(
            N_("--image: {image} is not saved yet (status {status}) — `gputui images` shows "
               "when it is ready"), image=repr(found.readable), status=repr(found.status)))
    return found.id if found is not None else wanted.strip()


def check_image_name(name: str) -> str:
    """An image name as AutoDL's console takes it: 1–64 characters, one line."""
    text = name.strip()
    if not text or len(text) > IMAGE_NAME_MAX or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InvalidRequest(Deferred(
            N_("IMAGE: give an image name of 1 to {most} characters on one line"),
            most=IMAGE_NAME_MAX))
    return text


async def save_image(services: Services, inst: Instance, name: str,
                     progress: Callable[[str], None] | None = None) -> ImageInfo:
    """Save the instance as a private image and wait until it is saved."""
    name = check_image_name(name)
    if not inst.status.live:
        raise InvalidRequest(_("{name} is released: nothing to save").format(name=inst.name))
    try:
        return await services.provider(inst.provider).save_image(inst, name, progress)
    except ProviderError as exc:
        raise _error(exc) from None


# -- reaching the box ------------------------------------------------------------------------------


def check_port(value: int | str, flag: str) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        port = -1
    if not 1 <= port <= MAX_PORT:
        raise InvalidRequest(Deferred(N_("{flag}: give a port between 1 and {most}, not {value}"),
                                      flag=flag, most=MAX_PORT, value=repr(str(value))))
    return port


async def forward(services: Services, inst: Instance, remote_port: int,
                  local_port: int | None = None) -> tuple[int, Any]:
    """An SSH local forward over the instance's link: 127.0.0.1:<local> → the instance's
    127.0.0.1:<remote_port>. Without `local_port`, the same number as the remote one where it
    is free, else any free one. Returns (the local port, the link)."""
    from gputui.remote.ssh import SSHLayerError

    if inst.status != InstanceStatus.RUNNING:
        from gputui.format import status_word

        raise InvalidRequest(Deferred(N_("{name} is {status}: only a running instance can be "
                                         "reached"), name=inst.name,
                                      status=status_word(inst.status)))
    link = await services.link(inst)
    wanted = local_port if local_port is not None else remote_port
    try:
        try:
            port = await link.forward_local(remote_port, local_port=wanted)
        except OSError:
            if local_port is not None:
                raise ServiceError(Deferred(
                    N_("--local: port {port} on this machine is in use — give another"),
                    port=local_port)) from None
            port = await link.forward_local(remote_port, local_port=0)
    except SSHLayerError as exc:
        raise ServiceError(Deferred(N_("{name}: {error}"), name=inst.name, error=exc)) from None
    except OSError as exc:
        raise ServiceError(Deferred(N_("{name}: cannot listen on this machine ({reason})"),
                                    name=inst.name, reason=type(exc).__name__)) from None
    return port, link


async def addresses(services: Services, inst: Instance) -> list[tuple[str, str]]:
    """The provider's published ways in besides SSH (AutoDL: Jupyter, service_6006/6008)."""
    try:
        return await services.provider(inst.provider).addresses(inst)
    except ProviderError as exc:
        raise _error(exc) from None


def _error(exc: ProviderError) -> ServiceError:
    from gputui.errors import BadInput

    return InvalidRequest(str(exc)) if isinstance(exc, BadInput) else ServiceError(str(exc))


__all__ = ["addresses", "check_image_name", "check_port", "forward", "image_providers",
           "list_images", "resolve_image", "save_image"]
