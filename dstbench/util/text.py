"""How figures are written for people: missing values, percentages, byte sizes, error summaries.

One definition each, so that a report table, a terminal line and a CI comment print the same figure
the same way. Imports nothing heavy: `compare` and `report` use it without loading torch.
"""

from __future__ import annotations

import math
from typing import Any

DASH = "—"  # what a table shows for a figure that was not measured
MIB = 2**20


def missing(value: Any) -> bool:
    """None or NaN (pandas turns a missing figure into NaN; JSON wrote NaN as null)."""
    if value is None:
        return True
    try:
        return math.isnan(value)
    except TypeError:  # strings, lists, dicts: present
        return False


def present(value: Any) -> bool:
    return not missing(value)


def percent(value: Any, *, digits: int = 1, signed: bool = False, missing_text: str = DASH) -> str:
    """A fraction as a percentage: 0.1234 -> "12.3%" (signed: "+12.3%"). A value that rounds to zero
    prints as 0, never as -0.0; an infinite change prints as "+inf%"."""
    if missing(value):
        return missing_text
    number = float(value)
    if math.isinf(number):
        return "+inf%" if number > 0 else "-inf%"
    pct = round(number * 100, digits) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{pct:+.{digits}f}%" if signed else f"{pct:.{digits}f}%"


def mib(value: Any, *, digits: int = 1, unit: bool = False, missing_text: str = DASH) -> str:
    """Bytes in MiB, e.g. "12.5" (or "12.5 MiB" with `unit`)."""
    if missing(value):
        return missing_text
    text = f"{float(value) / MIB:.{digits}f}"
    return f"{text} MiB" if unit else text


def human_bytes(value: Any, *, missing_text: str = "n/a") -> str:
    """Bytes in the largest binary unit that keeps the figure readable: "512 B", "3.2 KiB", "1.5 GiB"."""
    if missing(value):
        return missing_text
    n = float(value)
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


NOT_APPLICABLE = "n/a"  # what a table shows for a figure one sample cannot give (an IQR, an interval)


def ci_text(low: Any, high: Any, *, level: str = "95%", digits: int = 2) -> str:
    """ "95% CI [1.10, 1.32]", or "95% CI n/a" where there is no interval (one segment per case:
    a bootstrap of one sample would print a zero-width interval, claiming a certainty it lacks)."""
    if missing(low) or missing(high):
        return f"{level} CI {NOT_APPLICABLE}"
    return f"{level} CI [{float(low):.{digits}f}, {float(high):.{digits}f}]"


def last_line(text: Any, default: str = "") -> str:
    """The last non-blank line of an error: for a traceback, the exception and its message."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1] if lines else default


# What an error message or a terminal line may quote: rich renders a line in time quadratic in its
# length (a 20 MB error line stalled a run for minutes), and a repr of hostile input can be huge.
CLIP_CHARS = 500


def clip(text: Any, limit: int = CLIP_CHARS) -> str:
    """`text` cut to `limit` characters, saying how long it was: "abc… (20,000,000 characters)"."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def short_repr(value: Any, limit: int = 80) -> str:
    """A bounded repr of a value from a user's file: nested structures are cut at each level (so an
    enormous list costs no more than a small one), and the result is clipped to `limit`."""
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother = 3, limit, limit
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 6
    return clip(short.repr(value), limit)


def markdown_text(value: Any) -> str:
    """`value` as text safe to put into Markdown: `&`, `<` and `>` as entities, so a name holding
    `<script>` or a tag is shown, never run by a viewer that renders HTML inside Markdown."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
