"""An example dstbench plugin package: the method `set_constant` (`constant_set`) and the report
section of the weights it replaced (`report_section`), both found through entry points."""

__version__ = "0.1.0"
