"""How far apart the timings of one plan fall on the emulated cluster: the spread every "within X%" judgement of
``bench/cluster/emulated.py`` sits in.

Per layout and rate: bring the cluster up and measure it (``sparsewire calibrate --network``, as ``emulated.py``
does), then per matrix one job plans the same strategy ``--copies`` times (each its own plan and executor, as
``auto``'s pick and the same strategy under its name are in ``spmm --strategy auto,...``) and times the copies taking
turns (``--rounds`` turns of ``--repeat`` multiplies each after one untimed, every other turn in reverse order; a
multiply's time is its slowest rank's), and prints each copy's median and the slowest over the fastest. Identical
plans on identical inputs: any spread is the machine's (the scheduler of oversubscribed ranks, caches, the link's
queues), not the plan's. Needs root (``sparsewire emulate``'s harness).

    sudo .venv/bin/python bench/cluster/plan_twins.py --layouts 2x2 --rates 1gbit --strategy joint
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # emulated.py
from common import short_name  # noqa: E402
from emulated import MATRICES, calibrated_cluster  # noqa: E402

from sparsewire.testing import unavailable_reason  # noqa: E402


def time_copies(spec: str, strategy: str, copies: int, rounds: int, repeat: int, network: str, k: int) -> None:
    """Collective (under the cluster's mpiexec). Rank 0 prints one JSON line: every copy's timed multiplies."""
    import numpy as np
    from mpi4py import MPI

    import sparsewire
    from sparsewire.profile import time_plan, turn_order
    from sparsewire.topology import parse_topology

    comm = MPI.COMM_WORLD
    topology = parse_topology(network)
    matrix = sparsewire.distribute(comm, spec, "auto", topology=topology)
    plans = [matrix.spmm_plan(k, np.float64, strategy=strategy, mode="overlap", topology=topology) for _ in range(copies)]
    start, stop = matrix.col_partition.range(comm.Get_rank())
    b = np.random.default_rng(comm.Get_rank()).standard_normal((stop - start, k))
    outputs = [np.empty((plan.output_rows, k)) for plan in plans]
    seconds: list[list[float]] = [[] for _ in plans]
    for turn in range(rounds):
        for index in turn_order(list(range(copies)), turn):  # as spmm --rounds takes turns
            seconds[index].extend(time_plan(plans[index], b, outputs[index], repeat).seconds)
    for plan in plans:
        plan.close()
    if comm.Get_rank() == 0:
        print(json.dumps({"seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", default=MATRICES)
    parser.add_argument("--layouts", default="2x2,4x1")
    parser.add_argument("--rates", default="1gbit")
    parser.add_argument("--strategy", default="joint", help="the strategy planned --copies times (default: joint)")
    parser.add_argument("--copies", type=int, default=6, help="plans of the one strategy in the job (default: 6)")
    parser.add_argument("--rounds", type=int, default=20, help="turns the copies take (default: 20)")
    parser.add_argument("--repeat", type=int, default=2, help="timed multiplies per copy and turn (default: 2)")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--inner", nargs=2, metavar=("MATRIX", "NETWORK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.copies < 2 or args.rounds < 1 or args.repeat < 1:
        raise SystemExit("plan_twins.py: --copies needs at least 2, --rounds and --repeat at least 1")
    if args.inner:
        time_copies(args.inner[0], args.strategy, args.copies, args.rounds, args.repeat, args.inner[1], args.k)
        return
    problem = unavailable_reason()
    if problem:
        raise SystemExit(f"bench/cluster/plan_twins.py needs an emulated cluster: {problem}")
    for layout in args.layouts.split(","):
        for rate in args.rates.split(","):
            with calibrated_cluster(layout, rate) as (cluster, per_node, network, _):
                for matrix in args.matrices.split(","):
                    command = [sys.executable, __file__, "--inner", matrix, network, "--strategy", args.strategy,
                               "--copies", str(args.copies), "--rounds", str(args.rounds), "--repeat", str(args.repeat),
                               "--k", str(args.k)]  # fmt: skip
                    result = cluster.run(per_node, command, timeout=3600)
                    if result.returncode != 0:
                        raise SystemExit(f"failed ({result.returncode}): {matrix}\n{result.stderr[-3000:]}")
                    medians = [statistics.median(s) for s in json.loads(result.stdout.strip().splitlines()[-1])["seconds"]]
                    print(
                        f"{layout} at {rate}, {short_name(matrix)}, {args.copies} copies of {args.strategy}: medians "
                        f"{', '.join(f'{m * 1e3:.2f}' for m in medians)} ms of {args.rounds * args.repeat} multiplies "
                        f"each; slowest / fastest {max(medians) / min(medians):.3f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
