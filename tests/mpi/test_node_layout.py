"""Where a communicator's ranks live: :func:`sparsewire.comm.runtime.node_ids`, found once per communicator."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import _node_ids_keyval, node_ids, ranks_on_node


def test_node_ids_are_found_once_per_communicator_and_anew_on_a_duplicate(comm):
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    expected_sharing = node.Get_size()
    node.Free()
    duplicate = comm.Dup()
    try:
        ids = node_ids(duplicate)
        assert ids.shape == (comm.Get_size(),) and ids[comm.Get_rank()] <= comm.Get_rank()
        assert ranks_on_node(duplicate) == expected_sharing == int((ids == ids[comm.Get_rank()]).sum())
        ids[:] = -5  # the caller's copy: what the communicator keeps is not changed through it
        assert np.array_equal(node_ids(duplicate), node_ids(comm))
        # a planted layout on the communicator is what the next call returns: nothing was computed again
        duplicate.Set_attr(_node_ids_keyval(), np.full(comm.Get_size(), 7, np.int64))
        assert node_ids(duplicate).tolist() == [7] * comm.Get_size()
        assert ranks_on_node(duplicate) == comm.Get_size()
        again = duplicate.Dup()  # a duplicate does not inherit it
        assert np.array_equal(node_ids(again), node_ids(comm))
        again.Free()
    finally:
        duplicate.Free()
