from __future__ import annotations

import importlib.metadata
import types

import pytest

import dstbench
from dstbench.dst import registry
import dstbench.dst.catalog as method_catalog
import dstbench.methods as catalog
from dstbench.dst.method_base import Method
from tests.conftest import ADAMW, micro_vit


def test_builtin_dense_is_listed_with_kind_and_description() -> None:
    assert "dense" in dstbench.list_methods()
    info = dstbench.method_info("dense")
    assert info.kind == "dense" and info.description.startswith("Ordinary dense training")
    assert info.module == "dstbench.methods.dense"


def test_register_and_create_a_method_defined_here() -> None:
    @dstbench.register_method("test_registered_here", kind="masked", description="made in a test")
    class Here(Method):
        pass

    try:
        assert "test_registered_here" in dstbench.list_methods()
        method = dstbench.create_method("test_registered_here", micro_vit(), density=0.5, total_steps=10, optimizer=ADAMW)
        assert isinstance(method, Here) and method.kind == "masked" and method.name == "test_registered_here"
        assert method.target_density == 0.5 and method.total_steps == 10
    finally:
        registry._REGISTRY.pop("test_registered_here")


def test_kind_must_be_known_and_names_unique() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        registry.register_method("x", kind="sparse")
    with pytest.raises(ValueError, match="already registered"):

        @registry.register_method("dense", kind="dense")
        class Impostor(Method):
            pass


def test_unknown_method_names_the_registered_ones() -> None:
    with pytest.raises(KeyError, match="registered: .*dense"):
        dstbench.create_method("nope", micro_vit(), density=0.5, total_steps=10, optimizer=ADAMW)


def test_entry_points_register_third_party_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    class ThirdParty(Method):
        """A method from another package."""

        kind = "compact"

    entry_point = types.SimpleNamespace(name="third_party", value="pkg:ThirdParty", load=lambda: ThirdParty)
    broken = types.SimpleNamespace(name="broken", value="pkg:missing", load=lambda: (_ for _ in ()).throw(ImportError("gone")))

    def fake_entry_points(group: str):  # type: ignore[no-untyped-def]
        assert group == catalog.ENTRY_POINT_GROUP
        return [entry_point, broken]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    try:
        with pytest.warns(UserWarning, match="could not load method plugin"):
            method_catalog._import_entry_points()
        info = catalog.method_info("third_party")
        assert info.cls is ThirdParty and info.kind == "compact" and info.description == "A method from another package."
    finally:
        registry._REGISTRY.pop("third_party", None)


def test_descriptions_are_whole_first_paragraphs_and_parameters_carry_their_comments() -> None:
    chase = catalog.method_info("chase").description
    assert chase.endswith("by their unit mean magnitude.") and "\n" not in chase  # two lines in its docstring
    params = {p.name: p for p in catalog.method_params("rigl")}
    assert params["delta_t"].default == 100 and params["delta_t"].type == "int"
    assert params["delta_t"].help == "steps between topology updates"
    assert params["drop_fraction"].help.startswith("fraction of active weights")  # from a base class
    assert catalog.method_params("dense") == []


def test_parameter_help_from_field_metadata_wins_over_the_comment() -> None:
    import dataclasses

    class WithHelp(Method):
        @dataclasses.dataclass
        class Params:
            alpha: float = dataclasses.field(default=0.5, metadata={"help": "weight of the new term"})  # ignored
            beta: int = 3  # from the comment
            gamma: int = 1

    params = {p.name: p for p in registry.params_of(WithHelp)}
    assert params["alpha"].help == "weight of the new term" and params["alpha"].default == 0.5
    assert params["beta"].help == "from the comment"
    assert params["gamma"].help == ""
