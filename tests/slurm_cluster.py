"""A real one-node Slurm cluster on 127.0.0.1 for the tests (Debian's slurm-wlm and munge).

Everything lives in a scratch folder: its own munged (own socket and key), slurmctld and slurmd
on free ports, one node `localhost` with two fake GPUs (`gpu:h100:2`, character devices made
with mknod), and `SLURM_CONF` pointing at the folder's slurm.conf. Facts in
../shared/reference/slurm-local.md. Tests skip, saying why, where Slurm, munge or root is absent.
With `accounting=True` the cluster also has Slurm's accounting (sacct): slurmdbd over a private
MariaDB whose data lives (and is removed) in the same folder; those tests skip, saying why, where
MariaDB or slurmdbd is absent (see accounting_reason).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gputui.config import Config
    from gputui.models import Instance, LedgerEntry
    from gputui.services.hub import Services

SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scancel", "scontrol",
                  "sinfo", "srun")


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


def missing_reason() -> str | None:
    """Why a local Slurm cannot be started here, or None."""
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (slurmd runs jobs as their user)"
    missing = [b for b in SLURM_BINARIES if _which(b) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): "
                "apt-get install slurm-wlm munge")
    if not os.path.exists("/etc/munge/munge.key"):
        return "munge has no key (/etc/munge/munge.key): apt-get install munge"
    return None


needs_slurm = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")

ACCOUNTING_BINARIES = ("mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacctmgr",
                       "sacct")


def accounting_reason() -> str | None:
    """Why a local Slurm with accounting (slurmdbd over a private MariaDB) cannot be started
    here, or None."""
    if missing_reason() is not None:
        return missing_reason()
    missing = [b for b in ACCOUNTING_BINARIES if _which(b) is None]
    if missing:
        return (f"Slurm accounting needs MariaDB and slurmdbd ({', '.join(missing)} missing): "
                "apt-get install mariadb-server slurmdbd")
    if not any(Path(d, "accounting_storage_mysql.so").exists() for d in _plugin_dirs()):
        return ("slurmdbd has no MySQL plugin (accounting_storage_mysql.so): "
                "apt-get install slurm-wlm-mysql-plugin")
    return None


def _plugin_dirs() -> list[str]:
    import glob

    return glob.glob("/usr/lib/*/slurm-wlm") + glob.glob("/usr/lib*/slurm") + glob.glob(
        "/usr/local/lib*/slurm")


needs_accounting = pytest.mark.skipif(accounting_reason() is not None,
                                      reason=accounting_reason() or "")


def two_nodes_reason() -> str | None:
    """Why a second node (a slurmd in its own network namespace, joined by a veth pair)
    cannot be started here, or None."""
    if missing_reason() is not None:
        return missing_reason()
    for tool in ("ip", "nsenter"):
        if _which(tool) is None:
            return f"a second Slurm node needs `{tool}` (iproute2, util-linux)"
    name = f"gtprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"a second Slurm node needs a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mem_mib() -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 2048


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cleanup: list[list[str]] = field(default_factory=list)  # commands run after the daemons stop

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                              timeout=60, check=check)

    def jobs(self) -> str:
        """squeue's view: `ID STATE REASON` lines."""
        return self.run("squeue", "-h", "-o", "%i %T %r").stdout

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()
        for command in self.cleanup:
            subprocess.run(command, capture_output=True, timeout=30)
        self.cleanup.clear()


def _two_node_network(cluster_cleanup: list[list[str]]) -> tuple[str, str, str]:
    """A network namespace for the second node, joined to this one by a veth pair on a free
    /24: (namespace, this side's address, the second node's address)."""
    import random

    tag = f"{os.getpid() % 100000}"
    ns, here, there = f"gtn{tag}", f"gtv{tag}a", f"gtv{tag}b"
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    while True:
        net = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
        if f" {net}." not in used:
            break
    commands = [["ip", "netns", "add", ns],
                ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
                ["ip", "link", "set", there, "netns", ns],
                ["ip", "addr", "add", f"{net}.1/24", "dev", here],
                ["ip", "link", "set", here, "up"],
                ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/24", "dev", there],
                ["ip", "netns", "exec", ns, "ip", "link", "set", there, "up"],
                ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]
    cluster_cleanup += [["ip", "link", "del", here], ["ip", "netns", "del", ns]]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            for undo in cluster_cleanup:
                subprocess.run(undo, capture_output=True)
            pytest.fail(f"{' '.join(command)}: {done.stderr.strip()}")
    return ns, f"{net}.1", f"{net}.2"


def start_cluster(root: Path, *, gpus: int = 2, gpu_type: str = "h100",
                  path_prefix: str = "", nodes: int = 1, min_job_age: int = 300,
                  accounting: bool = False) -> SlurmCluster:
    """Start munged, slurmctld and slurmd in `root` (foreground processes this test owns).
    `nodes=2`: two nodes n1 and n2 with `gpus` GPUs each, the second one's slurmd in its own
    network namespace (as a second machine; see two_nodes_reason). `min_job_age`: seconds an
    ended job stays listed before Slurm purges it (Slurm's MinJobAge). `accounting`: with
    Slurm's accounting (sacct): a private MariaDB and slurmdbd, started before slurmctld, the
    cluster registered (see accounting_reason); without it, AccountingStorageType=none."""
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "log", "dev", "munge"):
        (root / sub).mkdir(exist_ok=True)
    for i in range(gpus):
        dev = root / "dev" / f"fakegpu{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
    key = root / "munge" / "munge.key"
    shutil.copyfile("/etc/munge/munge.key", key)
    key.chmod(0o600)
    sock = root / "munge" / "munge.sock"
    cpus = max(1, min(os.cpu_count() or 1, 2))
    mem = max(1024, min(_mem_mib() - 512, 24000))
    ctld, slurmd = _free_port(), _free_port()
    dbd = _free_port() if accounting else 0
    cleanup: list[list[str]] = []
    node_lines = (f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} Boards=1 SocketsPerBoard=1 "
                  f"CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory={mem} "
                  f"Gres=gpu:{gpu_type}:{gpus} State=UNKNOWN")
    partition_nodes, ctld_host, spool = "localhost", "localhost", f"{root}/spool"
    gres = f"NodeName=localhost Name=gpu Type={gpu_type} File={root}/dev/fakegpu[0-{gpus - 1}]\n"
    ns = None
    if nodes == 2:
        for i in range(gpus, 2 * gpus):
            dev = root / "dev" / f"fakegpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        ns, addr1, addr2 = _two_node_network(cleanup)
        node_lines = "\n".join(
            f"NodeName={n} NodeAddr={a} CPUs={cpus} Boards=1 SocketsPerBoard=1 "
            f"CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory={mem} "
            f"Gres=gpu:{gpu_type}:{gpus} State=UNKNOWN" for n, a in (("n1", addr1), ("n2", addr2)))
        partition_nodes = "n1,n2"
        ctld_host = f"{socket.gethostname().split('.')[0]}({addr1})"
        spool = f"{root}/spool/%n"
        gres = (f"NodeName=n1 Name=gpu Type={gpu_type} File={root}/dev/fakegpu[0-{gpus - 1}]\n"
                f"NodeName=n2 Name=gpu Type={gpu_type} "
                f"File={root}/dev/fakegpu[{gpus}-{2 * gpus - 1}]\n")
    conf = root / "slurm.conf"
    storage = (f"AccountingStorageType=accounting_storage/slurmdbd\n"
               f"AccountingStorageHost=localhost\nAccountingStoragePort={dbd}\n"
               # slurmdbd's connections authenticate with the munge socket named here
               f"AccountingStoragePass={sock}" if accounting
               else "AccountingStorageType=accounting_storage/none")
    conf.write_text(f"""ClusterName=gputuitest
SlurmctldHost={ctld_host}
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={spool}
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
{storage}
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=5
OverTimeLimit=0
InactiveLimit=0
MinJobAge={min_job_age}
DefMemPerCPU=256
GresTypes=gpu
{node_lines}
PartitionName=debug Nodes={partition_nodes} Default=YES MaxTime=INFINITE DefaultTime=01:00:00 State=UP OverSubscribe=NO
""", encoding="ascii")
    for name in ("n1", "n2") if nodes == 2 else ():
        (root / "spool" / name).mkdir(exist_ok=True)
    (root / "gres.conf").write_text(gres, encoding="ascii")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env.get('PATH', '/usr/bin:/bin')}"
    cluster = SlurmCluster(root, conf, env, cleanup=cleanup)
    log = open(root / "log" / "daemons.log", "ab")  # noqa: SIM115 - held by the daemons
    try:
        cluster.procs.append(subprocess.Popen(
            [_which("munged") or "munged", "--foreground", "--force", f"--socket={sock}",
             f"--key-file={key}", f"--pid-file={root}/munge/munged.pid",
             f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"],
            env=env, stdout=log, stderr=log))
        _wait(lambda: sock.exists(), "munged did not start", cluster)
        if accounting:
            _start_accounting(cluster, sock, dbd, log)
        cluster.procs.append(subprocess.Popen([_which("slurmctld") or "slurmctld", "-D", "-i"],
                                              env=env, stdout=log, stderr=log))
        _wait(lambda: _answers(ctld), "slurmctld did not start", cluster)
        slurmd_bin = _which("slurmd") or "slurmd"
        if ns is None:
            cluster.procs.append(subprocess.Popen([slurmd_bin, "-D", "-N", "localhost"],
                                                  env=env, stdout=log, stderr=log))
        else:
            cluster.procs.append(subprocess.Popen([slurmd_bin, "-D", "-N", "n1"],
                                                  env=env, stdout=log, stderr=log))
            cluster.procs.append(subprocess.Popen(
                [_which("nsenter") or "nsenter", f"--net=/var/run/netns/{ns}", slurmd_bin,
                 "-D", "-N", "n2"], env=env, stdout=log, stderr=log))
        _wait(lambda: cluster.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
              == ["idle"] * nodes, "the nodes did not come up idle", cluster, timeout=30)
    except BaseException:
        cluster.stop()
        raise
    finally:
        log.close()
    return cluster


def _start_accounting(cluster: SlurmCluster, munge_socket: Path, dbd_port: int,
                      log: Any) -> None:
    """A private MariaDB (its data in the cluster's folder, on a free port of 127.0.0.1) with
    Slurm's database and user, slurmdbd over it on `dbd_port`, and the cluster registered."""
    import secrets

    root, env = cluster.root, cluster.env
    data, sql_sock = root / "mariadb", root / "mariadb" / "mysqld.sock"
    cluster.cleanup.append(["rm", "-rf", str(data)])
    small = ["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=16M"]
    made = subprocess.run(
        [_which("mariadb-install-db") or "mariadb-install-db", "--no-defaults",
         f"--datadir={data}", "--user=root", "--skip-test-db",
         "--auth-root-authentication-method=socket", *small],
        env=env, capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        cluster.stop()
        pytest.fail(f"mariadb-install-db failed: {(made.stdout + made.stderr)[-1500:]}")
    sql_port = _free_port()
    cluster.procs.append(subprocess.Popen(
        [_which("mariadbd") or "mariadbd", "--no-defaults", f"--datadir={data}", "--user=root",
         f"--socket={sql_sock}", f"--port={sql_port}", "--bind-address=127.0.0.1",
         "--skip-name-resolve", f"--pid-file={data}/mariadbd.pid",
         f"--log-error={root}/log/mariadb.log", *small],
        env=env, stdout=log, stderr=log))
    _wait(lambda: _answers(sql_port) and sql_sock.exists(), "mariadbd did not start", cluster,
          timeout=60)
    password = secrets.token_hex(12)
    setup = subprocess.run(
        [_which("mariadb") or "mariadb", "--no-defaults", f"--socket={sql_sock}", "-u", "root",
         "-e", "CREATE DATABASE slurm_acct_db; "
               f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"],
        env=env, capture_output=True, text=True, timeout=60)
    if setup.returncode != 0:
        cluster.stop()
        pytest.fail(f"could not make Slurm's database: {setup.stderr.strip()[-1500:]}")
    dbd_conf = root / "slurmdbd.conf"  # beside slurm.conf, where slurmdbd looks (SLURM_CONF)
    dbd_conf.touch(mode=0o600)
    dbd_conf.chmod(0o600)
    dbd_conf.write_text(f"""AuthType=auth/munge
AuthInfo=socket={munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={root}/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={sql_port}
StorageUser=slurm
StoragePass={password}
StorageLoc=slurm_acct_db
""", encoding="ascii")
    cluster.procs.append(subprocess.Popen([_which("slurmdbd") or "slurmdbd", "-D"],
                                          env=env, stdout=log, stderr=log))
    _wait(lambda: _answers(dbd_port), "slurmdbd did not start", cluster, timeout=60)
    added = cluster.run("sacctmgr", "-i", "add", "cluster", "gputuitest", check=False)
    if added.returncode != 0:
        logs = (root / "log" / "slurmdbd.log").read_text(errors="replace")[-1500:]
        cluster.stop()
        pytest.fail(f"sacctmgr could not register the cluster: "
                    f"{(added.stdout + added.stderr).strip()}\n{logs}")


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(ok: object, why: str, cluster: SlurmCluster, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():  # type: ignore[operator]
            return
        for proc in cluster.procs:
            if proc.poll() is not None:
                break
        time.sleep(0.1)
    logs = "\n".join(p.read_text(errors="replace")[-1500:]
                     for p in sorted((cluster.root / "log").glob("*.log")))
    cluster.stop()
    pytest.fail(f"{why}:\n{logs}")


@dataclass
class Login:
    """OpenSSH's sshd on 127.0.0.1 as the cluster's login node: Slurm's commands find the
    cluster through SLURM_CONF, and the node's `nvidia-smi` is the sandbox's simulated one."""

    port: int
    key: Path  # the client's private key
    host_key: Any
    proc: subprocess.Popen[bytes]
    host: Path  # the sandbox shims' instance folder (the simulated GPUs)

    def line(self) -> str:
        return f"ssh -p {self.port} -i {self.key} root@127.0.0.1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def start_login(root: Path, cluster: SlurmCluster, *, gpu_count: int = 2) -> Login:
    from gputui.sandbox.shims.state import create_instance_dir
    from tests.drill.sshd_host import run_sshd

    host = root / "node"
    create_instance_dir(host, instance_id="slurm-node", gpu_name="NVIDIA H100 80GB HBM3",
                        gpu_count=gpu_count, memory_total_mib=81559, power_limit_w=700,
                        tdp_w=700)
    port, client_key, host_key, proc = run_sshd(
        root, "MaxStartups 50\nMaxSessions 50\nSubsystem sftp internal-sftp\n"
        f"SetEnv PATH={host / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "
        f"SLURM_CONF={cluster.conf}\n", what="sshd (the login node)")
    return Login(port, client_key, host_key, proc, host)


def unique_cluster(base: str) -> str:
    """A cluster name for the config that no other test run on this machine uses at the same
    time: the queue runners' folders are ~/.gputui/slurm/NAME in the login node's home, which is
    this machine's real one (a fixed name would let two runs share and remove each other's)."""
    return f"{base}{os.getpid()}"


def runner_folder(cluster_name: str) -> Path:
    """Where the queue runners of the config's cluster `cluster_name` live (the login node is
    this machine, logged in as this user)."""
    return Path.home() / ".gputui" / "slurm" / cluster_name


def cluster_fixture(folder: str, *, nodes: int = 1, runners_of: Sequence[str] = (),
                    min_job_age: int = 300, accounting: bool = False) -> Any:
    """The module-scoped fixture `cluster` (assign it: `cluster = cluster_fixture(...)`):
    (the SlurmCluster, its Login) for the module's tests, started in a scratch folder named
    `folder`. Afterwards, even when a test or the start failed, in this order: sshd stops, the
    jobs are cancelled, the daemons stop, and the queue runners' folders of the config's
    clusters `runners_of` are removed (see runner_folder). `min_job_age`, `accounting`: as
    start_cluster's."""

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[SlurmCluster, Login]]:
        root = tmp_path_factory.mktemp(folder)
        with ExitStack() as after:
            for name in runners_of:
                after.callback(shutil.rmtree, runner_folder(name), ignore_errors=True)
            made = start_cluster(root / "cluster", nodes=nodes, min_job_age=min_job_age,
                                 accounting=accounting)
            after.callback(made.stop)
            after.callback(made.run, "scancel", "--user=root", check=False)
            login = start_login(root, made)
            after.callback(login.stop)
            yield made, login

    return cluster


def cluster_config(login: Login, clusters: dict[str, str], currency: str = "CNY") -> Config:
    """A config with the clusters named in `clusters` (name -> price per GPU hour), each
    reached through `login`, asking for 1 CPU and 256 MB a GPU."""
    from gputui.config import Config

    return Config.model_validate({"providers": {"slurm": {
        name: {"login": login.line(), "price_per_gpu_hour": price, "currency": currency,
               "cpus_per_gpu": 1, "mem_per_gpu_mb": 256}
        for name, price in clusters.items()}}})


def slurm_services(home: Path, config: Config, login: Login) -> Services:
    """The services hub over the test's own state, the login node's host key pinned."""
    from gputui.services.hub import Services
    from gputui.store import SessionStore
    from tests.conftest import FAST_LINKS

    svc = Services(SessionStore(home / "state.db"), config, state_dir=home,
                   link_options=dict(FAST_LINKS))
    svc.known_hosts.add("127.0.0.1", login.port, login.host_key)
    return svc


async def until(ok: Callable[[], bool], timeout: float, what: str = "it") -> None:
    """Wait (polling, 0.2 s) until `ok()`; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def services_fixture(clusters: dict[str, str], currency: str = "CNY") -> Any:
    """The fixture `slurm` (assign it: `slurm = services_fixture(...)`): (the services hub
    over the test's own state, with the clusters of cluster_config all on the module's
    `cluster`, the cluster). Afterwards the hub is closed and every allocation cancelled and
    seen gone (the next test starts on an empty cluster)."""

    @pytest.fixture
    async def slurm(cluster: tuple[SlurmCluster, Login], gputui_home: Path
                    ) -> AsyncIterator[tuple[Services, SlurmCluster]]:
        made, login = cluster
        svc = slurm_services(gputui_home, cluster_config(login, clusters, currency), login)
        try:
            yield svc, made
        finally:
            await svc.close()
            made.run("scancel", "--user=root", check=False)
            await until(lambda: made.jobs().strip() == "", 30, "the allocations to end")

    return slurm


def job_purged(made: SlurmCluster, job: str) -> bool:
    """squeue no longer knows the job: Slurm purged it (MinJobAge) — what sends gputui to sacct."""
    out = made.run("squeue", "--states=all", "-h", "-j", job, "-o", "%T", check=False)
    return out.returncode != 0 or out.stdout.strip() == ""


async def rent_seen_running(svc: Services, cluster_name: str, gpus: int, release_in: float,
                            name: str) -> tuple[Instance, str]:
    """An allocation of `gpus` GPUs on the config's cluster `cluster_name`, its timer
    `release_in` seconds away (Slurm's --time, whole minutes), seen running once by gputui
    (so its time limit is known): (the instance as then seen, its Slurm job id)."""
    from datetime import timedelta

    from gputui.models import InstanceStatus, Lease, utcnow
    from gputui.providers.base import CreateRequest

    offer = await svc.find_offer("slurm", "h100", region=cluster_name)
    inst = await svc.create("slurm", offer, CreateRequest(
        offer_id=offer.offer_id, gpu_count=gpus, name=name),
        lease=Lease(instance_id="pending", release_at=utcnow() + timedelta(seconds=release_in)))
    seen = await svc.refresh(inst)
    assert seen.status == InstanceStatus.RUNNING and seen.running_since is not None
    return seen, (inst.provider_id or "").partition(":")[2]


def later_services(home: Path, config: Config) -> Services:
    """A fresh services hub over the same state, as a later gputui process (the login node's
    host key already pinned in that state)."""
    from gputui.services.hub import Services
    from gputui.store import SessionStore
    from tests.conftest import FAST_LINKS

    return Services(SessionStore(home / "state.db"), config, state_dir=home,
                    link_options=dict(FAST_LINKS))


async def refreshed_later(home: Path, config: Config, instance_id: str
                          ) -> tuple[Instance, LedgerEntry]:
    """A later gputui process looks at the instance once: (the instance as it then reads,
    its ledger entry)."""
    later = later_services(home, config)
    try:
        fresh = await later.refresh(later.store.get_instance_sync(instance_id))
        entry = next(e for e in later.store.ledger_sync() if e.instance_id == instance_id)
    finally:
        await later.close()
    return fresh, entry
