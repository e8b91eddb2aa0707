"""Run under ``mpiexec -n P``: messages staged through host memory by a planted transfer
calibration give the same C as messages sent from the buffers.

    python transfer_driver.py CALIBRATION BACKEND SEED [DEVICE]

CALIBRATION: a transfer calibration file (its threshold read back through the executor), or
``split:PATH``: the driver plans once, then plants at PATH a calibration whose threshold is the
largest message's size (every smaller message staged, the largest ones direct; where all messages
have one size, every message staged) and uses it; it reports ``distinct_sizes``. For each mode of
the backend and deterministic off and
on: C on integer data equal to SciPy's; the bytes MPI delivered equal to the plan; each message
staged exactly when its bytes are below the threshold; after a multiply, every staged message's
host memory holds what its buffer holds (so the copies ran); explain() counts the paths per link
class. DEVICE (default cpu; ``cuda``: each rank the GPU of its rank on the node;
``cpu-deferred-streams``: the CPU with the torch backend's CUDA branches over
:mod:`deferred_streams`, whose copies run as late as a GPU may run them) with the torch backend.
Each plan multiplies two different B, so a staged copy that has not run leaves stale rows in C.
Prints one JSON line from rank 0: the staged and direct message counts (and, deferred, the copies
queued on the copy stream).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire
from sparsewire.topology.model import Topology


def host(array) -> np.ndarray:
    """A result or buffer as a NumPy array (a copy from a GPU)."""
    return array.cpu().numpy() if hasattr(array, "cpu") else np.asarray(array)


def check_transfer_paths(comm, calibration: str, backend: str, seed: int, device: str = "cpu") -> dict:
    """The module's checks on every rank of ``comm`` (collective); returns rank 0's staged and direct message counts
    of the bulk runs and ``distinct_sizes``."""
    rng = np.random.default_rng(seed)
    n, k = 300, 6
    # A band (neighbouring ranks exchange a few rows) and random entries (more rows, to other ranks):
    # messages of many sizes.
    a = sp.random_array((n, n), density=0.004, rng=rng, format="csr") + sp.diags_array(
        [1.0] * 5, offsets=[-2, -1, 0, 1, 2], shape=(n, n)
    )
    a = sp.csr_array(a)
    a.data = rng.integers(-4, 5, a.nnz).astype(np.float64)
    a = comm.bcast(a, root=0)
    b_first, b_full = (comm.bcast(rng.integers(-3, 4, (n, k)).astype(np.float64), root=0) for _ in range(2))
    reference_first, reference = a @ b_first, a @ b_full
    matrix = sparsewire.distribute(comm, a)
    topology = Topology.nodes(2) if comm.Get_size() >= 2 else None
    distinct_sizes = None
    if calibration.startswith("split:"):
        calibration = calibration[len("split:") :]
        with matrix.spmm_plan(k, np.float64, strategy="auto", topology=topology, mode="bulk", threads=1) as probe:
            sizes = [e * 8 for ex in probe.executor.buffers.exchanges for e in ex.send_elements]
        distinct_sizes = sorted({size for rank_sizes in comm.allgather(sizes) for size in rank_sizes})
        # The largest size: every smaller message staged, the largest direct; where every message has
        # one size (a random matrix on few ranks may give that), one byte more: every message staged.
        threshold = distinct_sizes[-1] + (1 if len(distinct_sizes) == 1 else 0) if distinct_sizes else 0
        if comm.Get_rank() == 0:
            with open(calibration, "w") as file:
                record = {"kind": "transfer", "schema": 2, "device": device.split(":")[0], "staged_below_bytes": threshold}
                json.dump(record, file)
        comm.Barrier()
    modes = ("bulk", "overlap", "early") if backend == "torch" else ("bulk", "overlap", "early", "partitioned")
    totals = {"staged": 0, "direct": 0, "distinct_sizes": None if distinct_sizes is None else len(distinct_sizes)}
    for mode in modes:
        for deterministic in (False, True):
            plan = matrix.spmm_plan(
                k,
                np.float64,
                strategy="auto",
                topology=topology,
                mode=mode,
                threads=1,
                deterministic=deterministic,
                backend=backend,
                device=device,
                transfer_calibration=calibration,
            )
            executor = plan.executor
            rule = executor.transfer_rule
            first = host(plan.multiply(b_first[matrix.input_ids()]))
            case = f"{mode} deterministic={deterministic}"
            assert np.array_equal(first, reference_first[matrix.row_ids()]), f"{case}: first C differs"
            c = plan.multiply(b_full[matrix.input_ids()])  # another B: the staged copies run every multiply
            assert np.array_equal(host(c), reference[matrix.row_ids()]), f"{mode} deterministic={deterministic}: C differs"
            whole = matrix.gather_dense(c)  # a tensor of the backend's device, or an array
            assert comm.Get_rank() != 0 or np.array_equal(whole, reference), f"{mode}: gather_dense of {type(c).__name__}"
            assert not plan.delivery_problems, plan.delivery_problems
            expected = sum(int(e.recv_counts.sum()) for e in plan.rank_plan.exchanges) * k * 8
            assert plan.bytes_received == expected, (plan.bytes_received, expected)
            for ex in executor.buffers.exchanges:
                for side, elements, staged, stage, contents in (
                    ("send", ex.send_elements, ex.send_staged, ex.send_stage, host(ex.send_device)),
                    ("recv", ex.recv_elements, ex.recv_staged, ex.recv_stage, host(ex.recv_device)),
                ):
                    wanted = [m for m, e in enumerate(elements) if executor.stages_messages and e * 8 < rule.staged_below_bytes]
                    assert list(staged) == wanted, (side, staged, wanted)
                    offsets = np.concatenate([[0], np.cumsum(elements)])
                    for m in staged:
                        np.testing.assert_array_equal(stage[offsets[m] : offsets[m + 1]], contents[offsets[m] : offsets[m + 1]])
            summary = plan.transfer_summary
            text = plan.explain()
            for name, paths in summary.items():
                for path, (count, _, _, _) in paths.items():
                    assert f"{count} {path}" in text, (name, path, text)
                    if mode == "bulk" and not deterministic:
                        totals[path] += count
            assert ("staged through host memory" in text) == (executor.stages_messages and rule.staged_below_bytes > 0), text
            plan.close()
    return totals


def write_calibration(path, threshold: int, **fields):
    """A transfer calibration at ``path`` (``calibrate --device``'s format) whose threshold is ``threshold`` bytes."""
    record = {"kind": "transfer", "schema": 2, "device": "cpu", "staged_below_bytes": threshold, **fields}
    with open(path, "w") as file:
        json.dump(record, file)
    return path


def main() -> None:
    calibration, backend, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    comm = MPI.COMM_WORLD
    copy_stream = None
    if device == "cpu-deferred-streams":
        from deferred_streams import install

        copy_stream, device = install(), "cpu"
    if device == "cuda":
        from sparsewire.kernels.torch_backend import node_device

        device = node_device(comm)

    totals = check_transfer_paths(comm, calibration, backend, seed, device)
    if copy_stream is not None:
        totals["deferred_copies"] = comm.allreduce(copy_stream.deferred)
    if comm.Get_rank() == 0:
        print(json.dumps(totals))


if __name__ == "__main__":
    main()
