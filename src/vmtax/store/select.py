"""Selectors: the small language every command uses to pick runs.

A selector is ``key=value[,key=value...]``; the terms of one selector must all match (AND),
and a run matches a list of selectors when it matches any of them (OR). Keys:

- ``exp`` / ``experiment``: an experiment id or ``latest``; a bare integer (or ``latest``)
  is short for ``exp=...``;
- ``config`` (the display key, e.g. ``L1 accel=tcg vcpus=2``), ``level``, ``probe``,
  ``target``, ``hypervisor``, ``status``;
- ``run``: a run id;
- any other key (``accel``, ``vcpus``, ...) matches a configuration label.

Values compare case-insensitively. Example: ``exp=latest,probe=cpuid level=L1``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from vmtax.errors import UsageError

_ALIASES = {"experiment": "exp"}
_COLUMNS = ("config", "level", "probe", "target", "hypervisor", "status")
_STATUSES = ("ok", "failed", "lost")


@dataclass(frozen=True)
class Term:
    key: str
    value: str


@dataclass(frozen=True)
class Selector:
    text: str
    terms: tuple[Term, ...]

    def experiment_terms(self) -> list[str]:
        return [t.value for t in self.terms if t.key == "exp"]


def parse(selector: str) -> Selector:
    """Parse one selector; a malformed one raises UsageError naming what is wrong."""
    text = selector.strip()
    if not text:
        raise UsageError("empty selector: use key=value, e.g. exp=latest or probe=cpuid")
    if _is_int(text) or text.lower() == "latest":
        return Selector(text, (Term("exp", text.lower()),))
    terms = []
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key or not value:
            raise UsageError(
                f"malformed selector {selector!r}: {part.strip()!r} is not key=value "
                "(e.g. exp=latest,probe=cpuid)"
            )
        if not key.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise UsageError(f"malformed selector {selector!r}: bad key {key!r}")
        key = _ALIASES.get(key, key)
        if key == "exp" and not (_is_int(value) or value.lower() == "latest"):
            raise UsageError(
                f"malformed selector {selector!r}: exp must be an experiment id or 'latest'"
            )
        if key == "run" and not _is_int(value):
            raise UsageError(f"malformed selector {selector!r}: run must be a run id")
        if key == "status" and value.lower() not in _STATUSES:
            raise UsageError(
                f"malformed selector {selector!r}: status must be one of {', '.join(_STATUSES)}"
            )
        terms.append(Term(key, value))
    return Selector(text, tuple(terms))


def experiment_ids(
    selectors: Sequence[Selector], latest: Callable[[], int | None]
) -> set[int] | None:
    """Experiments the selectors can match, or None when some selector may match any."""
    if not selectors:
        return None
    ids: set[int] = set()
    for sel in selectors:
        values = sel.experiment_terms()
        if not values:
            return None
        # Terms are ANDed: a selector naming two different experiments matches nothing.
        resolved = {_resolve_exp(v, latest) for v in values}
        if len(resolved) == 1 and None not in resolved:
            ids |= {x for x in resolved if x is not None}
    return ids


def apply(runs: pd.DataFrame, selector: Selector, latest: int | None = None) -> pd.Series:
    """Boolean mask of the runs that match every term of one parsed selector.

    ``latest`` is the newest experiment id; by default the newest one in ``runs``.
    """
    if latest is None and len(runs):
        latest = int(runs["experiment_id"].max())
    keep = pd.Series(True, index=runs.index)
    for term in selector.terms:
        keep &= _term_mask(runs, term, latest)
    return keep


def mask(runs: pd.DataFrame, selector: str) -> pd.Series:
    """Apply one selector string to a runs frame (``Store.runs()`` columns)."""
    return apply(runs, parse(selector))


def _term_mask(runs: pd.DataFrame, term: Term, latest: int | None) -> pd.Series:
    value = term.value.casefold()
    if term.key == "exp":
        wanted = latest if value == "latest" else int(value)
        return runs["experiment_id"] == wanted
    if term.key == "run":
        return runs["run_id"] == int(value)
    if term.key in _COLUMNS:
        col = runs[term.key].astype("string").str.casefold()
        return (col == value).fillna(False).astype(bool)
    matches = [
        any(k.casefold() == term.key and str(v).casefold() == value for k, v in labels.items())
        for labels in runs["labels"]
    ]
    return pd.Series(matches, index=runs.index, dtype=bool)


def _resolve_exp(value: str, latest: Callable[[], int | None]) -> int | None:
    return latest() if value.lower() == "latest" else int(value)


def _is_int(value: str) -> bool:
    return value.isascii() and value.isdigit()
