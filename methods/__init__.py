"""Built-in DST methods, one file each, installed as `dstbench.methods`.

Each file registers its method with `@register_method` where the class is defined.
"""
