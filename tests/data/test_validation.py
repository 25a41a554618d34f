"""A suite whose data cannot be read stops at validation, naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dstbench.execution.orchestrator import run_suite
from dstbench.suite.loading import SuiteError, load_suite, parse_suite
from tests.conftest import micro_suite
from tests.data.fakes import write_cifar, write_imagefolder

ROOT = Path(__file__).resolve().parents[2]


def problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(SuiteError) as info:
        parse_suite(data, "s.yaml")
    return info.value.problems


def accuracy_suite(data: dict, **model: object) -> dict:
    return micro_suite(mode="accuracy", data=data, model={**micro_suite()["model"], **model})


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: None, "needs `root`"),
        (lambda p: str(p / "absent"), "no such folder; set `download: true`"),
        (lambda p: str(p), "no cifar-10-batches-py/ inside"),
        (lambda p: str(write_cifar(p, skip=("data_batch_3",))), "missing data_batch_3"),
    ],
)
def test_cifar_root_problems(tmp_path: Path, make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    [(key, message)] = problems(accuracy_suite({"name": "cifar10", "root": make(tmp_path)}))
    assert key == "data.root" and fragment in message


def test_cifar_with_download_needs_only_a_root(tmp_path: Path) -> None:
    suite = parse_suite(accuracy_suite({"name": "cifar10", "root": str(tmp_path / "later"), "download": True}))
    assert suite.data.download and not (tmp_path / "later").exists()  # validation downloads nothing


def test_empty_image_folder(tmp_path: Path) -> None:
    [(key, message)] = problems(accuracy_suite({"name": "imagefolder", "root": str(tmp_path)}, num_classes=2))
    assert key == "data.root" and "no train/ folder" in message
    [(key, message)] = problems(accuracy_suite({"name": "imagefolder", "root": str(tmp_path), "download": True}))
    assert key == "data.root" and "cannot be downloaded" in message


def test_image_folder_class_count_must_match_the_model(tmp_path: Path) -> None:
    root = str(write_imagefolder(tmp_path, {"a": 1, "b": 1, "c": 1}, {"a": 1}))
    assert parse_suite(accuracy_suite({"name": "imagefolder", "root": root}, num_classes=3))
    [(key, message)] = problems(accuracy_suite({"name": "imagefolder", "root": root}, num_classes=10))
    assert message == "model.num_classes: is 10, but imagefolder has 3 classes"


@pytest.mark.parametrize(
    "overrides, key, fragment",
    [
        ({"data": {"name": "digits", "root": "/tmp"}}, "data.root", "remove `root`"),
        ({"data": {"name": "synthetic"}, "mode": "accuracy"}, "", "data.name: synthetic data has no test split"),
        ({"data": {"name": "cifar10", "root": "x", "download": True}, "model": {"in_chans": 1}}, "", "model.in_chans"),
        ({"data": {"name": "digits", "augment": {"mixup": 0.8}}, "batch_size": 7}, "", "batch_size: mixup"),
        ({"data": {"name": "mnist5k"}, "model": {"num_classes": 100}}, "", "model.num_classes: is 100"),
        ({"model": {"checkpoint": "no/such/weights.pth"}}, "model.checkpoint", "no/such/weights.pth: no such file"),
    ],
)
def test_data_and_model_mismatches(overrides: dict, key: str, fragment: str) -> None:
    suite = micro_suite(mode=overrides.get("mode", "accuracy"), batch_size=overrides.get("batch_size", 8))
    suite["data"] = overrides.get("data", {"name": "digits"})
    suite["model"] = {**suite["model"], **overrides.get("model", {})}
    [(got_key, message)] = problems(suite)
    assert got_key == key and fragment in message


def test_a_bad_root_stops_the_run_before_any_case(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(accuracy_suite({"name": "cifar100", "root": str(tmp_path / "nope")}, num_classes=100)))
    with pytest.raises(SuiteError) as info:
        run_suite(path, out=tmp_path / "runs")
    assert str(info.value).startswith(f"{path}: data.root: {tmp_path / 'nope'}: no such folder")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["paper_cifar10", "paper_cifar100", "paper_finetune", "digits_accuracy"])
def test_shipped_accuracy_suites_are_valid_given_their_data(tmp_path: Path, name: str) -> None:
    data = yaml.safe_load((ROOT / "suites" / f"{name}.yaml").read_text())
    assert data["mode"] in ("accuracy", "both")
    if data["data"]["name"].startswith("cifar"):
        classes = data["model"]["num_classes"]
        data["data"]["root"] = str(write_cifar(tmp_path, data["data"]["name"], per_file=1, classes=classes))
        data["data"]["download"] = False
    if data["model"].get("checkpoint"):
        weights = tmp_path / "weights.pth"
        weights.write_bytes(b"")  # validation checks that the file exists; reading it is the case's job
        data["model"]["checkpoint"] = str(weights)
    suite = parse_suite(data, name)
    assert {m.name for m in suite.methods} >= {"dense", "set", "rigl", "mest", "chase", "barter"}
    if name == "digits_accuracy":
        assert load_suite(ROOT / "suites" / f"{name}.yaml").data.name == "digits"


def test_a_finished_runs_suite_stays_readable_without_its_data(tmp_path: Path) -> None:
    # `dstbench check` and reports reread RUN_DIR/suite.yaml, maybe on a machine without the data.
    suite = accuracy_suite({"name": "imagefolder", "root": str(tmp_path / "moved")}, num_classes=3)
    suite["model"]["checkpoint"] = str(tmp_path / "gone.pth")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "suite.yaml").write_text(yaml.safe_dump(suite))
    with pytest.raises(SuiteError):
        load_suite(run_dir / "suite.yaml")  # no run.json beside it: an ordinary suite file
    (run_dir / "run.json").write_text("{}")
    assert load_suite(run_dir / "suite.yaml").data.root == str(tmp_path / "moved")
    assert parse_suite(suite, check_files=False).model.checkpoint == str(tmp_path / "gone.pth")
    with pytest.raises(SuiteError, match="needs `root`"):  # settings are still checked
        parse_suite({**suite, "data": {"name": "imagefolder"}}, check_files=False)
