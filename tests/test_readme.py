"""The README as a user meets it: at most 150 lines, its test command is CI's, and every command in it
runs on a fresh clone without ../shared (the main job at a smaller R-MAT scale; the quickstart program
under mpiexec)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import CHILD_ENV, ROOT, mpiexec_path
from sparsewire import testing

README = (ROOT / "README.md").read_text()
SETUP = "python3 -m venv .venv && .venv/bin/pip install -q --no-compile -r requirements.lock -e . && "
#: What a test may shrink so that the command runs in seconds here (the same command, a smaller input).
SMALLER = {
    "rmat:16:8:1": "rmat:11:8:1",
    "pyg_cora.py --model gat": "pyg_cora.py --model gat --epochs 3",
    "3 examples/pyg_cora.py": "3 examples/pyg_cora.py --epochs 3",
    "sparsewire gcn cora": "sparsewire gcn cora --epochs 10",
}


def _commands() -> list[str]:
    """Every command line of the README's ``sh`` blocks, with the set-up part removed."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line.removeprefix(SETUP))
    return commands


COMMANDS = [command for command in _commands() if "pytest" not in command]
#: The commands' environment: their waiting ranks sleep, as the suite's other jobs' do (the collective jobs run
#: beside them; a rank that spins takes the core from one with work).
ENVIRONMENT = {**CHILD_ENV, **testing.SLEEPING_WAITS}


def test_the_readme_is_short_and_names_no_data_outside_the_repository():
    assert len(README.splitlines()) <= 150
    assert "../shared" not in README
    assert len(COMMANDS) >= 6  # the main job and the five commands


def test_the_readme_test_command_is_what_ci_runs():
    tests = [line for block in re.findall(r"```sh\n(.*?)```", README, re.S) for line in block.splitlines() if "pytest" in line]
    assert tests[0].strip() == SETUP + ".venv/bin/python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert SETUP + ".venv/bin/python -m pytest -q" in ci


def _runnable(command: str) -> list[str]:
    for large, small in SMALLER.items():
        command = command.replace(large, small)
    words = shlex.split(command)
    binaries = Path(sys.executable).parent
    words = [str(binaries / word.removeprefix(".venv/bin/")) if word.startswith(".venv/bin/") else word for word in words]
    words = [str(ROOT / word) if word.startswith("examples/") else word for word in words]  # the clone's scripts
    if Path(words[0]).name == "mpiexec":
        words[0] = mpiexec_path()
    return words


@pytest.mark.mpi
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c.split()[:4])[:60] for c in COMMANDS])
def test_every_readme_command_runs_on_a_fresh_clone(command, tmp_path):
    import subprocess

    completed = subprocess.run(
        _runnable(command), capture_output=True, text=True, timeout=400, cwd=tmp_path, env={**ENVIRONMENT, "MPLBACKEND": "Agg"}
    )
    assert completed.returncode == 0, f"{command}\n{completed.stdout[-2000:]}\n{completed.stderr[-3000:]}"


@pytest.mark.mpi
def test_the_quickstart_program_runs_under_mpiexec(tmp_path):
    import subprocess

    program = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    (tmp_path / "program.py").write_text(program)
    completed = subprocess.run(
        [mpiexec_path(), "-n", "2", sys.executable, "program.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=ENVIRONMENT,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "strategy" in completed.stdout  # rank 0 printed the plan's explanation
