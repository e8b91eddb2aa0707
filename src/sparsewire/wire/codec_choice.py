"""``compress="auto"``: code a link's messages only where the wire time saved exceeds the codec's
time, so compression never slows a fast link (deal.II removed its compression because it did, PRs 11001 and
19869).

Per payload byte, a coded message saves ``(1 - wire / payload) / bandwidth`` seconds on the wire and costs
``encode + decode`` seconds of CPU (both ends, one after the other on the message's path). The codec's cost
is measured when the executor is built, on the plan's own k and dtype (:func:`codec_seconds_per_byte`:
the fastest of five encode + decode round trips of a 512-row block of random rows), and the ranks take the
largest (one figure on every rank, so both ends of each link decide alike). A link's bandwidth is the
execution options' topology's (``--topology measured.json`` from ``sparsewire calibrate --network``, a
preset, ``nodes:G``), else MPI's nodes with the assumed constants of :mod:`sparsewire.topology.links`;
a ``shared`` link (a node's one network card) is divided by the larger of its two groups, whose ranks send
at once. The ratio ``wire / payload`` is the codec's for a message of 512 coded rows (header and per-row
metadata included). A link's messages are coded when the saving exceeds the cost; the decision depends on
the link, not the message's size (both sides grow with the rows), so it is made once per peer.
"""

from __future__ import annotations

import timeit

import numpy as np

from sparsewire.wire import codecs

__all__ = ["codec_seconds_per_byte", "wire_ratio", "choose_coded_peers", "peers_where_coding_pays", "describe_choice"]

_ROWS = 512


def codec_seconds_per_byte(name: str, k: int, dtype, repeat: int = 5) -> float:
    """Not collective. The fastest of ``repeat`` timings (the codec's own cost: a slower one measures another
    process's use of the core) of one encode plus one decode of a ``512 x k`` block of standard normal
    rows of ``dtype``, per payload byte (after one untimed round trip, which compiles the kernels)."""
    rng = np.random.default_rng(43)
    rows = rng.standard_normal((_ROWS, k)).astype(dtype)
    wire = np.zeros(codecs.max_message_bytes(name, _ROWS, k, rows.itemsize), np.uint8)
    out = np.empty_like(rows)

    def round_trip() -> None:
        codecs.decode(name, wire[: codecs.encode(name, rows, wire, rng)], out)

    round_trip()  # untimed: compiles the kernels
    return min(timeit.repeat(round_trip, repeat=repeat, number=1)) / rows.nbytes


def wire_ratio(name: str, k: int, itemsize: int) -> float:
    """Not collective. Bytes on the wire over payload bytes of a message of 512 rows, every row coded."""
    return codecs.coded_message_bytes(name, _ROWS, k, itemsize) / (_ROWS * k * itemsize)


def choose_coded_peers(comm, name: str, k: int, dtype, topology) -> tuple[frozenset[int], dict]:
    """Collective. The ranks whose messages to and from this rank are coded by codec ``name`` (module
    docstring), and what decided it (:func:`peers_where_coding_pays`)."""
    from mpi4py import MPI

    seconds = comm.allreduce(codec_seconds_per_byte(name, k, dtype), op=MPI.MAX)
    return peers_where_coding_pays(comm, name, seconds, wire_ratio(name, k, np.dtype(dtype).itemsize), topology)


def peers_where_coding_pays(comm, name: str, seconds: float, ratio: float, topology) -> tuple[frozenset[int], dict]:
    """Collective where ``topology`` is None (MPI's nodes are found by a split), else not collective; every rank
    must pass the same ``seconds`` and ``ratio`` (both ends of a link then decide alike). The ranks of ``comm``
    whose links to this rank save more wire time than a coding of ``seconds`` per payload byte and ``wire /
    payload`` of ``ratio`` costs: ``(1 - ratio) / bandwidth > seconds``, bandwidth the
    link's in ``topology`` (None: :meth:`~sparsewire.topology.model.Topology.from_mpi`), divided by the larger group for
    a shared link; and what decided it: ``{"codec", "codec_seconds_per_byte", "wire_ratio", "links": {link name:
    {"bandwidth", "coded", "peers"}}}``."""
    from sparsewire.topology.model import Topology

    if topology is None:
        topology = Topology.from_mpi(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    groups = topology.groups(size)
    group_sizes = np.bincount(groups)
    peers = np.array([p for p in range(size) if p != rank], np.int64)
    levels = topology.link_levels(np.full(len(peers), rank), peers, size)
    coded, links = [], {}
    for peer, level in zip(peers.tolist(), levels.tolist()):
        link = topology.levels[level].link
        sharing = int(max(group_sizes[groups[rank]], group_sizes[groups[peer]])) if link.shared else 1
        bandwidth = float(link.bandwidth) / sharing
        pays = bool((1.0 - ratio) / bandwidth > seconds)
        entry = links.setdefault(link.name, {"bandwidth": bandwidth, "coded": pays, "peers": 0})
        entry["peers"] += 1
        if pays:
            coded.append(peer)
    choice = {"codec": name, "codec_seconds_per_byte": seconds, "wire_ratio": ratio, "links": links}
    return frozenset(coded), choice


def describe_choice(choice: dict | None) -> list[str]:
    """Not collective. ``explain()``'s line for ``compress="auto"`` (none otherwise, ``choice`` None): the codec's
    measured cost against each link's saving."""
    if choice is None:
        return []
    rate = 1.0 / choice["codec_seconds_per_byte"] / 1e9
    parts = [
        f"{name} at {entry['bandwidth'] / 1e9:.3g} GB/s: {'coded' if entry['coded'] else 'full width'} ({entry['peers']} peers)"
        for name, entry in choice["links"].items()
    ]
    return [
        f"compress auto ({choice['codec']}: encode + decode {rate:.3g} GB/s of payload measured here, wire / payload "
        f"{choice['wire_ratio']:.3f}; a link is coded where (1 - wire/payload) / bandwidth exceeds the codec's time): "
        + ("; ".join(parts) if parts else "no peers")
    ]
