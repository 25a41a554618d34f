"""`make_launcher`: the launcher a suite's `launcher:` config names, from the registry
(`dstbench.execution.launchers.base`). Importing this module imports every launcher's module, so
each launcher class has registered itself by the time one is looked up.
"""

from __future__ import annotations

from dstbench.execution.launchers.base import Launcher, launcher_class
from dstbench.execution.launchers.config import AnyLauncherConfig
from dstbench.execution.launchers.inprocess.launcher import InProcessLauncher
from dstbench.execution.launchers.submitit.launcher import SubmititLauncher
from dstbench.execution.launchers.subprocess.launcher import SubprocessLauncher
from dstbench.execution.launchers.subprocess.parallel import ParallelLauncher
from dstbench.execution.launchers.torchrun.launcher import TorchrunLauncher

# Imported for their registration; named here so that a launcher left out is seen at a glance.
REGISTERED = (InProcessLauncher, SubprocessLauncher, ParallelLauncher, TorchrunLauncher, SubmititLauncher)


def make_launcher(config: AnyLauncherConfig) -> Launcher:
    """The registered launcher for `config` (`subprocess` with `parallel > 1`: the parallel one)."""
    return launcher_class(config.launcher_name).from_config(config)
