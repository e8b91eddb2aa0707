"""An executor's buffers and operands, built once from a :class:`~sparsewire.plan.plan.RankPlan`.

No MPI: arrays and operands of one kernel backend (:mod:`sparsewire.kernels`: NumPy with
the compiled kernels, or torch tensors). For every exchange e of the plan, with B_p this rank's
rows of B,

* the send buffer, ``send_matrix_e @ [B_p ; receive buffer of e's input]``, packed by a gather
  when every row is one B row (``pack_gather``), else by a CSR product (``pack_b``, plus
  ``pack_input`` on the input's receive buffer);
* the receive buffer and the unpack operand, ``C_p += receive_matrix_e @ receive_buffer_e``: a CSR
  operand applied per exchange, or a CSC operand split by output rows among the T threads, applied
  per message or per partition;
* message offsets in rows, padded where messages are cut into T partitions, and the pieces of the
  messages over the slower link (:mod:`~sparsewire.exec.message_rows`);
* for relays sent message by message, which input messages each sent message reads;
* the order in which an exchange's messages are packed and posted one at a time: those to ranks over the
  slower link first (``send_order``), so that link starts moving while the rest are packed.

With ``ordered`` (the deterministic combine) the receive buffers are one stack behind a copy of
B_p, and one CSR operand ``merged`` over that stack sums every C row in a fixed order.

Everything is immutable once built; what changes per multiply lives in the buffers' contents and
in the schedule's own state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import PlanMismatchError
from sparsewire.exec.message_rows import offsets, padded_rows, piece_bounds, row_map
from sparsewire.exec.sharing import MemoryPool, same_operands
from sparsewire.kernels.numpy_backend import NumpyBackend
from sparsewire.plan.plan import AGGREGATE_C, DIRECT_C, Exchange, RankPlan
from sparsewire.wire.paths import TransferRule, WirePath

__all__ = ["BufferNeeds", "ExchangeBuffers", "Buffers", "build_buffers"]


@dataclass(frozen=True)
class BufferNeeds:
    """What the schedule and combine need from the buffers.

    Attributes:
        partitions: parts every message is cut into (1: whole messages).
        unpack: ``"exchange"`` (a CSR operand per receive matrix), ``"message"`` (a CSC operand
            split by the threads' output rows) or ``None`` (the ordered combine's ``merged`` only).
        dependencies: list, per sent message of a relaying exchange, the input messages it reads.
        ordered: the receive buffers form one stack behind a copy of B_p, with the ``merged``
            operand over it.
        codec: the payload codec (:mod:`~sparsewire.wire.codecs`; ``none``: every message sent as it is).
        codec_peers: the ranks whose messages (both ways) go through it; None: every rank.
        first_peers: the ranks over the slower link (another node): an exchange that reads no input and sends to
            some of them and to others, on one thread, packs and posts theirs first (``send_order``).
        piece_bytes: where positive, every exchange with a peer among ``first_peers`` has its messages to and from
            them cut into pieces of about this many bytes (``send_pieces``, ``recv_pieces``) and is unpacked by
            column ranges (``unpack_columns``); 0: whole messages.
    """

    partitions: int = 1
    unpack: str | None = "exchange"
    dependencies: bool = False
    ordered: bool = False
    codec: str = "none"
    codec_peers: frozenset[int] | None = None
    first_peers: frozenset[int] = frozenset()
    piece_bytes: int = 0


@dataclass(frozen=True, eq=False)
class ExchangeBuffers:
    """Buffers, offsets and operands of one exchange of one rank (offsets in rows of k elements;
    ``*_elements`` per message; ``recv_elements`` includes padding, ``expected_elements`` is the
    plan's payload). The buffers and operands are the backend's; ``send_flat`` and ``recv_flat``
    are the buffers' memory as MPI is given it (1-D; NumPy arrays of host memory, or CUDA tensors
    for a CUDA-aware MPI; messages at ``offsets * k``).

    Wire paths (:mod:`~sparsewire.wire.paths`): ``send_paths``/``recv_paths`` hold every message's
    :class:`~sparsewire.wire.paths.WirePath`; ``send_staged``/``recv_staged`` list the messages that
    go through host memory; ``send_stage``/``recv_stage`` are that host memory (as
    long as the flat buffers, each message at the same offset; None when no message is staged),
    ``send_device``/``recv_device`` the buffers as 1-D arrays of the backend (what is copied).

    ``send_pieces``/``recv_pieces``: per message the row bounds of its pieces
    (:func:`~sparsewire.exec.message_rows.piece_bounds`), or None where every message is whole."""

    index: int
    exchange: Exchange
    input: int | None
    send_ranks: tuple[int, ...]
    recv_ranks: tuple[int, ...]
    send_offsets: np.ndarray
    recv_offsets: np.ndarray
    send_elements: tuple[int, ...]
    recv_elements: tuple[int, ...]
    expected_elements: tuple[int, ...]
    send_rows_map: np.ndarray
    recv_rows_map: np.ndarray
    send_buffer: object
    receive_buffer: object
    send_flat: np.ndarray
    recv_flat: np.ndarray
    pack_gather: object | None
    pack_b: object | None
    pack_input: object | None
    receive_matrix: sp.csr_array
    unpack: object | None
    unpack_columns: object | None
    dependencies: tuple[tuple[int, ...], ...]
    send_paths: tuple[WirePath, ...] = ()
    recv_paths: tuple[WirePath, ...] = ()
    send_stage: np.ndarray | None = None
    recv_stage: np.ndarray | None = None
    send_device: object = None
    recv_device: object = None
    send_order: tuple[int, ...] | None = None
    send_pieces: tuple[np.ndarray, ...] | None = None
    recv_pieces: tuple[np.ndarray, ...] | None = None

    def payload_bytes(self, itemsize: int) -> np.ndarray:
        """Not collective. Bytes of each sent message's payload: the plan's rows (the partitioned mode's padding
        is not payload)."""
        return self.exchange.send_counts.astype(np.int64) * (self.send_buffer.shape[1] * itemsize)

    @property
    def send_staged(self) -> tuple[int, ...]:
        """The sent messages staged through host memory."""
        return tuple(m for m, path in enumerate(self.send_paths) if path is WirePath.STAGED)

    @property
    def recv_staged(self) -> tuple[int, ...]:
        """The received messages staged through host memory."""
        return tuple(m for m, path in enumerate(self.recv_paths) if path is WirePath.STAGED)


@dataclass(frozen=True, eq=False)
class Buffers:
    """Every exchange's buffers, the diagonal operand and the order of the exchanges.

    Attributes:
        steps: exchange indices per step, in order; within a step, those that read no input
            first (their transfers are in flight while the others wait for what they relay).
        dependents: per exchange, per received message, the (exchange, sent message) pairs that
            read it (the inverse of ``ExchangeBuffers.dependencies``).
        row_bounds: thread t owns C rows ``[row_bounds[t], row_bounds[t+1])`` (the diagonal
            operand's balanced ranges, also the CSC split's).
        stack, merged: the ordered combine's ``[B_p ; receive buffers]`` and its CSR operand.
        kernels: the backend whose arrays and operands these are, and which runs every product.
    """

    plan: RankPlan
    k: int
    dtype: np.dtype
    threads: int
    needs: BufferNeeds
    kernels: object
    diagonal: object
    row_bounds: np.ndarray
    exchanges: tuple[ExchangeBuffers, ...]
    steps: tuple[tuple[int, ...], ...]
    dependents: tuple[tuple[tuple[tuple[int, int], ...], ...], ...]
    stack: object | None
    merged: object | None


def _is_selection(matrix: sp.csr_array) -> bool:
    return bool(np.all(np.diff(matrix.indptr) == 1) and np.all(matrix.data == 1))


# The maps are :func:`row_map`'s, increasing, so rows and columns keep their order: a canonical CSR is moved by rewriting
# its offsets or its column indices, without a pass through COO and a sort (a millisecond per small message matrix).


def _canonical(matrix: sp.csr_array) -> sp.csr_array:
    """``matrix``, or a copy with its duplicates summed and rows sorted by column where it has either."""
    if matrix.has_canonical_format:
        return matrix
    matrix = matrix.copy()
    matrix.sum_duplicates()
    return matrix


def _move_rows(matrix: sp.csr_array, rows_map: np.ndarray, n_rows: int) -> sp.csr_array:
    matrix = _canonical(matrix)
    counts = np.zeros(n_rows + 1, np.int64)
    counts[rows_map + 1] = np.diff(matrix.indptr)
    indptr = np.cumsum(counts)
    return sp.csr_array((matrix.data, matrix.indices, indptr), shape=(n_rows, matrix.shape[1]))


def _move_columns(matrix: sp.csr_array, columns_map: np.ndarray, n_cols: int) -> sp.csr_array:
    matrix = _canonical(matrix)
    return sp.csr_array((matrix.data, columns_map[matrix.indices], matrix.indptr), shape=(matrix.shape[0], n_cols))


def _exchange_buffers(
    index: int,
    exchange: Exchange,
    built: list[ExchangeBuffers],
    receive_storage,
    plan: RankPlan,
    k: int,
    dtype: np.dtype,
    threads: int,
    row_bounds: np.ndarray,
    needs: BufferNeeds,
    backend,
    rule,
    shared: ExchangeBuffers | None,
    memory: MemoryPool,
) -> ExchangeBuffers:
    n_b = plan.local_shape[1]
    if exchange.input is not None and not 0 <= exchange.input < index:
        raise PlanMismatchError(
            f"exchange {index} reads exchange {exchange.input}, which does not come before it; the plan is corrupt"
        )
    source = built[exchange.input] if exchange.input is not None else None
    plain_send, plain_recv = offsets(exchange.send_counts), offsets(exchange.recv_counts)
    send_offsets = offsets(padded_rows(exchange.send_counts, k, needs.partitions))
    recv_offsets = offsets(padded_rows(exchange.recv_counts, k, needs.partitions))
    send_rows_map, recv_rows_map = row_map(plain_send, send_offsets), row_map(plain_recv, recv_offsets)
    n_send, n_recv = int(send_offsets[-1]), int(recv_offsets[-1])
    send_cut, recv_cut = (
        [needs.piece_bytes > 0 and rank in needs.first_peers for rank in ranks.tolist()]
        for ranks in (exchange.send_ranks, exchange.recv_ranks)
    )
    send_cut, recv_cut = (cut if any(cut) else None for cut in (send_cut, recv_cut))

    if shared is not None:  # the same rank plan at another k: every operand is the same (whole messages)
        pack_gather, pack_b, pack_input, receive, unpack, unpack_columns, dependencies = (
            getattr(shared, name) for name in _OPERANDS
        )
    else:
        # Send side: a gather where every row is one B row, else a CSR product (+ the input part).
        send = sp.csr_array(exchange.send_matrix)
        from_b = sp.csr_array(send[:, :n_b])
        pack_gather = pack_b = pack_input = input_matrix = None
        if exchange.input is None and _is_selection(from_b):
            index_rows = np.zeros(n_send, np.int64)
            index_rows[send_rows_map] = from_b.indices
            pack_gather = backend.gather_operand(index_rows, threads)
        else:
            pack_b = backend.csr(_move_rows(from_b, send_rows_map, n_send), dtype, threads)
            if source is not None:
                from_input = _move_columns(sp.csr_array(send[:, n_b:]), source.recv_rows_map, int(source.recv_offsets[-1]))
                input_matrix = _move_rows(from_input, send_rows_map, n_send)
                input_matrix.sum_duplicates()
                pack_input = backend.csr(input_matrix, dtype, threads)

        # Receive side, in padded buffer positions (the ordered combine reads receive_matrix).
        receive = _move_columns(sp.csr_array(exchange.receive_matrix), recv_rows_map, n_recv)
        unpack = unpack_columns = None
        if needs.unpack == "exchange" and not recv_cut:
            unpack = backend.csr(receive, dtype, threads)
        elif needs.unpack is not None:
            unpack_columns = backend.columns(receive, dtype, row_bounds)

        needed: list[list[int]] = [[] for _ in exchange.send_ranks]
        if input_matrix is not None and needs.dependencies:
            rows = np.repeat(np.arange(input_matrix.shape[0]), np.diff(input_matrix.indptr))
            message_of_row = np.searchsorted(send_offsets, rows, side="right") - 1
            message_of_col = np.searchsorted(source.recv_offsets, input_matrix.indices, side="right") - 1
            for message, reads in np.unique(np.stack([message_of_row, message_of_col]), axis=1).T.tolist():
                needed[message].append(reads)
        dependencies = tuple(tuple(d) for d in needed)

    if receive_storage is None:
        receive_storage = memory.zeros(n_recv, k)
    send_buffer = memory.zeros(n_send, k)
    receive_buffer = receive_storage[:n_recv]
    send_elements, recv_elements = np.diff(send_offsets) * k, np.diff(recv_offsets) * k
    direct = TransferRule(0, "no staging")
    send_paths, recv_paths = ((rule or direct).paths(elements * dtype.itemsize) for elements in (send_elements, recv_elements))
    if needs.codec != "none":  # the messages to and from the codec's peers coded (host memory: nothing is staged)
        peers = needs.codec_peers

        def coded(ranks, paths):
            return tuple(WirePath.ENCODED if peers is None or rank in peers else path for rank, path in zip(ranks, paths))

        send_paths, recv_paths = coded(exchange.send_ranks.tolist(), send_paths), coded(exchange.recv_ranks.tolist(), recv_paths)
    # (one thread only: a message's rows are packed on the calling thread, the whole exchange on all of them)
    to_first = [rank in needs.first_peers for rank in exchange.send_ranks.tolist()]
    ordered = exchange.input is None and threads == 1 and needs.partitions == 1 and 0 < sum(to_first) < len(to_first)
    return ExchangeBuffers(
        index=index,
        exchange=exchange,
        input=exchange.input,
        send_ranks=tuple(exchange.send_ranks.tolist()),
        recv_ranks=tuple(exchange.recv_ranks.tolist()),
        send_offsets=send_offsets,
        recv_offsets=recv_offsets,
        send_elements=tuple((np.diff(send_offsets) * k).tolist()),
        recv_elements=tuple((np.diff(recv_offsets) * k).tolist()),
        expected_elements=tuple((np.diff(plain_recv) * k).tolist()),
        send_rows_map=send_rows_map,
        recv_rows_map=recv_rows_map,
        send_buffer=send_buffer,
        receive_buffer=receive_buffer,
        send_flat=backend.mpi_memory(send_buffer).reshape(-1),
        recv_flat=backend.mpi_memory(receive_buffer).reshape(-1),
        pack_gather=pack_gather,
        pack_b=pack_b,
        pack_input=pack_input,
        receive_matrix=receive,
        unpack=unpack,
        unpack_columns=unpack_columns,
        dependencies=dependencies,
        send_paths=send_paths,
        recv_paths=recv_paths,
        send_stage=backend.stage_zeros(n_send * k, dtype) if WirePath.STAGED in send_paths else None,
        recv_stage=backend.stage_zeros(n_recv * k, dtype) if WirePath.STAGED in recv_paths else None,
        send_device=backend.flat(send_buffer),
        recv_device=backend.flat(receive_buffer),
        send_order=tuple(sorted(range(len(to_first)), key=lambda m: not to_first[m])) if ordered else None,  # stable
        send_pieces=send_cut and piece_bounds(send_offsets, k, dtype.itemsize, send_cut, needs.piece_bytes),
        recv_pieces=recv_cut and piece_bounds(recv_offsets, k, dtype.itemsize, recv_cut, needs.piece_bytes),
    )


#: The fields of :class:`ExchangeBuffers` that do not depend on k where messages are whole (one partition).
_OPERANDS = ("pack_gather", "pack_b", "pack_input", "receive_matrix", "unpack", "unpack_columns", "dependencies")


def _merged_operand(plan: RankPlan, exchanges: tuple[ExchangeBuffers, ...], stack_rows: int, dtype, threads: int, backend):
    """The ordered product: one CSR over the stack [B_p ; every receive buffer], each row ordered
    by global column (B rows) and then by buffer position (received partial C rows)."""
    n_b = plan.local_shape[1]
    col_start = int(plan.col_partition.offsets[plan.rank])
    n_cols = plan.col_partition.n
    diagonal = sp.coo_array(plan.diagonal)
    rows, cols, values, keys = [diagonal.row], [diagonal.col], [diagonal.data], [diagonal.col + col_start]
    offset = 0
    for ex in exchanges:
        rows_here = int(ex.recv_offsets[-1])
        coo = sp.coo_array(ex.receive_matrix)
        # Buffer position -> the received row's kind and global key (padding rows have none).
        original = np.full(rows_here, -1, np.int64)
        original[ex.recv_rows_map] = np.arange(ex.recv_rows_map.size)
        kinds = ex.exchange.receive_kinds[original[coo.col]]
        global_keys = ex.exchange.receive_keys[original[coo.col]]
        is_c = np.isin(kinds, (DIRECT_C, AGGREGATE_C))
        keys.append(np.where(is_c, n_cols + offset + coo.col, global_keys))
        rows.append(coo.row)
        cols.append(n_b + offset + coo.col)
        values.append(coo.data)
        offset += rows_here
    rows, cols, values, keys = map(np.concatenate, (rows, cols, values, keys))
    order = np.lexsort((keys, rows))
    shape = (plan.local_shape[0], stack_rows)
    indptr = np.searchsorted(rows[order], np.arange(shape[0] + 1)).astype(np.int64)
    matrix = sp.csr_array((values[order], cols[order], indptr), shape=shape)
    return backend.csr(matrix, dtype, threads, keep_order=True)


def build_buffers(
    plan: RankPlan,
    k: int,
    dtype,
    threads: int,
    needs: BufferNeeds,
    backend=None,
    rule: TransferRule | None = None,
    shared: Buffers | None = None,
    memory: Buffers | None = None,
) -> Buffers:
    """Not collective. Every buffer and operand of ``plan`` for blocks of ``k`` columns of
    ``dtype`` on ``threads`` threads, as ``needs`` asks (see the module docstring), of ``backend``
    (:mod:`sparsewire.kernels`; default NumPy); with ``rule``, host memory for the messages
    it stages (None: none is). ``shared``: the buffers of the same plan at another k, whose sparse operands
    (the diagonal block, every pack and unpack) are taken instead of made again where they cannot differ (same
    dtype, threads, needs and backend, whole messages). ``memory``: other buffers (of any plan) whose dense arrays
    hold these where they fit, each lent to one buffer here: the two must then never multiply at once (their
    executors share one lock)."""
    dtype = np.dtype(dtype)
    backend = NumpyBackend() if backend is None else backend
    if shared is not None and not same_operands(shared, plan, dtype, threads, needs, backend):
        shared = None
    diagonal = shared.diagonal if shared is not None else backend.csr(plan.diagonal, dtype, threads)
    pool = MemoryPool(memory, dtype, backend)
    row_bounds = diagonal.bounds
    storage: list[np.ndarray | None]
    stack = None
    if needs.ordered:
        # One buffer per exchange (no slot sharing), all in one array after a copy of B_p, so one
        # CSR product over it reads B rows and received rows.
        rows = [int(padded_rows(e.recv_counts, k, needs.partitions).sum()) for e in plan.exchanges]
        head = plan.local_shape[1]
        stack = pool.zeros(head + sum(rows), k)
        bounds = head + offsets(np.array(rows, np.int64))
        storage = [stack[bounds[i] : bounds[i + 1]] for i in range(len(plan.exchanges))]
    else:
        slot_rows: dict[int, int] = {}
        for exchange in plan.exchanges:
            if exchange.receive_slot is not None:
                rows_here = int(padded_rows(exchange.recv_counts, k, needs.partitions).sum())
                slot_rows[exchange.receive_slot] = max(slot_rows.get(exchange.receive_slot, 0), rows_here)
        slots = {slot: pool.zeros(rows_here, k) for slot, rows_here in slot_rows.items()}
        storage = [slots.get(e.receive_slot) if e.receive_slot is not None else None for e in plan.exchanges]
    built: list[ExchangeBuffers] = []
    for index, exchange in enumerate(plan.exchanges):
        like = shared.exchanges[index] if shared is not None else None
        built.append(
            _exchange_buffers(
                index, exchange, built, storage[index], plan, k, dtype, threads, row_bounds, needs, backend, rule, like, pool
            )
        )
    exchanges = tuple(built)

    dependents: list[list[list[tuple[int, int]]]] = [[[] for _ in ex.recv_ranks] for ex in exchanges]
    for ex in exchanges:
        for message, needed in enumerate(ex.dependencies):
            for input_message in needed:
                dependents[ex.input][input_message].append((ex.index, message))
    step_numbers = sorted({e.step for e in plan.exchanges})
    steps = tuple(
        tuple(
            sorted((i for i, e in enumerate(plan.exchanges) if e.step == step), key=lambda i: plan.exchanges[i].input is not None)
        )
        for step in step_numbers
    )
    merged = None
    if needs.ordered:
        merged = (
            shared.merged if shared is not None else _merged_operand(plan, exchanges, stack.shape[0], dtype, threads, backend)
        )
    return Buffers(
        plan=plan,
        k=int(k),
        dtype=dtype,
        threads=int(threads),
        needs=needs,
        kernels=backend,
        diagonal=diagonal,
        row_bounds=row_bounds,
        exchanges=exchanges,
        steps=steps,
        dependents=tuple(tuple(tuple(m) for m in ex) for ex in dependents),
        stack=stack,
        merged=merged,
    )
