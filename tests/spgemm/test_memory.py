"""Memory between SpGEMM multiplies: what a product made and dropped holds no entries once it returns (python-graphblas
would free it only at Python's cycle collector), and a multiply after the last product was freed reuses that product's
pages instead of faulting fresh ones in (the page faults the kernel counts, an independent measurement)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from oracles import entries_left_to_the_collector
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import to_graphblas, to_scipy
from sparsewire.spgemm.product import multiply_into
from sparsewire.spgemm.semirings import get_semiring


@pytest.mark.parametrize("threads", [1, 2])  # (the kernel's product, then GraphBLAS's own)
def test_an_accumulated_product_is_freed_when_it_is_added(rng, threads):
    was = gb.ss.config["nthreads"]
    gb.ss.config["nthreads"] = threads
    semiring = get_semiring("plus_times")
    try:
        a, b, c = (sp.random_array((40, 40), density=0.2, rng=rng, format="csr") for _ in range(3))
        for matrix in (a, b, c):
            matrix.data = rng.integers(1, 10, matrix.nnz).astype(np.float64)
        result = to_graphblas(sp.csr_array(c), np.float64)
        left, right = to_graphblas(sp.csr_array(a), np.float64), to_graphblas(sp.csr_array(b), np.float64)

        def accumulate():
            multiply_into(result, left, right, semiring.operator, semiring.accumulate)

        _, dropped, entries = entries_left_to_the_collector(accumulate)
    finally:
        gb.ss.config["nthreads"] = was
    assert dropped >= (threads == 1), "the kernel's product was not dropped: the test measures nothing"
    assert entries == 0, f"{dropped} dropped matrices held {entries} entries until the cycle collector came"
    want = sp.csr_array(c) + sp.csr_array(a) @ sp.csr_array(b)
    got = to_scipy(result)
    assert (got != want).nnz == 0


REUSE = """
import resource, sys
import numpy as np, scipy.sparse as sp
from mpi4py import MPI
from sparsewire.spgemm import distributed
from sparsewire.spgemm.semirings import get_semiring
if sys.argv[1] == "default":
    distributed.keep_freed_heap = lambda: False
n = 2100  # C about 99% dense: 4.4 million entries, each of its two arrays above glibc's largest mmap threshold
a = sp.random_array((n, n), density=0.05, rng=np.random.default_rng(int(sys.argv[2])), format="csr")
spgemm = distributed.DistributedSpgemm(MPI.COMM_WORLD, a, a.shape, get_semiring("plus_times"), "summa")
b = spgemm.scatter_b(a)
spgemm.multiply(b).clear()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
c = spgemm.multiply(b)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, c.nvals)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's settings are glibc's")
def test_the_next_multiply_reuses_the_freed_products_pages(rng):
    """The page faults of a multiply whose previous product was freed: at least one per 4 kB page of C's arrays where
    glibc unmaps the freed ones (its default), under a tenth of that where the plan keeps the freed heap."""
    huge_pages = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if huge_pages.exists() and "[always]" in huge_pages.read_text():
        pytest.skip("transparent huge pages are always on: a new map faults in 2 MB at a time, not each 4 kB page")
    seed = str(int(rng.integers(2**31)))

    def faults(mode: str) -> tuple[int, int]:
        run = subprocess.run([sys.executable, "-c", REUSE, mode, seed], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return tuple(int(field) for field in run.stdout.split())

    default, entries = faults("default")
    kept, same_entries = faults("keep")
    pages = entries * 16 // 4096  # (an int64 column index and a float64 value per entry)
    assert entries == same_entries and entries > 4_000_000
    assert default >= pages, f"{default} faults for {pages} pages of C by default: the test measures nothing"
    assert kept < pages / 10, f"{kept} faults for {pages} pages of C: the freed product's pages were not reused"
