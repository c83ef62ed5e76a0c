"""A problem of the sweep's checks as the sweep dialog says it: the checks
(`dtgui.core.sweeps.sweep.check`, `parse_param`) are written for `dtgui sweep --param`; the
form says them without the command line's syntax, each parameter by the name it shows."""

from __future__ import annotations

import re

ERROR_STYLE = "color: #b00020"  # a problem's colour, under its row or below the form


# The command line's syntax in a problem, and what the form says instead.
_SYNTAX = (
    (re.compile(r"^--param "), ""),
    (re.compile(r" \(choice:[^)]*\)"), ""),
    (re.compile(r"use int:LOW:HIGH or logint:LOW:HIGH \(or a list\)"),
     "choose int, or a list of values"),
    (re.compile(r"for one value use choice:VALUE"), "for one value use a list of values"),
    (re.compile(r"LOW must be below HIGH"), "the lowest must be below the highest"),
    (re.compile(r"a range is \w+:LOW:HIGH"), "a range needs its lowest and highest value"),
    (re.compile(r" \((?:int|logint|uniform|loguniform):[^)]*\)"), ""),
    (re.compile(r" \(--param NAME=SPACE\)"), ""),
)


def in_words(problem: str, labels: dict[str, str]) -> str:
    """A problem of the sweep's checks (written for `dtgui sweep --param`) as the form says
    it: without the command line's syntax, each parameter by the name the form shows."""
    for pattern, words in _SYNTAX:
        problem = pattern.sub(words, problem)
    for name, label in labels.items():
        if name and label and name != label:
            problem = re.sub(rf"^{re.escape(name)}=", f"{label} ", problem)
            problem = re.sub(rf"^{re.escape(name)}(?=[: ])", label, problem)
            problem = re.sub(rf"(?<=for ){re.escape(name)}\b", label, problem)
    return sentence(problem)


def sentence(text: str) -> str:
    """`text` begun with a capital."""
    return text[:1].upper() + text[1:]

