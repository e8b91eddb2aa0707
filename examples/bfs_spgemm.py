"""Breadth-first search levels by sparse x sparse products over the boolean semiring.

    mpiexec -n 3 .venv/bin/python examples/bfs_spgemm.py [GRAPH] [--source S]

GRAPH is a file or generator spec (default ``rmat:10:8:1``, made undirected). The frontier is a
sparse n x 1 matrix F; each level is ``F' = A.T (lor.land) F`` with the visited vertices masked
out, one distributed SpGEMM per level (:meth:`DistributedMatrix.spgemm`). Prints the number of
vertices per level; SciPy's unweighted shortest paths check the level of every vertex on rank 0.
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.csgraph import shortest_path

import sparsewire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graph", nargs="?", default="rmat:10:8:1", help="graph file or generator spec")
    parser.add_argument("--source", type=int, default=0, help="start vertex (default: 0)")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    adjacency = None
    if rank == 0:
        directed = sparsewire.load_matrix(args.graph)
        adjacency = sp.csr_array(((directed + directed.T) != 0).astype(np.float64))  # undirected
    a = sparsewire.distribute(comm, adjacency)
    n = a.shape[0]
    start, stop = a.row_partition.range(rank)
    # The undirected graph is symmetric, so A.T F = A F: rows of the product are the new vertices.
    levels = np.full(stop - start, -1)
    frontier_rows = np.array([args.source - start]) if start <= args.source < stop else np.zeros(0, int)
    level = 0
    sizes = []
    while comm.allreduce(frontier_rows.size, op=MPI.SUM):
        levels[frontier_rows] = level
        sizes.append(comm.allreduce(frontier_rows.size, op=MPI.SUM))
        columns = np.zeros(frontier_rows.size, int)
        local = sp.csr_array((np.ones(frontier_rows.size), (frontier_rows, columns)), shape=(stop - start, 1))
        frontier = sparsewire.distribute(comm, local, row_offsets=a.row_partition.offsets)
        reached = a.spgemm(frontier, "lor_land").local_rows
        candidates = np.flatnonzero(np.diff(reached.indptr))
        frontier_rows = candidates[levels[candidates] < 0]
        level += 1
    all_levels = comm.gather(levels, root=0)
    if rank == 0:
        levels = np.concatenate(all_levels)
        hops = shortest_path(adjacency, indices=args.source, unweighted=True, directed=False)
        assert np.array_equal(levels, np.where(np.isinf(hops), -1, hops).astype(int)), "BFS levels differ from SciPy's"
        print(f"{args.graph}: n = {n}, {a.nnz} nonzeros; BFS from {args.source}")
        print("vertices per level:", " ".join(map(str, sizes)))
        print(f"reached {int((levels >= 0).sum())} of {n} vertices in {len(sizes) - 1} levels (SciPy agrees)")


if __name__ == "__main__":
    main()
