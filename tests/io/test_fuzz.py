"""Hypothesis fuzzing of every reader of untrusted input (tests/io/fuzz_readers.py), in a process of
its own under a 2 GiB data limit, seeded from the session seed: 1,000 inputs (new ones every run), each loaded
correctly or refused with one SparsewireError line. The count and the seed are printed at the end
of the run; a longer run for people is documented in docs/api.md."""

from __future__ import annotations

import re
import sys

import pytest

from conftest import FUZZ_LINES, ROOT, _seed, planted_fuzzer

EXAMPLES = 1000
FUZZER = ROOT / "tests" / "io" / "fuzz_readers.py"


@pytest.mark.prefetch(lambda: [sys.executable, FUZZER, "--examples", EXAMPLES, "--seed", _seed(), "--memory-mib", 2048])
def test_readers_survive_fuzzing(prefetched):
    seed, completed = _seed(), prefetched
    output = completed.stdout + completed.stderr
    summary = re.search(r"^fuzzed (\d+) inputs \(seed (\d+)\).*$", completed.stdout, re.MULTILINE)
    FUZZ_LINES.append(
        summary.group(0)
        if summary
        else f"FAILED with seed {seed}: rerun python {FUZZER.relative_to(ROOT)} --seed {seed} --examples {EXAMPLES}"
    )
    assert completed.returncode == 0 and summary, output[-6000:]
    assert int(summary.group(1)) >= EXAMPLES and int(summary.group(2)) == seed


#: A planted fault: a Matrix Market reader that lets a ValueError escape.
PLANTED = (
    "import sparsewire.io.readers as io\n"
    "original = io.read_matrix_market\n"
    "def broken(path):\n"
    "    data = open(path, 'rb').read()\n"
    "    if b'coordinate real general' in data[:60]:\n"
    "        raise ValueError('planted')\n"
    "    return original(path)\n"
    "io.read_matrix_market = broken\n"
)


@pytest.mark.prefetch(lambda: planted_fuzzer(PLANTED, FUZZER, 200))
def test_the_fuzzer_catches_a_reader_that_raises_the_wrong_error(prefetched):
    """The planted fault must fail the fuzzer's run."""
    output = prefetched.stdout + prefetched.stderr
    assert prefetched.returncode != 0 and "ValueError: planted" in output, prefetched.stdout[-3000:]
