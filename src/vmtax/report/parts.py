"""The parts a report is built from: figures to draw and tables of formatted cells. Every
section of the report (analysis, exits, prediction, applications) makes them."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class FigureSpec:
    """A figure with its place in the report. ``reference`` marks published (not user) data.

    ``draw`` makes the figure: the report draws its figures in parallel processes, and
    making one costs about as much as rendering it."""

    key: str
    section: str
    title: str
    caption: str
    draw: Callable[[], Figure] = field(repr=False)
    reference: bool = False
    #: The set-up ``draw`` shares with other figures (a mesh's frame, by its layout), or
    #: None: see ``svg.render_all``.
    shares: Hashable | None = None

    @cached_property
    def figure(self) -> Figure:
        return self.draw()


@dataclass
class Table:
    """A table ready to print: header cells and rows of already formatted strings."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool] = field(default_factory=list)
    note: str = ""
    #: Columns whose cells never wrap (a one-word verdict broke as "impreci/se").
    nowrap: list[bool] = field(default_factory=list)
