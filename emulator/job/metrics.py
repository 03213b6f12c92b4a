"""Metric definitions (``AlgorithmSpecification.MetricDefinitions``) and what they read from a job's logs.

What SageMaker documents, and the emulator does the same way:

* a definition is a ``Name`` (1–255 characters) and a ``Regex`` (1–500); a request carries at
  most 40 (botocore's SageMaker service model: ``MetricDefinitionList``, ``MetricName``,
  ``MetricRegex``); the emulator refuses more, or longer, before any host starts;
* the regexes search the training container's stdout and stderr ("SageMaker hyperparameter tuning
  parses your algorithm's stdout and stderr streams", *Define metrics and environment variables*),
  every host's (each instance writes its own CloudWatch Logs stream);
* a value is a number: a capture that is not one yields no data point (aws/sagemaker-python-sdk
  #3208, observed); CloudWatch takes no NaN or ±Infinity (PutMetricData's documentation), so those
  yield none either;
* ``FinalMetricDataList`` holds one ``MetricData`` (``MetricName``, ``Value``, ``Timestamp``) per
  metric that was emitted, at most 40.

Inferred, not documented (listed in the known differences, ``docs/reference/differences.md``): the value is the regex's
first capture group (the whole match when it has none); the first match in a line counts; the
final value is the one emitted last (by time, over every host); the regex dialect is Python's
``re`` (SageMaker's engine is not documented: a regex Python cannot compile is refused as the
emulator's own limit, not as SageMaker's); a data point's time is when the emulator read the line
(SageMaker's is its log agent's). Lines the emulator itself adds to a host's log (``[emulator] …``)
are not searched: SageMaker has no such lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from ..errors import RequestError

FIELD = "AlgorithmSpecification.MetricDefinitions"
#: botocore's SageMaker service model: MetricDefinitionList max, MetricName and MetricRegex lengths.
MAX_DEFINITIONS = 40
MAX_NAME = 255
MAX_REGEX = 500
#: A number as a metric value: decimal, optional exponent (no ``_`` separators, no ``nan``/``inf``).
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
#: An MPI rank's tag (``mpirun --tag-output``) before the line the rank printed.
MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
#: What starts a line the emulator writes into a host's log.
EMULATOR_LINE = "[emulator]"
#: Points kept per metric (the newest are kept when a script prints more).
MAX_POINTS = 100_000


@dataclass(frozen=True)
class MetricDefinition:
    """One ``{"Name": …, "Regex": …}`` of the request."""

    name: str
    regex: str

    def to_dict(self) -> dict[str, str]:
        return {"Name": self.name, "Regex": self.regex}


def parse_definitions(value: Any, field_name: str = FIELD) -> tuple[MetricDefinition, ...]:
    """The request's definitions, checked as the service model bounds them; ``None`` is none.
    Raises :class:`~emulator.errors.RequestError` naming the member that is wrong."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise RequestError(field_name, f"must be a list of {{Name, Regex}} objects, got {type(value).__name__}")
    if len(value) > MAX_DEFINITIONS:
        raise RequestError(field_name, f"{len(value)} definitions", allowed=f"at most {MAX_DEFINITIONS}")
    out = []
    for i, item in enumerate(value):
        where = f"{field_name}[{i}]"
        if not isinstance(item, Mapping):
            raise RequestError(where, f"must be an object with Name and Regex, got {type(item).__name__}")
        name, regex = item.get("Name"), item.get("Regex")
        for key, text, limit in (("Name", name, MAX_NAME), ("Regex", regex, MAX_REGEX)):
            if not isinstance(text, str) or not text:
                raise RequestError(f"{where}.{key}", f"missing or empty ({text!r})", allowed="a non-empty string")
            if len(text) > limit:
                raise RequestError(f"{where}.{key}", f"{len(text)} characters", allowed=f"1 to {limit} characters")
        assert isinstance(name, str) and isinstance(regex, str)
        try:
            re.compile(regex)
        except re.error as exc:
            raise RequestError(f"{where}.Regex", f"{regex!r} does not compile with Python's re ({exc}); "
                               "SageMaker's regex engine is not documented, so the emulator cannot apply it "
                               "(the emulator's limit, not necessarily SageMaker's)") from None
        out.append(MetricDefinition(name, regex))
    return tuple(out)


def searched_text(line: str) -> str | None:
    """The part of a host's log line the regexes search: None for the emulator's own lines."""
    tag = MPI_TAG.match(line)
    rest = line[tag.end():] if tag else line
    return None if rest.lstrip().startswith(EMULATOR_LINE) else line


def captured(match: re.Match[str]) -> str:
    """What a match captures for the metric: its first group (the whole match without groups)."""
    return (match.group(1) if match.re.groups else match.group(0)) or ""


def value_of(match: re.Match[str]) -> float | None:
    """The metric value a match yields: :func:`captured` as a finite number, else None."""
    text = captured(match)
    if not NUMBER.fullmatch(text.strip()):
        return None
    number = float(text.strip())
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Point:
    """A value a host's log gave a metric, and when (wall clock)."""

    name: str
    value: float
    time: float
    host: str

    def to_dict(self) -> dict[str, Any]:
        return {"MetricName": self.name, "Value": self.value, "Timestamp": self.time, "Host": self.host}


@dataclass
class Scraper:
    """Applies the definitions to log lines as they come; keeps the points and what matched."""

    definitions: Sequence[MetricDefinition]
    points: dict[str, list[Point]] = field(default_factory=dict)
    #: Per metric: lines the regex matched, and the first matched text that was not a number.
    matches: dict[str, int] = field(default_factory=dict)
    not_numbers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._compiled = [(d, re.compile(d.regex)) for d in self.definitions]
        for d in self.definitions:
            self.points.setdefault(d.name, [])
            self.matches.setdefault(d.name, 0)

    def feed(self, host: str, line: str, when: float) -> None:
        text = searched_text(line)
        if text is None:
            return
        for d, rx in self._compiled:
            m = rx.search(text)
            if m is None:
                continue
            self.matches[d.name] += 1
            value = value_of(m)
            if value is None:
                self.not_numbers.setdefault(d.name, captured(m))
                continue
            series = self.points[d.name]
            series.append(Point(d.name, value, when, host))
            if len(series) > MAX_POINTS:
                del series[: len(series) - MAX_POINTS]

    def all_points(self) -> list[Point]:
        return sorted((p for s in self.points.values() for p in s), key=lambda p: p.time)

    def final(self) -> list[Point]:
        """Per metric with data (definition order): the point emitted last (lines are fed in the
        order the tailer reads them)."""
        return [self.points[d.name][-1] for d in self.definitions if self.points.get(d.name)]

    def unmatched(self) -> list[MetricDefinition]:
        """Definitions that yielded no data point."""
        return [d for d in self.definitions if not self.points.get(d.name)]


def _literal(regex: str) -> str:
    """The regex's literal characters (escapes and syntax blanked), for :func:`nearest_line`."""
    return re.sub(r"\\[a-zA-Z]|\\|[()\[\]{}.*+?^$|]", " ", regex)


def nearest_line(regex: str, lines: Iterable[tuple[str, str]], *, width: int = 300) -> tuple[str, str] | None:
    """The ``(host, line)`` that shares the longest run of characters with the regex's literal
    text (at least 3), the first such line on a tie; None when no line comes close. What a user
    who mistyped a regex wants to see next to it."""
    literal = _literal(regex)
    words = {w.lower()[i:i + 3] for w in re.findall(r"[^\s]{3,}", literal) for i in range(len(w) - 2)}
    if not words:
        return None
    best: tuple[int, str, str] | None = None
    for host, line in lines:
        if searched_text(line) is None:
            continue
        short = line[:width]
        lowered = short.lower()
        if not any(w in lowered for w in words):
            continue
        sm = SequenceMatcher(None, lowered, literal.lower(), autojunk=False)
        size = sm.find_longest_match(0, len(lowered), 0, len(literal)).size
        if size >= 3 and (best is None or size > best[0]):
            best = (size, host, line)
    return None if best is None else (best[1], best[2])


__all__ = ["FIELD", "MAX_DEFINITIONS", "MetricDefinition", "Point", "Scraper", "captured", "nearest_line",
           "parse_definitions", "searched_text", "value_of"]
