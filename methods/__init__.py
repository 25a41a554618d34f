"""Built-in DST methods, one file each, installed as `dstbench.methods`: each registers itself with
`@register_method` (`dstbench.dst.registry`) where its class is defined, and is imported on first
use of the catalog. The catalog of every method (these, entry points, a suite's `plugins:`) is
`dstbench.dst.catalog`; its functions are re-exported here, the names suites and scripts use.
"""

from dstbench.dst.catalog import (
    ENTRY_POINT_GROUP,
    MethodInfo,
    PluginImportError,
    create_method,
    ensure_loaded,
    import_plugins,
    list_methods,
    method_info,
    method_params,
)

__all__ = [
    "ENTRY_POINT_GROUP", "MethodInfo", "PluginImportError", "create_method", "ensure_loaded", "import_plugins",
    "list_methods", "method_info", "method_params",
]
