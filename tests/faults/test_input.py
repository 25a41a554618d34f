"""Hostile or broken input is refused before anything runs: exit 2, one line naming the file and the
key, and no run folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dstbench.suite.plan import expand_cases
from dstbench.cli import main
from dstbench.util.safe_yaml import MAX_YAML_VALUES
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite


def write_suite(tmp_path: Path, **overrides) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(micro_suite(**overrides)))
    return path


def refused(capsys: pytest.CaptureFixture, tmp_path: Path, suite: Path, *extra: str) -> str:
    """Run `suite`, expect exit 2 with nothing written; the error text."""
    out = tmp_path / "runs"
    assert main(["run", str(suite), "--out", str(out), *extra]) == 2
    assert not out.exists() or not any(out.iterdir())
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "method, fragment",
    [
        ({"name": "barter", "params": {"delta_t": 0}}, "delta_t must be a positive integer"),
        ({"name": "barter", "params": {"clone_noise": -1}}, "clone_noise must be >= 0"),
        ({"name": "barter", "params": {"drop_fraction": 7}}, "drop_fraction must be in [0, 1]"),
        ({"name": "barter", "params": {"t_end": "soon"}}, "t_end must be a finite number"),
        ({"name": "barter", "params": {"clone_noise": [0.1] * 5_000}}, "clone_noise must be a finite number"),
        ({"name": "rigl", "params": {"prunable": "blocks\\.(("}}, "prunable is not a valid regular expression"),
        ({"name": "set", "params": {"delta_t": True}}, "delta_t must be an integer"),
        ({"name": "mest", "params": {"grad_lambda": float("nan")}}, "grad_lambda must be a finite number"),
    ],
)
def test_method_parameters_are_refused_before_the_run(
    method: dict, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = refused(capsys, tmp_path, write_suite(tmp_path, methods=["dense", method]))
    assert fragment in err and f"method {method['name']!r}" in err
    assert len(err) < 1000  # the 5,000-item list is not quoted whole


@pytest.mark.parametrize("seed", [10**23, -1])
def test_a_seed_torch_cannot_take_is_refused(seed: int, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert "seed" in refused(capsys, tmp_path, write_suite(tmp_path, seed=seed))


def alias_bomb(levels: int = 9, width: int = 9) -> list[str]:
    """YAML lines defining `*a{levels}`, which expands to width ** levels values."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return lines


@pytest.mark.parametrize("where", ["device: *a9", "methods: [{name: barter, params: {clone_noise: *a9}}]"])
def test_an_alias_bomb_is_refused_naming_the_file(where: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "bomb.yaml"
    rest = ["name: bomb", "densities: [0.5]", *([] if where.startswith("methods") else ["methods: [dense]"])]
    suite.write_text("\n".join(["x:", *("  " + line for line in alias_bomb()), *rest, where]) + "\n")
    err = refused(capsys, tmp_path, suite)
    assert f"{suite}: not valid YAML" in err and f"more than {MAX_YAML_VALUES:,} values" in err


def test_a_recursive_alias_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "loop.yaml"
    suite.write_text("name: loop\nmethods: &m [dense, *m]\ndensities: [0.5]\n")
    assert "refers to the node that contains it" in refused(capsys, tmp_path, suite)


def test_aliases_within_the_limit_still_work(tmp_path: Path) -> None:
    suite = tmp_path / "anchors.yaml"
    timing = "{warmup_steps: 1, segment_steps: 1, segments: 2}"
    suite.write_text(f"name: ok\nx: &t {timing}\ntiming: *t\nmethods: [dense]\ndensities: [0.5]\n")
    from dstbench.suite.loading import read_yaml

    assert read_yaml(suite)["timing"] == {"warmup_steps": 1, "segment_steps": 1, "segments": 2}


def test_a_suite_that_is_not_utf8_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "latin1.yaml"
    suite.write_bytes(b"name: caf\xe9\nmethods: [dense]\ndensities: [0.5]\n")
    err = refused(capsys, tmp_path, suite)
    assert err.strip() == f"{suite}: not UTF-8 text: byte 0xe9 on line 1"


@pytest.mark.parametrize("body", ["raise RuntimeError('plugin is broken')", "import numpy; 1 / 0", "raise SystemExit(3)"])
def test_a_plugin_that_raises_at_import_is_a_suite_error(
    body: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"broken_plugin_{abs(hash(body))}"
    (tmp_path / f"{name}.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = refused(capsys, tmp_path, write_suite(tmp_path, plugins=[name]))
    assert f"plugins: cannot import: {name} raised" in err and "Traceback" not in err


def test_labels_that_share_a_file_name_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    methods = [{"name": "rigl", "label": "r/1"}, {"name": "rigl", "label": "r-1"}]
    err = refused(capsys, tmp_path, write_suite(tmp_path, methods=methods))
    assert "labels 'r/1' and 'r-1' give their cases the same file name" in err


def test_close_densities_get_distinct_case_ids() -> None:
    suite = parse_suite(micro_suite(methods=["rigl", "dense"], densities=[0.5, 0.5000001, 0.1]))
    assert [c.case_id for c in expand_cases(suite)] == ["dense@1", "rigl@0.5000001", "rigl@0.5", "rigl@0.1"]


def test_out_naming_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "taken").write_text("")
    assert main(["run", str(write_suite(tmp_path)), "--out", str(tmp_path / "taken")]) == 2
    assert "--out: " in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--html", "--markdown"])
def test_a_report_path_naming_a_folder_is_refused_before_the_run(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "folder").mkdir()
    err = refused(capsys, tmp_path, write_suite(tmp_path), option, str(tmp_path / "folder"))
    assert f"{option}: {tmp_path / 'folder'} is a folder" in err


def test_a_long_literal_is_quoted_short(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = refused(capsys, tmp_path, write_suite(tmp_path, device="x" * 1_000_000))
    assert "device: got 'xxx" in err and len(err) < 1000
