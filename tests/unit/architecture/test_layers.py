"""The layer rule of docs/architecture.md, read from every module's imports (AST, function-level too).

contracts ← product (exporters, alerts, autoscaler, dashboards) ← sim ← devstack, benches ← cli:
a module may import its own layer or a lower one, never a higher one, and no modules import each
other in a circle. Inside the product, exporters, alerts and autoscaler are independent of each other;
dashboards may read the alerts' config (the thresholds they draw), nothing else of them. A string
naming a module in a file that uses importlib (what `import_module` and the CLI's lazy commands load)
counts as an import; `python -m tidescale.cli` in a child process is another process, not an import.
The folder lists come from `[tool.tidescale.layout]` in pyproject.toml, as setup.py's do.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

MODULE_NAME = re.compile(r"tidescale(\.[a-z_][a-z0-9_]*)+")

LAYOUT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["tidescale"]["layout"]
PRODUCT = tuple(LAYOUT["product"])
LAYERS = {  # top-level name under `tidescale` -> rank
    "contracts": 0,
    **dict.fromkeys(PRODUCT, 1),
    "sim": 2,
    "devstack": 3,
    "benches": 3,
    "cli": 4,
}
# What one product folder may read of another: (importer, imported module or package).
PRODUCT_READS = {("dashboards", "tidescale.alerts.config")}


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
    if "importlib" in found:  # a file that loads modules by name: every string naming one counts
        found.update(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and MODULE_NAME.fullmatch(node.value))
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


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_product_folders_are_independent_but_for_the_listed_reads() -> None:
    crossing = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items() for target in targets
        if _area(module) in PRODUCT and _area(target) in PRODUCT and _area(target) != _area(module)
        and not any(_area(module) == reader and (target == read or target.startswith(read + "."))
                    for reader, read in PRODUCT_READS)
    )
    assert crossing == []


def test_the_layout_lists_every_area_once() -> None:
    areas = {p.name for p in (REPO / "tidescale").iterdir() if (p / "__init__.py").is_file()}
    assert areas == {"contracts", *LAYOUT["dev"]}
    assert set(LAYERS) == {"contracts", "cli", *PRODUCT, *LAYOUT["dev"]}
    assert all((REPO / folder / "__init__.py").is_file() for folder in PRODUCT)


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


@pytest.mark.parametrize("source", [
    "from tidescale.devstack.procs import ManagedProcess\n",
    "import importlib\nMOD = importlib.import_module('tidescale.sim.fleet')\n",
])
def test_layer_rule_catches_an_upward_import(tmp_path: Path, source: str) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    targets = {known(n) for n in imports_of("tidescale.exporters.bad", bad)}
    assert any(t and layer_of(t) > layer_of("tidescale.exporters.bad") for t in targets)
