"""``vmtax run --param key=value``: one parameter for every selected probe that has it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from vmtax.contract import ProbeInfo
from vmtax.errors import UsageError

_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_params(items: list[str]) -> dict[str, str]:
    """``key=value`` strings to a dict; bad syntax is a UsageError."""
    out: dict[str, str] = {}
    for item in items:
        m = _PARAM.match(item.strip())
        if not m:
            raise UsageError(f"--param must be key=value, e.g. --param delay_us=500, got {item!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def apply_params(
    entries: dict[str, dict[str, Any]], params: dict[str, str], available: Iterable[ProbeInfo]
) -> None:
    """Set each parameter on every planned entry whose probe has it; a parameter that no
    selected probe has is a UsageError naming the ones that exist."""
    infos = {p.name: p for p in available}
    for key, text in params.items():
        hit = False
        for entry in entries.values():
            info = infos.get(entry["probe"])
            spec = next((p for p in info.params if p.name == key), None) if info else None
            if spec is None:
                continue
            entry["params"][key] = _typed(key, text, spec.kind)
            hit = True
        if not hit:
            have = sorted({p.name for e in entries.values() for p in _params(infos, e)})
            raise UsageError(
                f"--param {key}: no selected probe has it (they have: {', '.join(have) or 'none'})"
            )


def _params(infos: dict[str, ProbeInfo], entry: dict[str, Any]) -> list[Any]:
    info = infos.get(entry["probe"])
    return list(info.params) if info else []


def _typed(key: str, text: str, kind: str) -> Any:
    # Numbers are stored as numbers, so the range check and the stored plan see one type.
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"--param {key}={text}: not an integer") from None
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"--param {key}={text}: not a number") from None
    if kind == "bool":
        if text.lower() not in {"true", "false", "1", "0", "yes", "no"}:
            raise UsageError(f"--param {key}={text}: not true or false")
        return text.lower() in {"true", "1", "yes"}
    return text
