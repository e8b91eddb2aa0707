"""Fuzzing of every reader of untrusted input with Hypothesis, run by tests/io/test_fuzz.py
in a process of its own under a memory limit, and by people for longer runs:

    python tests/io/fuzz_readers.py --examples 20000 --seed 1234 --memory-mib 2048

Targets: Matrix Market, SNAP edge lists, METIS graphs, SciPy ``.npz``, Planetoid ``.npz``, saved
SpMM plans and generator specs, each from random bytes, mutated valid files, and extreme sizes and
indices. Every input must either load (into a structurally valid matrix or plan) or raise one
:class:`sparsewire.SparsewireError` with a one-line message. Any other exception, a hang (more
than ``--example-seconds``) or running out of memory (``--memory-mib``, RLIMIT_DATA) fails the run
with the falsifying input. Prints ``fuzzed N inputs (seed S)`` and the count per target.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import signal
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

COUNTS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()
WORK = Path(tempfile.mkdtemp(prefix="sparsewire-fuzz-"))

EXTREME = st.sampled_from(
    [0, 1, 2, -1, -5, 2**31 - 1, 2**31, 2**32, 2**53, 2**62, 2**63 - 1, 2**63, 2**64, 10**12, 10**18, 10**30]
)
NUMBER_TEXT = st.one_of(
    st.integers(-3, 60).map(str),
    EXTREME.map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "1e999", "-0", "0x10", "1.5", "", "  ", "\x00", "é", "1_000", "+3"]),
)


class Hang(Exception):
    """An example ran past its time limit."""


def _alarm(signum, frame):
    raise Hang("an input took longer than the time limit: a hang")


def check(target: str, load) -> None:
    """Run ``load()``: a result is validated by the loader's caller; SparsewireError must be one
    line; anything else (and a hang) propagates and fails the run."""
    from sparsewire import SparsewireError

    COUNTS[target] += 1
    signal.alarm(EXAMPLE_SECONDS)
    try:
        load()
        OUTCOMES["loaded"] += 1
    except SparsewireError as error:
        message = str(error)
        assert message and "\n" not in message, f"{target}: a SparsewireError that is not one line: {message!r}"
        OUTCOMES["refused"] += 1
    finally:
        signal.alarm(0)


def write(name: str, data: bytes) -> str:
    path = WORK / name
    path.write_bytes(data)
    return str(path)


def valid_matrix(matrix) -> None:
    assert isinstance(matrix, sp.csr_array), type(matrix)
    matrix.check_format(full_check=True)
    assert matrix.shape[0] >= 0 and matrix.shape[1] >= 0


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 replace, 1 insert, 2 delete, 3 truncate."""
    buffer = bytearray(data)
    for kind, position, value in edits:
        if not buffer and kind != 1:
            continue
        at = position % (len(buffer) + 1)
        if kind == 0 and at < len(buffer):
            buffer[at] = value
        elif kind == 1:
            buffer[at:at] = bytes([value])
        elif kind == 2 and at < len(buffer):
            del buffer[at]
        elif kind == 3:
            del buffer[at:]
    return bytes(buffer)


EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**20), st.integers(0, 255)), max_size=8)


def replace_numbers(text: str, replacements: list[str]) -> str:
    """Replace the i-th number-like token of ``text`` by ``replacements[i]`` (cycling)."""
    if not replacements:
        return text
    tokens = text.split(" ")
    out, index = [], 0
    for token in tokens:
        parts = token.split("\n")
        for p, part in enumerate(parts):
            if part.strip().lstrip("-").replace(".", "", 1).isdigit() and index < len(replacements) * 3:
                parts[p] = replacements[index % len(replacements)] if index % 3 == 0 else part
                index += 1
        out.append("\n".join(parts))
    return " ".join(out)


# --- Matrix Market ---------------------------------------------------------------------------

MM_HEADERS = [
    f"%%MatrixMarket matrix coordinate {field} {symmetry}"
    for field in ("real", "integer", "pattern", "complex")
    for symmetry in ("general", "symmetric", "skew-symmetric", "hermitian")
] + ["%%MatrixMarket matrix array real general", "%%MatrixMarket", ""]


@st.composite
def matrix_market(draw) -> bytes:
    header = draw(st.sampled_from(MM_HEADERS))
    rows, cols = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    entries = draw(st.lists(st.tuples(st.integers(-1, 8), st.integers(-1, 8), st.integers(-9, 9)), max_size=10))
    lines = [header, "% a comment", f"{rows} {cols} {len(entries)}"]
    lines += [f"{i} {j} {v}" if "pattern" not in header else f"{i} {j}" for i, j, v in entries]
    text = "\n".join(lines) + "\n"
    text = replace_numbers(text, draw(st.lists(NUMBER_TEXT, max_size=4)))
    return mutate(text.encode(), draw(EDITS))


# --- edge lists and METIS --------------------------------------------------------------------


@st.composite
def edge_list(draw) -> bytes:
    pairs = draw(st.lists(st.tuples(NUMBER_TEXT, NUMBER_TEXT, st.one_of(st.just(""), NUMBER_TEXT)), max_size=10))
    text = "# comment\n" + "\n".join(f"{a} {b} {w}".strip() for a, b, w in pairs) + "\n"
    return mutate(text.encode(), draw(EDITS))


@st.composite
def metis_graph(draw) -> bytes:
    n = draw(st.integers(0, 6))
    fmt = draw(st.sampled_from(["", " 0", " 1", " 10", " 11", " 100", " 7"]))
    adjacency = [sorted({j for j in draw(st.lists(st.integers(1, max(n, 1)), max_size=4)) if j != i + 1}) for i in range(n)]
    edges = sum(len(a) for a in adjacency) // 2
    weighted = fmt.strip() in ("1", "11")
    lines = [f"{n} {edges}{fmt}"]
    for neighbours in adjacency:
        lines.append(" ".join(f"{j} {draw(st.integers(-2, 5))}" if weighted else str(j) for j in neighbours))
    text = replace_numbers("\n".join(lines) + "\n", draw(st.lists(NUMBER_TEXT, max_size=3)))
    return mutate(text.encode(), draw(EDITS))


# --- SciPy npz --------------------------------------------------------------------------------


def npz_bytes(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@st.composite
def scipy_npz(draw) -> bytes:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (draw(st.integers(0, 8)), draw(st.integers(0, 8)))
    matrix = sp.random_array(shape, density=0.3, rng=rng, format=draw(st.sampled_from(["csr", "csc", "coo"])))
    buffer = io.BytesIO()
    sp.save_npz(buffer, matrix, compressed=draw(st.booleans()))
    data = buffer.getvalue()
    how = draw(st.integers(0, 2))
    if how == 0:  # a valid archive with one array replaced by an extreme one
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        name = draw(st.sampled_from(sorted(arrays)))
        value = draw(EXTREME)
        kind = draw(st.sampled_from(["set", "dtype", "shape", "empty"]))
        array = arrays[name].copy()
        if kind == "set" and array.size and array.dtype.kind in "iuf":
            array = array.astype(np.int64) if array.dtype.kind in "iu" else array
            array.flat[draw(st.integers(0, array.size - 1))] = (
                int(np.clip(value, -(2**62), 2**62)) if array.dtype.kind in "iu" else float(value)
            )
        elif kind == "dtype":
            array = (
                array.astype(draw(st.sampled_from([np.float32, np.int8, np.complex128, np.uint64, np.bool_])))
                if array.dtype.kind != "S"
                else array
            )
        elif kind == "shape":
            array = np.resize(array, draw(st.integers(0, 20)))
        else:
            array = array[:0] if array.ndim else np.zeros(0, array.dtype)
        arrays[name] = array
        return npz_bytes(arrays)
    return mutate(data, draw(EDITS))


# --- Planetoid npz ----------------------------------------------------------------------------


def planetoid_arrays(rng) -> dict:
    n, features, classes = 12, 6, 3
    adjacency = sp.random_array((n, n), density=0.3, rng=rng, format="csr")
    adjacency = sp.csr_array(((adjacency + adjacency.T) > 0).astype(np.float64))
    feats = sp.random_array((n, features), density=0.4, rng=rng, format="csr")
    masks = np.zeros(n, bool)
    masks[:4] = True
    return {
        "n": np.array(n),
        "adj_indptr": adjacency.indptr,
        "adj_indices": adjacency.indices,
        "feat_indptr": feats.indptr,
        "feat_indices": feats.indices,
        "feat_data": feats.data.astype(np.float32),
        "feat_shape": np.array([n, features]),
        "labels": rng.integers(0, classes, n),
        "train_mask": masks,
        "val_mask": np.roll(masks, 4),
        "test_mask": np.roll(masks, 8),
    }


@st.composite
def planetoid_npz(draw) -> bytes:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrays = planetoid_arrays(rng)
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(arrays)))
        array = np.array(arrays[name], copy=True)
        kind = draw(st.sampled_from(["set", "drop", "dtype", "shape"]))
        if kind == "set" and array.size:
            value = draw(EXTREME)
            array = array.astype(np.float64) if array.dtype.kind == "f" else array.astype(np.int64)
            array.flat[draw(st.integers(0, array.size - 1))] = (
                float(value) if array.dtype.kind == "f" else int(np.clip(value, -(2**62), 2**62))
            )
            arrays[name] = array
        elif kind == "drop":
            del arrays[name]
        elif kind == "dtype":
            arrays[name] = array.astype(draw(st.sampled_from([np.float64, np.int8, np.complex128, np.bool_])))
        else:
            arrays[name] = np.resize(array, draw(st.integers(0, 30)))
        return npz_bytes(arrays)
    return mutate(npz_bytes(arrays), draw(EDITS))


# --- saved plans ------------------------------------------------------------------------------

PLAN_STATE: dict = {}


def plan_fixture():
    """One small matrix on MPI.COMM_SELF and its saved plan (bytes and arrays), made once."""
    if not PLAN_STATE:
        from mpi4py import MPI

        import sparsewire

        matrix = sparsewire.distribute(MPI.COMM_SELF, "stencil2d:6")
        path = WORK / "saved-plan.npz"
        with matrix.spmm_plan(2) as plan:
            plan.save(path)
        with np.load(path) as archive:
            arrays = {name: archive[name] for name in archive.files}
        PLAN_STATE.update(matrix=matrix, data=path.read_bytes(), arrays=arrays)
    return PLAN_STATE


@st.composite
def plan_file(draw) -> tuple[bytes, bool]:
    """A damaged plan file, and whether its checksum was forged to match (then a value edited
    within range loads and multiplies to another product: only a checksum an attacker cannot
    recompute would stop it, so such a plan must merely load safely or be refused)."""
    from sparsewire.distributed.plan_file import arrays_checksum

    state = plan_fixture()
    how = draw(st.integers(0, 2))
    if how == 0:
        return mutate(state["data"], draw(EDITS)), False
    arrays = {name: np.array(value, copy=True) for name, value in state["arrays"].items()}
    meta = json.loads(str(arrays.pop("meta")))
    if how == 1:  # an array edited, the checksum forged to match
        name = draw(st.sampled_from(sorted(arrays)))
        array = arrays[name]
        kind = draw(st.sampled_from(["set", "drop", "dtype", "shape"]))
        if kind == "set" and array.size and array.dtype.kind in "iuf":
            value = draw(EXTREME)
            array = array.astype(np.int64) if array.dtype.kind in "iu" else array
            array.flat[draw(st.integers(0, array.size - 1))] = (
                int(np.clip(value, -(2**62), 2**62)) if array.dtype.kind in "iu" else float(value)
            )
            arrays[name] = array
        elif kind == "drop":
            del arrays[name]
        elif kind == "dtype" and array.dtype.kind in "iuf":
            arrays[name] = array.astype(draw(st.sampled_from([np.float32, np.int8, np.uint64, np.complex128])))
        elif kind == "shape" and array.ndim:
            arrays[name] = np.resize(array, draw(st.integers(0, 12)))
        meta["plan_checksum"] = arrays_checksum(arrays)
    else:  # a setting edited
        key = draw(st.sampled_from(sorted(meta)))
        meta[key] = draw(st.one_of(st.none(), st.booleans(), EXTREME, st.text(max_size=5), st.just([1, 2]), st.just({"a": 1})))
    return npz_bytes({"meta": np.array(json.dumps(meta)), **arrays}), how == 1


# --- generator specs --------------------------------------------------------------------------

SMALL_OR_EXTREME = st.one_of(st.integers(-2, 12).map(str), EXTREME.map(str), st.sampled_from(["x", "", "1.5", "nan", "0x4"]))


@st.composite
def generator_spec(draw) -> str:
    name = draw(st.sampled_from(["rmat", "delaunay", "stencil2d", "stencil3d", "uniform", "RMAT", "nosuch", ""]))
    fields = draw(st.lists(SMALL_OR_EXTREME, max_size=4))
    if name == "uniform" and fields and draw(st.booleans()):
        fields[0] = f"{fields[0]}x{draw(SMALL_OR_EXTREME)}"
    return ":".join([name, *fields])


# --- the run ----------------------------------------------------------------------------------


def run(examples: int, run_seed: int, shrink: bool = True) -> None:
    from mpi4py import MPI  # noqa: F401 - initialised before any limit hits the plan target

    import sparsewire
    from sparsewire.gnn.data import load_planetoid
    from sparsewire.io.readers import load_matrix

    share = {
        "matrix_market": 0.2,
        "edge_list": 0.12,
        "metis": 0.12,
        "scipy_npz": 0.14,
        "planetoid": 0.1,
        "plan": 0.12,
        "generator": 0.2,
    }
    phases = list(Phase) if shrink else [phase for phase in Phase if phase is not Phase.shrink]
    common = dict(
        deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck), print_blob=True, phases=phases
    )

    def limited(name):
        return settings(max_examples=max(1, int(examples * share[name])), **common)

    @seed(run_seed)
    @limited("matrix_market")
    @given(matrix_market(), st.booleans())
    def fuzz_matrix_market(data, gzipped):
        import gzip

        path = write("fuzz.mtx.gz" if gzipped else "fuzz.mtx", gzip.compress(data) if gzipped else data)
        check("matrix_market", lambda: valid_matrix(load_matrix(path)))

    @seed(run_seed + 1)
    @limited("edge_list")
    @given(edge_list(), st.booleans())
    def fuzz_edge_list(data, symmetrize):
        path = write("fuzz.txt", data)
        check("edge_list", lambda: valid_matrix(load_matrix(path, symmetrize=symmetrize)))

    @seed(run_seed + 2)
    @limited("metis")
    @given(metis_graph())
    def fuzz_metis(data):
        path = write("fuzz.graph", data)
        check("metis", lambda: valid_matrix(load_matrix(path)))

    @seed(run_seed + 3)
    @limited("scipy_npz")
    @given(scipy_npz())
    def fuzz_scipy_npz(data):
        path = write("fuzz.npz", data)
        check("scipy_npz", lambda: valid_matrix(load_matrix(path)))

    @seed(run_seed + 4)
    @limited("planetoid")
    @given(planetoid_npz())
    def fuzz_planetoid(data):
        path = write("fuzz-planetoid.npz", data)

        def load():
            graph = load_planetoid(path)
            valid_matrix(sp.csr_array(graph.adjacency))
            assert graph.features.shape[0] == graph.adjacency.shape[0] == graph.labels.size

        check("planetoid", load)

    @seed(run_seed + 5)
    @limited("plan")
    @given(plan_file())
    def fuzz_plan(damaged):
        data, forged = damaged
        path = write("fuzz-plan.npz", data)

        def load():
            state = plan_fixture()
            with sparsewire.SpmmPlan.load(path, state["matrix"]) as plan:
                b = np.arange(plan.input_rows * plan.k, dtype=np.float64).reshape(-1, plan.k)
                product = plan.multiply(b)  # never a crash, even from a forged plan
                if not forged and plan.k == 2:
                    assert np.array_equal(product, state["product"]), "a damaged plan loaded and gave a wrong product"

        check("plan", load)

    @seed(run_seed + 6)
    @limited("generator")
    @given(generator_spec())
    def fuzz_generator(spec):
        check("generator", lambda: valid_matrix(load_matrix(spec)))

    state = plan_fixture()
    state["product"] = state["matrix"].gather() @ np.arange(state["matrix"].shape[1] * 2, dtype=np.float64).reshape(-1, 2)
    for fuzz in (fuzz_matrix_market, fuzz_edge_list, fuzz_metis, fuzz_scipy_npz, fuzz_planetoid, fuzz_plan, fuzz_generator):
        fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=2100, help="inputs in all (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random, printed)")
    parser.add_argument("--memory-mib", type=int, default=2048, help="RLIMIT_DATA for this process (default: %(default)s)")
    parser.add_argument("--example-seconds", type=int, default=20, help="time limit per input (default: %(default)s)")
    parser.add_argument("--no-shrink", action="store_true", help="report the first failing input as drawn, unshrunk")
    args = parser.parse_args()
    global EXAMPLE_SECONDS
    EXAMPLE_SECONDS = args.example_seconds
    run_seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(
        f"fuzz seed {run_seed} (rerun: python tests/io/fuzz_readers.py --seed {run_seed} --examples {args.examples})", flush=True
    )
    limit = args.memory_mib * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore")  # readers' warnings on odd input (empty files) are not failures
    run(args.examples, run_seed, shrink=not args.no_shrink)
    total = sum(COUNTS.values())
    print(
        f"fuzzed {total} inputs (seed {run_seed}): "
        + ", ".join(f"{name} {count}" for name, count in sorted(COUNTS.items()))
        + f"; {OUTCOMES['loaded']} loaded, {OUTCOMES['refused']} refused with one SparsewireError line",
        flush=True,
    )
    return 0


EXAMPLE_SECONDS = 20

if __name__ == "__main__":
    sys.exit(main())
