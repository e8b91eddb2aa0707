"""Architecture checks run by the tests: the layer table, import cycles, what the command line imports.

Every module of ``src/sparsewire`` belongs to a folder (its first subpackage; a top-level module is
its own), and every folder to a layer of :data:`LAYERS`. A module may import its own folder or a
folder of a lower layer, never one of its own layer or above; imports inside functions and under
``if TYPE_CHECKING:`` count too (a type-only import is still a design dependency). The few
exceptions are listed, each with its reason, in :data:`EXCEPTIONS`. Beside that: no import cycle
among modules at run time (imports inside functions count; those under ``TYPE_CHECKING``, which
never run, do not: a folder's modules may name each other's types), the SpGEMM and GNN folders
import the executor only through ``sparsewire.exec``'s ``__all__`` (:data:`EXECUTOR_ENTRY`), and
the command line imports only names in the ``__all__`` of the module it imports from.

Usage: ``.venv/bin/python tools/check_architecture.py``; prints every fault, exits 1 if there is any.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "sparsewire"

#: Layer of every folder, lowest first: the data flow load -> partition -> plan -> execute -> report,
#: the shared services below the executor, the MPI API and the products above.
LAYERS: dict[str, int] = {
    "errors": 0,  # the exception types every layer raises
    "_lib": 1,  # helpers with no domain knowledge (aligned arrays, cores, sorting, tables, tolerances)
    "io": 2,  # load: readers, generators, the shipped matrices
    "topology": 2,  # the machine as data, and the calibration records it reads
    "partition": 2,  # partition: rows to ranks
    "plan": 3,  # plan: the pure planner, cost model and advisor (no MPI)
    "sim": 4,  # cluster-scale simulation of plans, and the NetSparse reproduction
    "comm": 4,  # the owner of mpi4py: runtime, watchdog, communicator lifetime
    "kernels": 4,  # local products on raw arrays
    "wire": 4,  # what a message looks like on the wire: paths, codecs
    "profile": 4,  # report: tracing, -log_view summary, timeline, traffic, timed runs
    "exec": 5,  # execute: the SpMM executor and its options
    "spgemm": 5,  # the SpGEMM algorithms (1D, SUMMA, semirings)
    "calibration": 6,  # measuring the machine (runs kernels and the executor's combine step)
    "distributed": 7,  # the MPI API: DistributedMatrix, SpmmPlan, SpgemmPlan, plan files
    "gnn": 8,  # GNN layers and training on the distributed API
    "apps": 8,  # eigensolver and graph algorithms on the distributed API
    "testing": 9,  # helpers for tests and benches, the emulated cluster
    "pyg": 9,  # PyTorch Geometric models and data on the GNN layer
    "sparsewire": 10,  # the package's face: re-exports only
    "cli": 11,  # the command line, a thin layer over the public API
    "__main__": 12,
}

#: Folders of one layer that may import each other's modules, as (importer, imported): the other
#: services use the communicator layer (the timed run its watchdog, the wire paths ask whether MPI is
#: CUDA-aware).
SAME_LAYER = {("profile", "comm"), ("wire", "comm")}

#: Named exceptions to the layer rule, (importing module, imported module): why.
EXCEPTIONS: dict[tuple[str, str], str] = {}

#: Folders that may import the executor only as ``from sparsewire.exec import <name in its __all__>``.
EXECUTOR_ENTRY = ("spgemm", "gnn")

#: Folders that must import with mpi4py, torch and python-graphblas absent (tests/test_architecture.py).
WITHOUT_MPI = ("_lib", "io", "topology", "partition", "plan", "sim")


def modules(source: Path = SOURCE) -> dict[str, Path]:
    """Every module of the package under ``source``, by dotted name."""
    found = {}
    for path in sorted((source / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def type_only_lines(tree: ast.AST) -> set[int]:
    """The lines of the imports under ``if TYPE_CHECKING:`` (they never run)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines.update(inner.lineno for statement in node.body for inner in ast.walk(statement) if hasattr(inner, "lineno"))
    return lines


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import of ``name``'s source, inside
    functions and under ``TYPE_CHECKING`` too; relative imports resolved; only modules of the package."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            names = [alias.name for alias in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            found.append((target, [n for n in names if f"{target}.{n}" not in known], node.lineno))
            found.extend((sub, [], node.lineno) for sub in submodules)
    return found


def folder(module: str) -> str:
    """The folder of a dotted module name: its first subpackage, or the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as a list."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def layer_faults(name: str, target: str, names: list[str], line: str) -> list[str]:
    """What is wrong with module ``name`` importing ``target`` (the names ``names`` from it)."""
    own, other = folder(name), folder(target)
    if own not in LAYERS:
        return [f"{line}: folder {own!r} has no layer in LAYERS"]
    if other not in LAYERS:
        return [f"{line}: imports {target}, whose folder {other!r} has no layer in LAYERS"]
    if own == other or (name, target) in EXCEPTIONS:
        return []
    if own in EXECUTOR_ENTRY and other == "exec" and target != f"{PACKAGE}.exec":
        return [f"{line}: {own}/ imports {target}; import the executor's public entry (from {PACKAGE}.exec import ...)"]
    if LAYERS[other] > LAYERS[own] or (LAYERS[other] == LAYERS[own] and (own, other) not in SAME_LAYER):
        return [f"{line}: {own}/ (layer {LAYERS[own]}) imports {target} ({other}/, layer {LAYERS[other]})"]
    return []


def analyse(source: Path = SOURCE) -> tuple[list[list[str]], list[str], list[str], int, int]:
    """(import cycles, layer faults, private names the CLI imports, modules, imports)."""
    known = modules(source)
    graph: dict[str, set[str]] = {name: set() for name in known}
    private: list[str] = []
    layers: list[str] = []
    for name, path in known.items():
        type_only = type_only_lines(ast.parse(path.read_text(), str(path)))
        for target, names, line in imports(name, path, known):
            where = f"{path.relative_to(source)}:{line}"
            # A module's own packages are already being imported when it runs: not an edge.
            if target == name or name.startswith(f"{target}."):
                continue
            if target in known and line not in type_only:
                graph[name].add(target)
            layers += layer_faults(name, target, names, where)
            if folder(name) in EXECUTOR_ENTRY and target == f"{PACKAGE}.exec" and source == SOURCE:
                exported = set(getattr(importlib.import_module(target), "__all__", ()))
                layers += [f"{where}: {target}.{n} is not in its __all__" for n in names if n not in exported]
            if folder(name) == "cli" and folder(target) != "cli" and names and source == SOURCE:
                exported = set(getattr(importlib.import_module(target), "__all__", ()))
                private += [  # dunder names (__version__) are public by convention, never in __all__
                    f"{where}: {target}.{n} is not in its __all__"
                    for n in names
                    if n not in exported and not (n.startswith("__") and n.endswith("__"))
                ]
    layers = list(dict.fromkeys(_one_per_line(layers)))
    return cycles(graph), layers, private, len(known), sum(map(len, graph.values()))


def _one_per_line(faults: list[str]):
    """The first fault of each import statement (``from p import a, b`` imports p, p.a and p.b)."""
    seen = set()
    for fault in faults:
        where = fault.split(": ", 1)[0]
        if where not in seen:
            seen.add(where)
            yield fault


#: Folders of scripts that use the package as its users do: public names only.
USERS = ("bench", "examples")


def public_name_faults(path: Path, exported) -> list[str]:
    """The imports of ``path`` (a script of :data:`USERS`) that reach past the public surface: anything but
    ``import sparsewire``, ``import sparsewire.FOLDER`` and ``from sparsewire[.FOLDER] import NAME`` with NAME in
    that package's ``__all__`` (``exported(package)``). A private folder (``_lib``) or a module inside a
    folder is internal. Imports in an ``except ImportError`` handler (another tree's names) are not checked."""
    tree = ast.parse(path.read_text(), str(path))
    fallback = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.ExceptHandler)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    faults = []
    for node in ast.walk(tree):
        if id(node) in fallback:
            continue
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE and (len(parts) > 2 or (len(parts) == 2 and parts[1].startswith("_"))):
                    faults.append(f"{where}: import {alias.name}: a module inside a folder is internal")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE and not node.level:
            parts = node.module.split(".")
            if len(parts) > 2 or (len(parts) == 2 and parts[1].startswith("_")):
                faults.append(f"{where}: from {node.module}: a module inside a folder is internal; import from its folder")
                continue
            public = exported(node.module)
            faults += [
                f"{where}: {node.module}.{alias.name} is not in its __all__"
                for alias in node.names
                if alias.name not in public and alias.name != "__version__"
            ]
    return faults


def users_faults(root: Path = SOURCE.parent) -> list[str]:
    """:func:`public_name_faults` of every script of :data:`USERS`."""

    def exported(package: str) -> set[str]:
        return set(getattr(importlib.import_module(package), "__all__", ()))

    faults = []
    for folder in USERS:
        for path in sorted((root / folder).rglob("*.py")):
            faults += [fault.replace(f"{root}/", "") for fault in public_name_faults(path, exported)]
    return faults


def main() -> int:
    found, layers, private, n_modules, n_imports = analyse()
    users = users_faults()
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    for line in layers + private + users:
        print(line)
    print(
        f"{n_modules} modules, {n_imports} imports: {len(found)} cycles, {len(layers)} layer faults, "
        f"{len(private)} private names imported by the CLI, {len(users)} internal names used by bench/ and examples/"
    )
    return 1 if found or layers or private or users else 0


if __name__ == "__main__":
    sys.exit(main())
