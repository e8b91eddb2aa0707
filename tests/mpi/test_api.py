"""The public API on every rank of one job (``import sparsewire`` only): distribute, plan, multiply, transpose,
save and load, exact against SciPy on integer data; ``out`` aliasing B; complex B refused; dropped and open plans;
``auto`` choosing the least predicted time; the programs of docs/api.md and examples/. The cases that must end the
job (a wrong B shape, a complex B at P > 1) run in jobs of their own (tests/test_api.py with tests/api_driver.py)."""

from __future__ import annotations

import os
import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire
from conftest import on_rank_zero


def integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-4, 5, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


def gathered(comm, block):
    return np.vstack(comm.allgather(block))


@pytest.mark.ranks(1, 3)
def test_public_program_multiplies_transposes_saves_and_loads_exactly(comm, seed, shared_tmp):
    """distribute -> spmm_plan() (auto) -> ten multiplies -> transpose().multiply, exact against SciPy's A @ B and
    A.T @ G, square and rectangular A != A.T, every rank passing its own rows as well as rank 0 holding A; the
    bytes MPI delivered to the transposed plan equal the forward plan's and the planned bytes; save and load."""
    path = shared_tmp / "plan.npz"
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    checked = 0
    for shape in [(61, 61), (47, 73), (80, 29)]:
        a = integer_matrix(rng, shape, 0.08)
        assert shape[0] != shape[1] or (a != a.T).nnz > 0
        k = int(rng.integers(1, 6))
        b = rng.integers(-3, 4, (shape[1], k)).astype(np.float64)
        g = rng.integers(-3, 4, (shape[0], k)).astype(np.float64)
        whole = sparsewire.distribute(comm, a if rank == 0 else None)
        offsets = whole.row_partition.offsets
        rows = a[offsets[rank] : offsets[rank + 1]]  # with 64-bit indices, as readers and caches give them
        rows = sp.csr_array((rows.data, rows.indices.astype(np.int64), rows.indptr.astype(np.int64)), shape=rows.shape)
        own = sparsewire.distribute(comm, rows, row_offsets=offsets)
        assert own.local_rows.indices.dtype == own.local_rows.indptr.dtype == np.int32  # held at 32 bits
        for matrix in (whole, own):
            assert matrix.shape == shape and matrix.nnz == a.nnz
            assert (matrix.gather() != a).nnz == 0 if rank == 0 else matrix.gather() is None
            b_local = b[slice(*matrix.col_partition.range(rank))]
            g_local = g[slice(*matrix.row_partition.range(rank))]
            with matrix.spmm_plan(k) as plan:
                assert "auto chose" in plan.explain()
                out = np.empty((plan.output_rows, k))
                for _ in range(10):
                    plan.multiply(b_local, out=out)
                    assert np.array_equal(gathered(comm, out), a @ b)
                forward_bytes = comm.allreduce(plan.bytes_received, op=MPI.SUM)  # what MPI delivered
                transposed = plan.transpose()
                assert np.array_equal(gathered(comm, transposed.multiply(g_local)), a.T @ g)
                backward_bytes = comm.allreduce(transposed.bytes_received, op=MPI.SUM)
                assert backward_bytes == forward_bytes == plan.stats.total_bytes, (backward_bytes, forward_bytes)
                assert transposed.stats.total_bytes == plan.stats.total_bytes
                assert transposed.transpose() is plan
                plan.save(path)
                with sparsewire.SpmmPlan.load(path, matrix) as loaded:
                    assert loaded.rank_plan.equals(plan.rank_plan) and loaded.rank_plan.strategy == plan.rank_plan.strategy
                    assert np.array_equal(gathered(comm, loaded.multiply(b_local)), a @ b)
                    assert np.array_equal(gathered(comm, loaded.transpose().multiply(g_local)), a.T @ g)
            assert np.array_equal(gathered(comm, sparsewire.spmm(matrix, b_local)), a @ b)
            assert np.array_equal(gathered(comm, sparsewire.spmm(matrix, b_local)), a @ b)  # the cached plan
            with matrix.spmm_plan(k, strategy="joint", mode="early", deterministic=True) as plan:
                assert np.array_equal(gathered(comm, plan.transpose().multiply(g_local)), a.T @ g)
            checked += 1
    assert checked == 6


@pytest.mark.ranks(1, 3)
def test_loading_a_plan_for_another_matrix_is_a_one_line_error_on_every_rank(comm, seed, shared_tmp):
    path = shared_tmp / "plan.npz"
    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (40, 40), 0.1)
    other = a.copy()
    other.data = other.data + 1
    matrix = sparsewire.distribute(comm, a if comm.Get_rank() == 0 else None)
    with matrix.spmm_plan(3) as plan:
        plan.save(path)
    changed = sparsewire.distribute(comm, other if comm.Get_rank() == 0 else None)
    with pytest.raises(sparsewire.PlanMismatchError, match="another matrix") as error:
        sparsewire.SpmmPlan.load(path, changed)
    assert "\n" not in str(error.value)


@pytest.mark.ranks(1, 3)
def test_out_may_be_or_overlap_b_in_every_mode_and_backend(comm, seed):
    """``multiply(B, out=B)`` and an ``out`` that overlaps B by all but one row, every mode and both kernel backends:
    C exact against SciPy (B is copied first, as NumPy's matmul does)."""
    import torch

    from sparsewire.errors import InputError

    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (53, 53), 0.1)
    k = int(rng.integers(1, 5))
    b = rng.integers(-3, 4, (53, k)).astype(np.float64)
    expected = a @ b
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    assert np.array_equal(matrix.row_partition.offsets, matrix.col_partition.offsets)
    rows = slice(*matrix.row_partition.range(rank))
    checked = 0
    for mode in ("bulk", "overlap", "pipelined", "early", "partitioned"):
        for backend in ("numpy", "torch"):
            try:
                plan = matrix.spmm_plan(k, mode=mode, backend=backend)
            except InputError:  # a combination the library refuses at planning (partitioned on torch)
                continue
            with plan:
                whole = b[rows].copy()  # a view of b would be overwritten with C
                shifted = np.zeros((whole.shape[0] + 1, k))
                shifted[1:] = whole
                if backend == "torch":
                    whole, shifted = torch.from_numpy(whole), torch.from_numpy(shifted)
                got_whole = plan.multiply(whole, out=whole)  # C written over B itself
                got_shifted = plan.multiply(shifted[1:], out=shifted[:-1])  # overlapping by all but one row
                for got in (got_whole, got_shifted):
                    got = got.numpy() if backend == "torch" else got
                    assert np.array_equal(gathered(comm, got), expected), (mode, backend)
                checked += 1
    assert checked >= 9  # 5 modes x 2 backends, less partitioned on torch where refused


@pytest.mark.ranks(1)
def test_a_complex_b_is_refused_in_every_mode_and_backend_at_one_rank(comm):
    from sparsewire.errors import InputError

    matrix = sparsewire.distribute(comm, "stencil2d:12")
    refused = 0
    for mode in ("bulk", "overlap", "pipelined", "early", "partitioned"):
        for backend in ("numpy", "torch"):
            try:
                plan = matrix.spmm_plan(2, mode=mode, backend=backend)
            except InputError:  # partitioned on torch is refused at planning
                continue
            with plan, pytest.raises(sparsewire.PlanMismatchError, match=r"the B block's values are complex128 \(complex\)"):
                plan.multiply(np.ones((plan.input_rows, 2)) * (1 + 2j))
            refused += 1
    assert refused == 9


@pytest.mark.ranks(1)
def test_a_sparse_or_list_b_is_refused_by_name_on_both_backends(comm):
    import scipy.sparse as sp

    matrix = sparsewire.distribute(comm, "stencil2d:5")
    for backend in ("numpy", "torch"):
        with matrix.spmm_plan(2, strategy="column", backend=backend) as plan:
            dense = np.ones((plan.input_rows, 2))
            with pytest.raises(sparsewire.PlanMismatchError, match="is a csr_array, not a dense array; .*plan_spgemm"):
                plan.multiply(sp.csr_array(dense))
            with pytest.raises(sparsewire.PlanMismatchError, match=r"is a list, not a dense array; pass np.asarray\(b\)"):
                plan.multiply(dense.tolist())
            assert np.asarray(plan.multiply(dense)).sum() == matrix.local_rows.sum() * 2  # the plan still multiplies


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:  # resident pages, as the kernel counts them
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


#: How many of MPICH's 2,048 communicator ids per process the test below holds while it drops plans.
HELD = 1700


@pytest.mark.ranks(2)
def test_dropped_plans_are_freed_without_close(comm, seed):
    """With 1,700 of MPICH's 2,048 communicator ids held, 400 plans dropped without close() and 400 matrices through
    spmm(): any plan or matrix not freed on collection ends the job with "Too many communicators" (each holds one);
    resident memory grows < 1 KB a plan, < 10 MB in all."""
    whole = integer_matrix(np.random.default_rng(seed), (60, 60), 0.1)
    b = np.arange(60 * 2, dtype=np.float64).reshape(60, 2) % 7
    expected = whole @ b
    matrix = sparsewire.distribute(comm, whole if comm.Get_rank() == 0 else None)
    rows, cols = matrix.row_partition.range(comm.Get_rank()), matrix.col_partition.range(comm.Get_rank())

    def through_a_plan():
        c = matrix.spmm_plan(2, strategy="column").multiply(b[cols[0] : cols[1]])  # dropped at once; column: no choice
        assert np.array_equal(c, expected[rows[0] : rows[1]])

    def through_spmm():
        again = sparsewire.distribute(comm, whole if comm.Get_rank() == 0 else None)
        assert np.array_equal(sparsewire.spmm(again, b[cols[0] : cols[1]]), expected[rows[0] : rows[1]])

    through_a_plan(), through_spmm()  # (their first calls compile kernels: memory that is kept, not leaked)
    held = [comm.Dup() for _ in range(HELD)]  # (so that 400 plans show what 2,100 would, in a seventh of the time)
    try:
        start = resident_mb()
        for _ in range(100):  # 400 in all: more than the ids left (2,048 - HELD, less those MPI and other cases keep)
            through_a_plan()
        steady = resident_mb()
        for _ in range(300):
            through_a_plan()
        per_plan = comm.allreduce((resident_mb() - steady) * 1024 / 300, op=MPI.MAX)
        for _ in range(400):
            through_spmm()
        growth = comm.allreduce(resident_mb() - start, op=MPI.MAX)
    finally:
        for duplicate in held:
            duplicate.Free()
    # a dropped plan is freed at once, all of it (an MPI datatype left unfreed would be 2 KB of every plan)
    assert per_plan < 1, f"resident memory grew by {per_plan:.2f} KB a plan"
    # a matrix and its plans are a reference cycle, freed by the collections admit() starts (every 256 live plans)
    assert growth < 10, f"resident memory grew by {growth:.1f} MB"


@pytest.mark.ranks(1, 2)
def test_too_many_open_plans_is_one_clear_error_before_mpis_limit(comm, monkeypatch):
    """At one rank the real limit: 1,024 open plans, each holding a communicator, fit under MPICH's 2,048 ids and the
    next is refused. At two, every rank refuses together, under a limit of 64 (the same code, a sixteenth of the
    plans: each plan costs collectives there)."""
    import gc

    from sparsewire.comm import lifetime

    limit = lifetime.LIVE_LIMIT if comm.Get_size() == 1 else 64
    assert lifetime.LIVE_LIMIT == 1024
    monkeypatch.setattr(lifetime, "LIVE_LIMIT", limit)
    gc.collect()  # (plans the job's earlier cases dropped: admit() collects only from 256 live ones on)
    lifetime.release_queued()
    assert lifetime.live_executors() == 0
    matrix = sparsewire.distribute(comm, "stencil2d:6")
    kept, refusal = [], "not refused"
    try:
        while len(kept) <= limit:
            kept.append(matrix.spmm_plan(1, strategy="column"))  # (column: no choice to make, the refusal is the point)
    except sparsewire.InputError as error:
        refusal = f"refused after {len(kept)}: {error}"
    expected = f"refused after {limit}: {limit} plans are open on this process, the most sparsewire allows ({limit}"
    assert expected in refusal and "plan.close()" in refusal, refusal
    for plan in kept:
        plan.close()
    with matrix.spmm_plan(1) as plan:
        plan.multiply(np.ones((plan.input_rows, 1)))
    assert len(kept) == limit


@pytest.mark.parametrize(
    "matrix, topology",
    [
        pytest.param("rmat:9:6:2", "flat", marks=pytest.mark.ranks(3)),
        pytest.param("delaunay:600:1", "nodes:2", marks=pytest.mark.ranks(4)),
        pytest.param("stencil2d:24", "cola-a800", marks=pytest.mark.ranks(4)),
        pytest.param("rmat:10:8:3", "measured", marks=pytest.mark.ranks(4)),
    ],
)
def test_auto_picks_the_least_predicted_time_near_ties_going_to_fewer_steps(comm, shared_tmp, matrix, topology):
    import json

    from sparsewire.distributed.spmm import candidate_strategies

    if topology == "measured":  # a calibration with local rates: the prediction adds the busiest rank's work
        from sparsewire.topology.records import stamp

        record = stamp("network")
        links = {"bandwidth_bytes_per_second": 6e7, "latency_seconds": 1e-5, "single_pair_bandwidth": 1.2e8}
        intra = {"bandwidth_bytes_per_second": 4e9, "latency_seconds": 3e-6}
        local = {"nonzero_columns_per_second": 1e7, "copy_bytes_per_second": 1e9}  # slow enough to change the choice
        record.update(ranks=4, rank_groups=[0, 0, 1, 1], group_size=2, local=local)
        record["links"] = {"intra_node": intra, "inter_node": links}
        topology = str(shared_tmp / "net.json")
        on_rank_zero(comm, (shared_tmp / "net.json").write_text, json.dumps(record))
    distributed = sparsewire.distribute(comm, matrix)
    parsed = None if topology == "flat" else sparsewire.parse_topology(topology)
    with distributed.spmm_plan(16, options=sparsewire.ExecOptions(trial=False), topology=parsed, mode="bulk") as chosen:
        predictions, steps = {}, {}
        for strategy in candidate_strategies(parsed, comm.Get_size()):
            with distributed.spmm_plan(16, strategy=strategy.value, topology=parsed, mode="bulk") as plan:
                predictions[strategy.value] = (plan.stats.as_dict()["predicted_seconds"], plan.stats.total_bytes)
                # the steps that send, counted from every rank's exchanges (not from the stats the planner reads)
                sending = {e.step for e in plan.rank_plan.exchanges if int(sum(e.send_counts)) > 0}
                steps[strategy.value] = len(set().union(*comm.allgather(sending)))
        assert (topology != "flat") == ("joint-hier" in predictions)
        assert chosen.choice.steps == steps
        least = min(seconds for seconds, _ in predictions.values())
        near = [name for name, (seconds, _) in predictions.items() if seconds <= 1.02 * least]
        expected = min(near, key=lambda name: (steps[name], *predictions[name]))
        assert chosen.rank_plan.strategy.value == expected, (predictions, steps)
        explained = chosen.explain()
        assert f"auto chose {expected}" in explained
        assert ("local work unknown" in explained) == (not topology.endswith("net.json")), explained


@pytest.mark.ranks(2)
def test_a_second_thread_multiplying_the_same_plan_gets_the_error_and_the_job_goes_on(comm, seed):
    """While one thread's multiply runs (its lock held, as then), a second multiply of the same plan raises the
    one-line PlanMismatchError to its caller on every rank instead of ending the job; the plan then multiplies
    exactly."""

    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (300, 300), 0.02)
    b = rng.integers(-3, 4, (300, 8)).astype(np.float64)
    matrix = sparsewire.distribute(comm, a if comm.Get_rank() == 0 else None)
    b_local = b[slice(*matrix.col_partition.range(comm.Get_rank()))]
    with matrix.spmm_plan(8) as plan:
        with plan.executor._running:
            with pytest.raises(sparsewire.PlanMismatchError, match="already multiplying in another thread"):
                plan.multiply(b_local)
        assert comm.allreduce(1) == 2  # the job goes on
        assert np.array_equal(gathered(comm, plan.multiply(b_local)), a @ b)


@pytest.mark.ranks(1, 3)
def test_a_plan_at_another_width_shares_the_operands_and_multiplies_exactly(comm, seed):
    """``plan.with_width(k)``, narrower and wider, in every mode (ordered too) on both backends, the transposes with
    and without ``share_buffers``: A @ B and A.T @ G exact against SciPy with the plans and transposes multiplied in
    turn (the narrower one in the wider one's buffers, a shared transpose in its forward's), the bytes MPI delivered
    k / k0 of the plan's; the narrower plan holds no sparse operand or dense buffer of its own, a transpose the
    forward's buffers only where shared; the transposes are the same rank plan; plans that share memory multiply one
    at a time (one lock)."""
    import torch

    from sparsewire.errors import InputError

    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (67, 59), 0.09)
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    cols, rows = slice(*matrix.col_partition.range(rank)), slice(*matrix.row_partition.range(rank))
    checked = 0
    for mode, deterministic in (("bulk", False), ("overlap", False), ("early", True), ("pipelined", False)):
        for backend in ("numpy", "torch"):
            base = matrix.spmm_plan(6, mode=mode, backend=backend, deterministic=deterministic, strategy="joint")
            narrow, wide = base.with_width(2), base.with_width(9)
            share = (mode, backend) in (("bulk", "torch"), ("overlap", "numpy"), ("early", "torch"), ("pipelined", "numpy"))
            base.transpose(share_buffers=share)
            plans = (base, narrow, wide, narrow, base)
            for turn, plan in enumerate(plans):
                b = rng.integers(-3, 4, (a.shape[1], plan.k)).astype(np.float64)
                g = rng.integers(-3, 4, (a.shape[0], plan.k)).astype(np.float64)
                b_local, g_local = (torch.from_numpy(v) for v in (b[cols], g[rows])) if backend == "torch" else (b[cols], g[rows])
                got, got_t = plan.multiply(b_local), plan.transpose().multiply(g_local)
                got, got_t = (np.asarray(v) for v in (got, got_t))
                assert np.array_equal(gathered(comm, got), a @ b), (mode, backend, turn, plan.k)
                assert np.array_equal(gathered(comm, got_t), a.T @ g), (mode, backend, plan.k)
                delivered = comm.allreduce(plan.bytes_received, op=MPI.SUM)
                assert delivered == plan.stats.total_bytes == base.stats.total_bytes * plan.k // 6, (mode, backend)
            assert narrow.transpose().rank_plan is base.transpose().rank_plan and narrow.transpose().transpose() is narrow

            def lent(plan, source):
                """Per dense buffer of ``plan`` (but empty ones): whether it lies in ``source``'s buffers' memory."""
                held = source.executor.buffers
                memory = [np.asarray(b) for ex in held.exchanges for b in (ex.send_buffer, ex.receive_buffer)]
                memory += [np.asarray(held.stack)] if held.stack is not None else []
                buffers = [b for ex in plan.executor.buffers.exchanges for b in (ex.send_buffer, ex.receive_buffer) if b.shape[0]]
                return [any(np.shares_memory(np.asarray(b), m) for m in memory) for b in buffers]

            for other in (narrow, wide):
                ours, theirs = other.executor.buffers, base.executor.buffers
                assert ours.diagonal is theirs.diagonal and ours.plan is theirs.plan
                for mine, its in zip(ours.exchanges, theirs.exchanges):
                    assert mine.unpack is its.unpack and mine.pack_b is its.pack_b
            # Unordered, a narrower plan's buffers and the adjoint's (the forward's sizes swapped) all lie in the
            # forward's memory where shared, none where not; ordered, the stacks' sizes differ: what fits is lent.
            ok = all(lent(narrow, base))  # (a wider one's buffers lie wherever one fits)
            ok &= (all(lent(base.transpose(), base)) or deterministic) if share else not any(lent(base.transpose(), base))
            assert comm.allreduce(ok, op=MPI.LAND), (mode, backend, share)
            assert (base.transpose().executor._running is base.executor._running) == share
            with base.executor._running:
                with pytest.raises(sparsewire.PlanMismatchError, match="already multiplying in another thread"):
                    narrow.multiply(b_local[:, :2] if backend == "numpy" else b_local[:, :2].contiguous())
            for plan in (narrow, wide, base):
                plan.close()
            checked += 1
    assert checked == 8
    with matrix.spmm_plan(3) as plan:
        with pytest.raises(InputError, match="k must be a positive integer"):
            plan.with_width(0)


#: The programs of docs/api.md, each a whole program as a user runs it under ``mpiexec -n 2``.
API_DOC_PROGRAMS = re.findall(r"```python\n(.*?)```", (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(), re.S)


@pytest.mark.ranks(2)
@pytest.mark.parametrize("index", range(len(API_DOC_PROGRAMS)), ids=lambda index: f"example {index + 1}")
def test_docs_api_example_runs_on_every_rank(index, comm):
    """The program as ``mpiexec -n 2 python program.py`` runs it (its own globals, ``__name__`` "__main__"), here on
    every rank of this job; its own asserts are the checks."""
    program = compile(API_DOC_PROGRAMS[index], f"docs/api.md example {index + 1}", "exec")
    exec(program, {"__name__": "__main__"})
    comm.Barrier()  # (every rank ended it before the next case)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.ranks(1, 3)
def test_examples_run_on_every_rank(comm, capsys, monkeypatch):
    """examples/power_iteration.py (its estimate against the stencil's exact largest eigenvalue) and
    examples/bfs_spgemm.py (levels checked against SciPy by the example itself), as ``mpiexec -n P python SCRIPT``
    runs them, here on every rank of this job; rank 0 prints."""

    def run(script: str, *args: str) -> list[str]:
        monkeypatch.setattr(sys, "argv", [str(EXAMPLES / script), *args])
        capsys.readouterr()
        runpy.run_path(str(EXAMPLES / script), run_name="__main__")
        return comm.bcast(capsys.readouterr().out.splitlines() if comm.Get_rank() == 0 else None)

    lines = run("power_iteration.py")
    estimate, exact = (float(line.rsplit(":", 1)[1]) for line in lines[-2:])
    assert abs(estimate - exact) < 1e-8 * exact, lines
    assert "SciPy agrees" in "\n".join(run("bfs_spgemm.py", "delaunay:300:2", "--source", "5"))
