"""One job of tests/test_torchrun.py, run by ``torchrun`` (or, for the planted fault, by ``mpiexec``).

    torchrun --standalone --nproc-per-node P tests/torchrun_job.py SEED [--launch-only]

Each rank first writes one line ``LAUNCH {...}`` to standard error: its launcher's rank, the size of its MPI world,
and the names of its ancestor processes (read from ``/proc``), so that the test can see that no ``mpiexec`` (or
its proxy) started it, and at exit one line ``EXIT {...}``: whether a torch.distributed process group outlived
sparsewire's exit handler. Then, on every rank: ``sparsewire spmm --check --json`` (all strategies) and ``sparsewire gcn
cora --json`` through the command line's own entry, and a PyG model (GCN, batch norm, SAGE mean and max, GIN, GAT)
converted by sparsewire.pyg and trained 100 epochs in float64 beside the same model on one process (a reference
rank 0 trains); SDDMM, SpGEMM and the MPI transport are tried and their refusals written. Rank 0
writes one JSON object per part to standard output, each on a line of its own starting with the part's name.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import sys

import numpy as np


def ancestors() -> list[str]:
    """The command names of this process's ancestors, nearest first."""
    names, pid = [], os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read()
        names.append(fields[fields.index("(") + 1 : fields.rindex(")")])
        pid = int(fields[fields.rindex(")") + 2 :].split()[1])
    return names


def command(*args: str) -> dict:
    """``sparsewire ARGS`` in this process, its JSON (rank 0's standard output; {} elsewhere)."""
    from sparsewire.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(args))
    if status:
        raise SystemExit(f"sparsewire {' '.join(args)} ended with {status}")
    text = out.getvalue().strip()
    return json.loads(text) if text else {}


def pyg_losses(seed: int) -> dict:
    """Per-epoch losses of a converted model against the same model on one process, and GAT's refusal."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv
    from torch_geometric.utils import coalesce

    import sparsewire.pyg as sw

    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)  # the same graph on every rank: same seed
    n = 40
    edge_index = coalesce(torch.from_numpy(rng.integers(0, n, (2, 220))), num_nodes=n)
    data = Data(x=torch.from_numpy(rng.standard_normal((n, 5))), edge_index=edge_index,
                y=torch.from_numpy(rng.integers(0, 3, n)), train_mask=torch.from_numpy(rng.random(n) < 0.6))  # fmt: skip

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn, self.norm = GCNConv(5, 6), torch.nn.BatchNorm1d(6)
            self.sage, self.max = SAGEConv(6, 6), SAGEConv(6, 6, aggr="max")
            self.gin = GINConv(torch.nn.Linear(6, 6))
            self.gat = GATConv(6, 3, heads=2, concat=False)

        def forward(self, x, edge_index):
            x = self.norm(self.gcn(x, edge_index)).relu()
            x = self.max(self.sage(x, edge_index).relu(), edge_index).relu()
            return self.gat(self.gin(x, edge_index).relu(), edge_index)

    def trained(model, x, graph, y, mask, loss, reduce_gradients) -> list[float]:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        losses = []
        for _ in range(100):
            optimizer.zero_grad()
            value = loss(model(x, graph)[mask], y[mask])
            value.backward()
            reduce_gradients(model)
            optimizer.step()
            losses.append(float(value.detach()))
        return losses

    torch.manual_seed(seed)
    model = Net().double()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    distributed = sw.convert(model)
    local = sw.distribute(data, partition="rcm")
    losses = trained(distributed, local.x, local.edge_index, local.y, local.train_mask, sw.cross_entropy, sw.allreduce_gradients)
    if sw.rank() != 0:  # (rank 0 alone reports: the reference, the same on every rank, is trained there only)
        return {}
    reference = Net().double()
    reference.load_state_dict(initial)
    expected = trained(reference, data.x, data.edge_index, data.y, data.train_mask, F.cross_entropy, lambda m: None)
    return {"largest_difference": max(abs(a - b) for a, b in zip(losses, expected)), "epochs": len(losses)}


def reductions() -> dict:
    """Each reduction over the ranks, on values rank r makes from r alone (the answers are known in closed form)."""
    from mpi4py import MPI

    from sparsewire.comm import world

    comm = world()
    r = comm.Get_rank()
    buffer = np.array([r + 1.0, -r], np.float64)
    comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.MAX)
    found = {
        "sum": comm.allreduce(r + 1, op=MPI.SUM),
        "max": comm.allreduce(r, op=MPI.MAX),
        "min": comm.allreduce(np.array([r, -r]), op=MPI.MIN).tolist(),
        "lor": bool(comm.allreduce(r == comm.Get_size() - 1, op=MPI.LOR)),
        "buffer max": buffer.tolist(),
        # reduced as tensors: each result of its value's own type
        "float sum": comm.allreduce(0.5 * (r + 1)),
        "int64 max": comm.allreduce(np.int64(r), op=MPI.MAX),
        "array sum": comm.allreduce(np.array([r, 1], np.int32)),
        "big": comm.allreduce(2**62 + r, op=MPI.MAX),  # past what a sum over the ranks keeps in int64: the pickled way
    }
    found["types"] = [type(found[key]).__name__ for key in ("float sum", "int64 max", "big")] + [str(found["array sum"].dtype)]
    found["array sum"] = found["array sum"].tolist()
    found["int64 max"] = int(found["int64 max"])
    # an Alltoallv of a dtype Gloo does not reduce (moved as bytes), rank r sending q + 1 values r * 10 + q to rank q,
    # each rank's pieces received at displacements with a gap of one element between them
    size = comm.Get_size()
    counts = np.arange(1, size + 1)
    send = np.repeat(r * 10 + np.arange(size, dtype=np.uint32), counts).astype(np.uint32)
    receive_counts = np.full(size, r + 1)
    receive_displacements = np.arange(size) * (r + 2)
    receive = np.full(size * (r + 2), 999, np.uint32)
    comm.Alltoallv([send, counts, MPI.UINT32_T], [receive, (receive_counts, receive_displacements), MPI.UINT32_T])
    found["alltoallv"] = receive.tolist()
    try:
        comm.allreduce(r, op=MPI.BXOR)
    except ValueError as error:
        found["refused"] = str(error)
    return found


def refusals() -> dict:
    """What sends its own MPI messages, tried on the torchrun job's communicator: each refusal's line."""
    import sparsewire
    from sparsewire.comm import world
    from sparsewire.errors import InputError

    comm = world()
    matrix = sparsewire.distribute(comm, "stencil2d:6")
    found = {}
    attempts = {
        "sddmm": lambda: sparsewire.plan_sddmm(matrix, 4),
        "spgemm": lambda: sparsewire.plan_spgemm(matrix, matrix),
        "mpi transport": lambda: sparsewire.plan_spmm(matrix, 4, options=sparsewire.ExecOptions(transport="mpi")),
    }
    for name, attempt in attempts.items():
        try:
            attempt().close()
            found[name] = None
        except InputError as error:
            found[name] = str(error)
    return found


def report_groups_at_exit() -> None:
    """At exit, after sparsewire's own exit handler (atexit runs the last registered first, and this one is registered
    before sparsewire makes a group): one line ``EXIT {...}`` on standard error, whether torch.distributed still has
    a process group."""
    import atexit

    import torch.distributed as dist

    atexit.register(lambda: os.write(2, f"EXIT {json.dumps({'initialized': dist.is_initialized()})}\n".encode()))


def main() -> None:
    faulthandler.enable(all_threads=True)  # a rank that aborts shows where each of its threads was
    report_groups_at_exit()
    seed = int(sys.argv[1])
    from mpi4py import MPI

    from sparsewire._lib.launcher import launched_by_torchrun, launcher_rank

    record = {"rank": launcher_rank(), "mpi_world": MPI.COMM_WORLD.Get_size(), "ancestors": ancestors()}
    # One write of the whole line (under PIPE_BUF, so atomic): the ranks share standard error, and print's separate
    # write of the newline let two ranks' records run together on one line.
    os.write(2, f"LAUNCH {json.dumps(record)}\n".encode())
    if sys.argv[2:] == ["--launch-only"]:  # (the planted fault: only the record is asked for)
        return
    parts = {
        "spmm": command("spmm", f"rmat:9:8:{seed % 100}", "--strategy", "all", "--repeat", "2", "--check", "--json"),
        "gcn": command("gcn", "cora", "--epochs", "4", "--json"),
        "pyg": pyg_losses(seed),
        "refusals": refusals(),
    }
    if launched_by_torchrun():  # TorchComm's own reductions (under mpiexec these are MPI's)
        parts["reductions"] = reductions()
    from sparsewire.pyg import rank

    if rank() == 0:
        for name, result in parts.items():
            print(f"{name} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()
