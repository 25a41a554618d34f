"""mkdocs hooks (`hooks:` in mkdocs.yml): the reference pages are generated from the code at build
time, and the committed example report joins the site.

`<!-- reference: NAME [ARG] -->` in a page becomes the Markdown `dstbench.cli.reference.render`
makes (suite keys from the schema, command options from argparse, result fields from the tracker
declarations, exit codes, a method's parameters). The example report
(`reports/cpu_smoke/index.html`, a self-contained page) is served as `results/cpu_smoke.html`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from dstbench.cli.reference import expand_markers

ROOT = Path(__file__).resolve().parents[1]
# Repository files served as they are: {path in the site: path in the repository}.
COPIED = {"results/cpu_smoke.html": "reports/cpu_smoke/index.html"}


def on_files(files: Files, config: Any) -> Files:
    for site_path, source in COPIED.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / source)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return expand_markers(markdown)
