"""Accuracy mode: train a case for `accuracy.epochs` on a real dataset and evaluate it.

The method's schedule spans the whole run (total steps = epochs x steps per epoch; an epoch is
every full batch of the shuffled training split). The learning rate warms up linearly for
`warmup_epochs` and then follows a cosine down to `min_lr`, stepped after every optimizer step.
Top-1 (and Top-5 when there are more than 5 classes) on the test split is measured every
`eval_every` epochs and after the last; each evaluation is a point of the result's `curve`, with
the topology updates made so far and the steps of those since the evaluation before.

Every `checkpoint_every` epochs the case's whole training state goes to
`RUN_DIR/checkpoints/<case key>.pt` (the case id, and the seed with `seeds:`): the method's `state_dict()` (weights at their current compact
shapes, optimizer state, masks or topology, schedule position, the method's generator, the LR
scheduler), the epoch reached, the curve so far and the global RNG states (Python, numpy, torch).
With `resume`, a case starts from that file; since each epoch's data order depends only on
(seed, epoch), it then ends with the same weights and topology as a run that never stopped.

Distributed (torchrun): each rank trains on its shard of every epoch with `batch_size` images per
step (`dstbench.inputs.loaders`), evaluates its share of the test split and the counts are summed
over ranks, so every rank reports the accuracy of the whole split. Rank 0 writes the checkpoint
(with every rank's RNG states, each rank resumes its own).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from dstbench.dst import checkpoint as ckpt
from dstbench.util import distributed
from dstbench.execution.case_setup import build_method
from dstbench.execution.torch_compile import compile_method
from dstbench.suite.cases import Case
from dstbench.suite.schema import SuiteConfig
from dstbench.inputs.loaders import Batch, EpochLoader, build_datasets, describe_loader, eval_loader, to_device
from dstbench.inputs.transforms import mixup_and_loss
from dstbench.dst.method_base import PRECISIONS, Method
from dstbench.util.device import synchronize
from dstbench.results.record import CaseResult
from dstbench.models.timm_models import create_model, input_shape

Progress = Callable[[str, int, int], None]


class WarmupCosine:
    """LR factor at scheduler step s: linear warmup to 1 over `warmup` steps, then a cosine from 1
    to `floor` at `total`. A callable object rather than a closure: its settings stay readable."""

    def __init__(self, warmup: int, total: int, floor: float) -> None:
        self.warmup, self.total, self.floor = int(warmup), int(total), float(floor)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.floor + (1.0 - self.floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


class FactorSchedule:
    """What torch's `LambdaLR` does (each group's lr = its initial lr x its factor at the step
    count), without wrapping the optimizer's `step`: `LambdaLR` patches `optimizer.step` through
    its `__func__`, which fails where a method's optimizer wrapper replaced `step` with a plain
    function (a third-party library's mask-applying wrapper does). Its state is LambdaLR's
    `base_lrs` and `last_epoch`, so a checkpoint of either loads into it."""

    def __init__(self, optimizer: torch.optim.Optimizer, factors: list[Callable[[int], float]]) -> None:
        self.optimizer, self.factors = optimizer, factors
        self.base_lrs = [group.setdefault("initial_lr", group["lr"]) for group in optimizer.param_groups]
        self.last_epoch = 0
        self._apply()

    def _apply(self) -> None:
        for group, base, factor in zip(self.optimizer.param_groups, self.base_lrs, self.factors):
            group["lr"] = base * factor(self.last_epoch)

    def step(self) -> None:
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"base_lrs": list(self.base_lrs), "last_epoch": self.last_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base_lrs, self.last_epoch = list(state["base_lrs"]), int(state["last_epoch"])
        self._apply()


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, min_lr: float) -> FactorSchedule:
    factors: list[Callable[[int], float]] = [WarmupCosine(warmup_steps, total_steps, min(1.0, min_lr / g["lr"])) for g in optimizer.param_groups]
    return FactorSchedule(optimizer, factors)


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: Any, device: torch.device, precision: str, num_classes: int) -> dict[str, float | None]:
    """Top-1, Top-5 (None with 5 classes or fewer) and mean cross-entropy over `loader`."""
    was_training = model.training
    model.eval()
    dtype = PRECISIONS[precision]
    k = 5 if num_classes > 5 else 1
    correct1 = torch.zeros((), device=device, dtype=torch.long)
    correct5 = torch.zeros((), device=device, dtype=torch.long)
    loss_sum = torch.zeros((), device=device)
    count = 0
    for inputs, targets in to_device(loader, device):
        with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
            logits = model(inputs)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, targets, reduction="sum")
        top = logits.topk(k, dim=1).indices
        correct1 += (top[:, 0] == targets).sum()
        correct5 += (top == targets[:, None]).any(dim=1).sum()
        count += targets.shape[0]
    model.train(was_training)
    if distributed.is_distributed():
        # Each rank evaluated its share of the split: one sum gives the whole split's counts.
        totals = torch.stack(
            [correct1.double(), correct5.double(), loss_sum.double(), loss_sum.new_tensor(count).double()]
        )
        correct1_all, correct5_all, loss_all, count_all = distributed.all_reduce_sum_(totals).tolist()
    else:  # one host-device synchronisation per evaluation
        correct1_all, correct5_all, loss_all, count_all = correct1.item(), correct5.item(), loss_sum.item(), count
    return {
        "top1": correct1_all / count_all,
        "top5": correct5_all / count_all if k == 5 else None,
        "test_loss": loss_all / count_all,
    }


def _epoch_batches(loader: EpochLoader, epoch: int, device: torch.device, mixup: Callable | None) -> Iterator[Batch]:
    for inputs, targets in to_device(loader.epoch(epoch), device):
        yield mixup(inputs, targets) if mixup is not None else (inputs, targets)


def _mean_over_ranks(value: float) -> float:
    """A rank's training loss -> the mean over ranks (the whole job's, the ranks' batches being
    the same size); the value itself in a plain process. Once per epoch."""
    if not distributed.is_distributed():
        return value
    total = distributed.all_reduce_sum_(torch.tensor([value], dtype=torch.float64))
    return float(total.item()) / distributed.world_size()


def _rng_states() -> list[dict[str, Any]]:
    """Every rank's global RNG states, rank by rank (one entry in a plain process)."""
    state = ckpt.rng_state()
    if not distributed.is_distributed():
        return [state]
    states: list[Any] = [None] * distributed.world_size()
    torch.distributed.all_gather_object(states, state)
    return states


def _resume_from(path: Path, method: Method, suite: SuiteConfig, case: Case, steps_per_epoch: int) -> dict[str, Any]:
    state = ckpt.load_checkpoint(path)
    expected = {"format": ckpt.CASE_FORMAT, "case_id": case.case_id, "seed": case.seed, "suite_hash": suite.setup_hash(), "steps_per_epoch": steps_per_epoch}
    wrong = {k: state.get(k) for k, v in expected.items() if state.get(k) != v}
    if wrong:
        raise ValueError(f"{path} is from another setup ({wrong}, expected {expected}); delete it to start the case afresh")
    method.load_state_dict(state["method_state"])
    per_rank = state.get("rng_ranks") or [state["rng"]]
    rank = distributed.rank()
    ckpt.set_rng_state(per_rank[rank] if rank < len(per_rank) else state["rng"])
    return state


def measure_accuracy(
    suite: SuiteConfig,
    case: Case,
    device: torch.device,
    result: CaseResult,
    run_dir: Path,
    progress: Progress,
    resume: bool = False,
) -> Method:
    """Train and evaluate one case; fills the accuracy fields of `result`. Returns the trained method."""
    acc, data = suite.accuracy, suite.data
    shape = input_shape(create_model(suite.model.name, device="meta", **suite.model.kwargs), suite.model.input_size)
    datasets = build_datasets(data, shape)
    pin = device.type == "cuda"
    train = EpochLoader(datasets.train, suite.batch_size, data.num_workers, case.run_seed(suite.seed), pin_memory=pin)
    test = eval_loader(datasets.test, acc.eval_batch_size, data.num_workers, pin_memory=pin)
    steps_per_epoch = len(train)
    total_steps = acc.epochs * steps_per_epoch
    mixup, loss_fn = mixup_and_loss(data.augment, datasets.num_classes)


    method = build_method(suite, case, device, total_steps, loss_fn=loss_fn)
    cache = None
    if suite.compile.enabled:  # trained as the speed track's method is; its compilation is part of train_s
        cache = compile_method(method, suite.compile.options())
    method.lr_scheduler = warmup_cosine(
        method.optimizer, round(acc.warmup_epochs * steps_per_epoch), total_steps, acc.min_lr
    )
    path = ckpt.case_checkpoint_path(run_dir, case.key)  # each seed its own file
    start_epoch, curve, train_time = 0, [], 0.0
    if resume and path.exists():
        try:
            state: dict[str, Any] | None = _resume_from(path, method, suite, case, steps_per_epoch)
        except ckpt.CheckpointDamaged as exc:
            # Nothing was loaded yet: the case starts afresh, and the damaged file goes.
            if distributed.rank() == 0:
                path.unlink(missing_ok=True)
            result.warnings.append(f"{exc}; discarded, the case was trained afresh")
            state = None
        if state is not None:
            start_epoch, curve, train_time = int(state["epoch"]), list(state["curve"]), float(state["train_time_s"])
    if distributed.is_distributed():
        # A rank that started afresh while the others resumed would train a different number of
        # steps and leave its peers waiting in a collective: refuse instead.
        starts: list[Any] = [None] * distributed.world_size()
        torch.distributed.all_gather_object(starts, start_epoch)
        if len(set(starts)) > 1:
            raise RuntimeError(f"ranks would resume from different epochs {starts}: every node needs the case's checkpoint")

    loss = math.nan
    for epoch in range(start_epoch + 1, acc.epochs + 1):
        synchronize(device)
        started = time.perf_counter()
        stats = method.train_segment(_epoch_batches(train, epoch, device, mixup), steps_per_epoch)
        synchronize(device)
        train_time += time.perf_counter() - started
        loss = _mean_over_ranks(stats.loss)
        last = epoch == acc.epochs
        if epoch % acc.eval_every == 0 or last:
            point = evaluate(method.model, test, device, suite.precision, datasets.num_classes)
            since = curve[-1]["step"] if curve else 0
            curve.append({
                "epoch": epoch, "step": method.step, "lr": method.optimizer.param_groups[0]["lr"],
                "train_loss": loss, **point, "density": method.density(), "train_time_s": train_time,
                # The updates so far, and the steps of those since the last evaluation: a time to
                # target charges the updates made before the target (dstbench.results.target_time).
                "topology_updates": method.topology_updates,
                "update_steps": [s for s in method.update_steps if s > since],
            })
        if (acc.checkpoint_every and epoch % acc.checkpoint_every == 0) or (last and acc.keep_checkpoint):
            rng = _rng_states()
            if distributed.rank() == 0:  # the ranks hold the same weights and topology
                ckpt.save_atomic({
                    "format": ckpt.CASE_FORMAT, "case_id": case.case_id, "seed": case.seed, "suite_hash": suite.setup_hash(),
                    "steps_per_epoch": steps_per_epoch, "epoch": epoch, "curve": curve, "train_time_s": train_time,
                    "method_state": method.state_dict(), "rng": rng[0], **({"rng_ranks": rng} if len(rng) > 1 else {}),
                }, path)
        progress("epoch", epoch, acc.epochs)

    final = curve[-1]  # the last epoch is always evaluated (and checkpointed after that)
    result.top1, result.top5 = final["top1"], final["top5"]
    result.epochs = acc.epochs
    result.train_time_s = train_time
    result.curve = curve
    loading = f"{datasets.description}, {describe_loader(data.num_workers, device)}"
    if result.data_loading and result.data_loading != loading:  # `both`, speed fed differently
        loading = f"speed: {result.data_loading}; accuracy: {loading}"
    result.data_loading = loading
    totals = {
        **method.result_extras(),
        "steps_total": method.step,
        "topology_updates_total": method.topology_updates,
        "density_achieved": method.density(),
    }
    if case.mode(suite.mode) == "accuracy":  # a later seed of `both` only trains: its line is an accuracy line
        result.density_achieved = totals.pop("density_achieved")
        result.loss = loss if math.isfinite(loss) else final.get("train_loss")
        result.method_extras = totals
    else:  # `both`: the speed segments filled the top-level fields; the training run goes beside them
        result.method_extras = {**result.method_extras, "accuracy": totals}
    if not acc.keep_checkpoint and distributed.rank() == 0 and path.exists():
        path.unlink()
        if not any(path.parent.iterdir()):
            path.parent.rmdir()
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    return method
