"""Planetoid ``.npz`` files written by the tests, in the layout ``sparsewire.gnn.data.load_planetoid`` reads."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def write_planetoid(path, adjacency, features, labels, train, val, test, self_loops=()):
    adjacency, features = sp.csr_array(adjacency), sp.csr_array(features, dtype=np.float32)
    np.savez(
        path,
        n=np.int64(adjacency.shape[0]),
        adj_indptr=adjacency.indptr.astype(np.int64),
        adj_indices=adjacency.indices.astype(np.int64),
        adj_raw_self_loops=np.asarray(self_loops, np.int64),
        feat_shape=np.asarray(features.shape, np.int64),
        feat_indptr=features.indptr.astype(np.int64),
        feat_indices=features.indices.astype(np.int64),
        feat_data=features.data,
        labels=np.asarray(labels, np.int64),
        train_idx=np.asarray(train, np.int64),
        val_idx=np.asarray(val, np.int64),
        test_idx=np.asarray(test, np.int64),
    )
