"""The shape of the package (issue 31): lint (ruff, configured in pyproject.toml), import cycles
and what the command line imports (tools/check_architecture.py)."""

from __future__ import annotations

import subprocess
import sys

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


def test_no_new_import_cycle_and_the_cli_imports_only_public_names():
    cycles, private, modules, imports = check_architecture.analyse()
    assert modules > 50 and imports > 200  # the checker sees the package
    assert cycles == [], cycles
    assert private == [], private


def test_the_checker_sees_a_planted_cycle(tmp_path):
    """A planted fault: two modules that import each other (one inside a function) are a cycle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert check_architecture.cycles(graph) == [["a", "b", "c"]]
    package = tmp_path / "src" / "sparsewire"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("def f():\n    from sparsewire.two import g\n")
    (package / "two.py").write_text("from sparsewire import one\n")
    known = {"sparsewire": package / "__init__.py", "sparsewire.one": package / "one.py", "sparsewire.two": package / "two.py"}
    edges = {name: {target for target, _, _ in check_architecture.imports(name, path, known)} for name, path in known.items()}
    assert "sparsewire.two" in edges["sparsewire.one"] and "sparsewire.one" in edges["sparsewire.two"]


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
    """A folder of tests per room of ``src/sparsewire`` (a subpackage or a module), and every
    subpackage has one."""
    package = ROOT / "src" / "sparsewire"
    rooms = {path.name for path in package.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    modules = {path.stem for path in package.glob("*.py")}
    folders = {path.name for path in (ROOT / "tests").iterdir() if path.is_dir() and any(path.glob("test_*.py"))}
    assert folders <= rooms | modules, f"test folders that name no part of the package: {sorted(folders - rooms - modules)}"
    assert rooms <= folders, f"subpackages without a test folder: {sorted(rooms - folders)}"


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
