"""No import cycles among the modules of ``lance_format`` and ``flight_server``.

The graph is built from the source with ``ast``: an edge for every import a module runs while
it is being imported (module level, including ``if``/``try`` blocks there, but not inside
functions or classes, and not under ``if TYPE_CHECKING:``).  ``from X import n`` imports
package ``X`` and, when ``n`` is a submodule, ``X.n`` too.  A module's own packages are
left out: Python initialises them before the module, so they are never a cycle's cause.
Each strongly connected component of more than one module is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import REPO

PACKAGES = ("lance_format", "flight_server")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(body: list[ast.stmt]):
    """The import statements run at import time: module level, through if/try/with blocks."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level_imports(block)
            for handler in node.handlers:
                yield from _module_level_imports(handler.body)
        elif isinstance(node, ast.With):
            yield from _module_level_imports(node.body)


def _with_packages(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a module runs its packages' inits."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules its import runs (see the module docstring)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        ancestors = set(_with_packages(package)) if package else set()
        targets: set[str] = set()
        for node in _module_level_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.update(_with_packages(alias.name))
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets.update(_with_packages(source))
            targets.update(f"{source}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t not in ancestors and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_cycles_among_the_project_modules():
    modules = module_files(REPO, PACKAGES)
    assert len(modules) > 150  # both packages are scanned, not an empty glob
    graph = import_graph(modules)
    assert sum(len(t) for t in graph.values()) > 500  # and their imports are seen
    assert cycles(graph) == []


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root, ("pkg",))


def test_the_check_finds_the_cycle_forms_it_must(tmp_path):
    """Relative and absolute imports, a submodule named in ``from . import``, a package
    ``__init__`` in the loop, and imports inside module-level ``try``/``if`` blocks."""
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import thing\n",
            "pkg/b.py": "try:\n    from . import a\nexcept ImportError:\n    pass\n",
            "pkg/sub/__init__.py": "from .c import C\n",
            "pkg/sub/c.py": "import pkg.d\n",
            "pkg/d.py": "import sys\nif sys.version_info > (3,):\n    from .sub import C\n",
            "pkg/e.py": "from pkg.f import x\n",
            "pkg/f.py": "from pkg import e\n",
        },
    )
    assert cycles(import_graph(modules)) == [
        ["pkg.a", "pkg.b"],
        ["pkg.d", "pkg.sub", "pkg.sub.c"],
        ["pkg.e", "pkg.f"],
    ]


def test_the_check_leaves_out_what_runs_later_or_never(tmp_path):
    """Imports inside functions and classes, under ``TYPE_CHECKING``, and of a module's own
    package run after the module has loaded (or never), so they close no cycle."""
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\n",
            "pkg/a.py": (
                "from typing import TYPE_CHECKING\nfrom . import b\n"
                "if TYPE_CHECKING:\n    from .c import C\nA = 1\n"
            ),
            "pkg/b.py": "def f():\n    from . import a\n\nclass K:\n    from . import a\n",
            "pkg/c.py": "from .a import A\n",
        },
    )
    graph = import_graph(modules)
    assert graph["pkg.a"] == {"pkg.b"}
    assert cycles(graph) == []
