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
the results do not depend on the thread count.
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.jit import njit, prange

__all__ = ["keep_fraction", "attend_forward", "attend_backward", "source_order"]


@njit(nogil=True, cache=True, inline="always")
def keep_fraction(row, col, salt):
    """u(row, col) in [0, 1): the 32-bit hash of :func:`sparsewire.gnn.layers.hash_dropout`, salted."""
    mask = np.uint64(0xFFFFFFFF)
    h = (
        np.uint64(row) * np.uint64(2654435761)
        + np.uint64(col) * np.uint64(40503)
        + (np.uint64(salt) & mask) * np.uint64(97)
        + np.uint64(1)
    ) & mask
    for _ in range(2):
        h = (((h >> np.uint64(16)) ^ h) * np.uint64(0x45D9F3B)) & mask
    h = (h >> np.uint64(16)) ^ h
    return h / 4294967296.0


@njit(nogil=True, cache=True, inline="always")
def _kept(dropout, dst_id, src_id, salt, h):
    """The dropout factor of one entry and head: 0, or 1 / (1 - dropout)."""
    if dropout <= 0.0:
        return 1.0
    if keep_fraction(dst_id, src_id, salt * 131 + h) < dropout:
        return 0.0
    return 1.0 / (1.0 - dropout)


@njit(nogil=True, parallel=True, cache=True)
def attend_forward(indptr, source, z, s, t, slope, dropout, dst_ids, src_ids, salt, softmax, L, V):
    """Not collective. Fill ``L`` (rows x H), ``V`` (rows x H x C) and ``softmax`` (nnz x H: ``exp(e - L)`` of each
    entry, what the backward needs) for rows of entries ``indptr``/``source`` (indices into z and s); ``t`` holds the
    rows' destination scores (module docstring). A row's heads are walked together, so each entry's H x C values are
    read once, contiguously."""
    heads, channels = z.shape[1], z.shape[2]
    for i in prange(indptr.size - 1):
        start, stop = indptr[i], indptr[i + 1]
        if start == stop:
            V[i] = 0.0
            L[i] = -np.inf
            continue
        top = np.full(heads, -np.inf)
        for e in range(start, stop):
            j = source[e]
            for h in range(heads):
                u = s[j, h] + t[i, h]
                score = u if u > 0 else slope * u
                softmax[e, h] = score
                top[h] = max(top[h], score)
        total = np.zeros(heads)
        for e in range(start, stop):
            for h in range(heads):
                weight = np.exp(softmax[e, h] - top[h])
                softmax[e, h] = weight
                total[h] += weight
        for h in range(heads):
            L[i, h] = top[h] + np.log(total[h])
            total[h] = 1.0 / total[h]
        acc = np.zeros((heads, channels), V.dtype)  # a local sum: V[i] may alias z as far as the compiler knows
        for e in range(start, stop):
            j = source[e]
            for h in range(heads):
                weight = softmax[e, h] * total[h]
                softmax[e, h] = weight
                weight *= _kept(dropout, dst_ids[i], src_ids[j], salt, h)
                if weight != 0.0:
                    for c in range(channels):
                        acc[h, c] += weight * z[j, h, c]
        V[i] = acc


@njit(nogil=True, parallel=True, cache=True)
def attend_backward(
    indptr, source, by_source, source_ptr, row_of_entry, z, s, t, slope, dropout, dst_ids, src_ids, salt,
    softmax, V, gV, gL, gz, gs, gt,
):  # fmt: skip
    """Not collective. The gradients of :func:`attend_forward`'s L and V (``gL``, ``gV``) carried to ``gt`` (rows x H;
    written), ``gz`` and ``gs`` (sources; added to). ``by_source`` lists the entries by source, ``source_ptr`` its
    offsets per source, ``row_of_entry`` each entry's row."""
    heads, channels = z.shape[1], z.shape[2]
    du = np.zeros(softmax.shape, softmax.dtype)
    beta = np.zeros(softmax.shape, softmax.dtype)
    for i in prange(indptr.size - 1):
        start, stop = indptr[i], indptr[i + 1]
        for h in range(heads):
            gt[i, h] = 0.0
            if start == stop:
                continue
            g_dot_v = 0.0
            for c in range(channels):
                g_dot_v += gV[i, h, c] * V[i, h, c]
            for e in range(start, stop):
                j = source[e]
                gamma = softmax[e, h]
                b = gamma * _kept(dropout, dst_ids[i], src_ids[j], salt, h)
                g_dot_z = 0.0
                if b != 0.0:
                    for c in range(channels):
                        g_dot_z += gV[i, h, c] * z[j, h, c]
                de = b * g_dot_z - gamma * g_dot_v + gamma * gL[i, h]
                u = s[j, h] + t[i, h]
                d = de if u > 0 else slope * de
                du[e, h] = d
                beta[e, h] = b
                gt[i, h] += d
    for j in prange(source_ptr.size - 1):
        for k in range(source_ptr[j], source_ptr[j + 1]):
            e = by_source[k]
            i = row_of_entry[e]
            for h in range(heads):
                gs[j, h] += du[e, h]
                b = beta[e, h]
                if b != 0.0:
                    for c in range(channels):
                        gz[j, h, c] += b * gV[i, h, c]


def source_order(source: np.ndarray, n_sources: int) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. The entries listed by source (stable: by row within a source) and each source's offsets into
    that list: the column pass of :func:`attend_backward`."""
    by_source = np.argsort(source, kind="stable").astype(np.int64)
    source_ptr = np.zeros(n_sources + 1, np.int64)
    np.cumsum(np.bincount(source, minlength=n_sources), out=source_ptr[1:])
    return by_source, source_ptr
