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
from typing import TYPE_CHECKING, Protocol

from vmtax import limits
from vmtax.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd


class RunSource(Protocol):
    """What :func:`resolve` reads: a ``Store``, or the read-only ``store.reader.StoreReader``."""

    def runs(self, selectors: Sequence[str] = ()) -> pd.DataFrame: ...

    def experiments(self) -> pd.DataFrame: ...


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
        if _is_int(text):
            limits.id_text(text, f"selector {selector!r}: an experiment id")
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
        if key in ("exp", "run") and _is_int(value):  # SQLite's integers end at 2^63-1
            limits.id_text(value, f"selector {selector!r}: {key}")
        if key == "status" and value.lower() not in _STATUSES:
            raise UsageError(
                f"malformed selector {selector!r}: status must be one of {', '.join(_STATUSES)}"
            )
        terms.append(Term(key, value))
    return Selector(text, tuple(terms))


def named_experiment_ids(selectors: Sequence[Selector]) -> set[int]:
    """The experiment ids the selectors name by number (not ``latest``)."""
    return {int(v) for s in selectors for v in s.experiment_terms() if _is_int(v)}


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


def matching(runs: pd.DataFrame, parsed: Sequence[Selector]) -> pd.DataFrame:
    """The runs that match any of the ``parsed`` selectors (all of them when there is none),
    renumbered from 0."""
    if parsed:
        import pandas as pd  # heavy: pandas, only where frames are made

        keep = pd.Series(False, index=runs.index)
        for one in parsed:
            keep |= apply(runs, one)
        runs = runs[keep]
    return runs.reset_index(drop=True)


def apply(runs: pd.DataFrame, selector: Selector, latest: int | None = None) -> pd.Series:
    """Boolean mask of the runs that match every term of one parsed selector.

    ``latest`` is the newest experiment id; by default the newest one in ``runs``.
    """
    import pandas as pd  # heavy: pandas, only where frames are made

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
    import pandas as pd  # heavy: pandas, only where frames are made

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


# -- the baseline, scoped by the positional selectors -------------------------------------------


def scoped_baseline(selectors: Sequence[str], baseline: str) -> list[str]:
    """The baseline as selectors, scoped to the experiments the positional selectors name.

    ``compare exp=latest --baseline level=L0`` means the L0 of the latest experiment, not every
    L0 in the store: when every positional selector names an experiment and the baseline names
    none, the baseline is taken within each of those experiments. A baseline that names its own
    experiment, or positional selectors that may match any experiment, leave it as given.
    """
    base = parse(baseline)
    parsed = [parse(s) for s in selectors]
    if base.experiment_terms() or not parsed or any(not p.experiment_terms() for p in parsed):
        return [base.text]
    exps = dict.fromkeys(v.lower() for p in parsed for v in p.experiment_terms())
    return [f"exp={e},{base.text}" for e in exps]


@dataclass
class Resolved:
    """What a command compares: the runs of its selectors plus the baseline's runs, and which
    of them form the baseline (None without a baseline)."""

    runs: pd.DataFrame
    baseline_mask: pd.Series | None
    baseline: str | None
    selectors: list[str]


def resolve(
    store: RunSource, selectors: Sequence[str], baseline: str | None, by: str | None = None
) -> Resolved:
    """Load the runs of ``selectors`` (OR) and of the scoped ``baseline`` from ``store``, once
    for every command that takes a baseline (compare, report, artifacts).

    Raises UsageError when the baseline matches no run of the store, or, for one probe, more
    than one configuration (with ``by``, a pooled comparison: more than one value of that
    label): the message lists the candidates with their experiment, its start time and the
    labels, and how to pick one.
    """
    import pandas as pd  # heavy: pandas, only where frames are made

    chosen = list(selectors)
    runs = store.runs(chosen)
    if not baseline:
        return Resolved(runs, None, None, chosen)
    scoped = scoped_baseline(chosen, baseline)
    base_runs = store.runs(scoped)
    both = pd.concat([runs, base_runs], ignore_index=True).drop_duplicates("run_id")
    both = both.sort_values("run_id").reset_index(drop=True)
    base_mask = both["run_id"].isin(set(base_runs.loc[base_runs["status"] == "ok", "run_id"]))
    if not base_mask.any():
        where = " within " + " or ".join(scoped) if scoped != [baseline] else ""
        raise UsageError(f"baseline {baseline!r} matches no completed run{where}")
    if by is None:
        _check_one_configuration(store, both[base_mask], baseline)
    else:
        _check_one_value(both[base_mask], baseline, by)
    return Resolved(both, base_mask, baseline, chosen)


def label_value(labels: dict[str, object] | None, key: str) -> str | None:
    """The value of label ``key`` (case-insensitive, as selectors match keys), or None."""
    wanted = key.casefold()
    return next((str(v) for k, v in (labels or {}).items() if str(k).casefold() == wanted), None)


def _check_one_value(base: pd.DataFrame, baseline: str, by: str) -> None:
    """A pooled baseline is one value of label ``by`` (its hosts may be many)."""
    values = sorted({label_value(labels, by) or "" for labels in base["labels"]})
    if len(values) > 1:
        shown = ", ".join(f"{by}={v}" if v else f"no {by}" for v in values)
        raise UsageError(
            f"baseline {baseline!r} spans {len(values)} values of {by} ({shown}); "
            f"name one, e.g. --baseline {by}={values[-1]}"
        )


def _check_one_configuration(store: RunSource, base: pd.DataFrame, baseline: str) -> None:
    per_probe = base.groupby("probe")["configuration_id"].nunique()
    if (per_probe <= 1).all():
        return
    probe = str(per_probe[per_probe > 1].index[0])
    cands = base[base["probe"] == probe].drop_duplicates("configuration_id")
    started = _start_times(store)
    described = []
    ordered = cands.sort_values(["experiment_id", "configuration_id"])
    for exp_id, rec_labels, level in zip(
        ordered["experiment_id"], ordered["labels"], ordered["level"], strict=True
    ):
        when = started.get(int(exp_id))
        labels = " ".join(f"{k}={v}" for k, v in sorted((rec_labels or {}).items())) or "none"
        described.append(
            f"experiment {int(exp_id)}"
            + (f" started {when}" if when else "")
            + f", {level}, labels {labels}"
        )
    example = f"exp={int(cands['experiment_id'].max())},{baseline}"
    raise UsageError(
        f"baseline {baseline!r} matches {len(cands)} configurations for probe {probe}: "
        + "; ".join(described)
        + f"; narrow it, e.g. --baseline {example}"
    )


def _start_times(store: RunSource) -> dict[int, str]:
    import pandas as pd  # heavy: pandas, only where frames are made

    exps = store.experiments()
    return {
        int(e): t.strftime("%Y-%m-%d %H:%M:%S UTC")
        for e, t in zip(exps["experiment_id"], exps["started_at"], strict=True)
        if not pd.isna(t)
    }
