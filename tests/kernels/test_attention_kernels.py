"""Graph attention's local kernels (sparsewire.kernels.attention) against PyTorch autograd on the same entries: the
partial softmax-aggregate and its gradient, with and without attention dropout, rows without entries, and the
compiled mask hash equal to the NumPy one of the layers' dropout."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sparsewire.gnn.layers import _keep_fraction  # noqa: E402
from sparsewire.kernels.attention import (  # noqa: E402
    attend_backward,
    attend_forward,
    keep_fraction,
    merge_gradients,
    merge_partials,
    source_order,
)


def reference(indptr, source, z, s, t, slope, dropout, dst_ids, src_ids, salt):
    """L and V by PyTorch ops over an explicit entries x heads x channels tensor (what the kernel avoids)."""
    rows = torch.from_numpy(np.repeat(np.arange(indptr.size - 1), np.diff(indptr)))
    src = torch.from_numpy(source)
    heads = z.shape[1]
    e = torch.nn.functional.leaky_relu(s[src] + t[rows], slope)
    top = torch.full((indptr.size - 1, heads), -torch.inf, dtype=z.dtype).scatter_reduce(
        0, rows[:, None].expand(-1, heads), e.detach(), "amax"
    )
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.zeros_like(top).index_add(0, rows, torch.exp(e - top[rows]))
    L = top + torch.log(total)
    keep = np.ones((source.size, heads))
    if dropout > 0:
        row_ids = dst_ids[rows.numpy()][:, None]
        col_ids = src_ids[source][:, None]
        salts = salt * 131 + np.arange(heads)[None, :]
        keep = np.where(_mask(row_ids, col_ids, salts) < dropout, 0.0, 1 / (1 - dropout))
        assert 0 < (keep == 0).sum() < keep.size  # some entries dropped, not all
    alpha = torch.exp(e - L[rows]) * torch.from_numpy(keep)
    V = torch.zeros(indptr.size - 1, heads, z.shape[2], dtype=z.dtype).index_add(0, rows, alpha[..., None] * z[src])
    return L, V


def _mask(row_ids, col_ids, salts):
    """The hash per (entry, head) with a salt per head."""
    return np.stack([_keep_fraction(row_ids[:, 0], col_ids[:, 0], int(salt)) for salt in salts[0]], axis=1)


def random_entries(rng, n_rows, n_sources, empty_rows=()):
    counts = rng.integers(1, 5, n_rows)
    counts[list(empty_rows)] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    source = np.concatenate([np.sort(rng.choice(n_sources, c, replace=False)) for c in counts]).astype(np.int64)
    return indptr, source


@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_the_kernels_equal_autograd_on_random_entries(rng, dropout):
    n_rows, n_sources, heads, channels = 9, 7, 3, 5
    indptr, source = random_entries(rng, n_rows, n_sources, empty_rows=(4,))
    z = torch.from_numpy(rng.standard_normal((n_sources, heads, channels))).requires_grad_(True)
    s = torch.from_numpy(rng.standard_normal((n_sources, heads))).requires_grad_(True)
    t = torch.from_numpy(rng.standard_normal((n_rows, heads))).requires_grad_(True)
    dst_ids, src_ids = rng.permutation(100)[:n_rows].astype(np.int64), rng.permutation(100)[:n_sources].astype(np.int64)
    salt, slope = int(rng.integers(0, 1 << 20)), 0.2
    scores = np.empty((source.size, heads))
    L, V = np.empty((n_rows, heads)), np.empty((n_rows, heads, channels))
    zn, sn, tn = z.detach().numpy(), s.detach().numpy(), t.detach().numpy()
    attend_forward(indptr, source, zn, sn, tn, slope, dropout, dst_ids, src_ids, salt, scores, L, V)
    L_ref, V_ref = reference(indptr, source, z, s, t, slope, dropout, dst_ids, src_ids, salt)
    assert L[4].tolist() == [-np.inf] * heads and not V[4].any()  # the empty row
    filled = np.arange(n_rows) != 4
    np.testing.assert_allclose(L[filled], L_ref.detach().numpy()[filled], rtol=0, atol=1e-12)
    np.testing.assert_allclose(V, V_ref.detach().numpy(), rtol=0, atol=1e-12)
    # Backward: random gradients of L and V (none on the empty row, whose L is -inf).
    gV, gL = rng.standard_normal(V.shape), rng.standard_normal(L.shape)
    gL[4] = 0.0
    ((V_ref * torch.from_numpy(gV)).sum() + (L_ref[filled] * torch.from_numpy(gL[filled])).sum()).backward()
    gz, gs, gt = np.zeros_like(zn), np.zeros_like(sn), np.empty_like(tn)
    rows_of_entry = np.repeat(np.arange(n_rows), np.diff(indptr)).astype(np.int64)
    by_source, source_ptr, row_by_source = source_order(source, rows_of_entry, n_sources)
    attend_backward(indptr, source, by_source, source_ptr, row_by_source, zn, sn, tn, slope, dropout, dst_ids, src_ids,
                    salt, scores, V, gV, gL, gz, gs, gt)  # fmt: skip
    np.testing.assert_allclose(gz, z.grad.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(gs, s.grad.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(gt, t.grad.numpy(), rtol=0, atol=1e-12)


def test_a_hand_made_row_has_the_softmax_of_its_scores():
    # One row, two sources, one head of one channel: s = (0, log 3), t = 0, slope 0.2: e = (0, log 3),
    # softmax (1/4, 3/4), V = z_0 / 4 + 3 z_1 / 4 = 2 / 4 + 3 * 6 / 4 = 5, L = log 4. The softmax is kept.
    indptr, source = np.array([0, 2], np.int64), np.array([0, 1], np.int64)
    z = np.array([[[2.0]], [[6.0]]])
    s = np.array([[0.0], [np.log(3.0)]])
    scores, L, V = np.empty((2, 1)), np.empty((1, 1)), np.empty((1, 1, 1))
    ids = np.arange(2, dtype=np.int64)
    attend_forward(indptr, source, z, s, np.zeros((1, 1)), 0.2, 0.0, ids, ids, 0, scores, L, V)
    assert V[0, 0, 0] == pytest.approx(5.0, abs=1e-14) and L[0, 0] == pytest.approx(np.log(4.0), abs=1e-14)
    assert scores[:, 0].tolist() == pytest.approx([0.25, 0.75], abs=1e-15)
    # A negative score is scaled by the slope: s_0 = -1 gives e_0 = -0.2.
    attend_forward(indptr, source, z, np.array([[-1.0], [0.0]]), np.zeros((1, 1)), 0.2, 0.0, ids, ids, 0, scores, L, V)
    # softmax of (-0.2, 0): e^-0.2 / (e^-0.2 + 1)
    assert scores[:, 0].tolist() == pytest.approx([np.exp(-0.2) / (np.exp(-0.2) + 1), 1 / (np.exp(-0.2) + 1)], abs=1e-15)


def test_the_compiled_mask_hash_equals_the_layers_numpy_hash(rng):
    rows, cols = rng.integers(0, 1 << 30, 200), rng.integers(0, 1 << 30, 200)
    salt = int(rng.integers(0, 1 << 32))
    expected = _keep_fraction(rows, cols, salt)
    assert [keep_fraction(int(r), int(c), salt) for r, c in zip(rows, cols)] == expected.tolist()


def test_the_kernels_give_the_same_bits_on_one_thread_and_two(rng):
    """Each row's and each source's sums run in one order whatever the thread count: the results are bitwise equal."""
    from sparsewire.kernels.compiled import run_threaded, set_threads

    n_rows, n_sources, heads, channels = 300, 200, 4, 3
    indptr, source = random_entries(rng, n_rows, n_sources)
    z, s, t = (
        rng.standard_normal((n_sources, heads, channels)),
        rng.standard_normal((n_sources, heads)),
        rng.standard_normal((n_rows, heads)),
    )
    ids_rows, ids_sources = np.arange(n_rows, dtype=np.int64), np.arange(n_sources, dtype=np.int64)
    rows = np.repeat(np.arange(n_rows), np.diff(indptr)).astype(np.int64)
    by_source, source_ptr, row_by_source = source_order(source, rows, n_sources)
    gV, gL = rng.standard_normal((n_rows, heads, channels)), rng.standard_normal((n_rows, heads))
    results = []
    for threads in (1, 2):
        set_threads(threads)
        softmax, L, V = np.empty((source.size, heads)), np.empty((n_rows, heads)), np.empty((n_rows, heads, channels))
        run_threaded(attend_forward, indptr, source, z, s, t, 0.2, 0.3, ids_rows, ids_sources, 9, softmax, L, V)
        gz, gs, gt = np.zeros_like(z), np.zeros_like(s), np.empty_like(t)
        run_threaded(attend_backward, indptr, source, by_source, source_ptr, row_by_source, z, s, t, 0.2, 0.3, ids_rows,
                     ids_sources, 9, softmax, V, gV, gL, gz, gs, gt)  # fmt: skip
        results.append((softmax, L, V, gz, gs, gt))
    set_threads(1)
    for one, two in zip(*results):
        assert np.array_equal(one, two)


def _partial(e: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One row's (L, V) over entries with scores ``e`` (entries, H) and sources ``z`` (entries, H, C), by NumPy."""
    if e.shape[0] == 0:
        return np.full(e.shape[1], -np.inf), np.zeros(z.shape[1:])
    L = np.log(np.exp(e).sum(axis=0))
    return L, np.einsum("eh,ehc->hc", np.exp(e - L), z)


def test_the_log_sum_exp_merge_of_any_split_is_the_softmax_over_the_whole_row(rng):
    # by hand: scores 0, 0 on one side and log 2 on the other; the whole row's softmax weighs them 1/4, 1/4, 1/2
    z = np.array([[[4.0]], [[8.0]], [[2.0]]])
    L_a, V_a = _partial(np.zeros((2, 1)), z[:2])
    L_b, V_b = _partial(np.full((1, 1), np.log(2.0)), z[2:])
    out, L, weights = merge_partials(L_a[None], V_a[None], [(np.array([0]), L_b[None], V_b[None])])
    np.testing.assert_allclose(out[0, 0, 0], 0.25 * 4 + 0.25 * 8 + 0.5 * 2, rtol=1e-15)
    np.testing.assert_allclose(L[0, 0], np.log(4.0), rtol=1e-15)
    np.testing.assert_allclose([weights[0][0, 0], weights[1][0, 0]], [0.5, 0.5], rtol=1e-15)
    # random rows split at random among three partials (some empty), against the softmax over the whole row
    heads, channels, rows = 2, 3, 6
    e = [rng.standard_normal((int(rng.integers(0, 7)), heads)) * 5 for _ in range(rows)]
    z = [rng.standard_normal((r.shape[0], heads, channels)) for r in e]
    owner = [rng.integers(0, 3, r.shape[0]) for r in e]
    parts = []
    for k in range(3):
        L_k, V_k = zip(*(_partial(e[i][owner[i] == k], z[i][owner[i] == k]) for i in range(rows)))
        parts.append((np.arange(rows), np.array(L_k), np.array(V_k)))
    out, L, weights = merge_partials(parts[0][1], parts[0][2], parts[1:])
    for i in range(rows):
        if e[i].shape[0] == 0:
            assert not out[i].any() and all(not w[i].any() for w in weights)
            continue
        softmax = np.exp(e[i] - e[i].max(axis=0))
        softmax /= softmax.sum(axis=0)
        np.testing.assert_allclose(out[i], np.einsum("eh,ehc->hc", softmax, z[i]), rtol=1e-12, atol=1e-12)
    # the gradients: a finite difference of <G, out> in one partial's L and V
    G = rng.standard_normal(out.shape)
    k, row = 1, int(np.argmax([x.shape[0] for x in e]))
    gV, gL = merge_gradients(G, out, weights[k], parts[k][2], parts[k][0])
    step = 1e-6
    for change, analytic in ((1, gL[row, 0]), (2, gV[row, 0, 0])):
        shifted = [list(p) for p in parts]
        shifted[k][change] = shifted[k][change].copy()
        if change == 1:
            shifted[k][1][row, 0] += step
        else:
            shifted[k][2][row, 0, 0] += step
        moved, _, _ = merge_partials(shifted[0][1], shifted[0][2], [tuple(p) for p in shifted[1:]])
        np.testing.assert_allclose(((moved - out) * G).sum() / step, analytic, rtol=1e-4, atol=1e-6)
