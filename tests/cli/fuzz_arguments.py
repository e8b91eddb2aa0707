"""Fuzzing of the command lines with Hypothesis, run by tests/cli/test_fuzz_arguments.py in a
process of its own under a memory limit, and by people for longer runs:

    python tests/cli/fuzz_arguments.py --examples 20000 --seed 1234 --memory-mib 4096

Every command but ``emulate`` (it builds network namespaces; tests/emulation covers it) gets an equal share of the
vectors made from its own parser: each flag present or not, its value valid, out of its domain, of the
wrong type, extreme (0, -1, 2**31 - 1, 2**63, NaN, inf, text) or a path that is missing, a directory, a
file of another kind or one with an odd extension; the matrix a small generator spec, a small file, a
damaged one, or none. Sizes stay small and the flags that multiply the work (epochs, repeats,
iterations, nodes) stay below 8, so every vector runs in bounded time. The pass rule is the
readers' fuzzer's: ``sparsewire.cli.main(argv)`` (in this process, at P = 1) returns 0 (and with
``--json`` prints one JSON object), or returns 2 with exactly one ``sparsewire: error:`` line and
no traceback; ``eigs`` may also return 1 when its report says it did not converge (a fuzzed
``--max-iterations`` or ``--tol`` stops it early; its documented status). Any other exit status,
an exception escaping ``main``, a vector running past ``--example-seconds`` (a hang) or the
process dying (a crash, running out of memory) fails the run with the falsifying vector. Prints
``fuzzed N argument vectors (seed S)`` and the count per command and outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import json
import os
import resource
import shlex
import shutil
import signal
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CORA = ROOT.parent / "shared" / "data" / "gnn" / "cora.npz"
WORK = Path(tempfile.mkdtemp(prefix="sparsewire-argfuzz-"))
COMMANDS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()
SKIPPED = {"emulate"}  # makes network namespaces and runs a command in them: tests/emulation

#: Flags whose value multiplies the time a run takes: small values only (a user asking for 2**31
#: epochs gets them; that is not a hang).
WORK_FLAGS = {
    "--repeat": 4,
    "--rounds": 4,
    "--epochs": 3,
    "--max-iterations": 8,
    "--steps": 6,
    "--layers": 4,
    "--nodes": 8,
    "--rack": 8,
    "--batch": 8,
    "--sa-cores": 8,
    "--stages-per-product": 4,
    "--nev": 6,
    "--block": 8,
    "--ranks": 16,  # planning P ranks in one process costs P^2: advise at P = 1,000 takes minutes
}
#: Out-of-domain values of those flags, refused at once (2**31 - 1 ranks by the memory check; 2**31 - 1
#: repeats are a long run the user asked for, not a hang).
WORK_JUNK = ["0", "-1", "abc", "nan", "2.5"]
HUGE_REFUSED = {"--ranks": ["2147483647"]}

EXTREME = ["0", "-1", "1", "2", "3", "7", "2147483647", "2147483648", "9223372036854775808", "10" * 12]
JUNK = ["", " ", "abc", "nan", "inf", "-inf", "1e308", "1.5", "0x10", "-0", "1_000", "+3", "\x01", "é"]


def files() -> dict[str, str]:
    """Small inputs written once: valid, damaged and of other kinds."""
    made = {
        "tiny.mtx": "%%MatrixMarket matrix coordinate real general\n4 4 5\n1 1 2\n2 1 1\n3 3 -1\n4 2 3\n1 4 1\n",
        "sym.mtx": "%%MatrixMarket matrix coordinate integer symmetric\n5 5 6\n1 1 2\n2 1 1\n3 2 1\n4 3 1\n5 4 1\n5 5 3\n",
        "rect.mtx": "%%MatrixMarket matrix coordinate real general\n3 5 3\n1 5 1\n2 2 2\n3 1 3\n",
        "nan.mtx": "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1\n",
        "empty.mtx": "%%MatrixMarket matrix coordinate real general\n0 0 0\n",
        "bad.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 9\n1 1\n",
        "edges.txt": "# directed\n0 1\n1 2\n2 0\n2 3\n",
        "garbage.npz": "not a zip file",
        "record.json": json.dumps({"kind": "compute", "schema": 1, "compute_rate": 1e9}),
        "text.json": "{not json",
    }
    for name, text in made.items():
        (WORK / name).write_text(text)
    (WORK / "folder").mkdir(exist_ok=True)
    return {name: str(WORK / name) for name in made}


FILES = files()
MATRICES = [
    "stencil2d:4",
    "stencil2d:3:5",
    "rmat:5:2:1",
    "uniform:9x7:2:1",
    "uniform:6:0",
    "delaunay:30:1",
    "stencil3d:3",
    "stencil3d:2:27",
    "rmat:99:99",
    "uniform:0:1",
    "nosuch:3",
    "",
    str(WORK / "missing.mtx"),
    str(WORK / "folder"),
    *FILES.values(),
] + ([str(CORA)] if CORA.exists() else [])
PATHS = [
    str(WORK / "out.png"),
    str(WORK / "out.svg"),
    str(WORK / "out.xyz"),
    str(WORK / "out"),
    str(WORK / "out.npz"),
    str(WORK / "out.txt"),
    str(WORK / "out.json"),
    str(WORK / "no" / "such" / "dir" / "out.png"),
    str(WORK / "folder"),
    FILES["tiny.mtx"],
    FILES["record.json"],
    FILES["text.json"],
    "",
]
STRATEGIES = ["auto", "block", "column", "row", "joint", "rowwise", "joint-hier", "column-hier", "joint-group", "all"]
#: Values of the text flags: their domain and its edges, by flag.
TEXT = {
    "--strategy": STRATEGIES + ["joint,row", "bogus"],
    "--strategies": STRATEGIES + ["column,joint", "block,,", "bogus"],
    "--partitions": ["all", "even,nnz", "metis", "bogus", ","],
    "--mode": ["auto", "bulk", "overlap", "pipelined", "early", "partitioned", "all", "bulk,early", "bogus"],
    "--topology": ["nodes:2", "nodes:1", "nodes:0", "nodes:x", "cola-a800", "shiro-h100", "netsparse-leafspine", "fat-tree:4"],
    "--grid": ["1x1", "2x2", "1x3", "0x1", "axb", "1", "-1x-1"],
    "--semiring": ["plus_times", "min_plus", "any.pair", "plus.lt", "times.div", "lor.land", "max.first", "minus.plus", "x"],
    "--values": ["file", "ones", "random:1", "random:-1", "random:x", f"random:{2**70}", "zeros"],
    "--features": ["random:3", "random:0", "random:-1", "random:x", "random:2147483647", "foo"],
    "--device": ["cpu", "cuda", "cuda:0", "cuda:99", "tpu", "", "cpu:1"],
    "--sizes": ["1,2", "64,1024", "0", "-1", "a,b", "", "1e3"],
    "--sweep": ["batch", "delay", "cache", "batch,delay,cache", "bogus", ""],
    "--trace-window": ["0:", "1:3", "3:1", "a:b", "-1:2", ":", "2", "0:1"],
}
PATH_FLAGS = {"--plot", "--output", "--transfer-calibration", "--calibration", "--topology", "--trace", "--traffic-map"}


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    from sparsewire.cli import build_parser

    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return {name: sub for name, sub in subparsers.choices.items() if name not in SKIPPED}


VALID_NUMBERS = ["0.5", "0.1", "1", "0.01", "1e-6", "10", "300", "0.03"]
#: Number flags whose domain is not VALID_NUMBERS': their domain and its edges.
NUMBERS = {"--wait-timeout": ["1", "2", "30", "300", "0.5"]}


def flag_values(action: argparse.Action, flag: str) -> st.SearchStrategy[str]:
    """What a flag's value is drawn from: mostly its domain (so most vectors run), else its edges and junk."""
    junk = st.sampled_from(EXTREME + JUNK)
    if flag in WORK_FLAGS:  # nine in ten valid, as for every flag (st.one_of would make it one in two)
        valid = st.integers(1, WORK_FLAGS[flag]).map(str)
        junk = st.sampled_from(WORK_JUNK + HUGE_REFUSED.get(flag, []))
    elif action.choices:
        valid = st.sampled_from(list(action.choices))
    elif flag in TEXT:
        valid = st.sampled_from(TEXT[flag])
    elif flag in PATH_FLAGS:
        valid = st.sampled_from(PATHS)
    elif flag in NUMBERS:
        valid = st.sampled_from(NUMBERS[flag])
    elif getattr(action.type, "__name__", "") in ("positive_int", "int", "seed_number"):
        valid = st.integers(0 if action.type is int else 1, 12).map(str)
    else:
        valid = st.sampled_from(VALID_NUMBERS)
    return st.integers(0, 9).flatmap(lambda roll: valid if roll < 9 else junk)


@st.composite
def argument_vector(draw, name: str, parser: argparse.ArgumentParser) -> list[str]:
    argv = [name]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:  # a positional
            if action.nargs in ("?", "*") and draw(st.booleans()):
                continue
            small = st.sampled_from(MATRICES[:7]) if draw(st.integers(0, 9)) < 7 else st.sampled_from(MATRICES)
            argv.append(draw(small))
            continue
        flag = max(action.option_strings, key=len)
        required = action.required or (name == "gcn" and flag in ("--epochs", "--features", "--classes"))
        if not required and draw(st.integers(0, 99)) >= 25:
            continue
        if action.nargs == 0:
            argv.append(flag)
        else:
            argv += [flag, draw(flag_values(action, flag))]
    return argv


class Hang(Exception):
    """A vector ran past its time limit."""


def _alarm(signum, frame):
    raise Hang("an argument vector took longer than the time limit: a hang")


def not_converged(printed: str, as_json: bool) -> bool:
    """Whether eigs' report says it did not converge (with --json: and that its bytes equal the plan's)."""
    if not as_json:
        return "NOT converged" in printed
    report = json.loads(printed.strip())
    return report["converged"] is False and not report["traffic_differences"]


def run_vector(argv: list[str]) -> None:
    """``main(argv)`` in this process; fails (an AssertionError or the escaping exception) unless the pass rule holds."""
    from sparsewire.cli import main

    COMMANDS[argv[0]] += 1
    out, err = io.StringIO(), io.StringIO()
    signal.alarm(EXAMPLE_SECONDS)
    faulthandler.dump_traceback_later(2 * EXAMPLE_SECONDS + 10, exit=True)  # a hang in C code, where the alarm cannot reach
    native = tempfile.TemporaryFile()  # what C libraries print to file descriptor 1 (METIS does) counts as output too
    saved = os.dup(1)
    os.dup2(native.fileno(), 1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(argv))
    except SystemExit as exit:  # argparse's --version; never --help here
        status = exit.code
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        os.dup2(saved, 1)
        os.close(saved)
        native.seek(0)
        printed = native.read().decode(errors="replace") + out.getvalue()
        native.close()
    shown = f"sparsewire {shlex.join(argv)}"
    errors = err.getvalue()
    assert "Traceback" not in errors, f"{shown}: a traceback:\n{errors[-3000:]}"
    if status == 0:
        OUTCOMES["ran"] += 1
        if "--json" in argv:
            text = printed.strip()
            assert text.count("\n") == 0 and isinstance(json.loads(text), dict), f"{shown}: --json printed {text[:500]!r}"
        return
    if status == 1 and argv[0] == "eigs" and not_converged(printed, "--json" in argv):
        OUTCOMES["not converged"] += 1  # eigs' documented exit 1: a fuzzed --max-iterations or --tol may stop it early
        return
    lines = [line for line in errors.splitlines() if line.startswith("sparsewire: error:")]
    assert status == 2 and len(lines) == 1, f"{shown}: exit status {status}, stderr:\n{errors[-3000:]}"
    OUTCOMES["refused"] += 1
    if os.environ.get("SPARSEWIRE_FUZZ_SHOW"):
        print(f"{shlex.join(argv)}: {lines[0][:150]}", file=sys.__stderr__)


def run(examples: int, run_seed: int, shrink: bool = True) -> None:
    """Each command its share of the vectors, so every one is fuzzed in every run (drawing the command
    with Hypothesis left one with none in 400: sssp under seed 2030564048)."""
    parsers = command_parsers()
    share = -(-examples // len(parsers))
    for name in sorted(parsers):

        @seed(run_seed)
        @settings(
            max_examples=share,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
            phases=list(Phase) if shrink else [phase for phase in Phase if phase is not Phase.shrink],
        )
        @given(argument_vector(name, parsers[name]))
        def fuzz(argv):
            run_vector(argv)

        fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="argument vectors in all (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random, printed)")
    parser.add_argument("--memory-mib", type=int, default=4096, help="RLIMIT_DATA for this process (default: %(default)s)")
    parser.add_argument("--example-seconds", type=int, default=60, help="time limit per vector (default: %(default)s)")
    parser.add_argument("--no-shrink", action="store_true", help="report the first failing vector as drawn, unshrunk")
    args = parser.parse_args()
    global EXAMPLE_SECONDS
    EXAMPLE_SECONDS = args.example_seconds
    run_seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(
        f"argument fuzz seed {run_seed} (rerun: python tests/cli/fuzz_arguments.py --seed {run_seed} --examples {args.examples})",
        flush=True,
    )
    limit = args.memory_mib * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    os.environ["XDG_CACHE_HOME"] = str(WORK / "cache")  # calibrate writes its records here, not in the user's cache
    os.chdir(WORK)  # relative --output/--plot values (and netsparse's default plot) land here, not in the checkout
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore")
    try:
        run(args.examples, run_seed, shrink=not args.no_shrink)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    total = sum(COMMANDS.values())
    print(
        f"fuzzed {total} argument vectors (seed {run_seed}): "
        + ", ".join(f"{name} {count}" for name, count in sorted(COMMANDS.items()))
        + f"; {OUTCOMES['ran']} ran, {OUTCOMES['refused']} refused with one error line, "
        + f"{OUTCOMES['not converged']} eigs runs stopped before converging (exit 1)",
        flush=True,
    )
    return 0


EXAMPLE_SECONDS = 60

if __name__ == "__main__":
    sys.exit(main())
