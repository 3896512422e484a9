"""``nvidia-smi -q -x``: the XML report, repaired where nvidia-smi writes invalid XML."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, tzinfo
from typing import Any

from gputui.models import GpuInventory, GpuSample, HostInventory, MigDevice, ProcessSample
from gputui.sanitize import sanitize

from .common import (
    MAX_XML_CHARS,
    NvsmiParseError,
    _index,
    _int,
    _mib,
    _num,
    _pcie_width,
    _text,
    _timestamp,
    _version,
    _watts,
)
from .mig import guess_mig_profile

# --------------------------------------------------------------------------------------------
# XML (`nvidia-smi -q -x`)
# --------------------------------------------------------------------------------------------


# Characters XML 1.0 forbids. nvidia-smi copies process names into its XML unescaped, so one
# process named with an escape sequence would make the whole report unreadable.
_XML_ILLEGAL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_XML_CHARREF_RE = re.compile(r"&#(x[0-9a-fA-F]{1,8}|[0-9]{1,10});")
_XML_BARE_AMP_RE = re.compile(r"&(?![A-Za-z_][\w.-]{0,31};|#x[0-9a-fA-F]{1,8};|#[0-9]{1,10};)")


_XML_ESCAPE_SEQ_RE = re.compile(
    # as _ESCAPE_RE, but never eating the markup that follows (< & ' ")
    r"\x1b\[[0-;=>?]*[ !#-%(-/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b<'\"&]*(?:\x07|\x1b\\)?"
    r"|\x1b[ !#-%(-/]*[0-;=-~]?"
)


def _xml_repair(text: str) -> str:
    """Remove what nvidia-smi may print but XML 1.0 forbids: terminal escape sequences and
    other control characters (raw or as character references); escape bare '&'."""

    def charref(m: re.Match[str]) -> str:
        ref = m.group(1)
        code = int(ref[1:], 16) if ref[0] in "xX" else int(ref)
        if code > 0x10FFFF or _XML_ILLEGAL_RE.match(chr(code)):
            return ""
        return m.group(0)

    if "\x1b" in text:
        text = _XML_ESCAPE_SEQ_RE.sub("", text)
    text = _XML_ILLEGAL_RE.sub("", text)
    text = _XML_CHARREF_RE.sub(charref, text)
    return _XML_BARE_AMP_RE.sub("&amp;", text)


def _xml_root(text: str | bytes) -> ET.Element:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise NvsmiParseError("nvidia-smi XML must be text")
    if len(text) > MAX_XML_CHARS:
        raise NvsmiParseError("nvidia-smi XML report is implausibly large")
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise NvsmiParseError("XML entity declarations are not accepted")
    # The encoding declaration is for bytes; we already hold text.
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text, count=1)
    text = _xml_repair(text)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise NvsmiParseError(f"not XML: {sanitize(exc, 120)}") from None
    except (ValueError, RecursionError):
        raise NvsmiParseError("not XML") from None
    if root.tag != "nvidia_smi_log":
        raise NvsmiParseError(f"not an nvidia-smi report (root <{sanitize(root.tag, 40)}>)")
    return root


def _find(el: ET.Element | None, *paths: str) -> str | None:
    """The text of the first of `paths` that exists under `el` (None if none do)."""
    if el is None:
        return None
    for path in paths:
        child = el.find(path)
        if child is not None and child.text is not None and child.text.strip():
            return child.text
    return None


def _first_value(el: ET.Element, paths: Sequence[str], conv: Any) -> Any:
    """The first of `paths` whose value converts to something other than None."""
    for path in paths:
        value = conv(_find(el, path))
        if value is not None:
            return value
    return None


_POWER_DRAW = (
    "power_readings/power_draw",
    "gpu_power_readings/power_draw",
    "gpu_power_readings/instant_power_draw",
    "power_readings/instant_power_draw",
    "gpu_power_readings/average_power_draw",
    "power_readings/average_power_draw",
)
_POWER_LIMIT = (
    "power_readings/power_limit",
    "gpu_power_readings/current_power_limit",
    "power_readings/current_power_limit",
    "power_readings/enforced_power_limit",
    "gpu_power_readings/enforced_power_limit",
    "gpu_power_readings/requested_power_limit",
)


def _gpu_elements(root: ET.Element) -> list[ET.Element]:
    return root.findall("gpu")


def _xml_mig_devices(gpu: ET.Element, index: int) -> list[MigDevice]:
    product = _text(_find(gpu, "product_name"))
    arch = _text(_find(gpu, "product_architecture"), 32)
    gpu_total = _mib(_find(gpu, "fb_memory_usage/total"))
    out = []
    for dev in gpu.findall("mig_devices/mig_device"):
        total = _mib(_find(dev, "fb_memory_usage/total"))
        sms = _int(_find(dev, "device_attributes/shared/multiprocessor_count"))
        out.append(
            MigDevice(
                gpu_index=index,
                gi_id=_int(_find(dev, "gpu_instance_id")),
                ci_id=_int(_find(dev, "compute_instance_id")),
                mig_index=_index(_find(dev, "index")),
                profile=_text(_find(dev, "profile_name", "profile"), 32)
                or guess_mig_profile(product, sms, total, gpu_total, arch),
                memory_used_mib=_mib(_find(dev, "fb_memory_usage/used")),
                memory_total_mib=total,
                uuid=_text(_find(dev, "uuid", "mig_uuid"), 96),
            )
        )
    return out


def parse_xml(text: str | bytes) -> HostInventory:
    """The inventory in an `nvidia-smi -q -x` report (DTD v10..v13, trimmed reports too).

    Raises `NvsmiParseError` when the text is not such a report; missing elements are None."""
    root = _xml_root(text)
    gpus: list[GpuInventory] = []
    processes: list[ProcessSample] = []
    for index, gpu in enumerate(_gpu_elements(root)):
        uuid = _text(_find(gpu, "uuid"), 96)
        gpus.append(
            GpuInventory(
                index=index,
                name=_text(_find(gpu, "product_name")),
                uuid=uuid,
                serial=_text(_find(gpu, "serial"), 64),
                pci_bus_id=_text(_find(gpu, "pci/pci_bus_id") or gpu.get("id"), 32),
                memory_total_mib=_mib(_find(gpu, "fb_memory_usage/total")),
                power_limit_w=_first_value(gpu, _POWER_LIMIT, _watts),
                ecc_mode=_text(_find(gpu, "ecc_mode/current_ecc"), 32),
                mig_mode=_text(_find(gpu, "mig_mode/current_mig"), 32),
                pcie_gen=_int(_find(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
                pcie_width=_pcie_width(
                    _find(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")
                ),
                vbios=_text(_find(gpu, "vbios_version"), 64),
                mig_devices=_xml_mig_devices(gpu, index),
            )
        )
        for proc in gpu.findall("processes/process_info"):
            pid = _int(_find(proc, "pid"))
            if pid is None or pid < 0:
                continue
            processes.append(
                ProcessSample(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_index=index,
                    name=_text(_find(proc, "process_name")),
                    used_memory_mib=_mib(_find(proc, "used_memory")),
                    kind=_text(_find(proc, "type"), 8),
                )
            )
    return HostInventory(
        driver_version=_version(_find(root, "kmd_version", "driver_version")),
        cuda_version=_version(_find(root, "cuda_umd_version", "cuda_version")),
        gpus=gpus,
        processes=processes,
    )


def xml_samples(text: str | bytes, *, tz: tzinfo = UTC) -> list[GpuSample]:
    """The current readings in an `nvidia-smi -q -x` report, one sample per GPU. Power draw
    falls back to `instant_power_draw`, then `average_power_draw` where `power_draw` is N/A."""
    root = _xml_root(text)
    when = _timestamp(_find(root, "timestamp"), tz)
    samples = []
    for index, gpu in enumerate(_gpu_elements(root)):
        samples.append(
            GpuSample(
                index=index,
                uuid=_text(_find(gpu, "uuid"), 96),
                name=_text(_find(gpu, "product_name")),
                timestamp=when,
                utilization_gpu=_num(_find(gpu, "utilization/gpu_util")),
                utilization_memory=_num(_find(gpu, "utilization/memory_util")),
                memory_used_mib=_mib(_find(gpu, "fb_memory_usage/used")),
                memory_total_mib=_mib(_find(gpu, "fb_memory_usage/total")),
                temperature_c=_num(_find(gpu, "temperature/gpu_temp")),
                power_draw_w=_first_value(gpu, _POWER_DRAW, _watts),
                power_limit_w=_first_value(gpu, _POWER_LIMIT, _watts),
                fan_pct=_num(_find(gpu, "fan_speed")),
                sm_clock_mhz=_num(_find(gpu, "clocks/sm_clock")),
                pstate=_text(_find(gpu, "performance_state"), 16),
                mig_mode=_text(_find(gpu, "mig_mode/current_mig"), 32),
            )
        )
    return samples
