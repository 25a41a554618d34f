"""Weights in and training state out: pretrained weights for fine-tuning, and case checkpoints.

Fine-tuning (`model.checkpoint`): `load_pretrained` reads a plain state dict, a timm/DeiT training
checkpoint (weights under `state_dict` or `model`), a `.safetensors` file or a dstbench case
checkpoint, always with `weights_only=True`. timm's ViT filter adapts it to the model being built:
position embeddings are resampled to the model's grid and the patch embedding to its patch size, so
ImageNet weights at 224/16 can start a 32x32/4 CIFAR model. A classifier head of another class
count is left freshly initialised; any other mismatch is an error.

Case checkpoints (accuracy mode): one file per case, `RUN_DIR/checkpoints/<case key>.pt` (the case id, and the seed with `seeds:`), written
atomically (a temporary file, then a rename) so a kill mid-write leaves the previous one intact.
"""

from __future__ import annotations

import errno
import os
import pickle
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dstbench.util.files import open_no_follow, open_regular_bytes, regular_file_problem, slug

CHECKPOINT_DIR = "checkpoints"
CASE_FORMAT = 1  # bumped when the layout of a case checkpoint changes
_WRAPPERS = ("method_state", "state_dict", "model", "module")  # keys a state dict is nested under
HEAD = re.compile(r"head\.(weight|bias)")


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        problem = regular_file_problem(path)  # a FIFO would block the read for good
        if problem:
            raise ValueError(problem)
        return load_file(str(path))
    with open_regular_bytes(path) as handle:
        state: Any = torch.load(handle, map_location="cpu", weights_only=True)
    # Unwrap training checkpoints: dstbench's {"method_state": {"model": ...}}, timm's
    # {"state_dict": ...}, DeiT/MAE's {"model": ...}.
    # A plain state dict never maps these keys to dicts.
    while isinstance(state, dict):
        inner = next((state[k] for k in _WRAPPERS if isinstance(state.get(k), dict)), None)
        if inner is None:
            break
        state = inner
    if not isinstance(state, dict) or not any(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: no state dict of tensors found (looked under {', '.join(_WRAPPERS)})")
    # Models saved from DistributedDataParallel carry a `module.` prefix.
    return {k.removeprefix("module."): v for k, v in state.items() if isinstance(v, torch.Tensor)}


def load_pretrained(model: torch.nn.Module, path: str | Path) -> dict[str, Any]:
    """Load weights from `path` into `model` before a method wraps it. Returns what was loaded and
    which keys were left at their initial values (a head of another class count)."""
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

    path = Path(path).expanduser()
    state = _read_state_dict(path)
    if isinstance(model, VisionTransformer):  # position embeddings and patch size adapted to the model
        state = checkpoint_filter_fn(state, model)
    own = model.state_dict()
    classifier = model.get_classifier() if hasattr(model, "get_classifier") else None
    heads = {f"{name}.{key}" for name, module in model.named_modules() if module is classifier for key in module.state_dict()}
    reinitialised = sorted(k for k, v in state.items() if (HEAD.fullmatch(k) or k in heads) and k in own and v.shape != own[k].shape)
    for key in reinitialised:
        del state[key]
    mismatched = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items() if k in own and v.shape != own[k].shape]
    missing = sorted(set(own) - set(state) - set(reinitialised))
    unexpected = sorted(set(state) - set(own))
    if mismatched or missing or unexpected:
        details = [
            f"shapes differ: {', '.join(mismatched[:5])}" if mismatched else "",
            f"missing: {', '.join(missing[:5])}" if missing else "",
            f"unexpected: {', '.join(unexpected[:5])}" if unexpected else "",
        ]
        raise ValueError(f"{path} does not fit model {type(model).__name__}: " + "; ".join(d for d in details if d))
    model.load_state_dict(state, strict=False)
    return {"path": str(path), "loaded": len(state), "reinitialised": reinitialised}


# -- case checkpoints -------------------------------------------------------------------------------
def case_checkpoint_path(run_dir: str | Path, key: str) -> Path:
    """Where a case's checkpoint goes; `key` is its case key, its id with its seed under `seeds:`
    (`dstbench.suite.cases.CaseKey`)."""
    return Path(run_dir) / CHECKPOINT_DIR / f"{slug(key, 'case')}.pt"


def save_atomic(payload: dict[str, Any], path: Path) -> None:
    """Write a checkpoint through a temporary file and a rename; never through a symbolic link
    (of the file or its folder), which would put it outside the run folder."""
    if path.parent.is_symlink():
        raise OSError(errno.ELOOP, "a checkpoint folder that is a symbolic link is never written through", str(path.parent))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as handle:
        torch.save(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class CheckpointDamaged(Exception):
    """A case checkpoint that cannot be read (truncated, overwritten): the message names the file."""


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A case checkpoint, on the CPU (the method moves what it loads to its device);
    `CheckpointDamaged` naming the file when it cannot be read."""
    try:
        with open_regular_bytes(path) as handle:  # a FIFO there is refused, not waited on
            state = torch.load(handle, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        raise CheckpointDamaged(f"{path}: damaged checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict):
        raise CheckpointDamaged(f"{path}: damaged checkpoint (not a dict)")
    return state


def rng_state() -> dict[str, Any]:
    """Every global RNG a training step may draw from, in a form `weights_only` loading accepts."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
