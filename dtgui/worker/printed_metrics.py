"""Numbers a user's script prints, read as metrics (docs/own-scripts.md). Stdlib only.

The one parser of printed lines: the supervisor's script child (script_child.py) feeds it the
script's output as it passes, and the wizard's preview feeds it sample lines.

Out of the box a line gives one value per pair it holds: ``name: 1.23``, ``name=1.23``,
``name is 1.23`` or ``name 1.23`` (the last form only when the whole line is such pairs, so that
prose such as ``Found 6000 images`` gives nothing). A number in prose is not a metric: a line
gives values only when one of its names is a known metric's (loss, accuracy, lr, ...: KNOWN) or
it carries a step or epoch marker (``Number of devices: 1`` gives nothing). A qualifier before
a name is kept as the author wrote it: ``Test Loss: 0.21`` is the metric "Test Loss", not the
training loss (``Final loss`` is the loss). The x of the line's values is its ``step``,
``iter``, ``batch`` (a step axis) or, where only an epoch is given, its ``epoch`` (an epoch
axis); a line with neither takes the x of the last line that had one (``Final loss is 0.09``
after the epochs), else counts lines that gave values. ``Epoch 3/10`` (or ``step 40/100``)
tells the progress. Source-file positions and TensorFlow's own log lines are left alone.

A user's patterns are regular expressions with named groups: a group named ``step``,
``iter``, ``batch`` or ``epoch`` gives the x, every other group a value of that name. A line
that one of them matches is read by it alone; other lines by the defaults (unless turned off).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)\b"
STEP_WORDS = ("step", "steps", "global_step", "iter", "iters", "iteration", "batch")
EPOCH_WORDS = ("epoch",)
AXES = ("step", "epoch", "line")  # what a value's x counts
_PAIR = re.compile(
    r"(?<![\w./\\:-])(?P<name>[A-Za-z_][\w./-]*[A-Za-z0-9_]|[A-Za-z_])"
    r"(?:\s*(?P<sep>[:=])\s*|\s+(?P<is>is)\s+|\s+)"
    rf"(?P<value>{NUMBER})(?![\w/]|[.:]\S|,\d)(?:%)?", re.IGNORECASE)  # not 34,826
# words before a name that make another metric of it (kept: "Test Loss"), or none ("Final")
QUALIFIERS = ("train", "training", "test", "testing", "val", "valid", "validation", "eval",
              "evaluation")
_QUALIFIER = re.compile(rf"(?<![\w-])(?P<word>{'|'.join(QUALIFIERS)}|final)\s+$",
                        re.IGNORECASE)
# a word of a name that makes it a metric (`val_sparse_categorical_accuracy`, `Test Loss`)
KNOWN = frozenset({
    "loss", "acc", "accuracy", "lr", "learning_rate", "mae", "mse", "rmse", "mape", "auc",
    "precision", "recall", "f1", "perplexity", "ppl", "error", "err", "crossentropy", "bleu",
    "iou", "dice", "psnr", "ssim", "reward", "entropy", "grad_norm", "top1", "top5", "wer",
    "cer"})
_WORDS = re.compile(r"[\s_./-]+")
_COUNT_OF = re.compile(
    r"(?<![\w-])(?P<word>epoch|step|iter(?:ation)?|batch)\s*[:=]?\s*(?P<n>\d+)\s*(?:/|\bof\b)\s*"
    r"(?P<total>\d+)(?![\w.])", re.IGNORECASE)
_FILLER = re.compile(r"[^A-Za-z]*")  # what may sit between pairs for `name 1.23` to count
_SOURCE_FILE = re.compile(r"\.(?:py|h|hpp|cc|cpp|c|cu|so)$", re.IGNORECASE)
# glog (`I1124 17:11:31.1234 ...`) and TensorFlow's C++ log (`2026-11-24 17:11:31.12: I ...`)
LOG_LINE = re.compile(r"^\s*(?:[IWEF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
                       r"(?:\.\d+)?: [IWEF] )")
MAX_LINE = 4000  # longer lines are not looked at (a dumped array, a progress bar's backspaces)


@dataclass(frozen=True)
class Reading:
    """One printed value: its name, value, x and what the x counts (AXES)."""

    name: str
    value: float
    step: float
    axis: str


@dataclass
class LineResult:
    readings: list[Reading] = field(default_factory=list)
    progress: tuple[str, int, int] | None = None  # ("epoch" | "step", done, total)
    pattern: int = -1  # the user pattern that read it (-1: the defaults)


def _axis_of(name: str) -> str:
    low = name.lower()
    if low in STEP_WORDS:
        return "step"
    if low in EPOCH_WORDS:
        return "epoch"
    return ""


def is_known_metric(name: str) -> bool:
    """A name a metric goes by: it or one of its words is KNOWN."""
    low = name.lower()
    return low.replace(" ", "_") in KNOWN or any(w in KNOWN for w in _WORDS.split(low))


def _parsed_number(text: str) -> float | None:
    """The number a pair or a pattern's group gives (a group may take the punctuation after
    it: `0.53,`)."""
    try:
        return float(text.strip().rstrip(".,;:)]}%") or text)
    except ValueError:
        return None


def compile_patterns(patterns: Iterable[str]) -> tuple[list[re.Pattern[str]], list[str]]:
    """The patterns that compile, and why each other one does not (a sentence each)."""
    compiled, problems = [], []
    for number, text in enumerate(patterns, 1):
        if not text.strip():
            continue
        problem = pattern_problem(text)
        if problem:
            problems.append(f"Pattern {number}: {problem}")
        else:
            compiled.append(re.compile(text))
    return compiled, problems


def pattern_problem(text: str) -> str:
    """Why `text` cannot be a metric pattern ("" when it can)."""
    try:
        pattern = re.compile(text)
    except re.error as exc:
        return f"{text!r} is not a regular expression: {exc}"
    values = [g for g in pattern.groupindex if not _axis_of(g)]
    if not values:
        return (f"{text!r} names no value: give each number a named group, e.g. "
                r"(?P<loss>\S+)")
    return ""


def metric_name(tag: str) -> str:
    """The name a tag stands for whatever wrote it, to tell the same metric from two sources:
    TensorBoard's ``train/epoch_loss`` and a printed ``loss`` are both ``loss``;
    ``validation/epoch_accuracy``, a printed ``Validation Accuracy`` and ``val_accuracy`` all
    ``val_accuracy``."""
    parts = [p for p in tag.lower().replace(" ", "_").split("/") if p]
    if not parts:
        return ""
    last = parts[-1]
    for prefix in ("epoch_", "batch_", "train_", "training_"):
        if last.startswith(prefix) and len(last) > len(prefix):
            last = last[len(prefix):]
            break
    if any(p.startswith(("val", "eval")) for p in parts[:-1]) and not last.startswith("val"):
        last = "val_" + last
    if last.startswith("validation_"):
        last = "val_" + last[len("validation_"):]
    return last


def _ends_pair(line: str, end: int, starts: set[int]) -> bool:
    """A value is followed by the line's end, punctuation or the next pair, not by a word
    (`done: 0 errors` is prose)."""
    after = len(line) - len(line[end:].lstrip())
    return after >= len(line) or not line[after].isalpha() or after in starts


class LineParser:
    """Reads printed lines into values; keeps the line counter and the epochs' numbering."""

    def __init__(self, patterns: Sequence[str] = (), *, defaults: bool = True) -> None:
        self.patterns, self.problems = compile_patterns(patterns)
        self.defaults = defaults
        self.lines = 0  # lines that gave values (the x where a line gives none)
        self.first_epoch: int | None = None  # 0 or 1: how the script numbers its epochs
        self.last_x: tuple[float, str] | None = None  # of the last line with values and an x

    def feed(self, line: str) -> LineResult:
        result = LineResult()
        line = line.strip()
        if not line or len(line) > MAX_LINE:
            return result
        for index, pattern in enumerate(self.patterns):
            match = pattern.search(line)
            if match is not None:
                result.pattern = index
                self._read(result, [(k, v) for k, v in match.groupdict().items()
                                    if v is not None], None)
                return result
        if self.defaults and not LOG_LINE.match(line):
            self._read(result, *self._default_pairs(line))
        return result

    def _default_pairs(self, line: str) -> tuple[list[tuple[str, str]],
                                                 tuple[str, int, int] | None]:
        counted = _COUNT_OF.search(line)
        progress = None
        rest = line
        if counted is not None:
            word = "epoch" if counted["word"].lower() == "epoch" else "step"
            progress = (word, int(counted["n"]), int(counted["total"]))
            rest = line[:counted.start()] + " " + line[counted.end():]
        matches = list(_PAIR.finditer(rest))
        starts = {m.start() for m in matches}
        found: list[tuple[str, str, bool, bool]] = []  # (name, value, spaced, axis)
        leftover, last = [], 0
        for match in matches:
            name = match["name"]
            if _SOURCE_FILE.search(name) or not _ends_pair(rest, match.end(), starts):
                continue
            start = match.start()
            qualifier = _QUALIFIER.search(rest, last, start)
            if qualifier is not None and not _axis_of(name):
                start = qualifier.start()
                if qualifier["word"].lower() != "final":  # the final loss is the loss
                    name = f"{qualifier['word']} {name}"
            leftover.append(rest[last:start])
            last = match.end()
            found.append((name, match["value"], match["sep"] is None and match["is"] is None,
                          bool(_axis_of(name))))
        leftover.append(rest[last:])
        if any(spaced for _, _, spaced, _ in found) and \
                not all(_FILLER.fullmatch(piece) for piece in leftover):
            # `name 1.23` only where the line is nothing but pairs (or a step or epoch
            # marker: `Finished epoch 0, accuracy is 0.49.`)
            found = [f for f in found if not f[2] or f[3]]
        marked = progress is not None or any(axis for *_, axis in found)
        if not marked and not any(is_known_metric(name) for name, *_ in found):
            found = []  # prose: `Number of devices: 1`
        pairs = [(name, value) for name, value, _, _ in found]
        if progress is not None:
            pairs.append((progress[0], str(progress[1])))
        return pairs, progress

    def _read(self, result: LineResult, pairs: list[tuple[str, str]],
              progress: tuple[str, int, int] | None = None) -> None:
        x: dict[str, float] = {}
        values: list[tuple[str, float]] = []
        for name, text in pairs:
            number = _parsed_number(text)
            if number is None:
                continue
            axis = _axis_of(name)
            if axis:
                if math.isfinite(number):
                    x.setdefault(axis, number)
            else:
                values.append((name, number))
        if "epoch" in x and self.first_epoch is None and progress is None:  # `Epoch 3/10` counts from 1 whatever the script does
            self.first_epoch = 0 if x["epoch"] == 0 else 1
        if progress is not None:
            kind, n, total = progress
            if kind == "epoch" and not values:
                n -= 1  # `Epoch 3/10` alone opens epoch 3: two are done
            result.progress = (kind, max(0, n), total)
        if not values:
            return
        self.lines += 1
        if "step" in x:
            step, axis = x["step"], "step"
        elif "epoch" in x:
            step, axis = x["epoch"], "epoch"
        elif self.last_x is not None:  # said after that step or epoch (`Test loss: 0.02`)
            step, axis = self.last_x
        else:
            step, axis = float(self.lines), "line"
        if axis != "line":
            self.last_x = (step, axis)
        result.readings = [Reading(name, value, step, axis) for name, value in values]

    def epochs_done(self, epoch: float) -> int:
        """Epochs finished when a line gives values for `epoch` (0-based numbering: +1)."""
        return int(epoch) + (1 if self.first_epoch == 0 else 0)


def preview(lines: Iterable[str], patterns: Sequence[str] = (), *,
            defaults: bool = True) -> list[tuple[str, LineResult]]:
    """What each sample line gives (the wizard shows it as the user types)."""
    parser = LineParser(patterns, defaults=defaults)
    return [(line, parser.feed(line)) for line in lines]


def describe(result: LineResult) -> str:
    """A line's values in a few words: "train_loss 1.82, accuracy 0.33 @ epoch 0"."""
    if not result.readings and result.progress is None:
        return ""
    parts = [f"{r.name} {r.value:g}" for r in result.readings]
    text = ", ".join(parts)
    if result.readings:
        first = result.readings[0]
        text += f" @ {first.axis} {first.step:g}"
    if result.progress is not None:
        kind, done, total = result.progress
        text += ("; " if text else "") + f"{kind}s {done} of {total} done"
    return text
