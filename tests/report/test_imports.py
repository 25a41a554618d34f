"""The report package imports downwards only: figures and the section registry below the modules
that register sections, so no module has to import another lazily to break a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import dstbench.report

PACKAGE = Path(dstbench.report.__file__).parent


def _imports(path: Path) -> set[str]:
    """dstbench.report modules that `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dstbench.report."):
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.module == "dstbench.report":
            found.update(f"dstbench.report.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("dstbench.report."))
    return found


def test_no_import_circle_in_the_report_package() -> None:
    graph = {f"dstbench.report.{p.stem}": _imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, " -> ".join(path + [module])
        for target in graph.get(module, ()):
            visit(target, path + [module])

    for module in graph:
        visit(module, [])
    # The registry renders plots without importing any plot module.
    assert not graph["dstbench.report.sections"] - {"dstbench.report.figures"}
    assert graph["dstbench.report.figures"] == set()
