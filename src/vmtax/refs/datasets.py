"""Reference datasets: published results shipped in the package, plus the user's own imports.

Built-in datasets are the CSV files in ``vmtax/refs/data``. ``vmtax refs import`` stores user
datasets under the XDG data directory (``platformdirs.user_data_dir("vmtax")/refs``). A user
dataset must have the study-A columns of ``fitzgerald2014.csv``, so that ``vmtax compare
--dataset`` can recompute it. Cells are kept as text: a published figure's printed precision
(its number of decimals) is part of what it says.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd
import platformdirs

from vmtax.errors import UsageError, VmtaxError

STUDYA_COLUMNS = [
    "table",
    "test",
    "overcommitted",
    "arch",
    "level",
    "tpsec",
    "tpsec_delta_pct",
    "tpsec_stderr",
    "tpsec_stderr_pct",
    "resp_ms",
    "resp_delta_pct",
    "resp_stderr",
    "resp_stderr_pct",
]
KEY_COLUMNS = ["table", "test", "overcommitted", "arch", "level"]
REQUIRED_NUMBERS = [
    "tpsec",
    "tpsec_stderr",
    "tpsec_stderr_pct",
    "resp_ms",
    "resp_stderr",
    "resp_stderr_pct",
]
OPTIONAL_NUMBERS = ["tpsec_delta_pct", "resp_delta_pct"]  # empty at the first level of a chain

DESCRIPTIONS = {
    "fitzgerald2014": "Study A: SysBench on x86_64 KVM and s390x z/VM, L0-L2 (tables 5-13)",
    "dvh2020_micro": "Study C: DVH microbenchmarks in CPU cycles (VM, nested VM, + DVH)",
    "matthews2009_table1": "Study D: relay-ring timing per platform (mean, std dev, min, max)",
    "virtage_table2": "Study E: VM-exit overhead by factor, SPT vs EPT (normalised)",
    "zvm_xen2009_overcommit": "Study B: overcommit steps (guests, vCPUs on 8 CPUs, ratios)",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


@dataclass
class Dataset:
    name: str
    source: str  # "builtin" | "user"
    path: str
    rows: int
    studya: bool
    description: str


def user_dir() -> Path:
    """Where imported datasets live (XDG data directory)."""
    return Path(platformdirs.user_data_dir("vmtax")) / "refs"


def _builtin() -> dict[str, str]:
    root = resources.files("vmtax.refs") / "data"
    return {
        p.name[:-4]: p.read_text(encoding="utf-8")
        for p in root.iterdir()
        if p.name.endswith(".csv")
    }


def _user() -> dict[str, Path]:
    folder = user_dir()
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.csv"))}


def _frame(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)


def datasets() -> list[Dataset]:
    """Every dataset, built-in first, each name once (a built-in name cannot be imported)."""
    out = []
    for name, text in sorted(_builtin().items()):
        df = _frame(text)
        out.append(
            Dataset(
                name,
                "builtin",
                f"vmtax/refs/data/{name}.csv",
                len(df),
                list(df.columns) == STUDYA_COLUMNS,
                DESCRIPTIONS.get(name, ""),
            )
        )
    for name, path in _user().items():
        df = _frame(path.read_text(encoding="utf-8"))
        out.append(
            Dataset(
                name,
                "user",
                str(path),
                len(df),
                list(df.columns) == STUDYA_COLUMNS,
                "imported study-A table",
            )
        )
    return out


def load(name: str) -> pd.DataFrame:
    """A dataset as a frame of strings (cells exactly as published)."""
    builtin = _builtin()
    if name in builtin:
        return _frame(builtin[name])
    user = _user()
    if name in user:
        return _frame(user[name].read_text(encoding="utf-8"))
    known = ", ".join(sorted([*builtin, *user]))
    raise UsageError(f"unknown dataset {name!r} (known: {known}); see vmtax refs list")


def load_studya(name: str) -> pd.DataFrame:
    """A dataset that must have the study-A columns (for ``compare --dataset``)."""
    df = load(name)
    if list(df.columns) != STUDYA_COLUMNS:
        raise UsageError(
            f"dataset {name!r} is not a study-A table (columns "
            f"{', '.join(STUDYA_COLUMNS)}); it cannot be recomputed"
        )
    return df


def validate(text: str, where: str) -> pd.DataFrame:
    """Parse and check a study-A CSV; any problem is a one-line UsageError naming the line."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise UsageError(
            f"{where}: empty file; expected a header with the columns {','.join(STUDYA_COLUMNS)}"
        )
    header = [c.strip() for c in rows[0]]
    missing = [c for c in STUDYA_COLUMNS if c not in header]
    extra = [c for c in header if c not in STUDYA_COLUMNS]
    if missing or extra or len(header) != len(STUDYA_COLUMNS):
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected {', '.join(extra)}")
        if not parts:
            parts.append("duplicated column")
        raise UsageError(
            f"{where} line 1: {'; '.join(parts)} (columns must be {','.join(STUDYA_COLUMNS)})"
        )
    seen: dict[tuple[str, ...], int] = {}
    clean = []
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise UsageError(f"{where} line {lineno}: {len(row)} fields, expected {len(header)}")
        rec = {h: cell.strip() for h, cell in zip(header, row, strict=True)}
        for col in KEY_COLUMNS:
            if not rec[col]:
                raise UsageError(f"{where} line {lineno}: {col} is empty")
        if rec["overcommitted"].lower() not in ("yes", "no"):
            raise UsageError(
                f"{where} line {lineno}: overcommitted must be yes or no, "
                f"not {rec['overcommitted']!r}"
            )
        if not re.fullmatch(r"L\d+", rec["level"]):
            raise UsageError(
                f"{where} line {lineno}: level must be L0, L1, ... not {rec['level']!r}"
            )
        for col in REQUIRED_NUMBERS + OPTIONAL_NUMBERS:
            value = rec[col]
            if not value and col in OPTIONAL_NUMBERS:
                continue
            if not _NUMBER.fullmatch(value):
                raise UsageError(
                    f"{where} line {lineno}: {col} is not a plain decimal number: {value!r}"
                )
        key = tuple(rec[c] for c in KEY_COLUMNS)
        if key in seen:
            raise UsageError(
                f"{where} line {lineno}: duplicate of line {seen[key]} ({', '.join(key)})"
            )
        seen[key] = lineno
        clean.append(rec)
    if not clean:
        raise UsageError(f"{where}: no data rows")
    return pd.DataFrame(clean, columns=STUDYA_COLUMNS)


def import_dataset(path: str | Path, name: str, *, replace: bool = False) -> Dataset:
    """Validate a study-A CSV and store it under the user data directory as NAME."""
    if not _NAME.fullmatch(name):
        raise UsageError(f"bad dataset name {name!r}: use letters, digits, '.', '_' or '-'")
    if name in _builtin():
        raise UsageError(f"{name!r} is a built-in dataset; choose another name")
    src = Path(path)
    try:
        text = src.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{src}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{src}: not UTF-8 text (expected a CSV file)") from None
    except OSError as exc:
        raise UsageError(f"{src}: {exc.strerror or exc}") from None
    df = validate(text, str(src))
    dest = user_dir() / f"{name}.csv"
    if dest.exists() and not replace:
        raise UsageError(f"dataset {name!r} exists; pass --replace to overwrite it")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(dest, index=False)
    except OSError as exc:
        raise VmtaxError(f"cannot write {dest}: {exc.strerror or exc}") from None
    return Dataset(name, "user", str(dest), len(df), True, "imported study-A table")
