"""The local SpGEMM product beside SuiteSparse:GraphBLAS's ``mxm``, in one run.

    .venv/bin/python bench/peers/spgemm_kernel.py [--matrices SPEC ...] [--repeat 7]

Per matrix (values: integers 1..9) and semiring (plus_times, min_plus): the product one rank of a
2 x 2 SUMMA grid forms, ``A(:n/2, :) x A(:, :n/2)``, as python-graphblas matrices, timed warm (one product first,
then the fastest of ``--repeat``, sides taking turns, the collector run before each so that the last C is freed):

* ours: :func:`sparsewire.spgemm.local_multiply` (the product every SpGEMM algorithm runs);
* GraphBLAS: ``A.mxm(B, semiring).new()``, finished (``wait``) as ours is.

Both on one thread, as a rank runs where the ranks of a node share its cores (on more threads
``local_multiply`` is GraphBLAS's ``mxm`` itself). C is checked equal (pattern and values). Prints the milliseconds,
the ratios ours / GraphBLAS and their geometric mean; writes bench/results/spgemm_kernel.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import sparsewire
from sparsewire.spgemm import get_semiring, local_multiply

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MATRICES = ["stencil2d:512", "delaunay_n16", "rmat:14:8", "rmat:15:8", "rmat:16:8"]


def fastest(step, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()  # python-graphblas matrices are freed by the collector: the last C goes before the next
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="+", default=DEFAULT_MATRICES)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "spgemm_kernel.json"))
    args = parser.parse_args()
    import graphblas as gb  # (after sparsewire, which sizes Numba's pool before python-graphblas imports it)

    gb.ss.config["nthreads"] = 1
    rows = []
    for spec in args.matrices:
        a = sp.csr_array(sparsewire.load_matrix(spec))
        a.data = np.random.default_rng(1).integers(1, 10, a.nnz).astype(np.float64)
        half = a.shape[0] // 2
        for name in ("plus_times", "min_plus"):
            semiring = get_semiring(name)
            left = gb.io.from_scipy_sparse(sp.csr_array(a[:half, :]).astype(semiring.dtype))
            right = gb.io.from_scipy_sparse(sp.csr_array(a[:, :half]).astype(semiring.dtype))
            ours = local_multiply(left, right, semiring.operator)
            if not ours.isequal(left.mxm(right, semiring.operator).new()):
                raise SystemExit(f"{spec} {name}: C differs from GraphBLAS's")
            times = {"ours": [], "graphblas": []}
            for _ in range(2):  # turns, so drift slows both alike
                times["graphblas"].append(fastest(lambda: left.mxm(right, semiring.operator).new().wait(), args.repeat))
                times["ours"].append(fastest(lambda: local_multiply(left, right, semiring.operator).wait(), args.repeat))
            row = {
                "matrix": spec,
                "semiring": name,
                "nnz_c": ours.nvals,
                "graphblas_ms": 1e3 * min(times["graphblas"]),
                "ours_ms": 1e3 * min(times["ours"]),
            }
            row["ratio"] = row["ours_ms"] / row["graphblas_ms"]
            rows.append(row)
            print(
                f"{spec} {name}: nnz(C) {row['nnz_c']:,}, GraphBLAS {row['graphblas_ms']:.2f} ms, "
                f"ours {row['ours_ms']:.2f} ms ({row['ratio']:.2f}x)",
                flush=True,
            )
    ratios = [row["ratio"] for row in rows]
    mean = float(np.exp(np.mean(np.log(ratios))))
    print(f"ours / GraphBLAS geometric mean {mean:.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
