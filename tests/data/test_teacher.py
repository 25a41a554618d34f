"""The teacher-student workload: a fixed function, balanced labels, fresh reproducible epochs, a
fixed test split, and suites that use it validated and run."""

from __future__ import annotations

import math

import pytest
import torch

from dstbench.data.teacher import Teacher, TeacherDataset, teacher_splits
from dstbench.inputs.loaders import EpochLoader, build_datasets
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import micro_suite

SHAPE = (1, 8, 8)


def splits(seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    settings = {"classes": 4, "features": 32, "frequency": 1.0, "patch": 4, "teacher_seed": seed, "train_size": 256, "test_size": 128}
    settings.update(overrides)
    return teacher_splits(SHAPE, **settings)  # type: ignore[arg-type]


def test_the_teacher_is_a_function_of_its_seed_alone() -> None:
    teacher, train, test = splits()
    again, train_again, test_again = splits()
    assert torch.equal(test.inputs, test_again.inputs) and torch.equal(test.labels, test_again.labels)
    assert torch.equal(teacher.labels(train.inputs), again.labels(train.inputs))
    other, _, other_test = splits(seed=1)
    assert not torch.equal(other_test.inputs, test.inputs)
    assert not torch.equal(other.labels(test.inputs), test.labels)  # another function
    assert test.inputs.shape == (128, *SHAPE) and test.labels.dtype == torch.int64
    assert set(test.labels.tolist()) <= set(range(4))


def test_labels_are_about_balanced_and_not_a_linear_function() -> None:
    teacher = Teacher((1, 16, 16), 10, 256, 1.0, 4, seed=0)
    inputs = torch.randn(8192, 1, 16, 16, generator=torch.Generator().manual_seed(5))
    counts = torch.bincount(teacher.labels(inputs), minlength=10).double() / len(inputs)
    assert counts.min() > 0.07 and counts.max() < 0.13  # without the calibrated biases a few classes win
    # Negating the input flips no sign of a linear function's logits but changes the sinusoids':
    # the labels of -x agree with those of x no more than chance would by much.
    same = (teacher.labels(inputs) == teacher.labels(-inputs)).double().mean()
    assert same < 0.5


def test_every_patch_gets_the_same_function() -> None:
    teacher = Teacher((3, 8, 8), 3, 16, 1.0, 4, seed=2)
    x = torch.randn(5, 3, 8, 8)
    # A model's patch order (timm's patch embedding: row-major, channels inside a patch).
    assert torch.equal(teacher.patches(x)[:, 1], x[:, :, 0:4, 4:8].reshape(5, -1))
    swapped = x.clone()
    swapped[:, :, 0:4, 0:4], swapped[:, :, 4:8, 4:8] = x[:, :, 4:8, 4:8], x[:, :, 0:4, 0:4]
    assert torch.allclose(teacher.logits(x), teacher.logits(swapped), atol=1e-5)  # a sum over patches
    assert not torch.allclose(teacher.logits(x), teacher.logits(x.flip(2)), atol=1e-3)


def test_each_epoch_draws_new_inputs_and_a_resumed_epoch_gets_the_same_batches() -> None:
    _, train, _ = splits()
    loader = EpochLoader(train, 32, 0, seed=7)
    first = [(x.clone(), y.clone()) for x, y in loader.epoch(1)]
    second = [(x.clone(), y.clone()) for x, y in loader.epoch(2)]
    assert len(first) == 8 and all(x.shape == (32, *SHAPE) for x, _ in first)
    assert not torch.equal(first[0][0], second[0][0])
    # A resumed case builds its loader afresh and starts at epoch 2: the same batches as above.
    _, train_resumed, _ = splits()
    resumed = list(EpochLoader(train_resumed, 32, 0, seed=7).epoch(2))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(second, resumed))
    # Another case seed: other training inputs, the same teacher and test split.
    other = list(EpochLoader(splits()[1], 32, 0, seed=8).epoch(2))
    assert not torch.equal(other[0][0], second[0][0])
    labels = torch.cat([y for _, y in first])
    assert torch.equal(labels.sort().values, train.teacher.labels(torch.cat([x for x, _ in first])).sort().values)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        Teacher((1, 10, 10), 3, 4, 1.0, 4, seed=0)
    with pytest.raises(ValueError, match="at least one input"):
        TeacherDataset(Teacher(SHAPE, 3, 4, 1.0, 4, seed=0), 0)


def teacher_suite(**data: object) -> dict:
    model = {**micro_suite()["model"], "img_size": 8, "patch_size": 4, "in_chans": 1, "num_classes": 4}
    return micro_suite(mode="accuracy", model=model, data={"name": "teacher", **data})


def test_a_teacher_suite_validates_with_its_defaults_and_keeps_other_hashes() -> None:
    suite = parse_suite(teacher_suite(teacher={"classes": 4, "train_size": 64, "test_size": 32}))
    assert suite.data.num_workers == 0 and not suite.data.augment.random_crop and not suite.data.augment.flip
    assert suite.data.teacher is not None and suite.data.teacher.frequency == 1.0
    assert "teacher" in suite.setup_settings()["data"]
    wider = parse_suite(teacher_suite(teacher={"classes": 4, "train_size": 64, "test_size": 32, "frequency": 1.5}))
    assert wider.setup_hash() != suite.setup_hash()
    digits = parse_suite(micro_suite(mode="accuracy", data={"name": "digits"}, model={**micro_suite()["model"], "in_chans": 1}))
    assert "teacher" not in digits.setup_settings()["data"]  # committed suites keep their hashes


@pytest.mark.parametrize(
    "data, model, fragment",
    [
        ({"teacher": {"classes": 5}}, {}, "model.num_classes: is 4, but teacher has 5 classes"),
        ({"augment": {"flip": True}}, {}, "flip act on images"),
        ({"num_workers": 2}, {}, "num_workers"),
        ({"teacher": {"classes": 4, "patch": 3}}, {}, "patch: 3 does not divide the model's 8x8 input"),
    ],
)
def test_teacher_mismatches(data: dict, model: dict, fragment: str) -> None:
    suite = teacher_suite(**data)
    suite["model"].update(model)
    with pytest.raises(SuiteError) as info:
        parse_suite(suite, "s.yaml")
    assert any(fragment in message for _, message in info.value.problems), info.value.problems
    with pytest.raises(SuiteError, match="only with `name: teacher`"):
        parse_suite(micro_suite(mode="accuracy", data={"name": "digits", "teacher": {}}), "s.yaml")


def test_the_datasets_follow_the_models_shape_and_the_suites_settings() -> None:
    suite = parse_suite(teacher_suite(teacher={"classes": 4, "features": 8, "train_size": 64, "test_size": 32}))
    datasets = build_datasets(suite.data, SHAPE)
    assert datasets.num_classes == 4 and len(datasets.train) == 64 and len(datasets.test) == 32
    x, y = datasets.train[3]
    assert x.shape == SHAPE and isinstance(y, int)
    assert "8 random sinusoids" in datasets.description and "64 new train inputs per epoch" in datasets.description
    assert math.isclose(float(datasets.test.inputs.std()), 1.0, abs_tol=0.1)


def test_a_teacher_case_resumed_after_an_epoch_ends_like_an_uninterrupted_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dstbench.execution.accuracy_track import measure_accuracy
    from dstbench.execution.case_session import base_result
    from tests.execution.test_accuracy_track import CPU, Interrupted, _assert_equal, _state, case_of

    suite = parse_suite(micro_suite(
        mode="accuracy", batch_size=16, optimizer={"name": "adamw", "lr": 0.005, "weight_decay": 0.05},
        model={**micro_suite()["model"], "img_size": 8, "patch_size": 4, "in_chans": 1, "num_classes": 4},
        data={"name": "teacher", "num_workers": 0, "augment": {"random_crop": False, "flip": False},
              "teacher": {"classes": 4, "features": 16, "train_size": 64, "test_size": 64}},
        accuracy={"epochs": 3, "warmup_epochs": 1, "eval_every": 1, "checkpoint_every": 1, "eval_batch_size": 64},
    ))
    case = case_of("rigl", delta_t=2, drop_fraction=0.5)  # updates at steps 2, 4, 6 and 8 of 12 (4 per epoch)
    straight_result = base_result(suite, case)
    straight = measure_accuracy(suite, case, CPU, straight_result, tmp_path / "straight", lambda *p: None)

    def stop_after_first_epoch(stage: str, done: int, total: int) -> None:
        if done == 1:
            raise Interrupted

    with pytest.raises(Interrupted):
        measure_accuracy(suite, case, CPU, base_result(suite, case), tmp_path / "resumed", stop_after_first_epoch)
    resumed_result = base_result(suite, case)
    resumed = measure_accuracy(suite, case, CPU, resumed_result, tmp_path / "resumed", lambda *p: None, resume=True)
    _assert_equal(_state(straight), _state(resumed))
    assert [p["top1"] for p in straight_result.curve] == [p["top1"] for p in resumed_result.curve]
    assert len(straight_result.curve) == 3 and straight.topology_updates >= 3
    assert "teacher (16 random sinusoids" in (straight_result.data_loading or "")
