"""The executor on every rank of one job: every strategy, topology, mode and thread count exact with the bytes as
planned (the cases of tests/exec/mpi_driver.py, which the emulated cluster and the device tests run as a script);
bitwise determinism; allocation after the first multiply; a corrupted plan caught by the bytes check; the tests'
registered ``recording`` transport (tests/exec/registry_driver.py)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from mpi_driver import SMALL_PIECE_BYTES, one_row_fewer_to_rank_one, planned_runs, run_cases
from registry_driver import recorded_runs

from sparsewire.exec import combine
from sparsewire.exec import executor as executor_module
from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import ExecOptions
from sparsewire.io.generators import from_spec
from sparsewire.kernels import compiled as kernels
from sparsewire.partition import partition
from sparsewire.plan.modes import MODES, layout_for_mode
from sparsewire.plan.plan import build_rank_plan_collective
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.topology.model import Topology

COLUMN_BASED = {Strategy.BLOCK, Strategy.COLUMN, Strategy.COLUMN_HIER}
DETERMINISTIC_THREADS = (1, 2, 3)


@pytest.mark.ranks(1, 3, 4)
@pytest.mark.parametrize("strategy", [s.value for s in EXECUTABLE_STRATEGIES])
def test_executor_plans_results_and_bytes(comm, seed, strategy, monkeypatch):
    """Every case, topology and mode of one strategy (``-k "joint-hier"`` runs one), with 1, 2 and 3 threads per rank
    at P = 1, 2 at P = 3 and 1 at P = 4 (ranks x threads past this machine's 2 cores only cost time);
    collective plan = global plan, C exact, bytes as planned. The diagonal block goes in pieces of 64 multiply-adds,
    so that the modes that multiply it while messages are in flight call the transport's progress between pieces."""
    monkeypatch.setattr(combine, "PROGRESS_EVERY", 64)
    monkeypatch.setattr(executor_module, "PIECE_BYTES", SMALL_PIECE_BYTES)
    threads = {1: [1, 2, 3], 3: [2]}.get(comm.Get_size(), [1])
    runs, _ = run_cases(comm, seed, threads, "mpi", "numpy", "cpu", strategy)
    assert runs == planned_runs(threads, "mpi", strategies=strategy) * comm.Get_size()


@pytest.mark.ranks(1, 3)
def test_torch_transport_is_exact_for_every_strategy_mode_and_thread_count(comm, seed, monkeypatch):
    """The torch.distributed transport (Gloo): every case but the partitioned mode, which it does not run (at P = 3
    the two-level strategies relay through a node of two and one of one; the MPI transport runs them at P = 4 too)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(combine, "PROGRESS_EVERY", 64)
    threads = [1, 2] if comm.Get_size() == 1 else [1]  # (ranks x threads past the 2 cores only cost time)
    runs, _ = run_cases(comm, seed, threads, "torch")
    assert runs == planned_runs(threads, "torch") * comm.Get_size()


@pytest.mark.parametrize("transport", ["mpi", "torch"])
def test_torch_backend_is_exact_for_every_strategy_and_mode(comm, seed, transport, monkeypatch):
    """B, C and the buffers torch tensors: one and two threads per rank at P = 1, two at P = 2, one at P = 3 and 4
    (more threads than this 2-core machine's cores only cost time); on the torch transport at P = 3."""
    pytest.importorskip("torch")
    if transport == "torch" and comm.Get_size() != 3:
        pytest.skip("the torch backend on the torch transport runs at P = 3")
    monkeypatch.setattr(combine, "PROGRESS_EVERY", 64)
    monkeypatch.setattr(executor_module, "PIECE_BYTES", SMALL_PIECE_BYTES)
    threads = {1: [1, 2], 2: [2]}.get(comm.Get_size(), [1]) if transport == "mpi" else [1]
    runs, _ = run_cases(comm, seed, threads, transport, "torch")
    assert runs == planned_runs(threads, transport, "torch") * comm.Get_size()


@pytest.mark.ranks(1, 3)
def test_grouped_exchanges_are_exact_for_every_strategy_and_mode_they_run(comm, seed):
    """NCCL's protocol (each exchange's receives held until its sends, all in one group; tests/exec/extra_transports.py)
    on Gloo: C exact and the bytes as planned, every strategy, bulk/overlap/pipelined, torch backend."""
    pytest.importorskip("torch")
    runs, _ = run_cases(comm, seed, [1], "torch-grouped", "torch")
    assert runs == planned_runs([1], "torch-grouped", "torch") * comm.Get_size()


@pytest.mark.ranks(4)
def test_messages_to_another_group_go_in_pieces_each_combined_as_it_arrives(comm, seed, monkeypatch):
    """Two groups of two ranks, the overlap mode, a flat plan: each message to the other group is cut into pieces of
    about ``piece_bytes`` (one MPI message each, matched in order), packed and posted one by one and combined as each
    arrives; a message inside a group stays whole. C exact (integer data) on two multiplies, the bytes as planned,
    one message counted per plan message; a relaying plan and the bulk mode keep whole messages, and a two-level plan
    on groups of one rank, which relays nothing, cuts them."""
    monkeypatch.setattr(executor_module, "PIECE_BYTES", 1000)
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(seed)
    matrix = sp.random_array((400, 400), density=0.05, rng=rng, format="csr")
    matrix.data = rng.integers(-9, 10, matrix.nnz).astype(np.float64)
    matrix = comm.bcast(sp.csr_array(matrix))
    rows, cols = partition(matrix, size, "even").partitions
    k = 5
    b = comm.bcast(rng.integers(-4, 5, (400, k)).astype(np.float64))
    expected = (matrix @ b)[slice(*rows.range(rank))]
    pairs, singles = Topology.nodes(2), Topology.nodes(1)
    for strategy, mode, groups, cut in (
        ("joint", "overlap", pairs, True),
        ("column", "overlap", pairs, True),
        ("joint", "bulk", pairs, False),
        ("joint-hier", "overlap", pairs, False),
        ("joint-hier", "overlap", singles, True),
    ):
        other_group = set(np.flatnonzero(groups.groups(size) != groups.groups(size)[rank]).tolist())
        plan = build_rank_plan_collective(comm, matrix[slice(*rows.range(rank))], rows, cols, strategy, groups)
        with SpmmExecutor(plan, comm, k, np.float64, ExecOptions(mode=mode, topology=groups, threads=1)) as executor:
            for _ in range(2):
                got = executor.multiply(b[slice(*cols.range(rank))])
                np.testing.assert_array_equal(got, expected, err_msg=f"{strategy}/{mode}")
                planned = np.zeros(size, np.int64)
                for exchange in plan.exchanges:
                    np.add.at(planned, exchange.recv_ranks, exchange.recv_counts * k * 8)
                assert np.array_equal(executor.bytes_received_from, planned), f"{strategy}/{mode}: bytes"
                assert not executor.delivery_problems, executor.delivery_problems
                assert np.array_equal(
                    executor.ledger.messages_from,
                    np.bincount(
                        np.concatenate([exchange.recv_ranks for exchange in plan.exchanges] + [np.zeros(0, np.int64)]).astype(
                            np.int64
                        ),
                        minlength=size,
                    ),
                )
            several = 0  # messages in more than one piece
            for ex in executor.buffers.exchanges:
                for pieces, counts, ranks in (
                    (ex.send_pieces, ex.exchange.send_counts, ex.send_ranks),
                    (ex.recv_pieces, ex.exchange.recv_counts, ex.recv_ranks),
                ):
                    if not cut or not other_group & set(ranks):
                        assert pieces is None, f"{strategy}/{mode}: pieces where messages stay whole"
                        continue
                    for rows_of, count, peer in zip(pieces, counts.tolist(), ranks):
                        expected_pieces = -(-count * k * 8 // 1000) if peer in other_group else 1
                        assert len(rows_of) - 1 == max(1, min(count, expected_pieces)), f"{strategy}: message to/from {peer}"
                        assert rows_of[-1] - rows_of[0] == count and np.all(np.diff(rows_of) >= 0)
                        several += len(rows_of) > 2
            assert (comm.allreduce(several) > 0) == cut, f"{strategy}/{mode}"


def planned_deterministic_checks() -> int:
    """Comparisons :func:`deterministic` makes on rank 0: every (mode, threads) of every strategy
    against bulk with one thread (the pipelined mode of a row-based strategy against its own
    one-thread run instead, which does not count)."""
    return sum(
        len(DETERMINISTIC_THREADS) * sum(1 for mode in MODES if mode != "pipelined" or strategy in COLUMN_BASED)
        for strategy in EXECUTABLE_STRATEGIES
    )


@pytest.mark.ranks(1, 3)
def test_deterministic_mode_is_bitwise_identical(comm, seed):
    """Random (non-integer) values; with ``deterministic=True`` C is bitwise identical for every mode and thread
    count of a strategy that ran one plan (the pipelined mode runs a plan of its own layout), and for ``block``,
    ``column`` and ``column-hier`` bitwise equal to the serial CSR product of the whole matrix summed in ascending
    column order (the same at every P)."""
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    matrix = sp.random_array((70, 70), density=0.15, rng=rng, format="csr")
    matrix.data = rng.standard_normal(matrix.nnz)
    matrix = sp.csr_array(matrix)
    matrix.sort_indices()
    k = 5
    b = rng.standard_normal((70, k))
    reference = np.empty((70, k))
    kernels.set_threads(1)
    kernels.multiply(kernels.CsrOperand.from_matrix(matrix, np.float64, 1), b, reference)
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    checked = 0
    for strategy in EXECUTABLE_STRATEGIES:
        topology = Topology.nodes(2) if strategy.hierarchical else None
        results = {}
        for mode in MODES:
            layout = layout_for_mode(mode)
            plan = build_rank_plan_collective(
                comm,
                local,
                rows,
                cols,
                strategy,
                topology or Topology.nodes(2) if layout == "pipelined" else topology,
                layout=layout,
            )
            for threads in DETERMINISTIC_THREADS:
                with SpmmExecutor(
                    plan, comm, k, np.float64, ExecOptions(mode=mode, threads=threads, deterministic=True)
                ) as executor:
                    mine = executor.multiply(b[slice(*cols.range(rank))])
                full = comm.allgather(mine)
                results[(mode, threads)] = np.vstack(full)
        if rank == 0:
            first = results[("bulk", 1)]
            for (mode, threads), value in results.items():
                if mode == "pipelined" and strategy not in COLUMN_BASED:
                    # Another plan (rounds by group): partial C rows arrive in another order.
                    assert value.tobytes() == results[("pipelined", 1)].tobytes(), f"{strategy}: pipelined T={threads}"
                    continue
                assert value.tobytes() == first.tobytes(), f"{strategy}: {mode}/T={threads} differs bitwise from bulk/T=1"
                checked += 1
            if strategy in COLUMN_BASED:
                assert first.tobytes() == reference.tobytes(), f"{strategy}: differs from the serial ascending-column product"
            else:
                np.testing.assert_allclose(first, matrix @ b, rtol=1e-12, atol=1e-12)
    assert checked == (planned_deterministic_checks() if rank == 0 else 0)


@pytest.mark.ranks(2)
def test_multiply_allocates_under_64_kib_after_the_first_call(comm, seed):
    """n = 100,000, k = 32; after the first multiply, one ``multiply(b, out=c)`` in every mode allocates under
    64 KiB (tracemalloc's peak)."""
    rank = comm.Get_rank()
    matrix = from_spec(f"uniform:100000:8:{seed}")
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    k = 32
    b = np.ones((cols.counts()[rank], k))
    peaks = {}
    for mode in MODES:
        topology = Topology.nodes(1) if mode == "pipelined" else None
        plan = build_rank_plan_collective(comm, local, rows, cols, "column", topology, layout=layout_for_mode(mode))
        with SpmmExecutor(plan, comm, k, np.float64, ExecOptions(mode=mode, threads=1)) as executor:
            out = np.empty((plan.local_shape[0], k))
            executor.multiply(b, out=out)
            comm.Barrier()
            tracemalloc.start()
            executor.multiply(b, out=out)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        peaks[mode] = comm.allreduce(peak, op=MPI.MAX)
    worst = max(peaks.values())
    assert worst < 64 * 1024, f"a multiply allocated {peaks} bytes (tracemalloc peaks)"


@pytest.mark.ranks(2, 3)
def test_corrupted_plan_fails_the_bytes_check(comm):
    """Rank 0's plan sends one row fewer to rank 1 than rank 1's plan expects; the bytes MPI delivered then differ
    from the plan and the executor reports the message."""
    rank = comm.Get_rank()
    matrix = from_spec("stencil2d:12")
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    k = 3
    plan = build_rank_plan_collective(comm, local, rows, cols, "column", None)
    if rank == 0:
        plan = one_row_fewer_to_rank_one(plan)
    b = np.ones((cols.counts()[rank], k))
    outcomes = []
    for mode in ("bulk", "overlap", "early"):
        with SpmmExecutor(plan, comm, k, np.float64, ExecOptions(mode=mode, threads=1)) as executor:
            executor.multiply(b)
            planned = int(sum(int(e.recv_counts.sum()) for e in plan.exchanges)) * k * 8
            problems = comm.allgather(list(executor.delivery_problems))
            delivered = comm.allgather(executor.bytes_received)
            plans = comm.allgather(planned)
        outcomes.append((mode, sum(delivered), sum(plans), problems))
    for mode, delivered, planned, problems in outcomes:
        assert delivered == planned - k * 8, f"{mode}: MPI delivered {delivered} bytes, expected one row less than {planned}"
        assert len(problems[1]) == 1 and not problems[0], f"{mode}: {problems}"
        assert "received 33 elements from rank 0 in exchange 0 but its plan expects 36" in problems[1][0], problems


@pytest.mark.ranks(2, 3)
def test_a_transport_registered_in_the_tests_runs_every_mode_it_declares(comm, seed):
    """The tests' ``recording`` transport (one class, one registration) on every mode it declares, flat and grouped
    strategies: C exact, bytes as planned, every arrival recorded once (tests/exec/registry_driver.py); each rank's
    recorder saw the schedules' calls, the early mode's receives completed one at a time."""
    runs, calls = recorded_runs(comm, seed)
    assert runs == 12
    assert calls["post_receives"] > 0 and calls["start_sends"] > 0 and calls["wait_sends"] > 0
    assert calls["wait_any"] > 0
