"""The house's rules for shipped code (docs/architecture.md): no module over 800 lines, and no
import circle, in the SDK, the control plane and the local stack.

Read statically (ast), so a rule is checked on every module, imported by a test or not. An import
inside a function still counts: moving an import into a function hides a circle from Python's
import machinery, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# package name -> the folder that holds it
PACKAGES = {
    "payloadstore": ROOT / "payloadstore",
    "payloadstore_controlplane": ROOT / "functions" / "payloadstore_controlplane",
    "payloadstore_devstack": ROOT / "devstack" / "payloadstore_devstack",
}
MAX_LINES = 800


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        if not folder.is_dir():
            continue
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of the house that `module` imports (annotation-only imports left out)."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if (hit := resolve(alias.name)) is not None:
                        targets.add(hit)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = module.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    # `from pkg import mod` imports pkg.mod when that is a module, else pkg
                    hit = (resolve(f"{base}.{alias.name}") if base else None) or resolve(base)
                    if hit is not None:
                        targets.add(hit)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    targets.discard(module)
    return targets


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def _without_package_faces(graph: dict[str, set[str]], modules: dict[str, Path]) -> None:
    """A package's __init__ that only hands names on (a face) is not a room: an import of the
    package is an import of what it hands on."""
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        defines = any(
            isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in tree.body
        )
        if defines:
            continue
        handed_on = graph[name]
        for other, imported in list(graph.items()):
            if name in imported and other not in handed_on and not other.startswith(name + "."):
                graph[other] = (imported - {name}) | (handed_on - {other})
        graph[name] = set()


def test_given_the_shipped_packages_then_no_module_is_over_800_lines():
    over = {
        str(path.relative_to(ROOT)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines (split by what a reader looks for): {over}"


def test_given_the_shipped_packages_then_no_modules_import_each_other_in_a_circle():
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    _without_package_faces(graph, modules)
    circles = _circles(graph)
    assert not circles, f"import circles: {circles}"


def test_given_a_circle_then_the_check_finds_it():
    # the check above must be able to fail
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
