"""Untrusted input given to the API. A saved plan file: edited values, indices out of range, a truncated file,
damaged settings and missing arrays are each one InputError, never a wrong product, a segfault or
a traceback. In-process on MPI.COMM_SELF; tests/test_api.py covers P > 1."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire
from conftest import run_mpi
from sparsewire.distributed.plan_file import arrays_checksum


def _saved(tmp_path, rng):
    a = sp.random_array((30, 30), density=0.15, rng=rng, format="csr")
    a.data = rng.integers(1, 5, a.nnz).astype(np.float64)
    matrix = sparsewire.distribute(MPI.COMM_SELF, sp.csr_array(a))
    path = tmp_path / "plan.npz"
    with matrix.spmm_plan(3) as plan:
        plan.save(path)
    return matrix, path


def _rewrite(path, change, *, recompute=True):
    """Apply ``change`` to the file's arrays and settings; recompute the plan checksum as a forger
    would (so validation, not the checksum, has to catch it) unless ``recompute`` is False."""
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(str(arrays.pop("meta")))
    change(arrays, meta)
    if recompute:
        meta["plan_checksum"] = arrays_checksum(arrays)
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


def _set(name, index, value):
    def change(arrays, meta):
        arrays[name] = arrays[name].copy()
        arrays[name][index] = value

    return change


DAMAGE = {
    # an edited value keeps every shape: only the checksum can see it
    "edited value": (_set("r0/diagonal.data", 0, 99.0), False, "do not match their checksum"),
    "index out of range": (_set("r0/diagonal.indices", 0, 10**6), True, "column index outside 0..29"),
    "negative index": (_set("r0/diagonal.indices", 0, -5), True, "column index outside 0..29"),
    "broken row pointer": (_set("r0/diagonal.indptr", 3, 10**9), True, "row pointer"),
    "wrong dtype": (
        lambda arrays, meta: arrays.update({"r0/diagonal.indices": arrays["r0/diagonal.indices"].astype(np.float64)}),
        True,
        "diagonal.indices is a 1-D float64",
    ),
    "missing array": (lambda arrays, meta: arrays.pop("r0/diagonal.indptr"), True, "diagonal.indptr is missing"),
    "array of no rank": (lambda arrays, meta: arrays.update({"r7/header": np.zeros(3, np.int64)}), True, "belongs to no rank"),
    "wrong shape": (lambda arrays, meta: arrays.update({"r0/diagonal.shape": np.array([30, 31])}), True, "has shape (30, 31)"),
    "bad strategy": (lambda arrays, meta: arrays.update({"r0/strategy": np.array("teleport")}), True, "strategy is not one of"),
    "k not a number": (lambda arrays, meta: meta.update(k="three"), True, "damaged plan setting 'k'"),
    "k zero": (lambda arrays, meta: meta.update(k=0), True, "damaged plan setting 'k'"),
    "unknown mode": (lambda arrays, meta: meta["options"].update(mode="warp"), True, "damaged plan options (unknown mode 'warp'"),
    "unknown transport": (lambda arrays, meta: meta["options"].update(transport="pigeon"), True, "unknown transport 'pigeon'"),
    "dtype": (lambda arrays, meta: meta.update(dtype="complex128"), True, "damaged plan setting 'dtype'"),
    "choice": (lambda arrays, meta: meta.update(choice={"strategy": "joint"}), True, "damaged plan setting 'choice'"),
    "no checksum": (lambda arrays, meta: meta.pop("plan_checksum"), False, "damaged plan setting 'plan_checksum'"),
    "negative steps": (lambda arrays, meta: meta["choice"]["steps"].update(joint=-1), True, "damaged plan setting 'choice'"),
    "timed at 0 s": (lambda arrays, meta: meta["choice"].update(measured={"joint": 0.0}), True, "damaged plan setting 'choice'"),
    "timed, not a candidate": (
        lambda arrays, meta: meta["choice"].update(measured={"teleport": 1e-3}),
        True,
        "damaged plan setting 'choice'",
    ),
    "steps of no candidate": (
        lambda arrays, meta: meta["choice"]["steps"].update(teleport=1),
        True,
        "damaged plan setting 'choice'",
    ),
}


def test_a_saved_plan_keeps_why_auto_chose_it(tmp_path, rng):
    matrix, path = _saved(tmp_path, rng)
    with matrix.spmm_plan(3) as plan:
        choice = plan.choice
    with sparsewire.SpmmPlan.load(path, matrix) as loaded:
        assert loaded.choice == choice and loaded.choice.steps == {"block": 0, "column": 0, "row": 0, "joint": 0}
        assert "candidates (predicted time / bytes / steps): " in loaded.explain()
    _rewrite(path, lambda arrays, meta: meta["choice"].pop("steps"))  # a file written before the steps were recorded
    with sparsewire.SpmmPlan.load(path, matrix) as loaded:
        assert loaded.choice.steps == {} and loaded.choice.candidates == choice.candidates


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_plan_file_is_one_input_error(tmp_path, rng, case):
    change, recompute, expected = DAMAGE[case]
    matrix, path = _saved(tmp_path, rng)
    sparsewire.SpmmPlan.load(path, matrix).close()  # the undamaged file loads
    _rewrite(path, change, recompute=recompute)
    with pytest.raises(sparsewire.InputError) as caught:
        sparsewire.SpmmPlan.load(path, matrix)
    message = str(caught.value)
    assert expected in message and "\n" not in message and str(path) in message, message


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_a_truncated_or_empty_plan_file_is_one_input_error(tmp_path, rng, keep):
    matrix, path = _saved(tmp_path, rng)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(sparsewire.InputError, match="cannot read a plan from|is not a sparsewire SpMM plan file"):
        sparsewire.SpmmPlan.load(path, matrix)


def test_a_plan_file_that_is_not_an_archive_is_one_input_error(tmp_path, rng):
    matrix, path = _saved(tmp_path, rng)
    np.save(tmp_path / "single.npy", np.arange(3))
    with pytest.raises(sparsewire.InputError, match="holds a single array, not an .npz archive"):
        sparsewire.SpmmPlan.load(tmp_path / "single.npy", matrix)


DAMAGE_ON_EVERY_RANK = """
import json, sys, numpy as np
from mpi4py import MPI
import sparsewire
from sparsewire.distributed.plan_file import arrays_checksum
comm = MPI.COMM_WORLD
matrix = sparsewire.distribute(comm, "stencil2d:12")
with matrix.spmm_plan(2) as plan:
    plan.save(sys.argv[1])
if comm.Get_rank() == 0:  # rank 2's send matrix reads a B row that does not exist
    with np.load(sys.argv[1]) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(str(arrays.pop("meta")))
    arrays["r2/e0.send_matrix.indices"] = arrays["r2/e0.send_matrix.indices"] + 10**6
    meta["plan_checksum"] = arrays_checksum(arrays)
    np.savez(sys.argv[1], meta=np.array(json.dumps(meta)), **arrays)
comm.Barrier()
try:
    sparsewire.SpmmPlan.load(sys.argv[1], matrix)
except sparsewire.InputError as error:
    print(f"rank {comm.Get_rank()}: {error}", flush=True)
"""


def test_a_damaged_plan_of_one_rank_is_the_same_error_on_every_rank(tmp_path):
    completed = run_mpi(3, ["-c", DAMAGE_ON_EVERY_RANK, str(tmp_path / "plan.npz")], timeout=120)
    # Every rank prints the one error (lines of several ranks may interleave).
    expected = "holds a damaged plan (rank 2's e0.send_matrix has a column index outside 0..47); plan again and save"
    assert completed.returncode == 0 and completed.stdout.count(expected) == 3, completed.stdout + completed.stderr


@pytest.mark.parametrize("with_offsets", [False, True])
def test_complex_rows_are_refused_not_truncated(with_offsets):
    """The imaginary part was dropped silently (only NumPy's ComplexWarning) with row_offsets."""
    complex_rows = sp.csr_array(np.array([[1 + 2j, 0], [0, 3]]))
    with pytest.raises(sparsewire.InputError, match="complex128; give a real matrix"):
        if with_offsets:
            sparsewire.distribute(MPI.COMM_SELF, complex_rows, row_offsets=[0, 2])
        else:
            sparsewire.distribute(MPI.COMM_SELF, complex_rows)


def test_a_plan_for_a_k_beyond_memory_is_refused_before_allocating(tmp_path, rng):
    """Found by fuzzing: k = 2^31 in a plan file passed and the buffers' allocation failed."""
    matrix, path = _saved(tmp_path, rng)
    _rewrite(path, lambda arrays, meta: meta.update(k=2**31))
    with pytest.raises(sparsewire.InputError, match="the executor's buffers: blocks of .* need .* GiB, more than"):
        sparsewire.SpmmPlan.load(path, matrix)
