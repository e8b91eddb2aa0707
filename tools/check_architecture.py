"""Architecture checks run by the tests (issue 31): no import cycle among the modules of
``src/sparsewire`` counting imports inside functions (not those under ``if TYPE_CHECKING:``,
which never run), and the command line imports only names in
the ``__all__`` of the module it imports from. Usage: ``.venv/bin/python tools/check_architecture.py``;
prints every cycle and every private import, exits 1 if there is any."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "sparsewire"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SOURCE / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import of ``name``'s source,
    inside functions too; relative imports resolved; only modules of the package."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found = []
    skipped = set()  # imports under `if TYPE_CHECKING:` never run
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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


def analyse() -> tuple[list[list[str]], list[str], int, int]:
    """(import cycles, private names the CLI imports, modules, imports)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    private: list[str] = []
    for name, path in known.items():
        for target, names, line in imports(name, path, known):
            # A module's own packages are already being imported when it runs: not an edge.
            if target in known and target != name and not name.startswith(f"{target}."):
                graph[name].add(target)
            if name.startswith(f"{PACKAGE}.cli") and not target.startswith(f"{PACKAGE}.cli") and names:
                exported = set(getattr(importlib.import_module(target), "__all__", ()))
                private += [  # dunder names (__version__) are public by convention, never in __all__
                    f"{path.relative_to(SOURCE)}:{line}: {target}.{n} is not in its __all__"
                    for n in names
                    if n not in exported and not (n.startswith("__") and n.endswith("__"))
                ]
    return cycles(graph), private, len(known), sum(map(len, graph.values()))


def main() -> int:
    found, private, n_modules, n_imports = analyse()
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    for line in private:
        print(line)
    print(f"{n_modules} modules, {n_imports} imports: {len(found)} cycles, {len(private)} private names imported by the CLI")
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main())
