"""YAML from files a user wrote, read without letting the file decide how much work that is.

PyYAML's safe loader already refuses tags that build Python objects. What it allows is aliases: a
few hundred bytes of anchors can stand for billions of values (each alias is one shared object
after loading, but validation, dumping and error messages walk every expansion), and an alias can
even refer to the node that contains it. `load_bounded` counts the expansion on the composed node
graph, before anything is built, and refuses past `MAX_YAML_VALUES`.
"""

from __future__ import annotations

from typing import Any

import yaml

from dstbench.util.nesting import too_deep

# A suite is a few hundred values; YAML aliases let a few hundred bytes expand to billions (each
# alias is one shared object after loading, but validation and dumping walk every expansion).
MAX_YAML_VALUES = 100_000


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses documents whose aliases expand past `MAX_YAML_VALUES`
    values or refer to themselves, counted on the composed node graph before anything is built."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        check_expanded_size(node, MAX_YAML_VALUES)
        check_duplicate_keys(node)
        return node


def check_duplicate_keys(root: yaml.Node) -> None:
    """`yaml.YAMLError` naming a key that appears twice in one mapping, with both lines (PyYAML
    keeps the last silently). Keys brought in by a merge (`<<: *anchor`) may be overridden."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in first:
                        line = first[key.value].start_mark.line + 1
                        raise yaml.YAMLError(
                            f"key {key.value!r} appears twice in one mapping (lines {line} and {key.start_mark.line + 1}); "
                            "YAML would keep the last silently: remove one"
                        )
                    first[key.value] = key
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def check_expanded_size(root: yaml.Node, limit: int) -> int:
    """The number of values `root` stands for once every alias is expanded; `yaml.YAMLError` past
    `limit` or for a recursive alias. Each node is counted once (memoised), so a bomb costs as
    little as its text."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [part for pair in node.value for part in pair]
        return list(node.value) if isinstance(node, yaml.SequenceNode) else []

    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children(node))
            if sizes[key] > limit:
                raise yaml.YAMLError(f"its anchors and aliases expand to more than {limit:,} values (an alias bomb?); refused")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise yaml.YAMLError("an alias refers to the node that contains it (a recursive structure); refused")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)
    return sizes[id(root)]


def load_bounded(text: str) -> Any:
    """`text` as YAML data through `BoundedLoader`; `yaml.YAMLError` for invalid, hostile or too
    deeply nested YAML (PyYAML composes recursively)."""
    try:
        data = yaml.load(text, Loader=BoundedLoader)  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None
    problem = too_deep(data)
    if problem:  # loadable, but every recursive reader after this would fail on it
        raise yaml.YAMLError(problem)
    return data


def decode_utf8(raw: bytes) -> str:
    """`raw` as UTF-8 text; `UnicodeError` saying which byte on which line is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UnicodeError(f"not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line}") from None
