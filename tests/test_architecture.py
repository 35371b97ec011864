"""The import graph of planner/, catalog/, ui/ and app.py: no circle, and layers that only point down.

Every import between the project's own modules counts, one inside a function too (a function-local
import that dodges a cycle at load time keeps the cycle in the design). The layers are the table in
docs/architecture.md: the doc is the specification and this test holds the code to it, so neither
can drift. A new module fails `test_every_module_is_in_the_doc` until its row says where it sits;
`python tests/test_architecture.py` prints the lowest layer each module's imports allow.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
SOURCES = ("planner", "catalog", "ui")


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py under SOURCES and app.py."""
    files = [p for d in SOURCES for p in sorted((ROOT / d).rglob("*.py"))] + [ROOT / "app.py"]
    out = {}
    for p in files:
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(absolute name imported, whether inside a function or class body) for every import statement;
    `from a import b` yields a.b (a module or a name in a)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) not in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                base = ".".join(up + ([base] if base else []))
            out += [(f"{base}.{a.name}", id(node) not in top) for a in node.names] or [(base, id(node) not in top)]
    return out


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the project's modules it imports, module -> every top-level package it imports)."""
    files = module_files()
    ours, packages = {}, {}
    for module, path in files.items():
        ours[module], packages[module] = set(), set()
        for name, _ in _imports(module, path):
            packages[module].add(name.split(".")[0])
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                ours[module].add(name)
    return ours, packages


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# ----------------------------------------------------------------------------- the doc's layer table

def doc_layers() -> list[tuple[str, list[str]]]:
    """(layer name, module patterns) from bottom to top: the rows of docs/architecture.md's table
    between its `layers:begin` and `layers:end` markers, each `| n | name | `mod`, `pkg.*` ... |`.
    A pattern `pkg.*` is the package and every module under it."""
    text = DOC.read_text()
    table = text.split("<!-- layers:begin -->")[1].split("<!-- layers:end -->")[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1], re.findall(r"`([A-Za-z_][\w.]*(?:\.\*)?)`", cells[2])))
    assert [n for n, _, _ in rows] == list(range(len(rows))), "the layer table numbers its rows 0, 1, 2, ..."
    return [(name, patterns) for _, name, patterns in rows]


def layer_of(module: str, layers: list[tuple[str, list[str]]]) -> list[int]:
    """The layers whose patterns name `module` (exactly one when the table is right); an exact name
    wins over a package pattern."""
    exact = [i for i, (_, patterns) in enumerate(layers) if module in patterns]
    if exact:
        return exact
    return [i for i, (_, patterns) in enumerate(layers)
            if any(p.endswith(".*") and (module == p[:-2] or module.startswith(p[:-1])) for p in patterns)]


def lowest_layers(graph: dict[str, set[str]], layers) -> dict[str, int]:
    """Per module, the lowest layer its imports allow given where the table puts the others."""
    placed = {m: layer_of(m, layers) for m in graph}
    return {m: max((placed[t][0] for t in graph[m] if len(placed[t]) == 1), default=0) for m in graph}


# ----------------------------------------------------------------------------- tests

def test_no_circle_in_the_import_graph():
    graph, _ = import_graph()
    found = circles(graph)
    assert not found, (f"{len(found)} circle(s) in the import graph; largest: {max(found, key=len)}. Move the name "
                       f"both sides need into the lower module (docs/architecture.md says which layer is lower)")


def test_circle_finder_finds_a_circle():
    """The check above can fail: a two-module and a three-module circle beside a clean chain."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(circles(graph)) == [["a", "b"], ["c", "d", "e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_local_and_relative_imports(tmp_path, monkeypatch):
    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "__init__.py").write_text("")
    (tmp_path / "planner" / "low.py").write_text("def f():\n    from planner import high\n")
    (tmp_path / "planner" / "high.py").write_text("from .low import f\n")
    (tmp_path / "app.py").write_text("import streamlit as st\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph, packages = import_graph()
    assert graph["planner.low"] == {"planner.high"} and graph["planner.high"] == {"planner.low"}
    assert circles(graph) == [["planner.high", "planner.low"]]
    assert packages["app"] == {"streamlit"}


def test_the_vocabulary_imports_nothing_of_ours():
    graph, _ = import_graph()
    assert graph["planner.types"] == set(), f"planner.types imports {sorted(graph['planner.types'])}"


def test_planner_imports_no_front_end():
    """Nothing in planner/ imports the app (ui, app.py), Streamlit or Plotly."""
    _, packages = import_graph()
    bad = {m: sorted(p & {"ui", "app", "streamlit", "plotly"}) for m, p in packages.items()
           if m.split(".")[0] == "planner" and p & {"ui", "app", "streamlit", "plotly"}}
    assert not bad, f"planner modules import the front end: {bad}"


def test_catalog_imports_no_planner_feature():
    """catalog/ turns data files into the planner's types: it may import the vocabulary, the engine
    profiles and formulas, never the search, exports, fleet, replanning or the CLI (the layers above it)."""
    graph, _ = import_graph()
    layers = doc_layers()
    catalog_layer = layer_of("catalog", layers)[0]
    bad = sorted((m, t) for m in graph if m.split(".")[0] == "catalog" for t in graph[m]
                 if t.split(".")[0] != "catalog" and layer_of(t, layers)[0] >= catalog_layer)
    assert not bad, f"catalog imports planner features: {bad}"
    assert all(t.split(".")[0] in ("catalog", "planner") for m in graph if m.startswith("catalog") for t in graph[m])


def test_every_module_is_in_the_doc():
    graph, _ = import_graph()
    layers = doc_layers()
    lowest = lowest_layers(graph, layers)
    missing = {m: layers[lowest[m]][0] for m in graph if not layer_of(m, layers)}
    twice = {m: [layers[i][0] for i in layer_of(m, layers)] for m in graph if len(layer_of(m, layers)) > 1}
    assert not missing, (f"modules docs/architecture.md's layer table does not place (lowest layer their imports "
                         f"allow): {missing}")
    assert not twice, f"modules the layer table places twice: {twice}"


def test_the_doc_names_no_module_that_is_gone():
    graph, _ = import_graph()
    stale = [p for _, patterns in doc_layers() for p in patterns
             if (p[:-2] if p.endswith(".*") else p) not in graph]
    assert not stale, f"docs/architecture.md's layer table names modules that do not exist: {stale}"


def test_layers_only_point_down():
    """Every import goes to a module of the same layer or one below, as docs/architecture.md's table says."""
    graph, _ = import_graph()
    layers = doc_layers()
    up = sorted(f"{m} ({layers[layer_of(m, layers)[0]][0]}) -> {t} ({layers[layer_of(t, layers)[0]][0]})"
                for m in graph for t in graph[m]
                if layer_of(m, layers) and layer_of(t, layers) and layer_of(t, layers)[0] > layer_of(m, layers)[0])
    assert not up, "imports that point up a layer:\n" + "\n".join(up)


def test_function_local_imports_of_our_modules_are_the_named_seams():
    """Our modules import each other at the top; the exceptions are the app's seam to the search (it
    says when the planner is absent, and tests stand a search in, tests/app_helpers.py), run-local's
    launcher (it imports torch, the optional 'run' extra) and catalog.plain's pydantic models (about 0.1 CPU s
    of every command's start-up, needed only for a file the plain check leaves in doubt)."""
    seams = {("ui.planning", "planner.search"), ("ui.planning", "planner.export"), ("ui.planning", "planner.replan"),
             ("ui.planning", "planner.fleet"), ("ui.compose", "planner.search"),
             ("planner.cli.run_cmd", "planner.runtime"), ("catalog.plain", "catalog.schema")}
    files = module_files()
    local = sorted((m, name) for m, path in files.items() for name, inside in _imports(m, path)
                   if inside and name.split(".")[0] in SOURCES + ("app",)
                   and not any(m == s and (name == t or name.startswith(t + ".")) for s, t in seams))
    assert not local, f"function-local imports of our own modules (import them at the top): {local}"


def test_engine_names_in_the_vocabulary_match_the_registry():
    from planner.engines import ENGINES
    from planner.types import ENGINE_NAMES
    assert tuple(ENGINES) == ENGINE_NAMES


def test_no_call_passes_ten_or_more_arguments_by_position():
    """Arguments that many are read by name (a frozen dataclass such as compute.StagePass, or keywords):
    a reader should not count to the 14th to know what it is."""
    found = set()
    for path in module_files().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and len(node.args) >= 10:
                name = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
                found.add((path.relative_to(ROOT).as_posix(), name))
    assert not found, sorted(found)


if __name__ == "__main__":
    graph, _ = import_graph()
    layers = doc_layers()
    lowest = lowest_layers(graph, layers)
    for module in sorted(graph):
        placed = [layers[i][0] for i in layer_of(module, layers)] or ["-"]
        print(f"{module:40} placed: {', '.join(placed):12} lowest its imports allow: {layers[lowest[module]][0]}")
