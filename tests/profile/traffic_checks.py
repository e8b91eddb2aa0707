"""Collective: run on every rank of a collective job by tests/mpi/test_traces.py (``check``).

For every executable strategy (flat, and
the hierarchical ones on two groups) and every mode, one multiply of a random integer matrix; the
rank x rank map the transport counted must equal the plan's exactly, and its per-link-class sums
the plan's class totals. Then a planted wrong count (one byte more in rank 0's ledger) must be
reported. Returns ``OK N``."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES
from sparsewire.profile.traffic import measured_traffic


def check(seed: int) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    whole = sp.random_array((57, 57), density=0.08, rng=rng, format="csr")
    whole.data = rng.integers(-3, 4, whole.nnz).astype(np.float64)
    matrix = sparsewire.distribute(comm, whole if rank == 0 else None)
    b = np.arange(57 * 3, dtype=np.float64).reshape(57, 3) % 5
    cols = slice(*matrix.col_partition.range(rank))
    topology = sparsewire.Topology.nodes(2)
    checked = 0
    for strategy in EXECUTABLE_STRATEGIES:
        for mode in ("bulk", "overlap", "pipelined", "early", "partitioned"):
            grouped = strategy.hierarchical or mode == "pipelined"
            with matrix.spmm_plan(3, strategy=strategy.value, mode=mode, topology=topology if grouped else None) as plan:
                plan.multiply(b[cols])
                measured, planned = plan.traffic()
                assert measured.differences(planned) == [], (strategy, mode, measured.differences(planned))
                assert int(measured.bytes.sum()) == plan.stats.total_bytes
                if grouped:
                    totals = plan.stats.class_totals()
                    classes = measured.per_link_class(topology)
                    by_level = {"intra_group": topology.levels[0].link.name, "inter_group": topology.levels[-1].link.name}
                    for kind, name in by_level.items():
                        got = classes.get(name, {"bytes": 0, "messages": 0})
                        assert got == {"bytes": totals[f"{kind}_bytes"], "messages": totals[f"{kind}_messages"]}, (kind, got)
                if checked == 0 and comm.Get_size() > 1:  # a planted wrong count must be caught
                    ledger = plan.executor.ledger
                    source = int(np.flatnonzero(ledger.bytes_from)[0]) if ledger.bytes_from.any() else 0
                    ledger.bytes_from[source] += 1 if rank == 0 else 0
                    planted = measured_traffic(comm, ledger).differences(planned)
                    assert (len(planted) == 1) == bool(comm.bcast(rank == 0)), planted
                checked += 1
    return f"OK {checked}"
