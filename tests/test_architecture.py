"""The shape of the package: lint (ruff, configured in pyproject.toml), the layer table, import
cycles and what the command line imports (tools/check_architecture.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import check_architecture  # noqa: E402


def test_ruff_format_is_kept():
    completed = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "src", "tests", "bench", "tools"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]


def test_ruff_passes():
    completed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "src", "tests", "bench", "tools"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]


def test_the_layers_hold_with_no_cycle_and_the_cli_imports_only_public_names():
    cycles, layers, private, modules, imports = check_architecture.analyse()
    assert modules > 100 and imports > 400  # the checker sees the package
    assert cycles == [], cycles
    assert layers == [], layers
    assert private == [], private
    assert len(check_architecture.EXCEPTIONS) <= 2


def _plant(tmp_path, files: dict[str, str]):
    """A package ``sparsewire`` under ``tmp_path/src`` with ``files`` (path -> source), every folder a package."""
    package = tmp_path / "src" / "sparsewire"
    for relative, source in {"__init__.py": "", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(package).parents:
            (package / parent / "__init__.py").touch()
        path.write_text(source)
    return check_architecture.analyse(tmp_path / "src")


def test_the_checker_sees_a_planted_cycle(tmp_path):
    """A planted fault: two modules that import each other (one inside a function) are a cycle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert check_architecture.cycles(graph) == [["a", "b", "c"]]
    cycles, *_ = _plant(
        tmp_path,
        {"plan/one.py": "def f():\n    from sparsewire.plan.two import g\n", "plan/two.py": "from sparsewire.plan import one\n"},
    )
    assert cycles == [["sparsewire.plan.one", "sparsewire.plan.two"]]


@pytest.mark.parametrize(
    "source",
    [
        "from sparsewire.exec.executor import SpmmExecutor\n",
        "def f():\n    import sparsewire.exec.executor\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sparsewire.exec.executor import SpmmExecutor\n",
        "from sparsewire.partition import rows\nfrom sparsewire.io import readers\nfrom sparsewire.sim import flows\n",
    ],
    ids=["module-level", "in-a-function", "type-checking", "partition-ok-sim-not"],
)
def test_the_checker_sees_a_planted_upward_import(tmp_path, source):
    """Planted faults: ``plan/`` importing the executor (at module level, inside a function, under
    ``TYPE_CHECKING``) or ``sim/`` (a higher layer) fails the layer rule; partition and io do not."""
    _, layers, *_ = _plant(
        tmp_path,
        {"plan/cost.py": source, "exec/executor.py": "", "partition/rows.py": "", "io/readers.py": "", "sim/flows.py": ""},
    )
    assert len(layers) == 1 and "plan/ (layer 3) imports" in layers[0], layers
    _, clean, *_ = _plant(tmp_path, {"plan/cost.py": "from sparsewire.partition import rows\n"})
    assert clean == []


def test_the_checker_sees_same_layer_folders_and_the_executor_entry(tmp_path):
    """Planted faults: ``kernels/`` importing ``wire/`` (one layer, not allowed), ``gnn/`` importing an
    executor module instead of ``sparsewire.exec``; ``wire/`` importing ``comm/`` is allowed."""
    _, layers, *_ = _plant(
        tmp_path,
        {
            "kernels/a.py": "from sparsewire.wire import codecs\n",
            "wire/codecs.py": "from sparsewire.comm import runtime\n",
            "comm/runtime.py": "",
            "gnn/layers.py": "from sparsewire.exec.options import ExecOptions\n",
            "exec/options.py": "",
        },
    )
    assert len(layers) == 2, layers
    assert "kernels/ (layer 4) imports sparsewire.wire" in layers[0] + layers[1]
    assert "gnn/ imports sparsewire.exec.options" in layers[0] + layers[1]


WITHOUT_MPI_IMPORT = (
    "import sys; sys.modules['mpi4py'] = sys.modules['torch'] = sys.modules['graphblas'] = None; "
    "import importlib, pkgutil; import sparsewire.{folder} as p; "
    "[importlib.import_module(m.name) for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')]; "
    "print(sorted(n for n, m in sys.modules.items() if m is not None and n.split('.')[0] in ('mpi4py', 'torch', 'graphblas')))"
)


@pytest.mark.parametrize("folder", check_architecture.WITHOUT_MPI)
@pytest.mark.prefetch(lambda folder: [sys.executable, "-c", WITHOUT_MPI_IMPORT.format(folder=folder)], timeout=120)
def test_the_lower_layers_import_without_mpi_torch_or_graphblas(folder, prefetched):
    """Every module of the folders below the communicator imports with mpi4py, torch and
    python-graphblas blocked (a module that imports one at module level fails here)."""
    completed = prefetched
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip() == "[]"


def test_a_planted_mpi_import_is_caught_by_the_blocked_import(tmp_path):
    """A planted fault: a module that imports mpi4py at module level does not import with it blocked."""
    (tmp_path / "leaky.py").write_text("from mpi4py import MPI\n")
    completed = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['mpi4py'] = None; import leaky"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert completed.returncode != 0 and "mpi4py" in completed.stderr


def _documented(cls, name: str) -> str:
    """The docstring of method ``name`` of ``cls``: its own, or else the one it overrides (the
    first class of the method resolution order that documents it), as ``inspect.getdoc`` reads it."""
    for klass in cls.__mro__:
        member = vars(klass).get(name)
        doc = getattr(getattr(member, "__func__", member), "__doc__", None)
        if doc:
            return doc
    return ""


def test_an_overriding_method_inherits_its_docstring():
    """A planted pair: the override without a docstring is documented by the method it overrides;
    one that overrides nothing documented is not."""

    class Base:
        def run(self):
            """Collective. Runs."""

        def stop(self):
            pass

    class Child(Base):
        def run(self):
            return 1

        def stop(self):
            return 2

    assert _documented(Child, "run") == "Collective. Runs." and _documented(Child, "stop") == ""


def test_every_public_function_and_method_says_whether_it_is_collective():
    """Every function in a library module's ``__all__`` (the command line aside), and every public
    method of a class there, says Collective or Not collective in its docstring."""
    import importlib
    import inspect
    import pkgutil

    import sparsewire

    silent, seen = [], 0
    for module_info in pkgutil.walk_packages(sparsewire.__path__, "sparsewire."):
        if module_info.name.startswith("sparsewire.cli") or module_info.name == "sparsewire.__main__":
            continue
        module = importlib.import_module(module_info.name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if getattr(value, "__module__", None) != module.__name__:
                continue
            members = [(name, value)] if inspect.isfunction(value) else []
            if inspect.isclass(value):
                members = [
                    (f"{name}.{member}", getattr(method, "__func__", method))
                    for member, method in vars(value).items()
                    if not member.startswith("_")
                    and (inspect.isfunction(method) or isinstance(method, (classmethod, staticmethod)))
                ]
            for label, function in members:
                seen += 1
                if "ollective" not in (
                    _documented(value, label.rsplit(".", 1)[-1]) if inspect.isclass(value) else function.__doc__ or ""
                ):
                    silent.append(f"{module.__name__}.{label}")
    assert seen > 300 and not silent, silent


def test_tests_mirror_the_package():
    """A folder of tests per folder of ``src/sparsewire`` (a subpackage or a top-level module), and
    every subpackage has one; ``tests/mpi`` aside, the collective cases that run on every rank of one job."""
    package = ROOT / "src" / "sparsewire"
    subpackages = {path.name for path in package.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    modules = {path.stem for path in package.glob("*.py")}
    folders = {path.name for path in (ROOT / "tests").iterdir() if path.is_dir() and any(path.glob("test_*.py"))}
    folders.discard("mpi")
    assert folders <= subpackages | modules, (
        f"test folders that name no part of the package: {sorted(folders - subpackages - modules)}"
    )
    assert subpackages <= folders, f"subpackages without a test folder: {sorted(subpackages - folders)}"


MAX_MODULE_LINES = 450


def modules_over(root, limit: int = MAX_MODULE_LINES) -> list[str]:
    """The ``.py`` files under ``root`` with more than ``limit`` lines, as 'path: lines'."""
    return [
        f"{path.relative_to(root)}: {count}"
        for path in sorted(root.rglob("*.py"))
        if (count := len(path.read_text().splitlines())) > limit
    ]


def test_no_library_module_is_over_450_lines(tmp_path):
    """One module one responsibility: none of src/sparsewire over 450 lines (a planted 451-line
    module is seen, a 450-line one is not)."""
    assert modules_over(ROOT / "src" / "sparsewire") == []
    (tmp_path / "long.py").write_text("x = 1\n" * 451)
    (tmp_path / "short.py").write_text("x = 1\n" * 450)
    assert modules_over(tmp_path) == ["long.py: 451"]


def test_bench_and_examples_use_public_names_only(tmp_path):
    """Every script of bench/ and examples/ imports the public surface only; planted faults (a module
    inside a folder, the private helpers, a name outside a folder's ``__all__``) are found, and an
    import in an ``except ImportError`` handler (another tree's names) is not checked."""
    assert check_architecture.users_faults() == []
    script = tmp_path / "script.py"
    script.write_text(
        "import sparsewire\n"
        "from sparsewire.plan import build_plan\n"
        "from sparsewire.plan.cost import message_copies\n"
        "from sparsewire._lib import text\n"
        "from sparsewire.io import readers\n"
        "try:\n    from sparsewire.plan import nothing_here\nexcept ImportError:\n    from sparsewire.exec.modes import MODES\n"
    )

    def exported(package):
        import importlib

        return set(importlib.import_module(package).__all__)

    faults = check_architecture.public_name_faults(script, exported)
    assert len(faults) == 4, faults
    assert any("sparsewire.plan.cost" in f for f in faults) and any("sparsewire._lib" in f for f in faults)
    assert any("sparsewire.io.readers is not in its __all__" in f for f in faults)
    assert any("nothing_here" in f for f in faults)
