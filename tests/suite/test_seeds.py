"""`seeds:` in a suite, before anything runs: validation, the suite hash, the stored dump, the cases
(one per seed, keyed by id and seed), their groups, what may change on `--resume`, and how a run's
lines are keyed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dstbench.suite.cases import CaseKey, line_key, line_keys
from dstbench.suite.loading import SuiteError, load_suite, parse_suite
from dstbench.suite.plan import expand_cases, resume_conflicts, run_line_key, timing_groups
from tests.conftest import micro_suite

ROOT = Path(__file__).resolve().parents[2]

# Every committed suite's hash as the code before `seeds:` computed it: adding the key, and
# `timing.per_seed`, must leave every suite (and so every run folder it made) resumable and comparable.
SUITE_HASHES = {
    "barter_ablation.yaml": "8df520c8cf7d7a0d",
    "cpu_gate.yaml": "a30667aa2d4cfe89",
    "cpu_time_gate.yaml": "0c1ae0c967337573",  # the power study's suite (reports/studies/power/suite.yaml)
    "cpu_kernels.yaml": "c5efe679cce81647",
    "cpu_condensed.yaml": "c5efe679cce81647",  # cpu_kernels' setup: the methods are not in the hash
    "cpu_kernels_vit_small.yaml": "96d80dfea59afd35",
    "cpu_smoke.yaml": "b28cec22a1c72e9c",
    "digits_accuracy.yaml": "e4d840c9f91a01de",
    "l40_vit.yaml": "dd7f6d58e7920d62",
    "paper_cifar10.yaml": "0c807610920b98ce",
    "paper_cifar100.yaml": "0fd8f1d14d040f62",
    "paper_finetune.yaml": "95eac313f1161b9f",
    "scaling_cpu.yaml": "8571833bbad92857",
    "scaling_cpu_compile.yaml": "b718f3d49bc463bf",
    # On another model than a ViT: dstbench's model keys (`input_size`) enter the hash only when set.
    "cpu_resnet18.yaml": "3a86bc917e50541e",
    # Generated data: `data.teacher` enters the hash only in teacher suites.
    "cpu_accuracy.yaml": "824a112228c2c7dd",
}


def seeded(seeds: list[int], **overrides: Any) -> dict[str, Any]:
    """The micro suite over `seeds`, every seed timed (a speed suite times its first seed only otherwise)."""
    timing = {**micro_suite()["timing"], "per_seed": True, **overrides.pop("timing", {})}
    suite = micro_suite(methods=["dense", "rigl"], densities=[0.5, 0.25], timing=timing, **overrides)
    suite["seeds"] = seeds
    return suite


def test_every_committed_suite_keeps_its_hash() -> None:
    found = {path.name: load_suite(path, check_files=False).setup_hash() for path in sorted((ROOT / "suites").glob("*.yaml"))}
    assert found == SUITE_HASHES


def test_every_committed_run_folder_keeps_its_recorded_hash() -> None:
    folders = [p.parent for p in (ROOT / "reports").rglob("run.json") if (p.parent / "suite.yaml").exists()]
    assert folders
    for folder in folders:
        recorded = yaml.safe_load((folder / "run.json").read_text())["suite_hash"]
        assert load_suite(folder / "suite.yaml").setup_hash() == recorded, folder


def test_seeds_share_the_hash_of_the_suite_run_with_their_first_seed() -> None:
    one = parse_suite(micro_suite(seed=3))
    many = parse_suite(seeded([3, 7, 11]))
    assert many.seed == 3 and many.run_seeds == [3, 7, 11] and one.run_seeds == [3]
    assert many.setup_hash() == one.setup_hash()
    assert parse_suite(seeded([4, 7])).setup_hash() != one.setup_hash()  # the first seed is the suite's seed


def test_a_seeded_suite_is_stored_with_its_seeds_alone_and_reads_back_the_same() -> None:
    suite = parse_suite(seeded([0, 1]))
    dump = suite.model_dump(mode="json")
    assert "seed" not in dump and dump["seeds"] == [0, 1]
    again = parse_suite(yaml.safe_load(yaml.safe_dump(dump)))
    assert again.model_dump(mode="json") == dump and again.setup_hash() == suite.setup_hash()
    plain = parse_suite(micro_suite()).model_dump(mode="json")
    assert plain["seed"] == 0 and plain["seeds"] is None


@pytest.mark.parametrize(("change", "message"), [
    ({"seed": 0}, "seed and seeds: give one"),
    ({"seeds": [1, 1]}, "a seed is listed twice"),
    ({"seeds": []}, "at least 1 item"),
    ({"seeds": [2**63]}, "outside"),
    ({"timing": {"per_seed": False}}, "only the first seed is timed unless timing.per_seed"),
])
def test_unusable_seeds_are_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SuiteError, match=message):
        parse_suite({**seeded([0, 1]), **change})


def test_one_seed_in_speed_mode_needs_no_per_seed() -> None:
    assert parse_suite(seeded([5], timing={"per_seed": False})).run_seeds == [5]


def test_cases_run_seed_by_seed_with_their_seed_as_a_field() -> None:
    suite = parse_suite(seeded([0, 1], mode="both", data={"name": "digits", "num_workers": 0}, timing={"per_seed": False}))
    cases = expand_cases(suite)
    assert [c.key for c in cases] == [
        "dense@1 seed=0", "rigl@0.5 seed=0", "rigl@0.25 seed=0", "dense@1 seed=1", "rigl@0.5 seed=1", "rigl@0.25 seed=1",
    ]
    assert {c.case_id for c in cases} == {"dense@1", "rigl@0.5", "rigl@0.25"}
    # Without timing.per_seed only the first seed runs the speed segments.
    assert [c.timed for c in cases] == [True] * 3 + [False] * 3
    assert [c.mode("both") for c in cases[2:4]] == ["both", "accuracy"]
    assert all(c.run_seed(0) == c.seed for c in cases)
    timed = expand_cases(parse_suite(seeded([0, 1], mode="both", data={"name": "digits", "num_workers": 0})))
    assert all(c.timed for c in timed)


def test_a_suite_without_seeds_keeps_its_cases_and_keys() -> None:
    cases = expand_cases(parse_suite(micro_suite(methods=["dense", "rigl"])))
    assert [c.key for c in cases] == ["dense@1", "rigl@0.5"] and all(c.seed is None and c.timed for c in cases)


def test_interleaved_groups_hold_one_seed_and_name_it() -> None:
    suite = parse_suite(seeded([0, 1]))
    groups = timing_groups(suite, expand_cases(suite), can_interleave=True)
    assert [g.key for g in groups] == ["d=0.5 seed=0", "d=0.25 seed=0", "d=0.5 seed=1", "d=0.25 seed=1"]
    assert {c.seed for c in groups[2].cases} == {1}
    alone = timing_groups(suite, expand_cases(suite), can_interleave=False)
    assert alone[3].key == "dense@1 seed=1" and alone[3].base == "dense@1 seed=1"


def test_seeds_may_be_added_on_resume_never_removed_or_reordered_first() -> None:
    one = parse_suite(micro_suite(methods=["dense", "rigl"], mode="accuracy", data={"name": "digits", "num_workers": 0}))
    accuracy = {"mode": "accuracy", "data": {"name": "digits", "num_workers": 0}, "timing": {"per_seed": False}}
    two = parse_suite(seeded([0, 1], **accuracy))
    assert resume_conflicts(one, parse_suite({**seeded([0, 1], **accuracy), "densities": [0.5]})) == []
    assert resume_conflicts(two, parse_suite(seeded([0, 1, 2], **accuracy))) == []
    assert resume_conflicts(two, parse_suite(seeded([0], **accuracy))) == ["seeds: 1 removed"]
    assert "seeds: the first seed is 1, the run's was 0" in resume_conflicts(two, parse_suite(seeded([1, 0], **accuracy)))


def test_lines_are_keyed_by_case_and_seed() -> None:
    old = {"case_id": "rigl@0.5", "method": "rigl", "density": 0.5}  # written before lines named their seed
    lines = [old, {**old, "seed": 0}, {**old, "seed": 1}]
    assert [line_key(line) for line in lines] == ["rigl@0.5", "rigl@0.5 seed=0", "rigl@0.5 seed=1"]
    assert line_keys(lines[1:]) == ["rigl@0.5 seed=0", "rigl@0.5 seed=1"]
    assert line_keys([lines[1]]) == ["rigl@0.5"]  # one seed: the case id names it
    # A run keys its folder's lines as its cases: a line without a seed is the suite's first seed's.
    key = run_line_key(parse_suite(seeded([4, 5])))
    assert [key(line) for line in lines] == ["rigl@0.5 seed=4", "rigl@0.5 seed=0", "rigl@0.5 seed=1"]
    plain = run_line_key(parse_suite(micro_suite()))
    assert {plain(line) for line in lines} == {"rigl@0.5"}
    assert CaseKey("rigl@0.5", None) == "rigl@0.5"


def test_a_case_key_is_its_text_and_reads_back() -> None:
    import copy
    import json
    import pickle

    key = CaseKey("rigl@0.1[embed_dim=192,num_heads=3]", 2)
    assert key == "rigl@0.1[embed_dim=192,num_heads=3] seed=2" and (key.case_id, key.seed) == ("rigl@0.1[embed_dim=192,num_heads=3]", 2)
    for text in (str(key), "dense@1", "x seed=y@0.5"):  # run.json holds the text; parse gives the parts back
        back = CaseKey.parse(text)
        assert back == text and CaseKey(back.case_id, back.seed) == text
    assert CaseKey.parse(str(key)).seed == 2 and CaseKey.parse("dense@1").seed is None
    for same in (pickle.loads(pickle.dumps(key)), copy.deepcopy(key)):
        assert (same, same.case_id, same.seed, type(same)) == (key, key.case_id, key.seed, CaseKey)
    assert json.loads(json.dumps({key: [key]})) == {str(key): [str(key)]} and key.unseeded() == key.case_id
