"""The `subprocess` launcher: its config model (`config`), its launcher (`launcher`) and the
parallel form that places groups in slots of their own (`parallel`: `parallel: N`)."""

# The modules whose launchers register (`dstbench.execution.launchers.factory`); names only, so
# importing the package stays as light as its config needs.
LAUNCHER_MODULES = ("launcher", "parallel")
