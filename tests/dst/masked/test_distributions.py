"""Layer densities: ERK's ordering and cap, and exact integer allotments."""

from __future__ import annotations

import math

import pytest

from dstbench.dst.masked.distributions import allot, erk_densities, layer_allotment, target_active
from dstbench.models.timm_models import prunable_weights
from tests.conftest import micro_vit

SHAPES = {"small": (8, 8), "wide": (16, 64), "big": (64, 64), "tall": (256, 64)}


def _total(shapes: dict) -> int:
    return sum(math.prod(s) for s in shapes.values())


def test_erk_gives_denser_layers_to_smaller_fan_in_plus_fan_out_ratio() -> None:
    densities = erk_densities(SHAPES, 0.1)
    ratio = {name: sum(s) / math.prod(s) for name, s in SHAPES.items()}
    by_ratio = sorted(SHAPES, key=ratio.get)
    assert [densities[n] for n in by_ratio] == sorted(densities[n] for n in by_ratio)
    assert densities["small"] > densities["big"] > densities["tall"]
    # Proportional to the ratio wherever nothing is capped.
    assert densities["big"] / densities["tall"] == pytest.approx(ratio["big"] / ratio["tall"])
    assert sum(densities[n] * math.prod(SHAPES[n]) for n in SHAPES) == pytest.approx(0.1 * _total(SHAPES))


def test_erk_caps_at_one_and_redistributes_the_remainder() -> None:
    densities = erk_densities(SHAPES, 0.2)
    assert densities["small"] == 1.0  # about 2.0 uncapped
    assert all(0 < d < 1.0 for n, d in densities.items() if n != "small")
    assert sum(densities[n] * math.prod(SHAPES[n]) for n in SHAPES) == pytest.approx(0.2 * _total(SHAPES))
    # The remaining layers keep ERK's proportions among themselves.
    ratio = {name: sum(s) / math.prod(s) for name, s in SHAPES.items()}
    assert densities["wide"] / densities["tall"] == pytest.approx(ratio["wide"] / ratio["tall"])


def test_erk_caps_several_layers_in_rounds() -> None:
    densities = erk_densities(SHAPES, 0.5)
    # Capping "small" lowers the others' share of the budget; "wide" then exceeds 1.0 in turn.
    assert densities["small"] == 1.0 and densities["wide"] == 1.0
    assert densities["big"] < 1.0 and densities["tall"] < 1.0
    assert sum(densities[n] * math.prod(SHAPES[n]) for n in SHAPES) == pytest.approx(0.5 * _total(SHAPES))
    assert erk_densities(SHAPES, 1.0) == {n: 1.0 for n in SHAPES}


@pytest.mark.parametrize("distribution", ["erk", "uniform"])
@pytest.mark.parametrize("density", [0.05, 0.1, 0.333, 0.5, 0.7, 0.95])
def test_allotment_is_exact_and_close_to_the_densities(distribution: str, density: float) -> None:
    counts = layer_allotment(SHAPES, density, distribution)
    assert sum(counts.values()) == target_active(_total(SHAPES), density)
    densities = erk_densities(SHAPES, density) if distribution == "erk" else {n: density for n in SHAPES}
    for name, shape in SHAPES.items():
        assert abs(counts[name] - densities[name] * math.prod(shape)) < 1.0 + 1e-9
        assert 0 <= counts[name] <= math.prod(shape)


def test_allotment_on_a_vit_matches_the_target() -> None:
    shapes = {n: tuple(p.shape) for n, p in prunable_weights(micro_vit()).items()}
    assert len(shapes) == 8
    for density in (0.1, 0.5):
        counts = layer_allotment(shapes, density)
        assert sum(counts.values()) == round(density * _total(shapes))
        proj, fc1 = counts["blocks.0.attn.proj.weight"] / 64**2, counts["blocks.0.mlp.fc1.weight"] / (256 * 64)
        assert proj > fc1  # ERK: the square projection is denser than the wide FFN layer


def test_allot_fills_remainders_by_largest_fraction() -> None:
    shapes = {"a": (1, 10), "b": (1, 10), "c": (1, 10)}
    counts = allot(shapes, {"a": 0.15, "b": 0.18, "c": 0.17}, 0.5 / 3 + 1e-12)
    assert counts == {"a": 1, "b": 2, "c": 2}


def test_unknown_distribution_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown distribution"):
        layer_allotment(SHAPES, 0.1, "snip")


def test_erk_on_convolutions_follows_rigls_kernel_formula() -> None:
    # RigL's ERK for a conv layer (out, in, kh, kw): density = eps * (out + in + kh + kw) / (out * in * kh * kw).
    # By hand, at 0.2: A 30/1152 and B 54/4608 raw; eps = 0.2 * 5760 / (30 + 54) = 13.714...
    shapes = {"A": (16, 8, 3, 3), "B": (32, 16, 3, 3)}
    densities = erk_densities(shapes, 0.2)
    assert densities["A"] == pytest.approx(1152 / 84 * 30 / 1152) and densities["A"] == pytest.approx(0.357142857)
    assert densities["B"] == pytest.approx(1152 / 84 * 54 / 4608) and densities["B"] == pytest.approx(0.160714286)
    # A 1x1 convolution C (64, 32, 1, 1): raw 98/2048; at 0.5 eps = 3904 / 182 would give it 1.03, so it is
    # dense and the other two share what is left: eps = (3904 - 2048) / 84.
    shapes["C"] = (64, 32, 1, 1)
    densities = erk_densities(shapes, 0.5)
    assert densities["C"] == 1.0
    assert densities["A"] == pytest.approx(1856 / 84 * 30 / 1152) and densities["B"] == pytest.approx(1856 / 84 * 54 / 4608)
    counts = layer_allotment(shapes, 0.5)
    assert counts["C"] == 2048 and sum(counts.values()) == 3904
