"""The layer rule of docs/architecture.md, read from every module's imports (AST, function-level too).

contracts ← product (exporters, alerts, autoscaler, dashboards) ← sim ← devstack, benches ← cli:
a module may import its own layer or a lower one, never a higher one, and no modules import each
other in a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

PRODUCT = ("exporters", "alerts", "autoscaler", "dashboards")
LAYERS = {  # top-level name under `tidescale` -> rank
    "contracts": 0,
    **dict.fromkeys(PRODUCT, 1),
    "sim": 2,
    "devstack": 3,
    "benches": 3,
    "cli": 4,
}


def module_files() -> Iterator[tuple[str, Path]]:
    """(module name, file) for every module of the distribution, as installed."""
    roots = [("tidescale", REPO / "tidescale"), *((f"tidescale.{p}", REPO / p) for p in PRODUCT)]
    for prefix, root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join([prefix, *parts]), path


def layer_of(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "tidescale":
        raise ValueError(module)
    if len(parts) == 1:
        return 0  # the root package holds only the version
    return LAYERS[parts[1]]


def imports_of(module: str, path: Path) -> set[str]:
    """Every `tidescale…` module this file imports, resolved to a module (not a name in one)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] == "tidescale"}


MODULES = dict(module_files())


def known(name: str) -> str | None:
    """The module a dotted import name refers to (itself, or its longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = {t for name in imports_of(module, path) if (t := known(name)) and t != module}
        edges[module] = targets
    return edges


def test_every_module_belongs_to_a_layer() -> None:
    assert len(MODULES) > 100
    for module in MODULES:
        layer_of(module)


def test_imports_only_run_down_the_layers() -> None:
    upward = sorted(
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in graph().items() for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert upward == []


def test_the_product_never_imports_the_dev_stack_or_test_helpers() -> None:
    for module, path in MODULES.items():
        if layer_of(module) <= 1:
            tree = ast.parse(path.read_text())
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert not {n for n in names if n.split(".")[0] in ("tests", "pytest", "matplotlib")}, module


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    edges = graph()
    # a package's __init__ re-exporting its own modules is not a circle between concepts
    for module in list(edges):
        edges[module] = {t for t in edges[module] if not t.startswith(module + ".")}
    assert _cycles(edges) == []


@pytest.mark.parametrize(("edges", "expected"), [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycle_finder(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(edges) == expected


def test_layer_rule_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from tidescale.devstack.procs import ManagedProcess\n")
    targets = {known(n) for n in imports_of("tidescale.exporters.bad", bad)}
    assert any(t and layer_of(t) > layer_of("tidescale.exporters.bad") for t in targets)
