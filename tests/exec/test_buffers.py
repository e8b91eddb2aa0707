"""The executor's buffers in-process (no MPI): packing and unpacking maps against the plan's
matrices on random patterns, padded offsets, relay dependencies, and every rank's product
assembled by hand-delivering the messages between the ranks' buffers (streaming and ordered
combine), exact against SciPy on integer data; and the order in which an exchange's messages to another group are
packed and posted first."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import _seed
from sparsewire.exec.buffers import BufferNeeds, build_buffers
from sparsewire.exec.combine import OrderedCombine, StreamingCombine
from sparsewire.exec.message_rows import padded_rows
from sparsewire.exec.pack import Packer
from sparsewire.kernels import compiled as kernels
from sparsewire.partition import partition
from sparsewire.plan.plan import build_plan
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES
from sparsewire.topology.model import Topology

NEEDS = [
    BufferNeeds(),
    BufferNeeds(unpack="message", dependencies=True),
    BufferNeeds(partitions=3, unpack="message"),
    BufferNeeds(unpack=None, ordered=True),
    BufferNeeds(partitions=2, unpack=None, ordered=True),
]


def integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-5, 6, matrix.nnz).astype(np.float64)
    matrix.data[matrix.data == 0] = 7
    return sp.csr_array(matrix)


def plans(rng):
    """(label, matrix, CommPlan) for random patterns, every executable strategy, P = 1..4, both layouts."""
    for ranks in (1, 2, 3, 4):
        shape = (int(rng.integers(20, 60)), int(rng.integers(20, 60)))
        matrix = integer_matrix(rng, shape, float(rng.uniform(0.03, 0.2)))
        rows, cols = partition(matrix, ranks, str(rng.choice(["even", "nnz"]))).partitions
        for strategy in EXECUTABLE_STRATEGIES:
            for layout in ("merged", "pipelined"):
                topology = Topology.nodes(2) if strategy.hierarchical or layout == "pipelined" else None
                yield (
                    f"P={ranks}/{strategy.value}/{layout}",
                    matrix,
                    build_plan(matrix, rows, cols, strategy, topology, layout=layout),
                )


@pytest.fixture(scope="module")
def cases():
    return list(plans(np.random.default_rng(_seed())))


@pytest.mark.parametrize("needs", NEEDS, ids=lambda n: f"T{n.partitions}-{n.unpack}-{'ordered' if n.ordered else 'streaming'}")
def test_pack_and_unpack_maps_equal_the_plans_products(cases, needs, rng):
    kernels.set_threads(1)
    k = int(rng.integers(1, 6))
    for label, _, plan in cases:
        for rank_plan in plan.ranks:
            buffers = build_buffers(rank_plan, k, np.float64, 1, needs)
            b = rng.integers(-3, 4, (rank_plan.local_shape[1], k)).astype(np.float64)
            for ex in buffers.exchanges:
                exchange = ex.exchange
                # Offsets: the fewest padded rows per message whose elements split into the partitions.
                assert np.array_equal(np.diff(ex.recv_offsets), padded_rows(exchange.recv_counts, k, needs.partitions))
                assert all((e % needs.partitions) == 0 for e in ex.recv_elements + ex.send_elements), label
                assert sum(ex.expected_elements) == int(exchange.recv_counts.sum()) * k
                # Pack: the input's receive buffer holds random rows in its plan positions, garbage in padding.
                inputs = np.zeros((0, k))
                if ex.input is not None:
                    source = buffers.exchanges[ex.input]
                    source.receive_buffer[:] = 99.0
                    inputs = rng.integers(-3, 4, (source.recv_rows_map.size, k)).astype(np.float64)
                    source.receive_buffer[source.recv_rows_map] = inputs
                ex.send_buffer[:] = 0.0
                Packer(buffers).exchange(ex, b)
                expected = sp.csr_array(exchange.send_matrix) @ np.vstack([b, inputs])
                assert np.array_equal(ex.send_buffer[ex.send_rows_map], expected), f"{label}: pack"
                if needs.dependencies and ex.input is not None:
                    ex.send_buffer[:] = 0.0
                    for message in range(len(ex.send_ranks)):
                        Packer(buffers).message(ex, message, b)
                    assert np.array_equal(ex.send_buffer[ex.send_rows_map], expected), f"{label}: pack by message"
                # Unpack: padding rows hold garbage the operands must not read.
                received = rng.integers(-3, 4, (ex.recv_rows_map.size, k)).astype(np.float64)
                ex.receive_buffer[:] = -77.0
                ex.receive_buffer[ex.recv_rows_map] = received
                reference = sp.csr_array(exchange.receive_matrix) @ received
                out = np.zeros((rank_plan.local_shape[0], k))
                if needs.unpack == "exchange":
                    kernels.multiply(ex.unpack, ex.receive_buffer, out, accumulate=True)
                    assert np.array_equal(out, reference), f"{label}: unpack"
                elif needs.unpack == "message":
                    for message in range(len(ex.recv_ranks)):
                        kernels.apply_columns(
                            ex.unpack_columns,
                            ex.receive_buffer,
                            out,
                            int(ex.recv_offsets[message]),
                            int(ex.recv_offsets[message + 1]),
                        )
                    assert np.array_equal(out, reference), f"{label}: unpack by message"


def test_relay_dependencies_name_exactly_the_input_messages_each_sent_message_reads(cases):
    for label, _, plan in cases:
        for rank_plan in plan.ranks:
            buffers = build_buffers(rank_plan, 2, np.float64, 1, BufferNeeds(unpack="message", dependencies=True))
            for ex in buffers.exchanges:
                if ex.input is None:
                    assert all(not needed for needed in ex.dependencies)
                    continue
                source = buffers.exchanges[ex.input]
                n_b = rank_plan.local_shape[1]
                reads = sp.csr_array(ex.exchange.send_matrix)[:, n_b:]
                send_bounds, recv_bounds = np.cumsum(ex.exchange.send_counts), np.cumsum(source.exchange.recv_counts)
                for message in range(len(ex.send_ranks)):
                    start = 0 if message == 0 else send_bounds[message - 1]
                    columns = np.unique(reads[start : send_bounds[message]].indices)
                    expected = sorted(set(np.searchsorted(recv_bounds, columns, side="right").tolist()))
                    assert list(ex.dependencies[message]) == expected, f"{label}: message {message}"
                    for needed in expected:
                        assert (ex.index, message) in buffers.dependents[ex.input][needed]


@pytest.mark.parametrize("needs", NEEDS, ids=lambda n: f"T{n.partitions}-{n.unpack}-{'ordered' if n.ordered else 'streaming'}")
def test_hand_delivered_messages_give_the_exact_product_on_every_rank(cases, needs, rng):
    """Every rank's buffers, with messages copied from the sender's send buffer into the
    receiver's receive buffer as a transport would: C equals SciPy's A @ B exactly."""
    kernels.set_threads(1)
    k = int(rng.integers(1, 5))
    for label, matrix, plan in cases:
        b = rng.integers(-4, 5, (matrix.shape[1], k)).astype(np.float64)
        ranks = plan.ranks
        cols = ranks[0].col_partition
        everyone = [build_buffers(p, k, np.float64, 1, needs) for p in ranks]
        combines = [(OrderedCombine if needs.ordered else StreamingCombine)(buffers) for buffers in everyone]
        blocks = [np.ascontiguousarray(b[slice(*cols.range(p.rank))]) for p in ranks]
        outs = [np.zeros((p.local_shape[0], k)) for p in ranks]
        for _buffers, combine, block, out in zip(everyone, combines, blocks, outs):
            combine.diagonal(block, out)
        n_exchanges = {len(buffers.exchanges) for buffers in everyone}
        assert len(n_exchanges) == 1, label
        for index in range(n_exchanges.pop()):  # an exchange's input always comes before it
            for buffers, block in zip(everyone, blocks):
                Packer(buffers).exchange(buffers.exchanges[index], block)
            for sender in everyone:
                ex = sender.exchanges[index]
                for message, destination in enumerate(ex.send_ranks):
                    target = everyone[destination].exchanges[index]
                    slot = target.recv_ranks.index(sender.plan.rank)
                    assert target.recv_elements[slot] == ex.send_elements[message], f"{label}: counts"
                    start, to = int(ex.send_offsets[message]) * k, int(target.recv_offsets[slot]) * k
                    target.recv_flat[to : to + target.recv_elements[slot]] = ex.send_flat[
                        start : start + ex.send_elements[message]
                    ]
            for buffers, combine, out in zip(everyone, combines, outs):
                ex = buffers.exchanges[index]
                if needs.unpack == "message":
                    for message in range(len(ex.recv_ranks)):
                        combine.message_arrived(ex, message, out)
                else:
                    combine.exchange_arrived(ex, out)
        for _buffers, combine, block, out in zip(everyone, combines, blocks, outs):
            combine.finish(block, out)
        assert np.array_equal(np.vstack(outs), matrix @ b), label


def _one_rank_buffers(matrix, k: int, threads: int = 1):
    rows, cols = partition(matrix, 1, "even").partitions
    plan = build_plan(matrix, rows, cols, EXECUTABLE_STRATEGIES[0], None)
    return build_buffers(plan.ranks[0], k, np.float64, threads, BufferNeeds())


def test_the_diagonal_in_pieces_lets_the_transport_progress_between_them(monkeypatch, rng):
    from sparsewire.exec import combine as combine_module

    # Hand-made: 10 rows of 4 nonzeros, k = 8: 32 multiply-adds a row; pieces of 64 are 2 rows each.
    matrix = sp.csr_array((np.arange(1, 41, dtype=np.float64), np.tile(np.arange(4), 10), np.arange(0, 41, 4)), shape=(10, 10))
    monkeypatch.setattr(combine_module, "PROGRESS_EVERY", 64)
    buffers = _one_rank_buffers(matrix, 8)
    calls = []
    b = rng.integers(-4, 5, (10, 8)).astype(np.float64)
    out = np.zeros((10, 8))
    StreamingCombine(buffers).diagonal(b, out, lambda: calls.append(int(np.count_nonzero(out.any(axis=1)))))
    assert calls == [2, 4, 6, 8, 10]  # a call after each piece, each once its rows are written
    assert np.array_equal(out, matrix @ b)
    # Fresh random inputs: the pieces' product is the whole product, with a call per piece.
    for _ in range(5):
        n = int(rng.integers(30, 300))
        matrix = integer_matrix(rng, (n, n), float(rng.uniform(0.01, 0.2)))
        k, every = int(rng.integers(1, 17)), int(rng.integers(8, 400))
        monkeypatch.setattr(combine_module, "PROGRESS_EVERY", every)
        b = rng.integers(-4, 5, (n, k)).astype(np.float64)
        out, calls = np.zeros((n, k)), []
        StreamingCombine(_one_rank_buffers(matrix, k)).diagonal(b, out, functools.partial(calls.append, 1))
        assert np.array_equal(out, matrix @ b)
        work = matrix.nnz * k
        assert len(calls) == (
            0 if work <= every else len({0, *np.searchsorted(matrix.indptr * k, np.arange(every, work, every)), n}) - 1
        )
    # Several threads share the product: one call of the kernel, no progress between.
    monkeypatch.setattr(combine_module, "PROGRESS_EVERY", 8)
    calls = []
    StreamingCombine(_one_rank_buffers(matrix, k, threads=2)).diagonal(b, out, lambda: calls.append(1))
    assert calls == [] and np.array_equal(out, matrix @ b)


class _PostingTransport:
    """Records each post: the message (or ``None`` for a whole exchange) and its rows of the send buffer then."""

    sends_message_by_message = True

    def __init__(self) -> None:
        self.posted = []

    def start_send(self, ex, message: int) -> None:
        start, stop = int(ex.send_offsets[message]), int(ex.send_offsets[message + 1])
        self.posted.append((message, ex.send_buffer[start:stop].copy()))

    def start_sends(self, ex) -> None:
        self.posted.append((None, ex.send_buffer.copy()))


def _posts(buffers, ex, b):
    from sparsewire.exec.schedules.messages import OverlapSchedule

    transport = _PostingTransport()
    ex.send_buffer[:] = 0.0
    OverlapSchedule(buffers, transport, StreamingCombine(buffers))._send_exchange(ex, b)
    return transport.posted


def test_messages_over_the_slower_link_are_packed_and_posted_first(cases, rng):
    """Hand-made: a dense 8 x 8 on 4 ranks, column: rank 0 sends B rows to ranks 1, 2 and 3; with 2 and 3 on another
    node their messages are packed and posted first, each whole when posted. Then every random case with a random set
    of other-node ranks: an exchange that reads no input and sends to both kinds, on one thread, posts the other-node
    messages first (in rank order), each fully packed when posted; any other exchange, and every exchange on two
    threads, is packed whole and posted at once."""
    kernels.set_threads(1)
    matrix = sp.csr_array(np.arange(1, 65, dtype=np.float64).reshape(8, 8))
    rows, cols = partition(matrix, 4, "even").partitions
    column = next(strategy for strategy in EXECUTABLE_STRATEGIES if strategy.value == "column")
    plan = build_plan(matrix, rows, cols, column, None).ranks[0]
    buffers = build_buffers(plan, 3, np.float64, 1, BufferNeeds(first_peers=frozenset({2, 3})))
    (ex,) = buffers.exchanges
    assert ex.send_ranks == (1, 2, 3) and ex.send_order == (1, 2, 0)
    b = np.arange(6, dtype=np.float64).reshape(2, 3)
    posts = _posts(buffers, ex, b)
    assert [message for message, _ in posts] == [1, 2, 0]
    assert all(np.array_equal(rows_then, b) for _, rows_then in posts)  # rank 0's two B rows to every rank
    ordered = 0
    for label, _, whole in cases:
        for rank_plan in whole.ranks:
            others = [q for q in range(rank_plan.n_ranks) if q != rank_plan.rank]
            first = frozenset(q for q in others if rng.random() < 0.5)
            k = int(rng.integers(1, 5))
            b = rng.integers(-3, 4, (rank_plan.local_shape[1], k)).astype(np.float64)
            one, two = (build_buffers(rank_plan, k, np.float64, t, BufferNeeds(first_peers=first)) for t in (1, 2))
            for ex, on_two in zip(one.exchanges, two.exchanges):
                assert on_two.send_order is None, label
                if ex.input is not None:
                    assert ex.send_order is None, label
                    continue
                to_first = [m for m, q in enumerate(ex.send_ranks) if q in first]
                if not 0 < len(to_first) < len(ex.send_ranks):
                    assert ex.send_order is None, label
                    continue
                rest = [m for m in range(len(ex.send_ranks)) if m not in to_first]
                assert ex.send_order == tuple(to_first + rest), label
                expected = sp.csr_array(ex.exchange.send_matrix) @ b
                posts = _posts(one, ex, b)
                assert [message for message, _ in posts] == list(ex.send_order), label
                plain = np.concatenate([[0], np.cumsum(ex.exchange.send_counts)])
                for message, rows_then in posts:
                    assert np.array_equal(rows_then, expected[plain[message] : plain[message + 1]]), f"{label}: {message}"
                ordered += 1
    assert ordered > 0


def test_messages_cut_into_pieces_packed_and_combined_piece_by_piece_give_the_exact_product(cases, rng):
    """Random other-group ranks and piece sizes on every random case whose plan relays nothing: the messages to and
    from them are cut (``send_pieces``/``recv_pieces``, the same cut at both ends), every piece packed on its own
    (``Packer.rows``), delivered, and combined on its own in a random order (``rows_arrived``): C equals SciPy's
    A @ B exactly; the exchanges with no peer in another group keep whole messages and their CSR operand."""
    kernels.set_threads(1)
    cut = 0
    for label, matrix, whole in cases:
        if any(exchange.input is not None for p in whole.ranks for exchange in p.exchanges):
            continue  # the executor cuts nothing where a plan relays
        ranks = whole.ranks
        n = len(ranks)
        k = int(rng.integers(1, 5))
        group = rng.integers(0, 2, n)  # two groups at random
        piece_bytes = int(rng.integers(1, 4)) * k * 8 + int(rng.integers(0, 8))
        needs = [
            BufferNeeds(first_peers=frozenset(np.flatnonzero(group != group[p]).tolist()), piece_bytes=piece_bytes)
            for p in range(n)
        ]
        everyone = [build_buffers(p, k, np.float64, 1, need) for p, need in zip(ranks, needs)]
        b = rng.integers(-4, 5, (matrix.shape[1], k)).astype(np.float64)
        cols = ranks[0].col_partition
        blocks = [np.ascontiguousarray(b[slice(*cols.range(p.rank))]) for p in ranks]
        combines = [StreamingCombine(buffers) for buffers in everyone]
        outs = [np.zeros((p.local_shape[0], k)) for p in ranks]
        for combine, block, out in zip(combines, blocks, outs):
            combine.diagonal(block, out)
        for index in range(len(everyone[0].exchanges)):
            for buffers, block in zip(everyone, blocks):
                ex = buffers.exchanges[index]
                if ex.send_pieces is None:
                    Packer(buffers).exchange(ex, block)
                    continue
                for bounds in ex.send_pieces:
                    for start, stop in zip(bounds[:-1], bounds[1:]):
                        Packer(buffers).rows(ex, block, int(start), int(stop))
            for sender in everyone:
                ex = sender.exchanges[index]
                for message, destination in enumerate(ex.send_ranks):
                    target = everyone[destination].exchanges[index]
                    slot = target.recv_ranks.index(sender.plan.rank)
                    other = group[destination] != group[sender.plan.rank]
                    sent = ex.send_pieces[message] - ex.send_offsets[message] if ex.send_pieces is not None else None
                    got = target.recv_pieces[slot] - target.recv_offsets[slot] if target.recv_pieces is not None else None
                    if other:
                        assert sent is not None and got is not None and np.array_equal(sent, got), f"{label}: the cuts differ"
                        rows_here = int(np.diff(ex.send_offsets)[message])
                        assert len(sent) - 1 == max(1, min(rows_here, -(-rows_here * k * 8 // piece_bytes))), label
                        cut += len(sent) > 2
                    else:
                        assert sent is None or len(sent) == 2, label
                    start, to = int(ex.send_offsets[message]) * k, int(target.recv_offsets[slot]) * k
                    target.recv_flat[to : to + target.recv_elements[slot]] = ex.send_flat[
                        start : start + ex.send_elements[message]
                    ]
            for buffers, combine, out in zip(everyone, combines, outs):
                ex = buffers.exchanges[index]
                if ex.recv_pieces is None:
                    assert ex.unpack is not None and ex.unpack_columns is None, label
                    combine.exchange_arrived(ex, out)
                    continue
                assert ex.unpack is None and ex.unpack_columns is not None, label
                pieces = [(int(s), int(e)) for bounds in ex.recv_pieces for s, e in zip(bounds[:-1], bounds[1:])]
                for position in rng.permutation(len(pieces)):
                    combine.rows_arrived(ex, *pieces[position], out)
        assert np.array_equal(np.vstack(outs), matrix @ b), label
    assert cut > 0
