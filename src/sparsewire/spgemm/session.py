"""A distributed SpGEMM session (``sparsewire spgemm``): load on rank 0, set values, choose the
algorithm, distribute, multiply ``repeat`` times, check against single-process GraphBLAS, report."""

from __future__ import annotations

import statistics

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error
from sparsewire.errors import InputError
from sparsewire.io import load_matrix, nonfinite_entries
from sparsewire.spgemm.distributed import choose_algorithm, peak_rss_bytes, reference_product
from sparsewire.spgemm.local import to_scipy
from sparsewire.spgemm.semirings import Semiring
from sparsewire.spgemm.summa import ProcessGrid

__all__ = ["check_values_spec", "apply_values", "load_operand", "compare_exactly", "run_spgemm_session"]


def check_values_spec(values: str) -> None:
    """Reject a malformed ``--values`` (before any matrix is loaded)."""
    if values in ("file", "ones"):
        return
    if values.startswith("random:"):
        try:
            int(values.split(":", 1)[1])
            return
        except ValueError:
            raise InputError(f"--values {values!r}: the seed must be an integer, e.g. random:1") from None
    raise InputError(f"--values {values!r}: choose file, ones or random:SEED")


def apply_values(matrix: sp.csr_array, values: str) -> sp.csr_array:
    """Set the stored values: ``file`` keeps them (pattern files read as 1), ``ones`` sets 1,
    ``random:SEED`` sets deterministic integers in 1..9 (entry e of the canonical CSR order gets
    the e-th draw of NumPy's default generator seeded with SEED), so integer semirings are exact."""
    check_values_spec(values)
    result = sp.csr_array(matrix, copy=True)
    result.sum_duplicates()
    if values == "ones":
        result.data = np.ones(result.nnz)
    elif values.startswith("random:"):
        seed = int(values.split(":", 1)[1])
        result.data = np.random.default_rng(seed).integers(1, 10, result.nnz).astype(np.float64)
    return result


def load_operand(spec: str, values: str) -> sp.csr_array:
    """Load a matrix and set its values (:func:`apply_values`); NaN or infinite values are an error."""
    matrix = apply_values(load_matrix(spec), values)
    bad = nonfinite_entries(matrix)
    if bad:
        raise InputError(f"{spec}: {bad} stored values are NaN or infinite; clean the matrix or use --values ones|random:SEED")
    return matrix


def compare_exactly(result: sp.csr_array, reference: sp.csr_array) -> dict:
    """Compare two results entry by entry: the same stored pattern, and equal values (exactly; a
    relative 1e-12 is allowed only where the reference holds non-integer floating values)."""
    result, reference = sp.csr_array(result), sp.csr_array(reference)
    result.sort_indices()
    reference.sort_indices()
    same_pattern = (
        result.shape == reference.shape
        and np.array_equal(result.indptr, reference.indptr)
        and np.array_equal(result.indices, reference.indices)
    )
    if not same_pattern:
        return {"check_passed": False, "pattern_equal": False, "mismatched_values": None}
    got, want = result.data, reference.data
    if want.dtype.kind == "f" and not np.all(np.isin(want, [np.inf, -np.inf]) | (want == np.round(want))):
        bad = ~np.isclose(got, want, rtol=1e-12, atol=0)
        exact = False
    else:
        bad = got != want
        exact = True
    return {"check_passed": not bad.any(), "pattern_equal": True, "mismatched_values": int(bad.sum()), "exact": exact}


def run_spgemm_session(
    comm: MPI.Comm,
    spec: str,
    second_spec: str | None,
    semiring: Semiring,
    *,
    algorithm: str = "auto",
    strategy: str = "auto",
    grid: ProcessGrid | None = None,
    phases: int = 1,
    repeat: int = 3,
    values: str = "file",
    check: bool = False,
    progress=None,
) -> dict | None:
    """Collective. ``C = A (+.x) B`` (B = A when ``second_spec`` is None); the result dict on rank 0.

    Timing: one untimed warm-up multiply, then ``repeat`` multiplies, each between barriers and
    timed as the slowest rank. ``bytes_moved`` is what the ranks handed to MPI in one multiply
    (equal to ``predicted_bytes``, counted before running). ``peak_held_entries`` is the most
    stored entries any rank held at once inside the multiply; ``peak_rss_bytes`` the largest peak
    resident memory of any rank over the whole run.
    """
    rank = comm.Get_rank()
    a_global = b_global = None
    problem = None
    if rank == 0:
        try:
            a_global = load_operand(spec, values)
            b_global = a_global if second_spec is None else load_operand(second_spec, values)
            if a_global.shape[1] != b_global.shape[0]:
                raise InputError(
                    f"cannot multiply {a_global.shape[0]} x {a_global.shape[1]} by {b_global.shape[0]} x "
                    f"{b_global.shape[1]}: A's columns must equal B's rows"
                )
        except Exception as error:  # reported on every rank by agree_on_error
            problem = str(error)
    agree_on_error(comm, problem)
    if progress and rank == 0:
        progress(f"choosing among {algorithm} candidates" if algorithm == "auto" or strategy == "auto" else f"building {algorithm}")
    spgemm, b_local, predictions = choose_algorithm(
        comm, a_global, b_global, semiring, algorithm, strategy=strategy, grid=grid, phases=phases
    )
    if progress and rank == 0:
        progress(f"running {spgemm.name} on a {spgemm.grid} grid")
    result = spgemm.multiply(b_local, phases=phases)  # warm-up
    sent_before = spgemm.bytes_sent
    times = []
    for _ in range(repeat):
        comm.Barrier()
        started = MPI.Wtime()
        result = spgemm.multiply(b_local, phases=phases)
        times.append(comm.allreduce(MPI.Wtime() - started, op=MPI.MAX))
    moved = comm.allreduce(spgemm.bytes_sent - sent_before, op=MPI.SUM) // max(repeat, 1)
    nnz_out = comm.allreduce(int(result.nvals), op=MPI.SUM)
    # float64 sum of the stored values; a boolean True counts 1
    checksum = comm.allreduce(float(to_scipy(result).data.sum(dtype=np.float64)), op=MPI.SUM)
    peak_held = comm.allreduce(spgemm.peak_held_entries, op=MPI.MAX)
    gathered = spgemm.gather_c(result) if check else None
    rss = peak_rss_bytes(comm)
    spgemm.free()
    if rank != 0:
        return None
    report = {
        "matrix": spec,
        "matrix2": second_spec,
        "shape": [int(a_global.shape[0]), int(b_global.shape[1])],
        "nnz_a": int(a_global.nnz),
        "nnz_b": int(b_global.nnz),
        "ranks": comm.Get_size(),
        "grid": str(spgemm.grid),
        "algorithm": spgemm.name,
        "semiring": semiring.name,
        "semiring_facts": semiring.describe(),
        "values": values,
        "phases": phases,
        "repeat": repeat,
        "median_seconds": statistics.median(times) if times else None,
        "nnz_out": int(nnz_out),
        "checksum_sum": float(checksum),
        "bytes_moved": int(moved),
        "predicted_bytes": int(predictions[spgemm.name]),
        "predicted_bytes_by_algorithm": predictions,
        "peak_held_entries": int(peak_held),
        "peak_rss_bytes": rss,
    }
    if check:
        reference = reference_product(a_global, b_global, semiring)
        report.update(compare_exactly(gathered, reference))
    return report
