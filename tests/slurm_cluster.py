"""A real one-node Slurm cluster on 127.0.0.1 for the tests (Debian's slurm-wlm and munge).

Everything lives in a scratch folder: its own munged (own socket and key), slurmctld and slurmd
on free ports, one node `localhost` with two fake GPUs (`gpu:h100:2`, character devices made
with mknod), and `SLURM_CONF` pointing at the folder's slurm.conf. Facts in
../shared/reference/slurm-local.md. Tests skip, saying why, where Slurm, munge or root is absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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


def start_cluster(root: Path, *, gpus: int = 2, gpu_type: str = "h100",
                  path_prefix: str = "") -> SlurmCluster:
    """Start munged, slurmctld and slurmd in `root` (foreground processes this test owns)."""
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
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=gputuitest
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=5
OverTimeLimit=0
InactiveLimit=0
MinJobAge=300
DefMemPerCPU=256
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory={mem} Gres=gpu:{gpu_type}:{gpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE DefaultTime=01:00:00 State=UP OverSubscribe=NO
""", encoding="ascii")
    (root / "gres.conf").write_text(
        f"NodeName=localhost Name=gpu Type={gpu_type} File={root}/dev/fakegpu[0-{gpus - 1}]\n",
        encoding="ascii")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env.get('PATH', '/usr/bin:/bin')}"
    cluster = SlurmCluster(root, conf, env)
    log = open(root / "log" / "daemons.log", "ab")  # noqa: SIM115 - held by the daemons
    try:
        cluster.procs.append(subprocess.Popen(
            [_which("munged") or "munged", "--foreground", "--force", f"--socket={sock}",
             f"--key-file={key}", f"--pid-file={root}/munge/munged.pid",
             f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"],
            env=env, stdout=log, stderr=log))
        _wait(lambda: sock.exists(), "munged did not start", cluster)
        cluster.procs.append(subprocess.Popen([_which("slurmctld") or "slurmctld", "-D", "-i"],
                                              env=env, stdout=log, stderr=log))
        _wait(lambda: _answers(ctld), "slurmctld did not start", cluster)
        cluster.procs.append(subprocess.Popen([_which("slurmd") or "slurmd", "-D", "-N",
                                               "localhost"], env=env, stdout=log, stderr=log))
        _wait(lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout,
              "the node did not come up idle", cluster, timeout=30)
    except BaseException:
        cluster.stop()
        raise
    finally:
        log.close()
    return cluster


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
    import asyncssh

    from gputui.sandbox.shims.state import create_instance_dir
    from tests.drill.sshd_host import SSHD, free_port

    assert SSHD is not None
    host = root / "node"
    create_instance_dir(host, instance_id="slurm-node", gpu_name="NVIDIA H100 80GB HBM3",
                        gpu_count=gpu_count, memory_total_mib=81559, power_limit_w=700,
                        tdp_w=700)
    keys = root / "keys"
    keys.mkdir(exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    (keys / "host").write_bytes(host_key.export_private_key("openssh"))
    (keys / "host").chmod(0o600)
    client = asyncssh.generate_private_key("ssh-ed25519")
    (keys / "client").write_bytes(client.export_private_key("openssh"))
    (keys / "client").chmod(0o600)
    (keys / "authorized_keys").write_bytes(client.export_public_key("openssh"))
    port = free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPidFile {root / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nMaxStartups 50\nMaxSessions 50\n"
        f"SetEnv PATH={host / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "
        f"SLURM_CONF={cluster.conf}\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not _answers(port):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("sshd (the login node) did not start")
        time.sleep(0.05)
    time.sleep(0.2)  # the probe counted against MaxStartups until sshd saw it closed
    return Login(port, keys / "client", host_key, proc, host)
