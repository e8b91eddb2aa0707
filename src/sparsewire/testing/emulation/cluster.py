"""An emulated cluster: N "nodes", each a Linux network namespace, joined by veth links whose every
end has a ``tbf`` rate limit, with MPICH running over TCP between them.

Layout. Two nodes share one veth pair; more than two hang off a bridge in a switch namespace (a
star, every node's link rate-limited at both ends). With ``delay_us`` the bridge is replaced by a
user-space relay (:mod:`sparsewire.testing.emulation.delay_switch`) that holds each frame a fixed time: the
kernel here has no ``netem``. Node ``i`` has address ``10.200.0.(i+1)/24`` on its interface
``swemu0``; these addresses exist only inside the namespaces this object creates, and nothing is
routed to or from the machine's own namespace.

MPI. ``mpiexec`` (Hydra) runs inside node 0's namespace with an "ssh" launcher that is a script
mapping each host address to ``ip netns exec`` of its namespace; Hydra's host list tells MPICH
which ranks share a node (shared memory inside, TCP across). UCX must be told ``UCX_TLS=self,tcp``:
otherwise it sees one host and moves "remote" messages through shared memory, bypassing the link.
Large messages use UCX's ``get_zcopy`` rendezvous (``UCX_RNDV_SCHEME``, unless the caller's environment sets
it): under UCX's default over TCP a node that sent while it received took much longer than its busier
direction alone (the protocol, not the link), with ``get_zcopy`` (the receiver reads the data) about as long
(``bench/cluster/link_directions.py``; docs/design-decisions.md, "UCX's get_zcopy rendezvous over TCP").

The peers' MPI. ``launcher="openmpi"`` runs a job under the system's Open MPI instead (Debian's, which PETSc and
CombBLAS are built on): ``mpirun`` inside node 0's namespace with a launch agent that enters each node's namespace
under a host name of its own (Open MPI tells nodes apart by name), ob1 over TCP on the emulated links only and
shared memory inside a node (:data:`OPENMPI_OPTIONS`).

Rate. ``tbf`` with a burst of at least 256 KiB or 1 ms of the rate (a smaller burst splits 64 KiB
segments and loses throughput). The payload rates each link rate gives, and where the CPU rather than the
link sets the limit, are in docs/cli.md ("sparsewire emulate").

Cores. The nodes share this machine's cores; each is told its share (``SPARSEWIRE_NODE_CORES``,
:func:`sparsewire._lib.cores.node_core_share`: the machine's cores / nodes, a fraction where nodes outnumber
cores), so a rank's default thread count is its whole cores over the ranks on its node, as on a real node,
and not the whole machine's, and its waits yield the core where its node's ranks need more than the share
(:func:`sparsewire._lib.cores.oversubscribed`: four nodes of one rank on two cores do).

Clean-up. :meth:`EmulatedCluster.down` (also on an exception or Ctrl-C inside ``with``) ends the
processes still in the namespaces, by id (they can only be this cluster's), stops the relay and
deletes the namespaces, which deletes every veth, bridge and qdisc with them.

Needs root and the ``ip`` and ``tc`` commands; :func:`unavailable_reason` says why not, for tests
that skip.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from sparsewire._lib.cores import NODE_CORES_VARIABLE, node_core_share
from sparsewire.errors import InputError
from sparsewire.testing.jobs import still_running

__all__ = ["EmulatedCluster", "parse_rate", "bucket_bytes", "unavailable_reason", "INTERFACE"]

INTERFACE = "swemu0"  # each node's link, inside its namespace
_SUBNET = "10.200.0"
_CLUSTERS = itertools.count()
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gbit|mbit|kbit)\s*$", re.IGNORECASE)
_UNITS = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}

# Hydra calls the launcher as an ssh: "[options] HOST COMMAND..."; the host is a node's address.
_LAUNCHER = """#!/bin/sh
# Written by sparsewire.testing.emulation.cluster: Hydra's "ssh" for the emulated nodes of namespace prefix {prefix}.
while [ $# -gt 0 ]; do case "$1" in -x|-q|-T|-n) shift;; -o|-p|-l|-i) shift 2;; -*) shift;; *) break;; esac; done
host=$1; shift
case "$host" in
  {subnet}.*) ns={prefix}-n$(( ${{host##*.}} - 1 ));;
  *) echo "sparsewire emulated cluster: unknown host '$host'" >&2; exit 1;;
esac
exec ip netns exec "$ns" {uts}/bin/sh -c "{hostname}exec $*"
"""

#: Open MPI (the peers' MPI, Debian's): ob1 over TCP on the emulated links only, shared memory in a node, 4 MB socket
#: buffers and yielding when idle: the peers at their best on these shared cores (bench/cluster/vs_peers.py).
OPENMPI_OPTIONS = (
    "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
    "--mca", "btl_tcp_if_include", INTERFACE, "--mca", "oob_tcp_if_include", INTERFACE, "--mca", "btl_tcp_sndbuf", "4194304",
    "--mca", "btl_tcp_rcvbuf", "4194304", "--mca", "mpi_yield_when_idle", "1", "-x", "OMP_NUM_THREADS=1",
)  # fmt: skip


#: The largest burst ``tc``'s tbf accepts (a 32-bit byte count).
_LARGEST_BUCKET = 2**32 - 1


def parse_rate(rate: str) -> float:
    """Not collective. Bits per second of a ``tc`` rate such as ``1gbit``, ``500mbit``.

    Raises:
        InputError naming the accepted forms.
    """
    match = _RATE.match(str(rate))
    if not match or float(match.group(1)) <= 0:
        raise InputError(f"link rate {rate!r} is not a positive NUMBER followed by gbit, mbit or kbit (e.g. 1gbit, 500mbit)")
    bits = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if bits / 8 / 1000 > _LARGEST_BUCKET:  # tc's tbf takes a 32-bit burst, and the bucket holds 1 ms of the rate
        raise InputError(f"link rate {rate!r} is beyond what tc's tbf can shape (its 1 ms burst > 4 GiB); give at most 34000gbit")
    return bits


def bucket_bytes(rate: str) -> int:
    """Not collective. The ``tbf`` bucket of a link of ``rate``, in bytes: at least 256 KiB or 1 ms of the rate (a
    smaller one splits 64 KiB segments and drops the throughput; module docstring). A link idle for long enough
    passes this much at once, which ``calibrate --network`` measures as its burst."""
    return max(256 * 1024, int(parse_rate(rate) / 8 / 1000))


def unavailable_reason() -> str | None:
    """Not collective. Why an emulated cluster cannot be made here (not root, no ``ip`` or ``tc``, no
    network namespaces), or None when it can."""
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "making network namespaces needs root (run as root, or in a container that grants CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the '{tool}' command is missing (Debian: apt-get install iproute2)"
    probe = f"swprobe{os.getpid()}-{next(_CLUSTERS)}"  # (clusters made at once in one process probe apart)
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip() or made.returncode}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(arguments: Sequence[str]) -> str:
    completed = subprocess.run(list(arguments), capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"'{' '.join(arguments)}' failed: {completed.stderr.strip()}")
    return completed.stdout


def _exit_on_sigterm(signal_number, frame) -> None:
    raise SystemExit(128 + signal_number)


class EmulatedCluster:
    """``nodes`` namespaces joined by links of ``rate`` (``1gbit``, ``5gbit``, ...), optionally with a
    fixed one-way ``delay_us``; a context manager (``with EmulatedCluster(2, "1gbit") as cluster:``)
    that brings the cluster up and always takes it down. See the module docstring."""

    def __init__(self, nodes: int = 2, rate: str = "1gbit", *, delay_us: float | None = None, mtu: int = 1500) -> None:
        if not 2 <= nodes <= 16:
            raise InputError(f"an emulated cluster has 2 to 16 nodes (got {nodes})")
        if delay_us is not None and delay_us < 0:
            raise InputError(f"the link delay must be at least 0 us (got {delay_us})")
        self.nodes = nodes
        self.rate = rate
        self.rate_bits = parse_rate(rate)
        self.delay_us = delay_us
        self.mtu = mtu
        self.prefix = f"swe{os.getpid()}-{next(_CLUSTERS)}"  # (one process may hold several clusters at once)
        self.namespaces = [f"{self.prefix}-n{i}" for i in range(nodes)]
        self.switch = f"{self.prefix}-sw" if nodes > 2 or delay_us is not None else None
        # The nodes share this machine's cores: each counts its share, so a rank's default
        # threads are node cores / ranks on the node, as on a real node, and its waits yield where the
        # share is less than its ranks need (4 nodes on 2 cores: half a core each).
        self.cores_per_node = node_core_share() / nodes
        self._folder: tempfile.TemporaryDirectory | None = None
        self._relay: subprocess.Popen | None = None
        self.is_up = False

    # -- bring up, take down ------------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        # A plain kill (SIGTERM) must take the cluster down as Ctrl-C does: make it an exit.
        self._previous_sigterm = None
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.down()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)

    def addresses(self) -> list[str]:
        """Not collective. Each node's address (on its interface :data:`INTERFACE`)."""
        return [f"{_SUBNET}.{i + 1}" for i in range(self.nodes)]

    def _tbf(self, rate: str) -> list[str]:
        return ["tbf", "rate", rate, "burst", f"{bucket_bytes(rate)}b", "latency", "50ms"]

    def _link_ends(self) -> list[tuple[str, str]]:
        """(namespace, device) of every rate-limited link end."""
        ends = [(ns, INTERFACE) for ns in self.namespaces]
        if self.switch is not None:
            ends += [(self.switch, f"swemu-p{i}") for i in range(self.nodes)]
        return ends

    def up(self) -> None:
        """Not collective. Create the namespaces, links, addresses and rate limits (module docstring);
        on any failure, remove what was made and raise."""
        problem = unavailable_reason()
        if problem is not None:
            raise InputError(f"cannot make an emulated cluster: {problem}")
        self.is_up = True
        try:
            self._make()
        except BaseException:
            self.down()
            raise

    def _make(self) -> None:
        for ns in self.namespaces + ([self.switch] if self.switch else []):
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        mtu = str(self.mtu)
        if self.switch is None:
            _run(
                ["ip", "link", "add", "name", INTERFACE, "netns", self.namespaces[0], "mtu", mtu, "type", "veth"]
                + ["peer", "name", INTERFACE, "netns", self.namespaces[1], "mtu", mtu]
            )
        else:
            sw = self.switch
            subprocess.run(["ip", "netns", "exec", sw, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], capture_output=True)
            if self.delay_us is None:
                _run(["ip", "-n", sw, "link", "add", "swemu-br", "type", "bridge"])
                _run(["ip", "-n", sw, "link", "set", "swemu-br", "up"])
            for i, ns in enumerate(self.namespaces):
                port = f"swemu-p{i}"
                _run(
                    ["ip", "link", "add", "name", INTERFACE, "netns", ns, "mtu", mtu, "type", "veth"]
                    + ["peer", "name", port, "netns", sw, "mtu", mtu]
                )
                if self.delay_us is None:
                    _run(["ip", "-n", sw, "link", "set", port, "master", "swemu-br"])
                _run(["ip", "-n", sw, "link", "set", port, "up"])
        for i, ns in enumerate(self.namespaces):
            _run(["ip", "-n", ns, "addr", "add", f"{_SUBNET}.{i + 1}/24", "dev", INTERFACE])
            _run(["ip", "-n", ns, "link", "set", INTERFACE, "up"])
        for ns, device in self._link_ends():
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", device, "root", *self._tbf(self.rate)])
        if self.delay_us is not None:
            ports = [f"swemu-p{i}" for i in range(self.nodes)]
            command = ["ip", "netns", "exec", self.switch, sys.executable, "-m", "sparsewire.testing.emulation.delay_switch"]
            self._relay = subprocess.Popen(command + [str(self.delay_us), *ports], stdin=subprocess.DEVNULL)
        self._wait_until_running()
        self._folder = tempfile.TemporaryDirectory(prefix="sparsewire-emulated-")
        # Open MPI tells nodes apart by host name: its launcher gives each namespace its own (a UTS namespace).
        for name, uts, hostname in (("launch", "", ""), ("launch-openmpi", "unshare --uts ", "hostname $ns; ")):
            launcher = Path(self._folder.name) / name
            launcher.write_text(_LAUNCHER.format(prefix=self.prefix, subnet=_SUBNET, uts=uts, hostname=hostname))
            launcher.chmod(0o755)

    def _wait_until_running(self) -> None:
        # UCX skips an interface that is not operationally up yet
        deadline = time.monotonic() + 10
        for ns in self.namespaces:
            while _run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{INTERFACE}/operstate"]).strip() != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the link of {ns} did not come up within 10 s")
                time.sleep(0.05)

    def _pids(self) -> list[int]:
        """The processes inside the nodes' namespaces (this one aside)."""
        pids = []
        for ns in self.namespaces:
            listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            pids += [int(pid) for pid in listed.stdout.split() if int(pid) != os.getpid()]
        return pids

    def end_processes(self) -> list[int]:
        """Not collective. End (SIGTERM, then SIGKILL to those still there 1 s later) every process still inside the
        nodes' namespaces: only this cluster's jobs run there. The ids ended."""
        ended = self._pids()
        alive = ended
        for signal_number in (signal.SIGTERM, signal.SIGKILL):
            sent = []
            for pid in alive:
                try:
                    os.kill(pid, signal_number)
                    sent.append(pid)
                except ProcessLookupError:
                    pass
            if not sent or signal_number == signal.SIGKILL:
                break
            alive = still_running(sent, 1.0)
        return ended

    def down(self) -> None:
        """Not collective. End what runs inside, stop the relay, delete the namespaces (and with them
        every link and qdisc) and the launcher. Safe to call twice. Ctrl-C and SIGTERM wait until it is done
        (blocked, then delivered): another Ctrl-C during the teardown would otherwise stop it half-way and leave
        the namespaces."""
        if not self.is_up:
            return
        held = {signal.SIGINT, signal.SIGTERM}
        main = threading.current_thread() is threading.main_thread()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held) if main else None
        try:
            self._take_down()
        finally:
            if previous is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def _take_down(self) -> None:
        self.end_processes()
        if self._relay is not None:
            self._relay.kill()
            self._relay.wait()
            self._relay = None
        for ns in self.namespaces + ([self.switch] if self.switch else []):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None
        self.is_up = False

    # -- use --------------------------------------------------------------------------------
    def mpi_environment(self) -> dict[str, str]:
        """Not collective. The variables that make MPICH use TCP over the emulated links, with the rendezvous
        that lets both directions of a link stream (module docstring), torch.distributed's rendezvous at rank 0's
        node and its Gloo sockets on them, and each node's share of the cores."""
        return {
            "MPIR_CVAR_CH4_NETMOD": "ucx",
            "UCX_TLS": "self,tcp",
            "UCX_NET_DEVICES": INTERFACE,
            "UCX_RNDV_SCHEME": os.environ.get("UCX_RNDV_SCHEME", "get_zcopy"),
            "MASTER_ADDR": self.addresses()[0],
            "GLOO_SOCKET_IFNAME": INTERFACE,
            NODE_CORES_VARIABLE: f"{self.cores_per_node:g}",
        }

    def mpiexec_command(
        self, ranks_per_node: int, command: Sequence[str], *, nodes: int | None = None, launcher: str = "mpich"
    ) -> list[str]:
        """Not collective. The command line that runs ``command`` as ``ranks_per_node`` ranks on each of
        the first ``nodes`` nodes (all by default), from inside node 0 (ranks 0.. on node 0 first): by our MPICH's
        ``mpiexec``, or with ``launcher="openmpi"`` by the system Open MPI's ``mpirun`` (:data:`OPENMPI_OPTIONS`)."""
        if launcher not in ("mpich", "openmpi"):
            raise InputError(f"launcher {launcher!r} is not one of mpich (our mpiexec) and openmpi (the system's mpirun)")
        if not self.is_up:
            raise InputError("the emulated cluster is not up; use it inside 'with EmulatedCluster(...)'")
        nodes = self.nodes if nodes is None else nodes
        if not 1 <= nodes <= self.nodes or ranks_per_node < 1:
            raise InputError(f"need 1..{self.nodes} nodes and at least 1 rank per node (got {nodes} x {ranks_per_node})")
        hosts = ",".join(f"{address}:{ranks_per_node}" for address in self.addresses()[:nodes])
        if launcher == "openmpi":
            agent, ns = str(Path(self._folder.name) / "launch-openmpi"), self.namespaces[0]
            mpirun = [*OPENMPI_OPTIONS, "--mca", "plm_rsh_agent", agent, "--host", hosts, "-n", str(nodes * ranks_per_node)]
            return ["ip", "netns", "exec", ns, "unshare", "--uts", "/bin/sh", "-c", f'hostname {ns}; exec "$@"', "sh",
                    "mpirun", *mpirun, *command]  # fmt: skip
        mpiexec = str(Path(sys.executable).with_name("mpiexec"))
        variables = [item for name, value in self.mpi_environment().items() for item in ("-genv", name, value)]
        agent = str(Path(self._folder.name) / "launch")
        return [
            "ip", "netns", "exec", self.namespaces[0], mpiexec, "-launcher", "ssh", "-launcher-exec", agent,
            "-hosts", hosts, *variables, "-n", str(nodes * ranks_per_node), *command,
        ]  # fmt: skip

    def start(
        self, ranks_per_node: int, command: Sequence[str], *, nodes: int | None = None, launcher: str = "mpich", **popen
    ) -> subprocess.Popen:
        """Not collective. Start an MPI job (:meth:`mpiexec_command`, by ``launcher``) in a session of its own and
        return it; ``popen`` goes to :class:`subprocess.Popen` (``env``, ``stdout``, ...). End it
        with :meth:`finish`."""
        env = dict(popen.pop("env", None) or os.environ)
        if launcher == "mpich":
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        arguments = self.mpiexec_command(ranks_per_node, command, nodes=nodes, launcher=launcher)
        return subprocess.Popen(arguments, env=env, start_new_session=True, **popen)

    def finish(self, process: subprocess.Popen, timeout: float = 600, grace: float = 0.0) -> subprocess.CompletedProcess:
        """Not collective. Wait for a job of :meth:`start` to end, at most ``timeout`` seconds (then
        kill it: ``returncode`` -9, ``timed_out`` True), give what it left inside the namespaces up
        to ``grace`` seconds to end by itself (ranks and a launcher cut off by a dead link, say),
        then end the rest: their ids are ``left_running``."""
        timed_out = False
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self._pids():
            time.sleep(0.1)
        left = self.end_processes()
        result = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        result.timed_out, result.left_running = timed_out, left
        return result

    def run(
        self, ranks_per_node: int, command: Sequence[str], *, timeout: float = 600, nodes: int | None = None, **popen
    ) -> subprocess.CompletedProcess:
        """Not collective. :meth:`start` then :meth:`finish` (``launcher=`` goes to :meth:`start`); output captured
        as text unless ``popen`` says otherwise."""
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        popen.setdefault("text", True)
        return self.finish(self.start(ranks_per_node, command, nodes=nodes, **popen), timeout)

    def counters(self) -> list[tuple[int, int]]:
        """Not collective. (bytes sent, bytes received) on each node's interface, from the kernel's counters."""
        values = []
        for ns in self.namespaces:
            text = _run(
                ["ip", "netns", "exec", ns, "cat", *(f"/sys/class/net/{INTERFACE}/statistics/{n}_bytes" for n in ("tx", "rx"))]
            )
            tx, rx = (int(value) for value in text.split())
            values.append((tx, rx))
        return values

    def set_link(self, node: int, up: bool) -> None:
        """Not collective. Take node ``node``'s link down (no frame passes either way) or bring it back."""
        _run(["ip", "-n", self.namespaces[node], "link", "set", INTERFACE, "up" if up else "down"])

    def set_rate(self, rate: str) -> None:
        """Not collective. Change every link end's rate limit."""
        parse_rate(rate)
        for ns, device in self._link_ends():
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", device, "root", *self._tbf(rate)])
        self.rate, self.rate_bits = rate, parse_rate(rate)
