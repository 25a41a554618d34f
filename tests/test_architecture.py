"""The package's layers (ARCHITECTURE.md), checked on the source: no import circles, every import
goes down the layers, report/ and gates/ never import each other, argparse lives in the command
layer only, and no module grows past the size limit without a stated reason.

Imports are read with `ast`, so an import inside a function or under `TYPE_CHECKING` counts as
much as one at the top: a lazy import hides a dependency, it does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Low to high. A module may import from its own layer's package(s) and from any lower layer.
LAYERS: list[tuple[str, ...]] = [
    ("dstbench.util",),
    ("dstbench.models", "dstbench.data"),
    ("dstbench.dst",),
    ("dstbench.methods",),
    ("dstbench.suite",),
    ("dstbench.inputs",),
    ("dstbench.measure",),
    ("dstbench.results",),
    ("dstbench.execution",),
    ("dstbench.report", "dstbench.gates"),
    ("dstbench.api", "dstbench.cli"),
]
# `dstbench/__init__.py` (the version and the public API, loaded lazily by name) sits below every
# layer; `python -m dstbench` above them all.
ROOT_MODULE, MAIN_MODULE = "dstbench", "dstbench.__main__"
# A launcher's config model sits beside its launcher, but the suite schema reads it: such a module
# is part of the schema layer and may import only below it.
SCHEMA_LEVEL_MODULES = ("dstbench.execution.launchers.",)
SCHEMA_LEVEL_SUFFIX = ".config"
SIDE_BY_SIDE = ("dstbench.report", "dstbench.gates")
MAX_LINES = 450
MAX_LONG_MODULES = 2


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "dstbench").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((ROOT / "methods").glob("*.py")):
        name = "dstbench.methods" if path.stem == "__init__" else f"dstbench.methods.{path.stem}"
        found[name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            if name == "dstbench" or name.startswith("dstbench."):
                target = _resolve(name)
                if target and target != module:
                    out.add(target)
    return out


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def layer_of(module: str) -> int:
    if module == ROOT_MODULE:
        return 0
    if module == MAIN_MODULE:
        return len(LAYERS)
    if module.startswith(SCHEMA_LEVEL_MODULES) and module.endswith(SCHEMA_LEVEL_SUFFIX):
        return next(i for i, names in enumerate(LAYERS) if "dstbench.suite" in names)
    best = None
    for index, names in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[1]:
                    best = (index, len(name))
    assert best is not None, f"{module} belongs to no layer: add its package to LAYERS"
    return best[0]


def _package_of(module: str) -> str:
    """The layer package a module is in (`dstbench.results` for `dstbench.results.merge`)."""
    names = sorted((n for layer in LAYERS for n in layer), key=len, reverse=True)
    return next((n for n in names if module == n or module.startswith(n + ".")), ROOT_MODULE)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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

    for module in GRAPH:
        if module not in index:
            visit(module)
    return found


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_import_circles() -> None:
    assert _cycles() == []


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_layer_packages_of_one_layer_never_import_each_other() -> None:
    crossing = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if layer_of(target) == layer_of(module)
        and _package_of(module) != _package_of(target)
        and ROOT_MODULE not in (_package_of(module), _package_of(target))
        and not (module.endswith(SCHEMA_LEVEL_SUFFIX) or target.endswith(SCHEMA_LEVEL_SUFFIX))
    ]
    assert crossing == []
    report, gates = SIDE_BY_SIDE
    assert not any(_package_of(m) == report and any(_package_of(t) == gates for t in ts) for m, ts in GRAPH.items())
    assert not any(_package_of(m) == gates and any(_package_of(t) == report for t in ts) for m, ts in GRAPH.items())


def test_launcher_config_modules_stay_leaves() -> None:
    """The suite schema reads them, so they import only helpers and each other."""
    configs = [m for m in MODULES if m.startswith(SCHEMA_LEVEL_MODULES) and m.endswith(SCHEMA_LEVEL_SUFFIX)]
    assert configs
    for module in configs:
        others = {t for t in GRAPH[module] if not (t in configs or t.startswith("dstbench.util"))}
        assert others == set(), module


def test_argparse_only_in_the_command_layer() -> None:
    outside = []
    for module, path in MODULES.items():
        if module.startswith("dstbench.cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                outside.append(module)
    assert outside == []


def test_modules_stay_small_or_say_why() -> None:
    long = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    long = {m: n for m, n in long.items() if n > MAX_LINES}
    assert len(long) <= MAX_LONG_MODULES, long
    for module in long:
        doc = ast.get_docstring(ast.parse(MODULES[module].read_text(encoding="utf-8"))) or ""
        assert "longer than" in doc, f"{module}: {long[module]} lines; its docstring must say why it is longer than {MAX_LINES}"


def test_no_two_modules_share_a_name_up_to_a_suffix() -> None:
    """`run.py` beside `runner.py`, `schedule.py` beside `scheduler.py`: names that differ by a
    suffix read as the same thing. Per-launcher `config.py` / `launcher.py` are the one pattern
    that repeats on purpose (one folder per launcher)."""
    stems = sorted({m.rpartition(".")[2] for m in MODULES} - {"__init__", "config", "launcher"})
    clashes = [(a, b) for a in stems for b in stems if a != b and b.startswith(a) and b[len(a):] in ("r", "s", "er", "ing", "ed")]
    assert clashes == []


@pytest.mark.parametrize("path", ["ARCHITECTURE.md"])
def test_architecture_names_every_layer(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    for names in LAYERS:
        for name in names:
            assert f"`{name.replace('.', '/')}/`" in text or f"`{name}`" in text, name


# Who reads a run folder's files (ARCHITECTURE.md, "The run folder"): `RunFolder` and the modules
# it reads through, and the writers; every other module goes through `RunFolder`. Each says why.
FOLDER_READERS = {
    "dstbench.results.run_folder": "RunFolder, the reader",
    "dstbench.results.run_files": "the files at the lowest level, under RunFolder",
    "dstbench.results.record": "writes the lines, and is the one rule they are read by",
    "dstbench.results.derive": "load_frame, which RunFolder.loaded reads through",
    "dstbench.results.replicates": "the stored suite's first seed, for load_frame and RunFolder.first_seed",
    "dstbench.results.pooling": "each run's first seed when seeds are pooled in a frame (below RunFolder)",
    "dstbench.results.coverage": "what run.json says was asked for, and writes it there (record_cases)",
    "dstbench.results.time_to_target": "a run's target top-1 for a frame no RunFolder derived (RunFolder passes its own)",
    "dstbench.execution.orchestrator": "the writer: creates a run folder and reads the one it resumes, under its lock",
    "dstbench.execution.more_sets": "a writer: adds process sets to a run, under its lock",
    "dstbench.execution.group_lines": "a writer: joins a group's lines with the folder's, under its lock",
    "dstbench.suite.loading": "tells a run folder's stored suite from a suite file (is_stored_suite)",
}
FOLDER_READING_CALLS = {
    "load_run_meta", "stored_suite", "run_reference", "stored_seed", "recorded_target", "iter_results", "read_results", "load_frame",
    "update_run_meta", "write_run_meta",
}
FOLDER_FILES = {"RUN_FILE", "SUITE_FILE", "RESULTS_FILE"}
FILE_OPENERS = {"read_text", "read_bytes", "open", "read_regular_text", "open_regular", "open_no_follow", "safe_load", "loads"}


def _reads_a_run_folder(tree: ast.AST) -> list[str]:
    """The calls of `tree` that read (or write run.json of) a run folder: a reader function, or a
    file opened whose path names run.json, suite.yaml or results.jsonl."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in FOLDER_READING_CALLS:
            found.append(f"line {node.lineno}: {name}()")
        elif name in FILE_OPENERS:
            parts = [*node.args, *(kw.value for kw in node.keywords)]
            if isinstance(node.func, ast.Attribute):
                parts.append(node.func.value)
            if any(isinstance(n, ast.Name) and n.id in FOLDER_FILES for part in parts for n in ast.walk(part)):
                found.append(f"line {node.lineno}: {name}() of a run folder file")
    return found


def test_only_run_folder_reads_a_run_folder() -> None:
    readers = {m: calls for m, p in MODULES.items() if m not in FOLDER_READERS
               and (calls := _reads_a_run_folder(ast.parse(p.read_text(encoding="utf-8"))))}
    assert readers == {}, "read a run folder through dstbench.results.run_folder.RunFolder"
    assert set(FOLDER_READERS) <= set(MODULES)  # no exception outlives its module


def test_the_reader_check_sees_a_reader() -> None:
    assert _reads_a_run_folder(ast.parse("meta = load_run_meta(path)")) == ["line 1: load_run_meta()"]
    assert _reads_a_run_folder(ast.parse("x = yaml.safe_load((d / SUITE_FILE).read_text())")) != []
    assert _reads_a_run_folder(ast.parse("print(d / RESULTS_FILE)")) == []  # a path printed is not read


# -- a metric is one module ------------------------------------------------------------------------
def test_no_tracker_is_named_where_cases_run() -> None:
    """The case session and the launchers drive every registered tracker through the registry:
    a new tracker needs no edit there."""
    from dstbench.measure.trackers import registered_trackers

    classes = {tracker.__name__ for tracker in registered_trackers()}
    drivers = [m for m in MODULES if m == "dstbench.execution.case_session" or m.startswith("dstbench.execution.launchers.")]
    assert "dstbench.execution.case_session" in drivers and len(drivers) > 5
    named = {m: sorted(classes & (_used_names(MODULES[m]) | _imported_names(MODULES[m]))) for m in drivers}
    assert {m: n for m, n in named.items() if n} == {}


def _used_names(path: Path) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Name)}


def _imported_names(path: Path) -> set[str]:
    return {alias.asname or alias.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) for alias in node.names}


# -- tests mirror the package ----------------------------------------------------------------------
# Folders of tests that cut across the package rather than mirror one of its packages.
CROSS_CUTTING = {"faults", "benchmarks", "docs", "scripts", "examples"}
ROOT_TEST_MODULES = {"__init__.py", "conftest.py", "test_architecture.py", "test_packaging.py"}


def test_tests_mirror_the_package() -> None:
    """Every test module sits in a folder that mirrors a package (`tests/dst/masked/` for
    `dstbench/dst/masked/`; `tests/methods/` for the installed `methods/`) or in a cross-cutting one;
    the root keeps only the architecture and packaging checks."""
    tests = ROOT / "tests"
    assert {p.name for p in tests.glob("*.py")} == ROOT_TEST_MODULES
    astray = []
    for module in tests.rglob("*.py"):
        parts = module.relative_to(tests).parts[:-1]
        if not parts or parts[0] in CROSS_CUTTING:
            continue
        package = ROOT / "methods" if parts[0] == "methods" else ROOT / "dstbench" / Path(*parts)
        if not (package / "__init__.py").exists():
            astray.append(str(module.relative_to(ROOT)))
    assert astray == [], "move these into the folder of the package they test"
