"""`vmtax refs list | show NAME | import PATH --name NAME`: published reference results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vmtax.errors import UsageError

refs_app = typer.Typer(
    help="Published reference results (the seeds' tables) and your own imported tables.\n\n"
    "Example: vmtax refs show fitzgerald2014",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.add_typer(refs_app, name="refs")


def _check_format(fmt: str) -> None:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    if fmt not in fmt_mod.FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(fmt_mod.FORMATS)})")


@refs_app.command("list")
def list_cmd(
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json")] = "table",
) -> None:
    """List the reference datasets: built-in ones and those you imported.

    Example: vmtax refs list --format markdown
    """
    # heavy: pandas and the use case, only when the command runs
    import pandas as pd

    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.refs import datasets
    from vmtax.report import compare_format as fmt_mod

    _check_format(fmt)

    frame = pd.DataFrame(
        [vars(d) for d in datasets.datasets()],
        columns=["name", "source", "rows", "studya", "description", "path"],
    )
    emit(fmt_mod.render_frame(frame, fmt, "reference datasets"))


@refs_app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="Dataset name (see vmtax refs list).")],
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json")] = "table",
) -> None:
    """Print one reference dataset exactly as published.

    Example: vmtax refs show dvh2020_micro --format csv
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.refs import datasets
    from vmtax.report import compare_format as fmt_mod

    _check_format(fmt)
    emit(fmt_mod.render_frame(datasets.load(name), fmt, name))


@refs_app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(help="CSV with the columns of fitzgerald2014.csv.")],
    name: Annotated[str, typer.Option(help="Name to store it under.")],
    replace: Annotated[bool, typer.Option(help="Overwrite a dataset of that name.")] = False,
) -> None:
    """Import a study-A table (the columns of fitzgerald2014.csv) as a reference dataset.

    It is validated and stored under the user data directory; compare --dataset NAME uses it.

    Example: vmtax refs import mylab.csv --name mylab2025
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.refs import datasets

    ds = datasets.import_dataset(path, name, replace=replace)
    typer.echo(f"imported {ds.rows} rows as {ds.name} ({ds.path})")
