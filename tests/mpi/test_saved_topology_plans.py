"""Plans saved under a measured (``calibrate --network``) or a user-built topology load back and multiply exactly,
even once the measured record is gone: the plan file keeps the topology itself. A damaged topology in a plan file
is one error on every rank."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import sparsewire
from conftest import on_rank_zero, slow_link_topology
from sparsewire.errors import InputError
from sparsewire.topology import Level, LinkClass, Topology

RACK = Level("rack", 2, LinkClass("rack switch", 2e10, 1e-6, 5e-7, shared=True))
USER_BUILT = Topology("two racks", (RACK, Level("spine", None, LinkClass("spine", 3e9, 4e-6, 1e-6))))


@pytest.mark.ranks(4)
def test_plans_under_a_measured_or_user_built_topology_load_back_exactly(comm, shared_tmp, seed):
    rng = np.random.default_rng(seed)
    rank = comm.Get_rank()
    a = sp.random_array((90, 90), density=0.08, rng=rng, format="csr")
    a.data = rng.integers(-3, 4, a.nnz).astype(np.float64)
    b = rng.integers(-3, 4, (90, 5)).astype(np.float64)
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    b_local = b[slice(*matrix.col_partition.range(rank))]
    record = shared_tmp / "net.json"
    on_rank_zero(comm, slow_link_topology, record, [0, 0, 1, 1])
    for topology in (sparsewire.parse_topology(str(record)), USER_BUILT):
        path = shared_tmp / "plan.npz"
        for strategy in ("auto", "joint-hier"):
            with matrix.spmm_plan(5, strategy=strategy, topology=topology) as plan:
                expected = plan.multiply(b_local)
                plan.save(path)
                chosen = plan.rank_plan.strategy
            on_rank_zero(comm, lambda: record.unlink(missing_ok=True))  # the measured record is gone
            with sparsewire.SpmmPlan.load(path, matrix) as loaded:
                assert loaded.options.topology == topology and loaded.rank_plan.strategy == chosen
                c = loaded.multiply(b_local)
                assert np.array_equal(c, expected)
                whole = comm.gather(c)
                if rank == 0:
                    assert np.array_equal(np.vstack(whole), a @ b)
    # a plan file whose topology was edited by hand: the same one-line error on every rank
    with matrix.spmm_plan(5, topology=USER_BUILT) as plan:
        plan.save(shared_tmp / "plan.npz")

    def damage() -> None:
        with np.load(shared_tmp / "plan.npz", allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        meta = json.loads(str(arrays["meta"]))
        meta["topology"]["levels"][1]["link"]["bandwidth"] = -1
        arrays["meta"] = np.array(json.dumps(meta))
        np.savez(shared_tmp / "damaged.npz", **arrays)

    on_rank_zero(comm, damage)
    with pytest.raises(InputError, match="levels 1|level 1 link bandwidth is -1; it must be a positive number"):
        sparsewire.SpmmPlan.load(shared_tmp / "damaged.npz", matrix)
