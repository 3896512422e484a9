"""Prometheus metrics: what a scrape says, what Prometheus itself reads back, and bad input."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputui.models import (
    BillingRule,
    DiskUse,
    GpuSample,
    HostSample,
    Instance,
    InstanceStatus,
    Lease,
    LinkState,
    utcnow,
)
from gputui.services.metrics import FleetCollector, registry_for
from gputui.store import SessionStore
from tests.conftest import GPUTUI, run_gputui_env


def scrape(collector: FleetCollector) -> dict[str, list]:
    text = generate_latest(registry_for(collector)).decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def _instance(store: SessionStore, iid: str, name: str, price: str, currency: str,
              gpus: int = 2) -> Instance:
    inst = Instance(id=iid, name=name, provider="sandbox", gpu="H100 SXM", gpu_count=gpus,
                    billing=BillingRule(price_per_hour=Decimal(price), currency=currency),
                    status=InstanceStatus.RUNNING, created_at=utcnow() - timedelta(hours=1))
    inst.mark_running(utcnow() - timedelta(hours=1))
    store.put_instance_sync(inst)
    return inst


def test_a_scrape_names_units_labels_and_currencies(gputui_home: Path):
    store = SessionStore(gputui_home / "state.db")
    usd = _instance(store, "a1", 'train "big"\x1b[2J\nrun', "4.00", "USD")
    cny = _instance(store, "b2", "cheap", "3.50", "CNY", gpus=1)
    store.put_lease_sync(Lease(instance_id=usd.id, release_at=utcnow() + timedelta(minutes=30)))
    store.add_samples(usd.id, [
        GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA H100 80GB HBM3", utilization_gpu=87.0,
                  memory_used_mib=40960.0, memory_total_mib=81559.0, temperature_c=64.0,
                  power_draw_w=512.5, power_limit_w=700.0),
        GpuSample(index=1, uuid="GPU-bbbb", name="NVIDIA H100 80GB HBM3", utilization_gpu=None,
                  memory_used_mib=None, memory_total_mib=81559.0),
    ])
    store.set_link(usd.id, LinkState.CONNECTED)
    got = scrape(FleetCollector(store))

    [util] = got["gputui_gpu_utilization_ratio"]  # a GPU that did not say is absent, not 0
    assert util.value == pytest.approx(0.87)
    assert util.labels == {"instance_name": 'train "big" run', "provider": "sandbox",
                           "gpu": "0", "uuid": "GPU-aaaa", "model": "NVIDIA H100 80GB HBM3"}
    [used] = got["gputui_gpu_memory_used_bytes"]
    assert used.value == 40960 * 1024 * 1024
    assert len(got["gputui_gpu_memory_total_bytes"]) == 2
    assert got["gputui_gpu_temperature_celsius"][0].value == 64.0
    assert got["gputui_gpu_power_watts"][0].value == 512.5

    link = {s.labels["state"]: s.value for s in got["gputui_instance_link_state"]
            if s.labels["instance_name"] == 'train "big" run'}
    assert link["connected"] == 1.0 and sum(link.values()) == 1.0

    rates = {s.labels["currency"]: s.value for s in got["gputui_instance_hourly_rate"]}
    assert rates == {"USD": 4.0, "CNY": 3.5}
    costs = {s.labels["instance_name"]: (s.value, s.labels["currency"])
             for s in got["gputui_instance_cost_total"]}
    assert costs["cheap"] == (pytest.approx(3.5, abs=0.02), "CNY")
    assert costs['train "big" run'][1] == "USD"
    [left] = got["gputui_instance_release_in_seconds"]  # "cheap" has no timer: absent
    assert 1700 < left.value <= 1800 and left.labels["instance_name"] == 'train "big" run'
    today = {s.labels["currency"]: s.value for s in got["gputui_spend_today"]}
    assert set(today) == {"USD", "CNY"}  # per currency, never one sum
    assert all(name.startswith("gputui_") for name in got)
    assert cny.id  # listed above by name


def test_a_scrape_carries_the_host_vitals(gputui_home: Path):
    store = SessionStore(gputui_home / "state.db")
    inst = _instance(store, "h1", "vitals", "1.00", "USD", gpus=1)
    _instance(store, "h2", "no-vitals-yet", "1.00", "USD", gpus=1)
    store.set_host(inst.id, HostSample(
        cpu_pct=97.0, cpu_cores=4, cpu_limited=True, iowait_pct=2.5, load1=3.9, load5=3.0,
        load15=None, mem_used_mib=2048.0, mem_total_mib=8192.0, disk_read_bps=1.5e6,
        disk_write_bps=0.0, net_rx_bps=None, net_tx_bps=10.0,
        disks=[DiskUse(mount="/", filesystem="overlay", size_kib=1000, used_kib=930,
                       avail_kib=70),
               DiskUse(mount="/data\x1b[2J", filesystem="/dev/sdb", size_kib=10,
                       used_kib=1, avail_kib=9)]))
    got = scrape(FleetCollector(store))
    [cpu] = got["gputui_host_cpu_utilization_ratio"]  # the instance without vitals is absent
    assert cpu.value == pytest.approx(0.97)
    assert cpu.labels == {"instance_name": "vitals", "provider": "sandbox"}
    assert got["gputui_host_cpu_cores"][0].value == 4
    assert got["gputui_host_cpu_iowait_ratio"][0].value == pytest.approx(0.025)
    load = {s.labels["window"]: s.value for s in got["gputui_host_load_average"]}
    assert load == {"1m": 3.9, "5m": 3.0}  # 15m not read: absent, not 0
    assert got["gputui_host_memory_used_bytes"][0].value == 2048 * 1024 * 1024
    assert got["gputui_host_memory_total_bytes"][0].value == 8192 * 1024 * 1024
    io = {s.labels["direction"]: s.value for s in got["gputui_host_disk_bytes_per_second"]}
    assert io == {"read": 1.5e6, "write": 0.0}
    net = {s.labels["direction"]: s.value for s in got["gputui_host_network_bytes_per_second"]}
    assert net == {"transmit": 10.0}
    used = {s.labels["mount"]: s.value for s in got["gputui_host_filesystem_used_ratio"]}
    assert used["/"] == pytest.approx(0.93)
    assert all("\x1b" not in m for m in used)  # a remote mount name is a clean label
    size = {s.labels["mount"]: s.value for s in got["gputui_host_filesystem_size_bytes"]}
    assert size["/"] == 1000 * 1024
    [age] = got["gputui_host_sample_age_seconds"]
    assert 0 <= age.value < 60


def test_metrics_on_a_released_instance_go_away(gputui_home: Path):
    store = SessionStore(gputui_home / "state.db")
    inst = _instance(store, "c3", "gone", "1.00", "USD")
    ended = inst.model_copy()
    ended.mark_ended(utcnow(), "manual")
    from gputui.models import LedgerEntry

    store.end_instance_sync(inst.id, LedgerEntry.from_instance(ended, "manual", utcnow()), ended)
    got = scrape(FleetCollector(store))
    assert "gputui_instance_hourly_rate" not in got
    assert got["gputui_spend_today"][0].labels == {"currency": "USD"}


def gputui(home: Path, *args: str, timeout: float = 60):
    return subprocess.run([*GPUTUI, *args], capture_output=True, text=True,
                          env=run_gputui_env(home), timeout=timeout, stdin=subprocess.DEVNULL)


def test_bad_listen_addresses_start_nothing(gputui_home: Path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        cases = [
            (["metrics", "--listen", "0.0.0.0:9400"], "--allow-remote"),
            (["daemon", "--metrics", "192.168.1.5:9400"], "--allow-remote"),
            (["metrics", "--listen", "example.com:9400"], "not a loopback"),
            (["metrics", "--listen", f"127.0.0.1:{port}"], "is in use"),
            (["daemon", "--metrics", f"127.0.0.1:{port}"], "is in use"),
            (["metrics", "--listen", "9400"], "HOST:PORT"),
            (["metrics", "--listen", "127.0.0.1:99999"], "out of range"),
            (["daemon", "--interval", "0"], "--interval"),
        ]
        for args, text in cases:
            out = gputui(gputui_home, *args)
            assert out.returncode == 2, (args, out)
            assert text in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
            assert out.stderr.strip().count("\n") == 0, (args, out.stderr)
            assert out.stdout == ""
        status = gputui(gputui_home, "daemon", "status")
        assert status.returncode == 3  # no daemon was left behind
    finally:
        taken.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="Prometheus is not installed (apt-get install prometheus; CI does)")
def test_prometheus_scrapes_gputui_and_answers_a_query(gputui_home: Path, tmp_path: Path):
    made = gputui(gputui_home, "create", "--provider", "sandbox", "--gpu", "RTX 4090",
                  "--name", "scraped", "--release-after", "30m", timeout=120)
    assert made.returncode == 0, made.stderr
    err_path = tmp_path / "metrics.err"
    procs: list[subprocess.Popen] = []
    try:
        with err_path.open("w") as err:
            procs.append(subprocess.Popen([*GPUTUI, "metrics", "--listen", "127.0.0.1:0"],
                                          stdout=subprocess.DEVNULL, stderr=err,
                                          env=run_gputui_env(gputui_home),
                                          stdin=subprocess.DEVNULL))
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            found = [w for w in err_path.read_text().split() if w.startswith("http://")]
            url = found[0] if found else None
            time.sleep(0.1)
        assert url, err_path.read_text()
        target = urllib.parse.urlparse(url).netloc
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gputui\n    static_configs:\n"
            f"      - targets: ['{target}']\n")
        web = f"127.0.0.1:{_free_port()}"
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={web}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))
        query = urllib.parse.quote('gputui_gpu_memory_total_bytes{instance_name="scraped"}')
        result: list = []
        deadline = time.monotonic() + 120
        while not result and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                answer = _get_json(f"http://{web}/api/v1/query?query={query}")
            except OSError:
                continue  # not listening yet
            result = answer["data"]["result"]
        assert result, "Prometheus never had the metric"
        [series] = result
        assert series["metric"]["job"] == "gputui" and series["metric"]["provider"] == "sandbox"
        assert series["metric"]["instance"] == target  # Prometheus's own label: the target
        assert float(series["value"][1]) == 24564 * 1024 * 1024  # a 4090's 24564 MiB
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
