"""The code blocks of README.md and docs/, with the markers that say how each is tested.

The rules are written down for readers in docs/testing.md; this module finds the blocks and reads
the markers, `test_docs_examples.py` runs them. A marker is an HTML comment on the last non-blank
line before a fenced block:

    <!-- docs-test: skip (REASON; details) -->    not run; REASON from SKIP_REASONS
    <!-- docs-test: exit N (why) -->               every dstbench command of the block exits N
    <!-- docs-test: dry-run (why) -->              dstbench run commands get --dry-run
    <!-- docs-test: append ARGS (why) -->          ARGS appended to dstbench run/profile commands

A block whose one line is `--8<-- "PATH"` (pymdownx.snippets, as the site shows it) is the
repository's file PATH, run as if written in the block.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Why a block may go untested. Kept short on purpose: a new reason is a decision, made here.
SKIP_REASONS = (
    "installs packages",
    "needs a GPU",
    "needs a Slurm cluster",
    "needs the network",
    "needs Docker",
    "changes the repository",
    "runs the test suite",
    "a measurement",
)
SHELL = ("bash", "sh", "shell")
PYTHON = ("python", "py")
PARSED = ("yaml", "yml", "toml")
NOT_RUN = ("text",)
KNOWN_LANGUAGES = SHELL + PYTHON + PARSED + NOT_RUN

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>[\w-]+)\s*(?P<rest>.*?)\s*-->\s*$")
SNIPPET = re.compile(r'^--8<--\s+"(?P<path>[^"]+)"$')
REASON = re.compile(r"^(?P<before>.*?)\s*\((?P<reason>[^()]*)\)$")


class DocsRuleError(ValueError):
    """A block or marker that breaks the rules of docs/testing.md."""


@dataclasses.dataclass(frozen=True)
class Marker:
    kind: str  # skip, exit, dry-run, append
    reason: str  # the text in parentheses
    exit_code: int = 0
    append: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: Marker | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[Path]:
    """README.md and every Markdown page of the docs."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse_marker(text: str, where: str) -> Marker:
    match = MARKER.match(text)
    if match is None:
        raise DocsRuleError(f"{where}: not a docs-test marker: {text.strip()}")
    kind, rest = match.group("kind"), match.group("rest")
    reason_match = REASON.match(rest)
    if reason_match is None or not reason_match.group("reason").strip():
        raise DocsRuleError(f"{where}: docs-test {kind} needs a reason in parentheses")
    before, reason = reason_match.group("before").strip(), reason_match.group("reason").strip()
    if kind == "skip":
        if before or reason.split(";")[0].strip() not in SKIP_REASONS:
            raise DocsRuleError(f"{where}: skip reason {reason!r} must start with one of: {', '.join(SKIP_REASONS)}")
        return Marker("skip", reason)
    if kind == "exit":
        if not before.isdigit():
            raise DocsRuleError(f"{where}: docs-test exit needs an exit code: exit N (why)")
        return Marker("exit", reason, exit_code=int(before))
    if kind == "dry-run":
        if before:
            raise DocsRuleError(f"{where}: docs-test dry-run takes only a reason")
        return Marker("dry-run", reason)
    if kind == "append":
        if not before:
            raise DocsRuleError(f"{where}: docs-test append needs the arguments to append")
        return Marker("append", reason, append=tuple(shlex.split(before)))
    raise DocsRuleError(f"{where}: unknown docs-test marker {kind!r} (skip, exit, dry-run, append)")


def page_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, each with the marker before it (if any)."""
    page = str(path.relative_to(ROOT))
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: tuple[int, str] | None = None  # a marker line waiting for its block
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if fence is None:
            if line.lstrip().startswith("<!--") and "docs-test" in line:
                if pending is not None:
                    raise DocsRuleError(f"{page}:{pending[0]}: a docs-test marker with no block after it")
                pending = (index + 1, line)
            elif line.strip() and pending is not None:
                raise DocsRuleError(f"{page}:{pending[0]}: a docs-test marker must come right before its block")
            index += 1
            continue
        start, indent, closing = index, len(fence.group("indent")), fence.group("fence")
        language = fence.group("lang").lower()
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(closing):
            body.append(lines[index][indent:] if lines[index][:indent].strip() == "" else lines[index])
            index += 1
        if index == len(lines):
            raise DocsRuleError(f"{page}:{start + 1}: a code block that is never closed")
        index += 1
        where = f"{page}:{start + 1}"
        if language not in KNOWN_LANGUAGES:
            raise DocsRuleError(f"{where}: a code block needs one of the languages {', '.join(KNOWN_LANGUAGES)}, not {language!r}")
        marker = parse_marker(pending[1], f"{page}:{pending[0]}") if pending else None
        if marker is not None and language not in SHELL + PYTHON:
            raise DocsRuleError(f"{where}: docs-test markers are for bash and python blocks, not {language}")
        if marker is not None and marker.kind != "skip" and language not in SHELL:
            raise DocsRuleError(f"{where}: docs-test {marker.kind} is for bash blocks")
        code = "\n".join(body) + "\n"
        if len(body) == 1 and (snippet := SNIPPET.match(body[0].strip())):
            included = ROOT / snippet.group("path")
            if not included.is_file():
                raise DocsRuleError(f"{where}: the block includes {snippet.group('path')}, which is not a file of the repository")
            code = included.read_text(encoding="utf-8")
        blocks.append(Block(page, start + 1, language, code, marker))
        pending = None
    if pending is not None:
        raise DocsRuleError(f"{page}:{pending[0]}: a docs-test marker with no block after it")
    return blocks


@dataclasses.dataclass(frozen=True)
class Command:
    env: dict[str, str]
    argv: tuple[str, ...]
    text: str


# Shell operators the runner does not emulate: a block using them must be marked skip.
UNSUPPORTED = {";", "|", "||", "&", ">", ">>", "<", "(", ")", "$("}


def shell_commands(code: str, where: str) -> list[Command]:
    """The commands of a shell block: continuation lines joined, comments dropped, `&&` chains
    split, leading VAR=value assignments taken as the command's environment."""
    joined = re.sub(r"\\\n", " ", code)
    commands: list[Command] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError as exc:
            raise DocsRuleError(f"{where}: cannot read {line!r}: {exc}") from None
        if "$" in line.replace("$$", ""):
            raise DocsRuleError(f"{where}: shell variables and substitutions are not run: {line.strip()!r} (mark the block skip)")
        part: list[str] = []
        for token in [*tokens, "&&"]:
            if token in UNSUPPORTED:
                raise DocsRuleError(f"{where}: shell syntax {token!r} is not run: {line.strip()!r} (mark the block skip)")
            if token != "&&":
                part.append(token)
                continue
            env: dict[str, str] = {}
            while part and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", part[0]):
                key, _, value = part.pop(0).partition("=")
                env[key] = value
            if part:
                commands.append(Command(env, tuple(part), " ".join(part)))
            part = []
    return commands
