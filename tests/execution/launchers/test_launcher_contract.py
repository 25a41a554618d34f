"""One launcher contract: every registered launcher keeps `dstbench.execution.launchers.base.Launcher`
and declares what it can do; the registry builds the launcher a config names; `launcher:` is one
config model per launcher, and a key another launcher owns is refused unless it is at its default
(a run folder's suite.yaml from before the split lists every key)."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dstbench.execution.launchers.base import LAUNCHERS, Launcher, launcher_class
from dstbench.execution.launchers.config import CONFIGS, parse_launcher_config
from dstbench.execution.launchers.factory import make_launcher
from dstbench.execution.launchers.inprocess.config import InProcessConfig
from dstbench.execution.launchers.inprocess.launcher import InProcessLauncher
from dstbench.execution.launchers.submitit.config import SubmititConfig
from dstbench.execution.launchers.submitit.launcher import SubmititLauncher
from dstbench.execution.launchers.subprocess.config import SubprocessConfig
from dstbench.execution.launchers.subprocess.launcher import SubprocessLauncher
from dstbench.execution.launchers.subprocess.parallel import ParallelLauncher
from dstbench.execution.launchers.torchrun.config import TorchrunConfig
from dstbench.execution.launchers.torchrun.launcher import TorchrunLauncher
from dstbench.suite.loading import SuiteError, load_suite, parse_suite
from tests.conftest import micro_suite

ROOT = Path(__file__).resolve().parents[3]
# Every key of the launcher model before it was split, at its default: what old suite.yaml files hold.
FLAT_DEFAULTS: dict[str, Any] = {
    "timeout_s": 3600.0, "nproc_per_node": 1, "nnodes": 1, "node_rank": 0, "master_addr": "127.0.0.1", "master_port": 29500,
    "parallel": 1, "cluster": "slurm", "partition": None, "account": None, "qos": None, "constraint": None, "gpus_per_node": 0,
    "cpus_per_task": None, "mem_gb": None, "timeout_min": None, "array_parallelism": None, "sbatch": {}, "setup": [],
}


def problems(launcher: Any) -> list[tuple[str, str]]:
    with pytest.raises(SuiteError) as info:
        parse_suite(micro_suite(launcher=launcher), "s.yaml")
    return info.value.problems


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_every_registered_launcher_keeps_the_contract(name: str) -> None:
    cls = LAUNCHERS[name]
    assert issubclass(cls, Launcher) and not inspect.isabstract(cls) and cls.name == name
    assert cls.interleaves == (cls.open is not Launcher.open)
    assert cls.places_groups == (cls.run_groups is not Launcher.run_groups)
    for method in ("run", "open", "run_groups", "preflight", "from_config"):
        assert callable(getattr(cls, method))


def test_what_each_launcher_can_do() -> None:
    can = {name: (cls.interleaves, cls.places_groups) for name, cls in LAUNCHERS.items()}
    assert can == {
        "inprocess": (True, False), "subprocess": (True, False), "parallel": (True, True),
        "torchrun": (False, False), "submitit": (False, True),
    }


def test_a_launcher_whose_declaration_and_methods_disagree_is_refused() -> None:
    with pytest.raises(TypeError, match="interleaves is True, but it does not define open"):
        type("Claims", (Launcher,), {"interleaves": True, "run": lambda self, task, progress: None})
    with pytest.raises(TypeError, match="places_groups is False, but it defines run_groups"):
        type("Hides", (Launcher,), {"run": lambda self, task, progress: None, "run_groups": lambda self, *a: iter(())})


@pytest.mark.parametrize(("config", "cls"), [
    (InProcessConfig(), InProcessLauncher),
    (SubprocessConfig(timeout_s=7), SubprocessLauncher),
    (SubprocessConfig(parallel=2), ParallelLauncher),
    (TorchrunConfig(nproc_per_node=2), TorchrunLauncher),
    (SubmititConfig(cluster="local"), SubmititLauncher),
])
def test_the_registry_makes_the_launcher_each_config_names(config: Any, cls: type) -> None:
    launcher = make_launcher(config)
    assert type(launcher) is cls and launcher_class(config.launcher_name) is cls
    if isinstance(config, SubprocessConfig):
        assert launcher.timeout_s == config.timeout_s  # type: ignore[attr-defined]
    if isinstance(launcher, ParallelLauncher):
        assert launcher.parallel == 2


def test_launcher_defaults_to_subprocess_and_each_config_has_its_own_keys() -> None:
    suite = parse_suite({k: v for k, v in micro_suite().items() if k != "launcher"})
    assert suite.launcher == SubprocessConfig() and suite.launcher.timeout_s == 3600.0
    assert parse_launcher_config({}) == SubprocessConfig()
    assert {c.model_fields["name"].default: list(c.model_fields) for c in CONFIGS} == {
        "subprocess": ["name", "timeout_s", "parallel"],
        "inprocess": ["name", "timeout_s"],
        "torchrun": ["name", "timeout_s", "nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port"],
        "submitit": ["name", "timeout_s", "nproc_per_node", "cluster", "partition", "account", "qos", "constraint",
                     "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "array_parallelism", "sbatch", "setup"],
    }
    assert SubmititConfig(nproc_per_node=2).distributed and not SubmititConfig().distributed
    assert SubmititConfig(timeout_s=3600).job_minutes == 62


def test_an_unknown_launcher_name_lists_the_launchers() -> None:
    assert problems({"name": "slurm"}) == [("launcher.name", "got 'slurm'; allowed: 'subprocess', 'inprocess', 'torchrun' or 'submitit'")]


@pytest.mark.parametrize(("launcher", "message"), [
    ({"name": "subprocess", "partition": "gpu", "cluster": "local"},
     "cluster, partition: only for name: submitit (a cluster job per case), not subprocess"),
    ({"name": "inprocess", "sbatch": {"exclusive": True}}, "sbatch: only for name: submitit (a cluster job per case), not inprocess"),
    ({"name": "torchrun", "parallel": 2},
     "parallel: cases at once on one host is the subprocess launcher's; torchrun cannot (it runs one case at a time)"),
    ({"name": "submitit", "parallel": 2},
     "parallel: cases at once on one host is the subprocess launcher's; submitit cannot (submitit runs jobs at once by itself (array_parallelism))"),
    ({"name": "submitit", "nnodes": 2}, "nnodes: a submitit job runs its case on one node (torchrun with nproc_per_node ranks)"),
    ({"name": "submitit", "nproc_per_node": 4, "gpus_per_node": 2}, "nproc_per_node: 4 ranks need as many GPUs; gpus_per_node is 2"),
])
def test_a_key_of_another_launcher_is_refused(launcher: dict, message: str) -> None:
    assert problems(launcher) == [("launcher", message)]


def test_torchrun_rendezvous_keys_stay_accepted_under_other_launchers_as_they_always_were() -> None:
    # The one flat model took them under every launcher; the split keeps suites that ran running.
    suite = parse_suite(micro_suite(launcher={"name": "subprocess", "master_port": 1234, "nproc_per_node": 2}), "s.yaml")
    assert isinstance(suite.launcher, SubprocessConfig)
    assert problems({"name": "subprocess", "master_port": 0}) == [("launcher.master_port", "Input should be greater than or equal to 1")]


def test_errors_name_the_key_as_on_one_model() -> None:
    found = problems({"name": "torchrun", "nproc_per_node": 0, "gpus": 1})
    assert ("launcher.nproc_per_node", "Input should be greater than 0") in found
    assert ("launcher.gpus", "unknown key (allowed: name, timeout_s, nproc_per_node, nnodes, node_rank, master_addr, master_port)") in found


def test_an_old_flat_stored_suite_loads_and_compares_equal_to_its_split_form() -> None:
    old = parse_suite(micro_suite(launcher={"name": "subprocess", **FLAT_DEFAULTS, "timeout_s": 600}))
    new = parse_suite(micro_suite(launcher={"name": "subprocess", "timeout_s": 600}))
    assert old.launcher == SubprocessConfig(timeout_s=600)
    assert old.model_dump(mode="json") == new.model_dump(mode="json")  # what --resume compares
    assert old.setup_hash() == new.setup_hash()
    jobs = parse_suite(micro_suite(launcher={**FLAT_DEFAULTS, "name": "submitit", "partition": "gpu", "nproc_per_node": 2}))
    assert jobs.launcher == SubmititConfig(partition="gpu", nproc_per_node=2)
    ranks = parse_suite(micro_suite(launcher={**FLAT_DEFAULTS, "name": "torchrun", "nnodes": 2}))
    assert ranks.launcher == TorchrunConfig(nnodes=2)


def test_a_stored_run_folder_keeps_its_suite_hash() -> None:
    folder = ROOT / "reports" / "baselines" / "cpu_smoke"
    stored = yaml.safe_load((folder / "suite.yaml").read_text())
    suite = load_suite(folder / "suite.yaml")
    assert suite.launcher == SubprocessConfig()
    assert suite.setup_hash() == json.loads((folder / "run.json").read_text())["suite_hash"]
    # The same suite as a run folder from before the launcher split stored it (one flat dump).
    flat = parse_suite({**stored, "launcher": {"name": "subprocess", **FLAT_DEFAULTS}})
    assert flat.launcher == SubprocessConfig() and flat.setup_hash() == suite.setup_hash()
    again = parse_suite(yaml.safe_load(yaml.safe_dump(suite.model_dump(mode="json"))))
    assert again.model_dump(mode="json") == suite.model_dump(mode="json")  # a new dump reads back the same


def test_no_caller_probes_a_launcher_for_a_method() -> None:
    probes = []
    for path in (ROOT / "dstbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node.func, "id", None) if isinstance(node, ast.Call) else None
            if name == "hasattr" or (name == "getattr" and len(node.args) == 3):  # a check, or a read with a fallback
                target = node.args[0]
                if isinstance(target, ast.Name) and "launcher" in target.id:
                    probes.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert probes == []
