"""Prometheus metrics: a collector that reads the store at each scrape, served with the official
`prometheus-client` library in the text exposition format.

Every metric is `gputui_…` and follows Prometheus's naming rules: base units in the name
(`_bytes`, `_celsius`, `_watts`, `_seconds`, `_ratio`), `_total` on counters. Money has no base
unit, so every money series carries a `currency` label and currencies are never summed here.

The instance's name is the label `instance_name`, not `instance`: Prometheus sets `instance` on
every series to the scrape target (host:port) and would rename ours to `exported_instance`.

Label values come from outside (names the user typed, GPU names and UUIDs a host reported):
control and format characters are removed and they are cut to 128 characters;
`prometheus-client` escapes quotes, backslashes and line breaks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import ipaddress
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gputui.errors import BadInput
from gputui.i18n import _
from gputui.models import Instance, LinkState, utcnow
from gputui.nvidia.nvsmi import sanitize

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from gputui.store import SessionStore

MIB = 1024 * 1024
LABEL_LIMIT = 128
DEFAULT_LISTEN = "127.0.0.1:9400"


def label(value: object) -> str:
    """A label value safe for any consumer: printable, one line, at most 128 characters."""
    if value is None:
        return ""
    return sanitize(value, LABEL_LIMIT)


# -- where to listen --------------------------------------------------------------------------------


def parse_listen(text: str, *, allow_remote: bool = False, flag: str = "--listen") -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets). Only loopback addresses unless `allow_remote`: the
    figures name instances, GPUs and spending."""
    raw = (text or "").strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not host:
        raise BadInput(_("{flag}: {text} is not HOST:PORT (e.g. {example})").format(
            flag=flag, text=repr(text), example=DEFAULT_LISTEN))
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise BadInput(_("{flag}: {text} is not a port number").format(
            flag=flag, text=repr(port_text))) from None
    if not 0 <= port <= 65535:
        raise BadInput(_("{flag}: port {port} is out of range (0-65535)").format(flag=flag,
                                                                                port=port))
    if host == "localhost":
        loopback = True
    else:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False  # a host name: it may resolve anywhere
    if not loopback and not allow_remote:
        raise BadInput(_("{flag}: {host} is not a loopback address; metrics name your "
                         "instances and spending — add --allow-remote to serve them to other "
                         "machines").format(flag=flag, host=host))
    return host, port


# -- the collector ---------------------------------------------------------------------------------


class FleetCollector:
    """A custom collector: every scrape reads the store (instances, leases and ledger from
    SQLite; the latest GPU readings from memory). Scrapes arrive on the HTTP server's thread;
    the in-memory telemetry is copied on the event loop that writes it (`loop`)."""

    def __init__(self, store: SessionStore, *, loop: asyncio.AbstractEventLoop | None = None,
                 now: Callable[[], datetime] = utcnow,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.store = store
        self.loop = loop
        self.now = now
        self.clock = clock or time.monotonic

    def _on_loop(self, fn: Callable[[], Any]) -> Any:
        loop = self.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return fn()
        try:
            if asyncio.get_running_loop() is loop:
                return fn()
        except RuntimeError:
            pass
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the scraping thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return done.result(timeout=10)

    def _telemetry(self, ids: list[str]) -> dict[str, tuple[list[Any], float | None, LinkState]]:
        store = self.store

        def copy() -> dict[str, tuple[list[Any], float | None, LinkState]]:
            out = {}
            for iid in ids:
                tel = store._telemetry.get(iid)  # read only: never create an entry
                gpus = tel.latest() if tel is not None else []
                out[iid] = (gpus, tel.updated if tel is not None else None, store.link(iid)[0])
            return out

        return self._on_loop(copy)

    def _hosts(self, ids: list[str]) -> dict[str, tuple[Any, float | None]]:
        store = self.store

        def copy() -> dict[str, tuple[Any, float | None]]:
            out = {}
            for iid in ids:
                tel = store._telemetry.get(iid)  # read only: never create an entry
                if tel is not None and tel.host is not None:
                    out[iid] = (tel.host, tel.host_updated)
            return out

        return self._on_loop(copy)

    def _host_families(self, live: list[Instance], mono: float) -> list[Any]:
        """Host vitals beside the GPUs: CPU (of the cores the instance may use), load, memory,
        disk and network rates, and each disk's size and use."""
        from prometheus_client.core import GaugeMetricFamily

        hosts = self._hosts([i.id for i in live])
        il = ["instance_name", "provider"]

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*il, *extra])

        cpu = gauge("gputui_host_cpu_utilization_ratio",
                    "Busy share (0-1) of the CPU cores the instance may use")
        cores = gauge("gputui_host_cpu_cores",
                      "CPU cores the instance may use (its cgroup quota or cpuset, else all)")
        iowait = gauge("gputui_host_cpu_iowait_ratio", "Share (0-1) of CPU time waiting on I/O")
        load = gauge("gputui_host_load_average", "Load average", ("window",))
        mem_used = gauge("gputui_host_memory_used_bytes",
                         "Memory in use (the container's, where it has a limit)")
        mem_total = gauge("gputui_host_memory_total_bytes",
                          "Memory in all (the container's limit, where it has one)")
        disk_io = gauge("gputui_host_disk_bytes_per_second", "Disk throughput", ("direction",))
        net = gauge("gputui_host_network_bytes_per_second", "Network throughput",
                    ("direction",))
        fs_size = gauge("gputui_host_filesystem_size_bytes", "A disk's size", ("mount",))
        fs_avail = gauge("gputui_host_filesystem_avail_bytes", "A disk's free space",
                         ("mount",))
        fs_used = gauge("gputui_host_filesystem_used_ratio",
                        "A disk's use (0-1) as df counts it", ("mount",))
        age = gauge("gputui_host_sample_age_seconds",
                    "Seconds since the instance's latest host reading")
        for inst in live:
            got = hosts.get(inst.id)
            if got is None:
                continue
            h, updated = got
            labels = [label(inst.name), label(inst.provider)]
            if updated is not None:
                age.add_metric(labels, max(0.0, mono - updated))
            if h.cpu_pct is not None:
                cpu.add_metric(labels, h.cpu_pct / 100.0)
            if h.cpu_cores is not None:
                cores.add_metric(labels, h.cpu_cores)
            if h.iowait_pct is not None:
                iowait.add_metric(labels, h.iowait_pct / 100.0)
            for window, value in (("1m", h.load1), ("5m", h.load5), ("15m", h.load15)):
                if value is not None:
                    load.add_metric([*labels, window], value)
            if h.mem_used_mib is not None:
                mem_used.add_metric(labels, h.mem_used_mib * MIB)
            if h.mem_total_mib is not None:
                mem_total.add_metric(labels, h.mem_total_mib * MIB)
            for fam, pairs in ((disk_io, (("read", h.disk_read_bps), ("write", h.disk_write_bps))),
                               (net, (("receive", h.net_rx_bps), ("transmit", h.net_tx_bps)))):
                for direction, value in pairs:
                    if value is not None:
                        fam.add_metric([*labels, direction], value)
            for d in h.disks:
                mount = [*labels, label(d.mount)]
                fs_size.add_metric(mount, d.size_kib * 1024.0)
                fs_avail.add_metric(mount, d.avail_kib * 1024.0)
                if d.used_pct is not None:
                    fs_used.add_metric(mount, d.used_pct / 100.0)
        return [cpu, cores, iowait, load, mem_used, mem_total, disk_io, net, fs_size, fs_avail,
                fs_used, age]

    def describe(self) -> list[Any]:
        return []  # no describe-time scrape: the registry must not read the store at register

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from gputui.services.costs import local_day_start, spent_between

        now = self.now()
        instances = self.store.instances_sync()
        live = [i for i in instances if i.status.live]
        leases = {le.instance_id: le for le in self.store.leases_sync()}
        ledger = self.store.ledger_sync()
        tel = self._telemetry([i.id for i in live])
        mono = self.clock()

        gpu_labels = ["instance_name", "provider", "gpu", "uuid", "model"]
        util = GaugeMetricFamily("gputui_gpu_utilization_ratio",
                                 "GPU utilisation (0-1) in the latest reading", labels=gpu_labels)
        mem_used = GaugeMetricFamily("gputui_gpu_memory_used_bytes", "GPU memory in use",
                                     labels=gpu_labels)
        mem_total = GaugeMetricFamily("gputui_gpu_memory_total_bytes", "GPU memory in all",
                                      labels=gpu_labels)
        temp = GaugeMetricFamily("gputui_gpu_temperature_celsius", "GPU core temperature",
                                 labels=gpu_labels)
        power = GaugeMetricFamily("gputui_gpu_power_watts", "GPU power draw", labels=gpu_labels)
        power_limit = GaugeMetricFamily("gputui_gpu_power_limit_watts", "GPU power limit",
                                        labels=gpu_labels)
        age = GaugeMetricFamily("gputui_gpu_sample_age_seconds",
                                "Seconds since the instance's latest GPU reading",
                                labels=["instance_name", "provider"])
        inst_labels = ["instance_name", "provider"]
        link = GaugeMetricFamily("gputui_instance_link_state",
                                 "The SSH link to the instance: 1 for its current state",
                                 labels=[*inst_labels, "state"])
        rate = GaugeMetricFamily("gputui_instance_hourly_rate",
                                 "What the instance bills per hour now (0 while stopped)",
                                 labels=[*inst_labels, "currency"])
        cost = CounterMetricFamily("gputui_instance_cost",
                                   "What the instance has cost so far (compute and storage)",
                                   labels=[*inst_labels, "currency"])
        release = GaugeMetricFamily("gputui_instance_release_in_seconds",
                                    "Seconds until the instance's release deadline (negative: "
                                    "overdue); absent with no timer", labels=inst_labels)
        running = GaugeMetricFamily("gputui_instances", "Live instances by status",
                                    labels=["provider", "status"])
        today = GaugeMetricFamily("gputui_spend_today",
                                  "Spent since local midnight, per currency (never summed "
                                  "across currencies)", labels=["currency"])

        counts: dict[tuple[str, str], int] = {}
        for inst in live:
            name, prov = label(inst.name), label(inst.provider)
            counts[(prov, inst.status.value)] = counts.get((prov, inst.status.value), 0) + 1
            cur = label(inst.billing.currency)
            billing = inst.billing.price_per_hour if inst.status.billing_compute else Decimal(0)
            rate.add_metric([name, prov, cur], float(billing))
            cost.add_metric([name, prov, cur], float(inst.accrued(now)))
            lease = leases.get(inst.id)
            if lease is not None and lease.state == "active" and lease.release_at is not None:
                release.add_metric([name, prov], (lease.release_at - now).total_seconds())
            gpus, updated, state = tel.get(inst.id, ([], None, LinkState.UNKNOWN))
            for s in LinkState:
                link.add_metric([name, prov, s.value], 1.0 if s == state else 0.0)
            if updated is not None:
                age.add_metric([name, prov], max(0.0, mono - updated))
            for g in gpus:
                labels = [name, prov, str(g.index), label(g.uuid), label(g.name or inst.gpu)]
                if g.utilization_gpu is not None:
                    util.add_metric(labels, g.utilization_gpu / 100.0)
                if g.memory_used_mib is not None:
                    mem_used.add_metric(labels, g.memory_used_mib * MIB)
                if g.memory_total_mib is not None:
                    mem_total.add_metric(labels, g.memory_total_mib * MIB)
                if g.temperature_c is not None:
                    temp.add_metric(labels, g.temperature_c)
                if g.power_draw_w is not None:
                    power.add_metric(labels, g.power_draw_w)
                if g.power_limit_w is not None:
                    power_limit.add_metric(labels, g.power_limit_w)
        for (prov, status), n in sorted(counts.items()):
            running.add_metric([prov, status], n)
        start = local_day_start(now)
        currencies = sorted({i.billing.currency for i in instances} |
                            {e.currency for e in ledger})
        for cur in currencies:
            spent = spent_between([i for i in live if i.billing.currency == cur],
                                  [e for e in ledger if e.currency == cur], start, now)
            today.add_metric([label(cur)], float(spent))
        yield from (util, mem_used, mem_total, temp, power, power_limit, age, link, rate, cost,
                    release, running, today)
        yield from self._host_families(live, mono)


def registry_for(collector: FleetCollector) -> CollectorRegistry:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry


class MetricsServer:
    """The exposition endpoint (`/metrics`) on its own thread."""

    def __init__(self, httpd: Any, thread: Any) -> None:
        self._httpd = httpd
        self._thread = thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve_metrics(listen: str, collector: FleetCollector, *, allow_remote: bool = False,
                  flag: str = "--listen") -> MetricsServer:
    """Bind and serve, or raise `BadInput` (nothing started) with one line."""
    host, port = parse_listen(listen, allow_remote=allow_remote, flag=flag)
    from prometheus_client import start_http_server

    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry_for(collector))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BadInput(_("{flag}: {host}:{port} is in use (another program listens "
                             "there; choose another port)").format(flag=flag, host=host,
                                                                  port=port)) from None
        raise BadInput(_("{flag}: cannot listen on {host}:{port}: {error}").format(
            flag=flag, host=host, port=port, error=exc.strerror or exc)) from None
    return MetricsServer(httpd, thread)


def instance_labels(inst: Instance) -> dict[str, str]:
    return {"instance_name": label(inst.name), "provider": label(inst.provider)}
