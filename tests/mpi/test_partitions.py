"""Every partitioner x executable strategy on every rank of one job: users pass B and get C in their original
indices (B blocks are ``matrix.rows_of(B)``, C is assembled by ``matrix.gather_dense``), exact on integer data; a
saved plan keeps the order."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsewire
from sparsewire.partition import PARTITIONERS
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES


@pytest.mark.ranks(1, 3)
def test_every_partitioner_and_strategy_gives_c_in_the_original_order(comm, seed, shared_tmp):
    rank = comm.Get_rank()
    path = shared_tmp / "plan.npz"
    rng = np.random.default_rng(seed)
    topology = sparsewire.Topology.nodes(2)
    checked = 0
    for shape in [(70, 70), (52, 81)]:
        a = sp.random_array(shape, density=0.06, rng=rng, format="csr")
        a.data = rng.integers(-4, 5, a.nnz).astype(float)
        a = sp.csr_array(a)
        b = rng.integers(-3, 4, (shape[1], 3)).astype(float)
        for method in PARTITIONERS:
            matrix = sparsewire.distribute(comm, a if rank == 0 else None, method, topology=topology)
            whole = matrix.gather()
            if rank == 0:
                assert (whole != a).nnz == 0, f"{method}: gather does not give back A in its order"
            for strategy in EXECUTABLE_STRATEGIES:
                with matrix.spmm_plan(3, strategy=strategy.value, topology=topology, mode="bulk") as plan:
                    c = matrix.gather_dense(plan.multiply(matrix.rows_of(b)))
                    if strategy.value == "joint":
                        plan.save(path)
                        with sparsewire.SpmmPlan.load(path, matrix) as loaded:
                            assert np.array_equal(matrix.gather_dense(loaded.multiply(matrix.rows_of(b))), c) or rank != 0
                if rank == 0:
                    assert np.array_equal(c, a @ b), f"{method}/{strategy.value}: C differs from SciPy's A @ B"
                checked += 1
    assert checked == 2 * len(PARTITIONERS) * len(EXECUTABLE_STRATEGIES)
