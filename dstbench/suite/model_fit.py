"""Whether a suite's methods can train its model: checked at validation, before anything runs.

The model is built on the meta device (shapes, no memory). Each method says what it cannot train
(`Method.model_problem`: BARTER and small_dense need ViT blocks; a masked method needs weights to
mask, and convolutions only where its update and execution handle them), a masked method's
`execution` must run on the suite's device, precision and launcher, `fuse_norms` needs ViT
blocks, and a plugin's method must build with the suite's parameters (on the meta device).
`pruned_weights` lists what a masked method would prune, for `run --dry-run`.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Any

import dstbench.methods as catalog


def _model(suite: Any) -> Any:
    from dstbench.models.timm_models import create_model

    return create_model(suite.model.name, device="meta", **suite.model.kwargs)


def methods_problem(suite: Any) -> str | None:
    """The first reason a method of `suite` (a `SuiteConfig`) cannot run it, beginning with the key
    to change and naming the method and the model; None when every one can."""
    from dstbench.dst.masked.backends import execution_problem
    from dstbench.models.timm_models import family, is_vision_transformer

    model = _model(suite)
    name = f"{suite.model.name!r} ({family(model)})"
    if suite.fuse_norms and not is_vision_transformer(model):
        return f"fuse_norms: fuses the LayerNorm and Linear pairs of ViT blocks, which {name} does not have"
    known = set(catalog.list_methods())
    for index, spec in enumerate(suite.methods):
        if spec.name not in known:
            continue  # refused on its own (`methods`)
        cls = catalog.method_info(spec.name).cls
        problem = cls.model_problem(model, dict(spec.params), suite.model.prunable)
        if problem:
            return f"methods.{index}: {spec.key} cannot train {name}: {problem}"
        if suite.model.checkpoint and cls.builds_own_model(dict(spec.params)):
            return (f"methods.{index}: {spec.key} builds a model of other widths than {name}, which model.checkpoint "
                    "cannot be loaded into; leave model.checkpoint out or the method out")
        problem = _construction_problem(cls, suite, spec) if not cls.__module__.startswith("dstbench.") else None
        if problem:
            return f"methods.{index}: {spec.key}: {problem}"
        if "execution" in spec.params:
            problem = execution_problem(
                spec.params, device=suite.device, densities=suite.method_densities(spec), precision=suite.precision,
                distributed=suite.launcher.distributed, model_name=suite.model.name, model_kwargs=suite.model.kwargs,
                model_prunable=suite.model.prunable,
            )
            if problem:
                return f"methods.{index}.params.execution: {problem}"
    return None


def _construction_problem(cls: Any, suite: Any, spec: Any) -> str | None:
    """Why a plugin's method cannot even be built with the suite's parameters (its `Params` lacking a
    field its base reads, a typo in its `__init__`), found by building it on a meta-device model, or
    None. Naming the plugin's own file and line, so a broken plugin fails at `--dry-run`, not in
    its first case. A method that needs real data to be built (a meta tensor has none) is checked
    when it runs."""
    density = 1.0 if suite.method_kind(spec) == "dense" else min(suite.method_densities(spec))
    try:
        cls(_model(suite), density=density, total_steps=suite.timing.schedule_steps, optimizer=suite.optimizer.model_dump(),
            fuse_norms=suite.fuse_norms, seed=suite.seed, model_prunable=suite.model.prunable, **spec.params)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a plugin's bug may raise anything, sys.exit(0) too
        if isinstance(exc, Exception) and "meta" in str(exc):
            return None  # needs tensor data to be built: not checkable here
        frames = traceback.extract_tb(exc.__traceback__)
        own = inspect.getsourcefile(cls)
        where = next((f for f in reversed(frames) if f.filename == own), frames[-1])
        return (f"{cls.__module__}.{cls.__qualname__} ({own}) cannot be built with these parameters: "
                f"{type(exc).__name__}: {exc} (raised at {where.filename}, line {where.lineno})")
    return None


def pruned_weights(suite: Any) -> list[tuple[list[str], dict[str, tuple[int, ...]], dict[float, dict[str, int]]]]:
    """For each distinct (prunable pattern, distribution) of the suite's masked methods: the method
    labels, the weights they prune with their shapes, and each density's active weights per layer."""
    from dstbench.dst.masked.distributions import layer_allotment
    from dstbench.dst.masked.masked_method import MaskedMethod
    from dstbench.models.timm_models import prunable_weights

    model = _model(suite)
    groups: dict[tuple[str | None, str], tuple[list[str], set[float]]] = {}
    for spec in suite.methods:
        cls = catalog.method_info(spec.name).cls
        if not issubclass(cls, MaskedMethod):
            continue
        key = (spec.params.get("prunable") or suite.model.prunable, str(spec.params.get("distribution", "erk")))
        labels, densities = groups.setdefault(key, ([], set()))
        labels.append(spec.key)
        densities.update(suite.method_densities(spec))
    out = []
    for (pattern, distribution), (labels, densities) in groups.items():
        shapes = {n: tuple(w.shape) for n, w in prunable_weights(model, pattern).items()}
        budgets = {d: layer_allotment(shapes, d, distribution) for d in sorted(densities) if shapes}
        out.append((labels, shapes, budgets))
    return out


def unlisted_methods(suite: Any) -> list[tuple[str, str, str, list[float]]]:
    """The suite's methods `pruned_weights` cannot list (not built on the masked engine: dense,
    compact and plugin methods), each as (label, kind, the module that defines it, densities)."""
    from dstbench.dst.masked.masked_method import MaskedMethod

    out = []
    for spec in suite.methods:
        info = catalog.method_info(spec.name)
        if not issubclass(info.cls, MaskedMethod):
            out.append((spec.key, info.kind, info.module, list(suite.method_densities(spec))))
    return out


def trainable_parameters(suite: Any) -> int:
    """The trainable parameters of the suite's model (built on the meta device: no memory)."""
    return sum(p.numel() for p in _model(suite).parameters() if p.requires_grad)


def compact_layouts(suite: Any) -> list[tuple[str, float, list[int], list[int], float]]:
    """For each compact method that says where it starts (`initial_layout`) and each of its
    densities: (label, density, heads per block, FFN channels per block, the share of the prunable
    weights they hold), on the suite's model built on the meta device."""
    from dstbench.dst.compact.compact_vit import layout_density

    model, out = None, []
    for spec in suite.methods:
        layout = getattr(catalog.method_info(spec.name).cls, "initial_layout", None)
        if layout is None:
            continue
        model = model or _model(suite)
        for density in suite.method_densities(spec):
            found = layout(model, density, dict(spec.params))
            if found is None:  # a layout that is not a narrowing of these blocks (small_dense's scaled)
                continue
            heads, hidden = found
            out.append((spec.key, float(density), list(heads), list(hidden), layout_density(model, heads, hidden)))
    return out
