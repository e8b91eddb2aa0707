"""Hypothesis fuzzing of every command's argument vector (tests/cli/fuzz_arguments.py), in a process of
its own under a 4 GiB data limit, seeded from the session seed: 130 vectors (new ones every run), an equal share per command,
each run to a result or refused with exactly one error line (exit status 2), none past its time limit. The count and the
seed are printed at the end of the run; a longer run for people is documented in docs/api.md."""

from __future__ import annotations

import re
import sys

import pytest

from conftest import FUZZ_LINES, ROOT, _seed, planted_fuzzer

EXAMPLES = 130
FUZZER = ROOT / "tests" / "cli" / "fuzz_arguments.py"


@pytest.mark.prefetch(lambda: [sys.executable, FUZZER, "--examples", EXAMPLES, "--seed", _seed(), "--memory-mib", 4096])
def test_every_command_survives_argument_fuzzing(prefetched):
    seed, completed = _seed(), prefetched
    output = completed.stdout + completed.stderr
    summary = re.search(r"^fuzzed (\d+) argument vectors \(seed (\d+)\).*$", completed.stdout, re.MULTILINE)
    FUZZ_LINES.append(
        summary.group(0) if summary else f"FAILED with seed {seed}: rerun python {FUZZER.relative_to(ROOT)} --seed {seed}"
    )
    assert completed.returncode == 0 and summary, output[-6000:]
    assert int(summary.group(1)) >= EXAMPLES and int(summary.group(2)) == seed
    ran = int(re.search(r"; (\d+) ran, ", summary.group(0)).group(1))
    # Most flags valid, so a good share of the vectors run to a result (a fifth to a third over the seeds tried); the
    # floor sits well below that spread, so only a fuzzer that stopped drawing runnable vectors trips it.
    assert ran >= EXAMPLES // 10, summary.group(0)
    for command in ("analyze", "advise", "spmm", "eigs", "spgemm", "bfs", "sssp", "triangles", "reach", "gcn", "simulate"):
        assert f" {command} " in summary.group(0), (command, summary.group(0))


#: A planted fault: a semiring lookup that lets a KeyError escape (as plus.lt once did).
PLANTED = (
    "import sparsewire.spgemm.semirings as semirings\n"
    "original = semirings.get_semiring\n"
    "def broken(name):\n"
    "    if '.' in name or '_' in name:\n"
    "        raise KeyError('planted')\n"
    "    return original(name)\n"
    "semirings.get_semiring = broken\n"
)


@pytest.mark.prefetch(lambda: planted_fuzzer(PLANTED, FUZZER, EXAMPLES))
def test_the_argument_fuzzer_catches_a_command_that_raises_the_wrong_error(prefetched):
    """The planted fault must fail the fuzzer's run."""
    output = prefetched.stdout + prefetched.stderr
    assert prefetched.returncode != 0 and "KeyError: 'planted'" in output, prefetched.stdout[-3000:]
