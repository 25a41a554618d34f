"""Result lines: versioned, named by their run, and read back whatever version wrote them."""

from __future__ import annotations

import json
from pathlib import Path

from dstbench.results.record import SCHEMA_VERSION, CaseResult, append_result, load_results


def _result() -> CaseResult:
    return CaseResult(suite="s", suite_hash="h", case_id="dense@1", method="dense", method_name="dense",
                      kind="dense", density=1.0, params={})


def test_a_line_starts_with_its_schema_version_and_run_id(tmp_path: Path) -> None:
    run_dir = tmp_path / "micro-20260101-000000"
    run_dir.mkdir()
    append_result(run_dir, _result())
    text = (run_dir / "results.jsonl").read_text()
    assert text.startswith('{"schema_version": %d, "run_id": "micro-20260101-000000", "suite": "s"' % SCHEMA_VERSION)
    assert isinstance(json.loads(text)["schema_version"], int)
    [back] = load_results(run_dir)
    assert back.schema_version == SCHEMA_VERSION and back.run_id == "micro-20260101-000000"


def test_a_line_from_before_versioning_reads_as_version_0(tmp_path: Path) -> None:
    old = {k: v for k, v in _result().to_dict().items() if k not in ("schema_version", "run_id")}
    (tmp_path / "results.jsonl").write_text(json.dumps(old) + "\n")
    [back] = load_results(tmp_path)
    assert back.schema_version == 0 and back.run_id is None
