"""gradcheck's error in one line: the first entries where its two Jacobians differ, never the
Jacobians themselves.

``torch.autograd.gradcheck`` raises a ``GradcheckError`` whose message holds the numerical and
the analytical Jacobian as printed tensors (in fast mode, recomputed in slow mode for the
message): dozens of lines for a sample of a few elements, a summary with ``...`` (the first
and last rows and columns) for larger ones. The autograd check finds the first differing
entry itself where the Jacobian is small (``jacobian_mismatch``); otherwise :func:`condense`
reads the printed Jacobians and names the first few entries that differ among those printed,
in the autograd check's order ``[flat output index, flat input index]``, with the Jacobian's
size and gradcheck's largest difference per element. Other gradcheck errors keep their first
paragraph.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: gradcheck's headline of a Jacobian mismatch (torch's wording, also in forward mode).
_HEADLINE = re.compile(
    r"Jacobian (?:computed with forward mode )?mismatch for output (?P<out>\d+) with respect "
    r"to input (?P<inp>\d+)"
)
#: The two Jacobians recomputed in slow mode after a fast-mode failure ...
_SLOW = re.compile(r"\nNumerical:\n(?P<n>.*?)\nAnalytical:\n(?P<a>.*?)\n\n", re.S)
#: ... or as the headline's own (slow mode; in fast mode, two numbers).
_DIRECT = re.compile(r"numerical:(?P<n>.*?)\nanalytical:(?P<a>.*?)(?:\n\n|\n?$)", re.S)
_MAX_DIFF = re.compile(r"max per-element difference \(slow mode\) is: (?P<d>.+?)\.?\n")
#: gradcheck's words when only its fast mode (a random projection) disagrees.
_SLOW_AGREES = "Fast gradcheck failed but element-wise differences are small"
#: One row of a printed matrix: the text between innermost brackets.
_ROW = re.compile(r"\[([^\[\]]*)\]")

#: gradcheck's default tolerance, and the rounding of its printed values (4 decimals).
_ATOL, _RTOL, _PRINTED = 1e-5, 1e-3, 1e-4

#: Entries named in a message.
SHOWN = 3

#: A printed Jacobian: (input element, output element) -> value, as gradcheck orients it.
Entries = dict[tuple[int, int], complex]
#: The flat sizes of the differentiated inputs and of the differentiable outputs.
Sizes = tuple[Sequence[int], Sequence[int]]


def is_jacobian_mismatch(exc: BaseException) -> bool:
    """Whether a gradcheck error says that the two Jacobians differ (not, e.g., a dtype)."""
    return _HEADLINE.search(str(exc)) is not None


def condense(exc: BaseException, names: Sequence[str], sizes: Sizes | None = None) -> str:
    """gradcheck's error ``exc`` in one line (see the module docstring). ``names`` name the
    differentiated inputs in order; ``sizes`` let entries after a printed ``...`` be named
    too."""
    text = str(exc)
    head = _HEADLINE.search(text)
    if head is None:
        return _first_paragraph(text)
    out, inp = int(head["out"]), int(head["inp"])
    name = names[inp] if inp < len(names) else f"input {inp}"
    where = f"Jacobian d(output {out})/d({name}) [flat output index, flat input index]"
    prefix = text[: head.start()].strip()
    if prefix:
        where = f"{prefix} {where}"
    shape = None
    if sizes is not None and inp < len(sizes[0]) and out < len(sizes[1]):
        shape = (sizes[0][inp], sizes[1][out])
    found = _SLOW.search(text) or _DIRECT.search(text)
    largest = _MAX_DIFF.search(text)
    tail = f"; largest difference per element {_number(largest['d'])}" if largest else ""
    if _SLOW_AGREES in text:
        return (
            f"{where}: gradcheck's fast mode (a random projection of the Jacobians) differs, "
            f"but the Jacobians agree element by element{tail}; fast_mode=False checks them "
            "that way"
        )
    if found is None:
        return f"{where}: the Jacobians differ{tail}"
    numerical, analytical = _entries(found["n"], shape), _entries(found["a"], shape)
    if numerical is None or analytical is None or numerical[0].keys() != analytical[0].keys():
        values = f"numerical {_short(found['n'])}, analytical {_short(found['a'])}"
        return f"{where}: {values} (gradcheck's fast mode: projections of the Jacobians){tail}"
    complete = numerical[1] and analytical[1]
    return where + _differing(numerical[0], analytical[0], complete, shape) + tail


def _differing(
    numerical: Entries, analytical: Entries, complete: bool, shape: tuple[int, int] | None
) -> str:
    """`` at (3, 3): expected 2, actual 0; ... (2 of 16 entries differ)``."""
    order = sorted(numerical, key=lambda rc: (rc[1], rc[0]))  # by output element, then input
    bad = [rc for rc in order if _differs(numerical[rc], analytical[rc])]
    of = "" if shape is None else f" of {shape[0] * shape[1]}"
    printed = f"the {len(numerical)} entries gradcheck printed{of}"
    if not bad:
        if complete:
            return ": the Jacobians agree to the 4 decimals gradcheck printed"
        return f": {printed} agree (it left the others out)"
    shown = "; ".join(
        f"({col}, {row}): expected {_show(numerical[row, col])}, "
        f"actual {_show(analytical[row, col])}"
        for row, col in bad[:SHOWN]
    )
    count = f"{len(bad)} of {len(numerical)} entries" if complete else f"{len(bad)} of {printed}"
    return f" at {shown} ({count} differ)"


def _differs(expected: complex, actual: complex) -> bool:
    bound = _ATOL + _RTOL * abs(expected) + _PRINTED * max(1.0, abs(expected))
    return abs(expected - actual) > bound


def _entries(text: str, shape: tuple[int, int] | None) -> tuple[Entries, bool] | None:
    """A printed 2-d tensor's entries by (row, column), and whether it was printed whole;
    None if it is no such matrix. Entries after a ``...`` are placed from the end when
    ``shape`` is known, else left out."""
    start, end = text.find("[["), text.rfind("]]")
    if start < 0 or end < start:
        return None
    body = text[start + 1 : end + 1]
    rows: list[list[str]] = []
    row_gap: int | None = None
    last = 0
    for match in _ROW.finditer(body):
        if row_gap is None and "..." in body[last : match.start()]:
            row_gap = len(rows)
        rows.append([item.strip() for item in match.group(1).split(",") if item.strip()])
        last = match.end()
    entries: Entries = {}
    complete = row_gap is None
    for k, items in enumerate(rows):
        row = _position(k, len(rows), row_gap, None if shape is None else shape[0])
        col_gap = items.index("...") if "..." in items else None
        complete = complete and col_gap is None
        values = [item for item in items if item != "..."]
        for c, item in enumerate(values):
            col = _position(c, len(values), col_gap, None if shape is None else shape[1])
            if row is None or col is None:
                continue
            try:
                entries[row, col] = complex(item.replace(" ", ""))
            except ValueError:
                return None
    return (entries, complete) if entries else None


def _position(k: int, printed: int, gap: int | None, size: int | None) -> int | None:
    """The index of the ``k``-th of ``printed`` items of a dim of ``size``, ``gap`` of which
    come before its ``...`` (None: not known)."""
    if gap is None or k < gap:
        return k
    return None if size is None else size - (printed - k)


def _show(value: complex) -> str:
    if value.imag == 0:
        return f"{value.real:.6g}"
    return f"({value.real:.6g}{value.imag:+.6g}j)"


def _number(text: str) -> str:
    """A number gradcheck printed, to 6 digits (as printed if it is none)."""
    try:
        return _show(complex(text.strip().replace(" ", "")))
    except ValueError:
        return text.strip()


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 60 else line[:57] + "..."


def _first_paragraph(text: str) -> str:
    """The first paragraph of a message, on one line, cut to a few hundred characters."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    return paragraph if len(paragraph) <= 300 else paragraph[:297] + "..."
