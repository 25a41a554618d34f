from __future__ import annotations

from dstbench.suite.cases import Case

from dstbench.suite.plan import expand_cases
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite
from tests.execution.launchers.fault_methods import PLUGIN


def suite(**overrides):  # type: ignore[no-untyped-def]
    return parse_suite(micro_suite(plugins=[PLUGIN], **overrides))


def test_dense_runs_once_at_full_density_and_first() -> None:
    cases = expand_cases(suite(methods=["fault_error", "dense"], densities=[0.1, 0.5]))
    assert [c.case_id for c in cases] == ["dense@1", "fault_error@0.5", "fault_error@0.1"]
    assert cases[0].kind == "dense" and cases[1].kind == "masked"


def test_only_and_density_filters() -> None:
    s = suite(methods=["dense", "fault_error"], densities=[0.1, 0.5])
    assert [c.case_id for c in expand_cases(s, only=["fault_error"])] == ["fault_error@0.5", "fault_error@0.1"]
    assert [c.case_id for c in expand_cases(s, densities=[0.1])] == ["dense@1", "fault_error@0.1"]


def test_labels_and_params_travel_with_the_case() -> None:
    s = suite(methods=[{"name": "fault_error", "label": "slow", "params": {"message": "x"}}])
    [case] = expand_cases(s)
    assert case == Case("slow", "fault_error", "masked", 0.5, {"message": "x"})
    assert Case.from_dict(case.to_dict()) == case


def test_a_method_runs_at_its_own_densities_only() -> None:
    s = suite(methods=["fault_error", {"name": "fault_error", "label": "half", "densities": [0.5]}], densities=[0.1, 0.5])
    assert [c.case_id for c in expand_cases(s)] == ["fault_error@0.5", "half@0.5", "fault_error@0.1"]
    assert [c.case_id for c in expand_cases(s, densities=[0.1])] == ["fault_error@0.1"]
