"""The ``emulate`` command: run an MPI command on an emulated cluster of this machine (network
namespaces over rate-limited links, :mod:`sparsewire.testing.emulation.cluster`), then take it down."""

from __future__ import annotations

import argparse
import sys

from sparsewire.cli.common import number, positive_int
from sparsewire.errors import InputError

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``emulate`` to the CLI's subparsers."""
    emulate = commands.add_parser(
        "emulate",
        help="run a command under mpiexec on an emulated cluster (namespaces over rate-limited links; needs root)",
        description="Bring up --nodes network namespaces joined by links of --rate (a veth pair for 2 nodes, a bridge for "
        "more; --delay-us adds a fixed one-way delay), run COMMAND as --ranks-per-node ranks on each node with mpiexec "
        "(MPICH over TCP between nodes, shared memory inside one), print each node's link counters, and remove everything "
        "it made, also after a failure or Ctrl-C. Example: sparsewire emulate --nodes 2 --ranks-per-node 2 --rate 1gbit "
        "-- sparsewire spmm rmat:16:8:1 --topology mpi --strategy all --check",
    )
    emulate.add_argument("--nodes", type=positive_int, default=2, help="nodes, 2 to 16 (default: 2)")
    emulate.add_argument("--ranks-per-node", type=positive_int, default=2, help="ranks on each node (default: 2)")
    emulate.add_argument("--rate", default="1gbit", help="every link's rate: NUMBER gbit|mbit|kbit (default: 1gbit)")
    emulate.add_argument("--delay-us", type=number(0.0), help="one-way delay of every link in microseconds (default: none)")
    emulate.add_argument(
        "--timeout", type=number(0.0, above=True), default=3600, help="end the job after this many seconds (default: 3600)"
    )
    emulate.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs (after --)")
    emulate.set_defaults(handler=_run_emulate)


def _run_emulate(args: argparse.Namespace) -> int:
    from sparsewire.testing.emulation.cluster import EmulatedCluster

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise InputError("give the command to run after --, e.g. -- sparsewire spmm rmat:14:8:1 --topology mpi --check")
    if command[0] == "sparsewire":  # the same installation as this command
        command = [sys.executable, "-m", "sparsewire", *command[1:]]
    with EmulatedCluster(args.nodes, args.rate, delay_us=args.delay_us) as cluster:
        print(f"emulated cluster: {args.nodes} nodes x {args.ranks_per_node} ranks, links {args.rate}"
              + (f", {args.delay_us:g} us delay" if args.delay_us is not None else ""), file=sys.stderr, flush=True)  # fmt: skip
        before = cluster.counters()
        result = cluster.run(args.ranks_per_node, command, timeout=args.timeout, stdout=None, stderr=None)
        for node, ((tx0, rx0), (tx1, rx1)) in enumerate(zip(before, cluster.counters())):
            print(f"node {node}: link sent {tx1 - tx0} bytes, received {rx1 - rx0} bytes", file=sys.stderr)
    if result.timed_out:
        print(f"sparsewire: error: the job ran past --timeout {args.timeout:g} s and was ended", file=sys.stderr)
    return 124 if result.timed_out else result.returncode
