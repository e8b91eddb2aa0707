"""Graph attention's local kernels: the partial softmax-aggregate of a set of entries and its gradient, per head,
without ever forming an ``nnz x H x C`` tensor (PyG's ``GATConv`` gathers one, which is what exhausts memory on large
graphs).

For the entries of row i (destination) with sources j, per head h (``u = s_j + t_i``, ``e = LeakyReLU(u)``):

    L_i = log sum_j exp(e_ij)           (the maximum subtracted first)
    V_i = sum_j xi_ij / (1 - rho) exp(e_ij - L_i) z_j

with the dropout mask ``xi_ij`` drawn from (destination id, source id, head, salt) by :func:`keep_fraction`, so every
rank draws the same mask for an edge. A row without entries has ``L = -inf`` and ``V = 0``. The softmax ``exp(e - L)``
(nnz x H) is kept for the backward. Backward, with ``gamma = exp(e - L)``, ``beta = xi / (1 - rho) gamma`` and ``lambda`` the
LeakyReLU's slope at u:

    de_ij = beta <gV_i, z_j> - gamma <gV_i, V_i> + gamma gL_i;   du = lambda de
    dt_i = sum_j du_ij;   ds_j = sum_i du_ij;   dz_j = sum_i beta_ij gV_i

Rows run in parallel (Numba's pool); the sums over a source run over its entries in the order ``by_source`` gives, so
the results do not depend on the thread count. :func:`merge_partials` combines a row's partials from several ranks
exactly (the log-sum-exp merge), :func:`merge_gradients` is its backward.
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.jit import njit, prange
from sparsewire.kernels.simd import prefetch

__all__ = ["keep_fraction", "attend_forward", "attend_backward", "source_order", "merge_partials", "merge_gradients", "AHEAD"]

#: Entries ahead whose rows the kernels prefetch.
AHEAD = 8


@njit(nogil=True, cache=True, inline="always")
def _hash(row, col, salt):
    """The 32-bit hash of :func:`sparsewire.gnn.layers.hash_dropout`, salted, as an integer."""
    mask = np.uint64(0xFFFFFFFF)
    h = (
        np.uint64(row) * np.uint64(2654435761)
        + np.uint64(col) * np.uint64(40503)
        + (np.uint64(salt) & mask) * np.uint64(97)
        + np.uint64(1)
    ) & mask
    for _ in range(2):
        h = (((h >> np.uint64(16)) ^ h) * np.uint64(0x45D9F3B)) & mask
    return (h >> np.uint64(16)) ^ h


@njit(nogil=True, cache=True)
def keep_fraction(row, col, salt):
    """u(row, col) in [0, 1): the hash of :func:`sparsewire.gnn.layers.hash_dropout`, salted, over 2^32."""
    return _hash(row, col, salt) / 4294967296.0


@njit(nogil=True, cache=True, inline="always")
def _kept(dropout, threshold, scale, dst_id, src_id, salt, h):
    """The dropout factor of one entry and head: 0 where ``u < dropout``, else ``scale`` = 1 / (1 - dropout).
    ``u < dropout`` is compared as ``hash < threshold``, ``threshold = ceil(dropout 2^32)`` (the same test on
    integers: a float conversion of every hash cost as much as the rest of the kernel)."""
    if dropout <= 0.0:
        return 1.0
    if _hash(dst_id, src_id, salt * 131 + h) < threshold:
        return 0.0
    return scale


@njit(nogil=True, cache=True, inline="always")
def _threshold(dropout):
    return np.uint64(np.ceil(dropout * 4294967296.0)), 1.0 / (1.0 - dropout) if dropout < 1.0 else 0.0


@njit(nogil=True, cache=True, inline="always")
def _prefetch_row(array, row):
    """Prefetch the cache lines of ``array``'s row ``row`` (C-contiguous 2-D): the rows an entry list names are
    scattered, and waiting for each in turn costs several times the arithmetic on it."""
    width = array.shape[1] * array.itemsize
    base = array.ctypes.data + row * width
    for line in range(0, width, 64):
        prefetch(base + line)


@njit(nogil=True, cache=True, inline="always")
def _prefetch_source(flat_z, s, source, e):
    """Prefetch the z and s rows of entry ``e``'s source, when there is such an entry."""
    if e < source.size:
        _prefetch_row(flat_z, source[e])
        _prefetch_row(s, source[e])


@njit(nogil=True, parallel=True, cache=True)
def attend_forward(indptr, source, z, s, t, slope, dropout, dst_ids, src_ids, salt, softmax, L, V):
    """Not collective. Fill ``L`` (rows x H), ``V`` (rows x H x C) and ``softmax`` (nnz x H: ``exp(e - L)`` of each
    entry, what the backward needs) for rows of entries ``indptr``/``source`` (indices into z and s); ``t`` holds the
    rows' destination scores (module docstring). A row's heads are walked together over each entry's H x C values,
    which are prefetched :data:`AHEAD` entries early."""
    heads, channels = z.shape[1], z.shape[2]
    width = heads * channels
    flat_z = z.reshape(z.shape[0], width)
    flat_v = V.reshape(V.shape[0], width)
    threshold, scale = _threshold(dropout)
    for i in prange(indptr.size - 1):
        start, stop = indptr[i], indptr[i + 1]
        if start == stop:
            for k in range(width):  # (loops, not slice assignments: Numba compiles a shape check's message for those)
                flat_v[i, k] = 0.0
            for h in range(heads):
                L[i, h] = -np.inf
            continue
        top = np.full(heads, -np.inf, softmax.dtype)
        for e in range(start, stop):
            _prefetch_source(flat_z, s, source, e + AHEAD)
            j = source[e]
            for h in range(heads):
                u = s[j, h] + t[i, h]
                score = u if u > 0 else slope * u
                softmax[e, h] = score
                top[h] = max(top[h], score)
        total = np.zeros(heads, softmax.dtype)
        for e in range(start, stop):
            for h in range(heads):
                weight = np.exp(softmax[e, h] - top[h])
                softmax[e, h] = weight
                total[h] += weight
        for h in range(heads):
            L[i, h] = top[h] + np.log(total[h])
            total[h] = 1.0 / total[h]
        acc = np.zeros(width, V.dtype)  # a local sum: V[i] may alias z as far as the compiler knows
        weights = np.empty(width, V.dtype)
        for e in range(start, stop):
            j = source[e]
            for h in range(heads):
                weight = softmax[e, h] * total[h]
                softmax[e, h] = weight
                weight *= _kept(dropout, threshold, scale, dst_ids[i], src_ids[j], salt, h)
                for c in range(channels):
                    weights[h * channels + c] = weight
            for k in range(width):
                acc[k] += weights[k] * flat_z[j, k]
        for k in range(width):
            flat_v[i, k] = acc[k]


@njit(nogil=True, parallel=True, cache=True)
def attend_backward(
    indptr, source, by_source, source_ptr, row_by_source, z, s, t, slope, dropout, dst_ids, src_ids, salt,
    softmax, V, gV, gL, gz, gs, gt,
):  # fmt: skip
    """Not collective. The gradients of :func:`attend_forward`'s L and V (``gL``, ``gV``) carried to ``gt`` (rows x H;
    written), ``gz`` and ``gs`` (sources; added to). A pass over the rows finds each entry's ``du`` and ``beta``; a pass
    over the sources then sums them through ``by_source`` (the entries listed by source), ``source_ptr`` (each
    source's offsets into that list) and ``row_by_source`` (the row of each listed entry)."""
    heads, channels = z.shape[1], z.shape[2]
    width = heads * channels
    flat_z = z.reshape(z.shape[0], width)
    flat_gz = gz.reshape(gz.shape[0], width)
    flat_gv = gV.reshape(gV.shape[0], width)
    flat_v = V.reshape(V.shape[0], width)
    du = np.empty(softmax.shape, softmax.dtype)
    beta = np.empty(softmax.shape, softmax.dtype)
    nnz = source.size
    threshold, scale = _threshold(dropout)
    for i in prange(indptr.size - 1):
        start, stop = indptr[i], indptr[i + 1]
        g_dot_v = np.zeros(heads, softmax.dtype)
        for h in range(heads):
            gt[i, h] = 0.0
            for c in range(channels):
                g_dot_v[h] += flat_gv[i, h * channels + c] * flat_v[i, h * channels + c]
        products = np.empty(width, gz.dtype)
        for e in range(start, stop):
            _prefetch_source(flat_z, s, source, e + AHEAD)
            j = source[e]
            for w in range(width):
                products[w] = flat_gv[i, w] * flat_z[j, w]
            for h in range(heads):
                gamma = softmax[e, h]
                b = gamma * _kept(dropout, threshold, scale, dst_ids[i], src_ids[j], salt, h)
                g_dot_z = 0.0
                for c in range(channels):
                    g_dot_z += products[h * channels + c]
                de = b * g_dot_z - gamma * g_dot_v[h] + gamma * gL[i, h]
                u = s[j, h] + t[i, h]
                d = de if u > 0 else slope * de
                du[e, h] = d
                beta[e, h] = b
                gt[i, h] += d
    for j in prange(source_ptr.size - 1):
        acc = np.zeros(width, gz.dtype)
        weights = np.empty(width, gz.dtype)
        for k in range(source_ptr[j], source_ptr[j + 1]):
            if k + AHEAD < nnz:
                _prefetch_row(flat_gv, row_by_source[k + AHEAD])
                _prefetch_row(du, by_source[k + AHEAD])
                _prefetch_row(beta, by_source[k + AHEAD])
            i = row_by_source[k]
            e = by_source[k]
            for h in range(heads):
                gs[j, h] += du[e, h]
                for c in range(channels):
                    weights[h * channels + c] = beta[e, h]
            for w in range(width):
                acc[w] += weights[w] * flat_gv[i, w]
        for w in range(width):
            flat_gz[j, w] += acc[w]


def source_order(source: np.ndarray, rows: np.ndarray, n_sources: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Not collective. What :func:`attend_backward`'s pass over the sources reads: the entries listed by source
    (stable: by row within a source), each source's offsets into that list, and the row of each listed entry.
    Indices as ``source``'s type."""
    by_source = np.argsort(source, kind="stable")
    source_ptr = np.zeros(n_sources + 1, np.int64)
    np.cumsum(np.bincount(source, minlength=n_sources), out=source_ptr[1:])
    return by_source.astype(source.dtype), source_ptr, np.ascontiguousarray(rows[by_source])


def merge_partials(L_own: np.ndarray, V_own: np.ndarray, partials: list) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Not collective. The exact log-sum-exp merge of a row's partial softmax-aggregates: ``L = log sum_k exp(L_k)``,
    ``out = sum_k w_k V_k`` with ``w_k = exp(L_k - L)``, over this rank's own partial (``L_own`` (rows, H), ``V_own``
    (rows, H, C)) and ``partials`` [(rows, L, V)] of some of the rows (each list's rows distinct). Returns out, L and
    the weights [w_own, w_1, ...]; a row without entries (every L_k = -inf) gets weight 0 and out 0."""
    if not partials:  # one partial: it is the result, with weight 1
        return V_own, L_own, [np.ones_like(L_own)]
    top = L_own.copy()
    for rows, L_part, _ in partials:
        top[rows] = np.maximum(top[rows], L_part)
    top[~np.isfinite(top)] = 0.0
    total = np.exp(L_own - top)
    for rows, L_part, _ in partials:
        total[rows] += np.exp(L_part - top[rows])
    with np.errstate(divide="ignore"):
        L = top + np.log(total)
    empty = ~np.isfinite(L)

    def weight(L_part, rows):
        with np.errstate(invalid="ignore"):  # -inf - -inf on a row without entries; its weight is set to 0
            w = np.exp(L_part - (L if rows is None else L[rows]))
        w[empty if rows is None else empty[rows]] = 0.0
        return w

    weights = [weight(L_own, None)]
    out = weights[0][..., None] * V_own
    for rows, L_part, V_part in partials:
        weights.append(weight(L_part, rows))
        out[rows] += weights[-1][..., None] * V_part
    return out, L, weights


def merge_gradients(G: np.ndarray, out: np.ndarray, w: np.ndarray, V: np.ndarray, rows) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. The gradients of one partial (V, L) of :func:`merge_partials` from that of its output ``G``:
    ``gV = w G`` and ``gL = w <G, V - out>`` (rows: the partial's rows, or None for all)."""
    g = G if rows is None else G[rows]
    return w[..., None] * g, w * np.einsum("rhc,rhc->rh", g, V - (out if rows is None else out[rows]))
