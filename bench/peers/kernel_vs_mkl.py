"""The local CSR x dense kernel at GNN widths beside Intel MKL and torch.sparse.mm, in one run.

    .venv/bin/pip install sparse-dot-mkl mkl          # benchmark-only; see bench/README.md
    .venv/bin/python bench/peers/kernel_vs_mkl.py [--matrices M ...] [--ks 8,16,32,64,128]
        [--dtypes float32,float64] [--threads 2]

Per matrix of ../shared/data, k and dtype: ``C = A @ B`` with B random, on ``--threads`` threads
for every side, warm (one product first, then the median of ``--repeat`` back to back):

* ours: :func:`sparsewire.kernels.compiled.multiply`, B and C on cache lines (as the library
  allocates them);
* MKL: ``sparse_dot_mkl.dot_product_mkl(A, B, out=C, out_scalar=0.0)`` (MKL's CSR x dense
  writing into a C allocated once, as ours does: its fastest call; ``out_scalar=0`` makes it
  overwrite C rather than add to it); ``MKL_RT`` is pointed at the wheel's
  ``libmkl_rt.so`` when not set;
* torch: ``torch.sparse.mm`` on a CSR tensor.

C is checked against SciPy. Prints the milliseconds and ratios and, per k and dtype, the geometric
mean of ours / MKL and ours / torch; writes bench/results/kernel_vs_mkl.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, geometric_mean, median_seconds, short_name  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--ks", default="8,16,32,64,128", help="widths of B (default: 8,16,32,64,128)")
    parser.add_argument("--dtypes", default="float32,float64", help="element types (default: float32,float64)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every side (default: 2)")
    parser.add_argument("--repeat", type=int, default=15, help="timed products per entry (default: 15)")
    args = parser.parse_args()
    if "MKL_RT" not in os.environ:
        found = glob.glob(str(Path(sysconfig.get_paths()["data"]) / "lib" / "libmkl_rt.so*"))
        if found:
            os.environ["MKL_RT"] = found[0]
    os.environ["MKL_NUM_THREADS"] = str(args.threads)
    try:
        import sparse_dot_mkl
    except ImportError:
        sys.exit("bench/peers/kernel_vs_mkl.py needs MKL: .venv/bin/pip install sparse-dot-mkl mkl (see bench/README.md)")
    import numpy as np
    import scipy.sparse as sp
    import torch

    from sparsewire import empty_aligned
    from sparsewire.io import load_matrix
    from sparsewire.kernels import compiled as kernels
    from sparsewire.profile import format_table

    torch.set_num_threads(args.threads)
    kernels.set_threads(args.threads)
    rng = np.random.default_rng(0)
    ks = [int(k) for k in args.ks.split(",")]
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    rows, results, ratios = [], [], {}
    for spec in args.matrices:
        matrix = load_matrix(spec)
        matrix.sort_indices()
        for dtype in dtypes:
            a = sp.csr_matrix(matrix, dtype=dtype)
            operand = kernels.CsrOperand.from_matrix(a, dtype, args.threads)
            a_torch = torch.sparse_csr_tensor(
                torch.from_numpy(a.indptr.astype(np.int64)),
                torch.from_numpy(a.indices.astype(np.int64)),
                torch.from_numpy(a.data),
                size=a.shape,
            )
            for k in ks:
                print(f"{short_name(spec)} {dtype.name} k={k}", file=sys.stderr, flush=True)
                b = empty_aligned((a.shape[1], k), dtype)
                b[:] = rng.random((a.shape[1], k))
                out = empty_aligned((a.shape[0], k), dtype)
                out_mkl = np.empty((a.shape[0], k), dtype)
                b_torch = torch.from_numpy(b)
                ours = median_seconds(lambda: kernels.multiply(operand, b, out), args.repeat)
                # out_scalar=0: C = A @ B (MKL's beta = 0); without it MKL adds to what ``out`` holds
                mkl = median_seconds(lambda: sparse_dot_mkl.dot_product_mkl(a, b, out=out_mkl, out_scalar=0.0), args.repeat)
                theirs = median_seconds(lambda: torch.sparse.mm(a_torch, b_torch), args.repeat)
                reference = a.astype(np.float64) @ b.astype(np.float64)
                tolerance = 1e-9 if dtype == np.float64 else 1e-3
                agree = all(
                    np.allclose(c, reference, rtol=tolerance, atol=tolerance * max(1.0, float(np.abs(reference).max(initial=0))))
                    for c in (out, out_mkl, torch.sparse.mm(a_torch, b_torch).numpy())
                )
                ratios.setdefault((dtype.name, k), []).append((ours / mkl, ours / theirs))
                results.append(
                    {
                        "matrix": short_name(spec),
                        "dtype": dtype.name,
                        "k": k,
                        "ours_seconds": ours,
                        "mkl_seconds": mkl,
                        "torch_seconds": theirs,
                        "agree": agree,
                    }
                )
                rows.append(
                    [
                        short_name(spec),
                        dtype.name,
                        k,
                        f"{ours * 1e3:.3f}",
                        f"{mkl * 1e3:.3f}",
                        f"{theirs * 1e3:.3f}",
                        f"{ours / mkl:.2f}",
                        f"{ours / theirs:.2f}",
                        "yes" if agree else "NO",
                    ]
                )
    print(format_table(["matrix", "dtype", "k", "ours ms", "MKL ms", "torch ms", "ours/MKL", "ours/torch", "same C"], rows))
    summary = [
        [dtype, k, f"{geometric_mean(r[0] for r in values):.3f}", f"{geometric_mean(r[1] for r in values):.3f}", len(values)]
        for (dtype, k), values in sorted(ratios.items())
    ]
    print()
    print(format_table(["dtype", "k", "ours/MKL (geometric mean)", "ours/torch", "matrices"], summary))
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel_vs_mkl.json").write_text(
        json.dumps({"threads": args.threads, "results": results, "summary": summary}, indent=1)
    )
    wrong = [f"{r['matrix']} {r['dtype']} k={r['k']}" for r in results if not r["agree"]]
    if wrong:
        print("C differs from SciPy's (one side computed something else): " + ", ".join(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
