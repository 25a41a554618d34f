"""Suite validation: everything wrong is reported before any case runs, naming file and key."""

from __future__ import annotations

import pytest
import yaml

from dstbench.suite.schema_sections import MethodSpec

from dstbench.suite.loading import SuiteError, load_suite, parse_suite
from tests.conftest import micro_suite


def problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(SuiteError) as info:
        parse_suite(data, "s.yaml")
    return info.value.problems


def test_valid_suite_fills_defaults_and_bare_names() -> None:
    suite = parse_suite(micro_suite(), "s.yaml")
    assert suite.methods == [MethodSpec(name="dense")]
    assert suite.optimizer.name == "adamw" and suite.precision == "fp32"
    assert suite.model.kwargs["embed_dim"] == 64
    assert not suite.profile.enabled


def test_unknown_top_level_key_lists_allowed_keys() -> None:
    [(key, message)] = problems(micro_suite(segmnets=3))
    assert key == "segmnets"
    assert "unknown key" in message and "timing" in message and "densities" in message


def test_unknown_nested_key_names_its_path() -> None:
    [(key, message)] = problems(micro_suite(timing={"segment_steps": 3, "segmnts": 2}))
    assert key == "timing.segmnts"
    assert "segments" in message and "warmup_steps" in message


def test_unknown_method_lists_registered_ones() -> None:
    [(key, message)] = problems(micro_suite(methods=["dense", "nosuch"]))
    assert key == "methods"
    assert "nosuch" in message and "dense" in message


def test_unknown_method_parameter_is_rejected() -> None:
    [(key, message)] = problems(micro_suite(methods=[{"name": "dense", "params": {"delta_t": 5}}]))
    assert key == "methods" and "delta_t" in message


def test_same_method_twice_needs_labels() -> None:
    assert problems(micro_suite(methods=["dense", "dense"]))[0][0] == "methods"
    suite = parse_suite(micro_suite(methods=["dense", {"name": "dense", "label": "dense2"}]))
    assert [m.key for m in suite.methods] == ["dense", "dense2"]


@pytest.mark.parametrize(
    "model, fragment",
    [
        ({"name": "no_such_model"}, "unknown timm model"),
        ({"name": "vit_tiny_patch16_224", "input_size": [3, 32, 32]}, "(a VisionTransformer) takes [3, 224, 224]"),
        ({"name": "vit_tiny_patch16_224", "embed_dimension": 64}, "cannot build 'vit_tiny_patch16_224'"),
        ({"name": "vit_tiny_patch16_224", "pretrained": True}, "pretrained"),
    ],
)
def test_bad_models_are_rejected(model: dict, fragment: str) -> None:
    [(key, message)] = problems(micro_suite(model=model))
    assert key == "model" and fragment in message


@pytest.mark.parametrize("density", [0.0, -0.1, 1.5])
def test_density_outside_unit_interval(density: float) -> None:
    [(key, message)] = problems(micro_suite(densities=[0.5, density]))
    assert key == "densities" and "outside (0, 1]" in message


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"timing": {"segments": 0}}, "timing.segments"),
        ({"timing": {"segment_steps": -2}}, "timing.segment_steps"),
        ({"timing": {"warmup_steps": 0}}, "timing.warmup_steps"),
        ({"optimizer": {"name": "adamw", "lr": 0}}, "optimizer.lr"),
        ({"densities": []}, "densities"),
        ({"precision": "fp8"}, "precision"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_non_positive_counts_and_bad_choices(overrides: dict, key: str) -> None:
    assert key in [k for k, _ in problems(micro_suite(**overrides))]


def test_literal_errors_say_what_is_allowed() -> None:
    [(_, message)] = problems(micro_suite(precision="fp8"))
    assert "'fp8'" in message and "bf16" in message


def test_reference_must_be_a_listed_method() -> None:
    [(key, message)] = problems(micro_suite(reference="rigl"))
    assert "reference 'rigl'" in message


def test_several_problems_are_reported_together() -> None:
    found = problems(micro_suite(batch_size=0, densities=[2.0], colour="red"))
    assert {k for k, _ in found} == {"batch_size", "densities", "colour"}


def test_load_suite_reports_file_and_yaml_errors(tmp_path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert str(path) in str(info.value) and "YAML" in str(info.value)
    with pytest.raises(SuiteError, match="cannot read"):
        load_suite(tmp_path / "missing.yaml")


def test_overrides_replace_top_level_keys(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(micro_suite(device="cuda")))
    assert load_suite(path, {"device": "cpu"}).device == "cpu"


def test_dotted_overrides_reach_inside_and_are_validated_like_the_file(tmp_path) -> None:
    from dstbench.suite.loading import parse_assignment

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(micro_suite(methods=["dense", "rigl"])))
    sets = dict(parse_assignment(t) for t in ("timing.segments=10", "model.depth=1", "methods.1.params.delta_t=7",
                                              "densities=[0.2, 0.4]", "model.checkpoint=null"))
    assert sets["densities"] == [0.2, 0.4] and sets["model.checkpoint"] is None
    suite = load_suite(path, sets)
    assert suite.timing.segments == 10 and suite.model.kwargs["depth"] == 1 and suite.densities == [0.2, 0.4]
    assert suite.methods[1].params == {"delta_t": 7}  # a bare name took keys
    with pytest.raises(SuiteError) as info:
        load_suite(path, {"timing.segmnts": 3, "timing.segments": 0})
    message = str(info.value)
    assert "timing.segmnts: unknown key (allowed: warmup_steps, segment_steps, segments, total_steps, interleave, processes, settle_segments, round_order, hand_over, per_seed) (from --set timing.segmnts=3)" in message
    assert "timing.segments: Input should be greater than 0 (from --set timing.segments=0)" in message
    with pytest.raises(SuiteError, match="batch_size is 8, not a mapping"):
        load_suite(path, {"batch_size.x": 1})
    with pytest.raises(SuiteError, match="no item 5 in a list of 2"):
        load_suite(path, {"methods.5.name": "set"})
    with pytest.raises(SuiteError, match="no item --1 in a list of 2"):
        load_suite(path, {"methods.--1.name": "set"})
    for bad in ("timing", "=3", "a..b=1"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_assignment(bad)


def test_importing_the_config_builds_no_model() -> None:
    """Reports read a run's expectations through dstbench.suite.schema without torch or timm."""
    import subprocess
    import sys

    code = "import sys, dstbench.suite.schema; print(sorted({'torch', 'timm'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_packaged_dataset_without_its_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sklearn", None)
    suite = micro_suite(data={"name": "digits", "num_workers": 0}, mode="accuracy",
                        model={**micro_suite()["model"], "img_size": 8, "patch_size": 2})
    with pytest.raises(SuiteError) as info:
        parse_suite(suite, "d.yaml")
    assert "data.name: digits needs scikit-learn, which is not installed: pip install 'dstbench[datasets]'" in str(info.value)
    parse_suite(suite, "d.yaml", check_files=False)  # a finished run's suite is still readable


def test_setup_hash_ignores_methods_and_names_but_not_settings() -> None:
    base = parse_suite(micro_suite()).setup_hash()
    assert parse_suite(micro_suite(name="other", densities=[0.1])).setup_hash() == base
    assert parse_suite(micro_suite(batch_size=9)).setup_hash() != base


@pytest.mark.parametrize("name", ["cpu_smoke", "l40_vit"])
def test_shipped_speed_suites_run_every_method_and_time_an_update(name: str) -> None:
    """Every built-in method runs, and each DST method's first topology update falls inside the
    timed segments (so the segments pay for it, as training would)."""
    from pathlib import Path

    from dstbench.methods import list_methods, method_info
    from dstbench.dst.update_schedule import UpdateSchedule

    suite = load_suite(Path(__file__).resolve().parents[2] / "suites" / f"{name}.yaml")
    built_in = [n for n in list_methods() if method_info(n).cls.__module__.startswith("dstbench.")]  # not test plugins
    assert {m.name for m in suite.methods} == set(built_in)  # some twice, under labels (rigl_csr)
    timing = suite.timing
    first_timed, last_timed = timing.warmup_steps + 1, timing.warmup_steps + timing.segments * timing.segment_steps
    for spec in suite.methods:
        info = method_info(spec.name)
        if info.kind == "dense" or "delta_t" not in info.cls.param_names():
            continue  # no topology update to time (dense, static, small_dense)
        params = info.cls.Params(**spec.params)
        schedule = UpdateSchedule(
            delta_t=int(params.delta_t), t_end=float(params.t_end), drop_fraction=0.3, total_steps=timing.schedule_steps
        )
        assert any(first_timed <= step <= last_timed for step in schedule.update_steps()), spec.key


def test_a_method_may_run_at_some_of_the_suite_densities() -> None:
    suite = parse_suite(micro_suite(methods=["rigl", {"name": "rigl", "label": "rigl_csr", "params": {"execution": "csr"}, "densities": [0.1]}],
                                    densities=[0.1, 0.5]))
    assert suite.method_densities(suite.methods[1]) == [0.1]
    assert suite.method_densities(suite.methods[0]) == [0.1, 0.5]


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"name": "rigl", "densities": [0.3]}, "0.3 not among the suite's densities"),
        ({"name": "rigl", "densities": [0.1, 0.1]}, "listed twice"),
        ({"name": "dense", "densities": [0.1]}, "runs at 1.0 only"),
    ],
)
def test_method_densities_must_be_suite_densities(spec: dict, fragment: str) -> None:
    [(key, message)] = problems(micro_suite(methods=[spec], densities=[0.1, 0.5]))
    assert fragment in message and "methods.0.densities" in message


def test_expectation_at_a_density_the_method_skips_is_rejected() -> None:
    methods = ["rigl", {"name": "rigl", "label": "rigl_csr", "params": {"execution": "csr"}, "densities": [0.1]}]
    expect = [{"metric": "state_ratio", "method": "rigl_csr", "vs": "rigl", "density": 0.5, "max": 0.5}]
    [(_, message)] = problems(micro_suite(methods=methods, densities=[0.1, 0.5], expect=expect))
    assert "rigl_csr runs at 0.1 only" in message


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"device": "cpu", "precision": "bf16"}, "CUDA only"),
        ({"device": "cuda", "precision": "fp32"}, "fp16 or bf16"),
        ({"device": "cuda", "precision": "bf16", "densities": [0.1, 0.5]}, "density 0.5 exactly"),
    ],
)
def test_semi_structured_is_refused_where_it_cannot_run(overrides: dict, fragment: str) -> None:
    spec = {"name": "rigl", "params": {"execution": "semi_structured"}}
    [(_, message)] = problems(micro_suite(methods=[spec], **{"densities": [0.5], **overrides}))
    assert "methods.0.params.execution" in message and fragment in message


def test_semi_structured_restricted_to_half_density_validates() -> None:
    spec = {"name": "rigl", "params": {"execution": "semi_structured"}, "densities": [0.5]}
    suite = parse_suite(micro_suite(methods=["rigl", spec | {"label": "rigl_2to4"}], device="cuda", precision="bf16", densities=[0.1, 0.5]))
    assert suite.method_densities(suite.methods[1]) == [0.5]


def test_csr_is_refused_under_torchrun() -> None:
    spec = {"name": "rigl", "params": {"execution": "csr"}}
    [(_, message)] = problems(micro_suite(methods=[spec], launcher={"name": "torchrun"}))
    assert "does not run distributed" in message


def test_chase_refuses_semi_structured() -> None:
    spec = {"name": "chase", "params": {"execution": "semi_structured"}}
    [(key, message)] = problems(micro_suite(methods=[spec], device="cuda", precision="bf16"))
    assert key == "methods" and "whole channels" in message
