"""NetSparse's workload and machine model (Ueno et al., the NetSparse paper, sec. 3-5): the header
sizes, the :class:`Workload` (which remote rows every node requests), its characterization, the
in-network :class:`Mechanisms` and :class:`Hardware` parameters, and the :class:`CommunicationResult`
every scheme reports. The schemes themselves are in :mod:`sparsewire.sim.netsparse.simulator`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.cores import map_on_threads, node_cores
from sparsewire._lib.distinct import distinct, distinct_counts
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition, even_rows
from sparsewire.sim.netsparse import request_streams

__all__ = [
    "UPPER_HEADER_BYTES",
    "CONCATENATION_HEADER_BYTES",
    "REQUEST_HEADER_BYTES",
    "PACKET_HEADER_BYTES",
    "PAIR_HEADER_BYTES",
    "ELEMENT_BYTES",
    "header_share_percent",
    "requests_per_packet",
    "Workload",
    "characterize",
    "Mechanisms",
    "ABLATION",
    "Hardware",
    "CommunicationResult",
    "Progress",
    "TABLE3_K",
]

UPPER_HEADER_BYTES = 50
CONCATENATION_HEADER_BYTES = 12
REQUEST_HEADER_BYTES = 18
PACKET_HEADER_BYTES = UPPER_HEADER_BYTES + CONCATENATION_HEADER_BYTES
PAIR_HEADER_BYTES = 2 * (PACKET_HEADER_BYTES + REQUEST_HEADER_BYTES)
ELEMENT_BYTES = 4  # single precision, as the paper
TABLE3_K = (1, 2, 4, 8, 16, 32, 64, 128, 256)

Progress = Callable[[str], None] | None


def header_share_percent(k: int, element_bytes: int = ELEMENT_BYTES) -> float:
    """Not collective. Share of headers in unconcatenated SA traffic: ``100 * 160 / (160 + element_bytes * K)``
    (NetSparse Table 3)."""
    return 100.0 * PAIR_HEADER_BYTES / (PAIR_HEADER_BYTES + element_bytes * k)


def requests_per_packet(payload: int, mtu: int) -> int:
    """Not collective."""
    return max(1, (mtu - PACKET_HEADER_BYTES) // (REQUEST_HEADER_BYTES + payload))


@dataclass
class Workload:
    """A matrix spread over ``nodes`` nodes by even rows (module docstring). Only its pattern matters:
    ``indices`` is the column of every nonzero in CSR order (sorted within each row), the matrix's own array,
    so that its values can be freed while the simulator runs."""

    indices: np.ndarray
    n_cols: int
    nodes: int
    rows: RowPartition
    col_owner: np.ndarray
    node_starts: np.ndarray
    remote: np.ndarray = field(repr=False)
    _remote_columns: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    _remote_counts: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_matrix(cls, matrix: sp.sparray, nodes: int) -> Workload:
        """Not collective. Even rows of ``matrix`` (and of the property array: its columns) over ``nodes`` nodes."""
        matrix = sp.csr_array(matrix)
        n_rows, n_cols = matrix.shape
        if nodes < 1:
            raise InputError(f"need at least one node (got {nodes})")
        if nodes > max(n_rows, 1):
            raise InputError(f"{nodes} nodes but only {n_rows} rows; use at most {n_rows} nodes")
        if max(n_rows, n_cols) >= 2**31:
            raise InputError(
                f"a {n_rows} x {n_cols} matrix is beyond the simulator, which holds row and column ids in 32 bits; use fewer "
                "than 2^31 rows and columns"
            )
        matrix.sort_indices()
        rows = even_rows(n_rows, nodes)
        col_owner = np.asarray(even_rows(n_cols, nodes).owner(np.arange(n_cols)), np.int32)
        node_starts = matrix.indptr[rows.offsets].astype(np.int64)
        indices = matrix.indices
        remote = np.empty(indices.size, bool)

        def mark(node: int) -> None:  # node by node: no per-nonzero node array; in threads (NumPy releases the GIL)
            begin, end = node_starts[node], node_starts[node + 1]
            np.not_equal(col_owner[indices[begin:end]], node, out=remote[begin:end])

        map_on_threads(mark, range(nodes), node_cores())
        return cls(indices, int(n_cols), nodes, rows, col_owner, node_starts, remote)

    def own_cols(self) -> np.ndarray:
        """Not collective. Properties each node holds."""
        return np.bincount(self.col_owner, minlength=self.nodes).astype(np.int64)

    def remote_counts(self) -> np.ndarray:
        """Not collective. Remote nonzeros of each node (counted once, node by node)."""
        if self._remote_counts is None:
            starts = self.node_starts
            counts = [np.count_nonzero(self.remote[starts[node] : starts[node + 1]]) for node in range(self.nodes)]
            self._remote_counts = np.asarray(counts, np.int64)
        return self._remote_counts

    def remote_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Not collective. ``(offsets, columns)``: node i needs the remote properties ``columns[offsets[i]:offsets[i + 1]]``
        (distinct, ascending; 32-bit), found node by node so that no array spans all nonzeros, the nodes in threads
        on this machine's cores (NumPy's masks and sorts release the GIL)."""
        if self._remote_columns is None:

            def columns_of(node: int) -> np.ndarray:
                begin, end = self.node_starts[node], self.node_starts[node + 1]
                return distinct(self.indices[begin:end][self.remote[begin:end]]).astype(np.int32)

            parts = map_on_threads(columns_of, range(self.nodes), node_cores())
            offsets = np.zeros(self.nodes + 1, np.int64)
            np.cumsum([part.size for part in parts], out=offsets[1:])
            self._remote_columns = (offsets, np.concatenate(parts) if parts else np.zeros(0, np.int32))
        return self._remote_columns

    def useful(self) -> np.ndarray:
        """Not collective. Distinct remote properties each node needs (its useful transfers)."""
        return np.diff(self.remote_columns()[0])


def characterize(workload: Workload, group_size: int = 16, window: int = 64) -> dict:
    """Not collective. NetSparse sec. 3 for this matrix and node count.

    * ``su_redundant_per_useful``: SU sends every node every remote property,
      ``sum_i (n_cols - own_i)`` transfers, of which ``U = sum_i useful_i`` are useful:
      ``(SU - U) / U`` (Table 1, first row).
    * ``sa_redundant_per_useful``: SA sends one PR per remote nonzero, ``R`` in all: ``(R - U) / U``.
    * ``header_share_percent``: Table 3 for K = 1 .. 256.
    * ``unique_destinations_per_64``: mean distinct owners in consecutive windows of ``window`` SA
      PRs of a node, in nonzero order (Table 4).
    * ``group_shared_percent``: of the useful (node, property) transfers, the share whose property
      another node of the same group of ``group_size`` consecutive nodes also needs (sec. 3).
    """
    useful = workload.useful()
    total_useful = int(useful.sum())
    su_transfers = int((workload.n_cols - workload.own_cols()).sum())
    remote_counts = workload.remote_counts()
    sa_transfers = int(remote_counts.sum())
    distinct_per_window, windows = request_streams.unique_destinations_per_window(
        workload.node_starts, workload.indices, workload.remote, workload.col_owner, window
    )
    offsets, columns = workload.remote_columns()
    shared = 0
    for first in range(0, workload.nodes, group_size):  # a property two or more nodes of the group need
        _, counts = distinct_counts(columns[offsets[first] : offsets[min(first + group_size, workload.nodes)]])
        shared += int(counts[counts >= 2].sum())
    ratio = (lambda transfers: (transfers - total_useful) / total_useful) if total_useful else (lambda transfers: 0.0)
    return {
        "nodes": workload.nodes,
        "group_size": group_size,
        "useful_transfers": total_useful,
        "su_transfers": su_transfers,
        "sa_transfers": sa_transfers,
        "su_redundant_per_useful": ratio(su_transfers),
        "sa_redundant_per_useful": ratio(sa_transfers),
        "header_share_percent": {str(k): round(header_share_percent(k), 1) for k in TABLE3_K},
        "unique_destinations_per_64": distinct_per_window / windows if windows else 0.0,
        "group_shared_percent": 100.0 * shared / total_useful if total_useful else 0.0,
    }


@dataclass(frozen=True)
class Mechanisms:
    """Which NetSparse mechanisms are on (RIG request generation always is)."""

    filter: bool = True
    coalesce: bool = True
    nic_concatenation: bool = True
    switch_concatenation: bool = True
    cache: bool = True

    def label(self) -> str:
        """Not collective. Short name: the last mechanism of the ablation order that is on."""
        for name, mechanisms in reversed(ABLATION):
            if mechanisms == self:
                return name
        parts = [
            n
            for n, on in (
                ("filter", self.filter),
                ("coalesce", self.coalesce),
                ("nic-concat", self.nic_concatenation),
                ("switch-concat", self.switch_concatenation),
                ("cache", self.cache),
            )
            if on
        ]
        return "RIG+" + "+".join(parts) if parts else "RIG"


ABLATION: list[tuple[str, Mechanisms]] = [
    ("RIG", Mechanisms(False, False, False, False, False)),
    ("+filter", Mechanisms(True, False, False, False, False)),
    ("+coalesce", Mechanisms(True, True, False, False, False)),
    ("+NIC concatenation", Mechanisms(True, True, True, False, False)),
    ("+switch", Mechanisms(True, True, True, True, True)),
]


@dataclass(frozen=True)
class Hardware:
    """NetSparse hardware parameters (Table 5 defaults): NIC clock, RIG batch size (nonzeros per
    command; ``None``: :func:`default_batch`), client RIG units, Pending PR Table entries per unit, host-NIC handshake per command
    (two 200 ns PCIe trips), concatenation delays (NIC cycles at 2.2 GHz, switch cycles at
    2 GHz), property cache bytes per switch (``None``: unbounded), ways, smallest line."""

    clock_hz: float = 2.2e9
    batch: int | None = None
    units: int = 16
    pending: int = 256
    command_seconds: float = 400e-9
    nic_delay_cycles: int = 500
    switch_delay_cycles: int = 125
    switch_clock_hz: float = 2.0e9
    cache_bytes: int | None = 32 << 20
    cache_ways: int = 16
    cache_line_min: int = 16

    def cycles(self, seconds: np.ndarray | float) -> np.ndarray:
        """Not collective. Seconds as NIC cycles (rounded up)."""
        return np.ceil(np.asarray(seconds) * self.clock_hz).astype(np.int64)


@dataclass
class CommunicationResult:
    """One configuration's communication on the modelled cluster (module docstring)."""

    name: str
    seconds: float
    lower_bound_seconds: float
    tail_node: int
    tail_traffic_bytes: int
    goodput_percent: float
    line_utilization_percent: float
    requests: int = 0
    packets: int = 0
    filter_coalesce_percent: float = 0.0
    cache_hit_percent: float = 0.0
    flows: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def requests_per_packet(self) -> float:
        """Average PRs per packet leaving the NICs (and, for cache hits, the switches) over the
        cluster, reads and responses."""
        return self.requests / self.packets if self.packets else 0.0

    def row(self, su: CommunicationResult) -> dict:
        """Not collective. This result against SUOpt: the fields of an ablation / comparison row."""
        return {
            "mechanisms": self.name,
            "seconds": self.seconds,
            "lower_bound_seconds": self.lower_bound_seconds,
            "speedup_vs_su": su.seconds / self.seconds if self.seconds > 0 else float("inf"),
            "traffic_reduction_vs_su": su.tail_traffic_bytes / self.tail_traffic_bytes
            if self.tail_traffic_bytes
            else float("inf"),
            "tail_node": self.tail_node,
            "tail_traffic_bytes": self.tail_traffic_bytes,
            "goodput_percent": self.goodput_percent,
            "line_utilization_percent": self.line_utilization_percent,
            "requests_per_packet": self.requests_per_packet,
            "filter_coalesce_percent": self.filter_coalesce_percent,
            "cache_hit_percent": self.cache_hit_percent,
            **self.extra,
        }
