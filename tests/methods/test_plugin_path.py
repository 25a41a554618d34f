"""The plugin path as a third-party DST library takes it: a toy method that wraps its optimizer the
way sparsimony does (`optimizer.step` replaced by a plain function that re-applies its masks) and
declares its topology schedule; the accuracy track's LR schedule on such an optimizer; a method that
declares a schedule and never updates, flagged in the line, the report and `check`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from dstbench.cli import main
from dstbench.execution.accuracy_track import WarmupCosine, warmup_cosine
from dstbench.execution.case_session import flag_missed_updates
from dstbench.results.record import CaseResult
from tests.conftest import ADAMW, micro_batches, micro_suite
from tests.dst.masked.helpers import micro_method
from tests.execution.test_accuracy_track import digits_suite

PLUGIN = "toy_masks_plugin"
PLUGIN_SOURCE = '''
"""A toy third-party DST method: random masks re-applied by a wrapper that replaces optimizer.step."""
import torch

from dstbench import Method
from dstbench.dst.registry import register_method
from dstbench.dst.update_schedule import UpdateSchedule


class _MaskedStep:
    """What a library's optimizer wrapper does: step, then zero the masked weights."""

    def __init__(self, optimizer, masks):
        inner = optimizer.step

        def step(closure=None):  # a plain function, not a bound method
            out = inner(closure)
            with torch.no_grad():
                for weight, mask in masks:
                    weight.mul_(mask)
            return out

        optimizer.step = step


@register_method("toy_masks", kind="masked")
class ToyMasks(Method):
    """Random masks at the density, re-drawn in place at each scheduled update; `broken: true`
    never updates (its update_due is wrong), as a library that counts its own steps twice."""

    import dataclasses as _dc

    @_dc.dataclass
    class Params:
        delta_t: int = 4
        broken: bool = False

    def __init__(self, model, **kwargs):
        super().__init__(model, **kwargs)
        self.schedule = UpdateSchedule(delta_t=self.params.delta_t, t_end=1.0, drop_fraction=0.3, total_steps=self.total_steps)
        self.weights = [p for n, p in model.named_parameters() if p.ndim == 2 and "head" not in n]
        self.masks = [(torch.rand(w.shape, generator=self.generator) < self.target_density).to(w.dtype).to(w.device) for w in self.weights]
        _MaskedStep(self.optimizer, list(zip(self.weights, self.masks)))
        with torch.no_grad():
            for weight, mask in zip(self.weights, self.masks):
                weight.mul_(mask)

    def update_due(self, step):
        return not self.params.broken and super().update_due(step)

    def update_topology(self, step):
        for mask in self.masks:
            mask.copy_(mask[torch.randperm(mask.shape[0], generator=self.generator)])

    def density(self):
        return float(sum(m.sum() for m in self.masks) / sum(m.numel() for m in self.masks))
'''


def _plain_step(optimizer: torch.optim.Optimizer) -> None:
    inner = optimizer.step

    def step(closure=None):  # type: ignore[no-untyped-def]
        return inner(closure)

    optimizer.step = step  # type: ignore[method-assign]


def test_the_lr_schedule_works_on_an_optimizer_whose_step_is_a_plain_function() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    wrapped, plain = torch.optim.SGD(params, lr=0.1), torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    _plain_step(wrapped)
    ours = warmup_cosine(wrapped, 2, 10, 0.001)
    torchs = torch.optim.lr_scheduler.LambdaLR(plain, [WarmupCosine(2, 10, 0.01)])
    for _ in range(12):  # the same learning rates as LambdaLR's, step by step
        assert wrapped.param_groups[0]["lr"] == pytest.approx(plain.param_groups[0]["lr"])
        params[0].grad = torch.ones(2)
        wrapped.step()
        ours.step()
        plain.step()
        torchs.step()
    state = ours.state_dict()
    again = warmup_cosine(wrapped, 2, 10, 0.001)
    again.load_state_dict(state)
    assert again.last_epoch == 12 and again.get_last_lr() == ours.get_last_lr()


def test_a_method_that_declares_a_schedule_and_never_updates_is_flagged() -> None:
    method = micro_method("rigl", ADAMW, density=0.5, delta_t=2)
    method.update_due = lambda step: False  # type: ignore[method-assign]
    method.train_segment(micro_batches(), 8)
    assert method.update_shortfall() == (len([s for s in method.schedule.update_steps() if s <= 8]), 0)
    result = CaseResult(suite="s", suite_hash="h", case_id="rigl@0.5", method="rigl", method_name="rigl", kind="masked",
                        density=0.5, params={})
    flag_missed_updates(method, result, "training run")
    assert result.warnings and result.warnings[0].startswith("0 topology updates in its training run's 8 steps, where its schedule asks for")
    updating = micro_method("rigl", ADAMW, density=0.5, delta_t=2)
    updating.train_segment(micro_batches(), 8)
    assert updating.update_shortfall() is None
    import dstbench
    from tests.dst.masked.helpers import micro_vit

    static = dstbench.create_method("static", micro_vit(), density=0.5, total_steps=12, optimizer=ADAMW)
    static.train_segment(micro_batches(), 8)
    assert static.update_shortfall() is None  # a schedule with no update in it: nothing asked


@pytest.fixture
def plugin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import sys

    from dstbench.dst.registry import registered

    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    yield tmp_path
    sys.modules.pop(PLUGIN, None)
    registered().pop("toy_masks", None)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["speed", "accuracy"])
def test_a_plugin_that_wraps_its_optimizer_runs_and_a_broken_one_is_flagged(plugin_folder: Path, mode: str,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    methods = [{"name": "toy_masks", "label": "toy"}, {"name": "toy_masks", "label": "toy_broken", "params": {"broken": True}}]
    if mode == "speed":
        suite = micro_suite(plugins=[PLUGIN], methods=["dense", *methods], densities=[0.5], launcher={"name": "inprocess"},
                            timing={"warmup_steps": 2, "segment_steps": 4, "segments": 3, "processes": 1})
    else:
        suite = digits_suite(plugins=[PLUGIN], methods=["dense", *methods], densities=[0.5], accuracy={"epochs": 1, "checkpoint_every": 0})
    (plugin_folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    assert main(["run", str(plugin_folder / "suite.yaml"), "--out", str(plugin_folder / "runs")]) == 0
    [run_dir] = list((plugin_folder / "runs").iterdir())
    lines = {line["method"]: line for line in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}
    assert all(line["status"] == "ok" for line in lines.values()), [line.get("error") for line in lines.values()]
    assert math.isclose(lines["toy"]["density_achieved"], 0.5, abs_tol=0.05)
    assert not any("topology update" in w for w in lines["toy"]["warnings"])
    [flag] = [w for w in lines["toy_broken"]["warnings"] if "topology update" in w]
    assert flag.startswith("0 topology updates in its")
    capsys.readouterr()
    assert main(["check", str(run_dir)]) == 0  # a warning, not a failure
    printed = capsys.readouterr()
    assert "toy_broken@0.5: 0 topology updates" in printed.out + printed.err


def test_dry_run_shows_a_plugin_methods_module_densities_and_the_models_parameters(
        plugin_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = micro_suite(plugins=[PLUGIN], methods=["dense", {"name": "toy_masks", "label": "toy"}], densities=[0.5, 0.1])
    (plugin_folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    assert main(["run", str(plugin_folder / "suite.yaml"), "--out", str(plugin_folder / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "trainable parameters; the methods below shape them their own way" in out
    [row] = [line for line in out.splitlines() if line.startswith("toy ")]
    assert row.split()[1:] == ["masked", PLUGIN, "0.5,", "0.1"]
