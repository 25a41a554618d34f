"""Launchers decide where a case runs; what is measured is `dstbench.execution.case_session`'s business.

- `inprocess`: in this process (debugging, tests); a crash or hang takes the run down with it.
- `subprocess` (default): a fresh process per case with a timeout, so a crash, a hang or an
  out-of-memory error fails that case alone and memory peaks never leak between cases.
- `torchrun`: the case's process starts `torchrun` for a distributed case.
- `subprocess` with `parallel: N` (`subprocess/parallel`): N groups at once, each pinned to its own
  GPU or share of the cores.
- `submitit`: each case a cluster job (Slurm, or this machine with `cluster: local`).

Each has a folder: `config` (its keys under `launcher:`, read by the suite schema through
`config` here) and `launcher` (the class, registered by name). `base` is the contract every
launcher keeps (what the orchestrator and the rounds call, and what each launcher can do, declared
rather than probed) and the registry; `factory.make_launcher` builds the launcher a suite names.

This package's `__init__` imports nothing: the suite schema imports the config modules, and with
them this package, before any launcher could be loaded.
"""
