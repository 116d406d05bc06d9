"""`vmtax db`: where the results store is, its schema version and what it holds."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

db_app = typer.Typer(
    help="The results store: location, schema version, counts.\n\nExample: vmtax db info",
    no_args_is_help=True,
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Store URL or SQLite path (default: $VMTAX_DB, else vmtax.db in the user data "
        "directory). PostgreSQL: postgresql://USER@HOST/DBNAME.",
        show_default=False,
    ),
]


@db_app.command("info")
def info(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show the store URL (password hidden), its schema version and row counts.

    Example: vmtax db info --db postgresql://vmtax@localhost/vmtax
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import store_info

    data = store_info.info(db)
    known = data.pop("schema_known")
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("store", data["url"])
    version = data["schema_version"] or "none (empty database)"
    if data["schema_version"] and not known:
        # db upgrade cannot help: it refuses a schema it does not know, as every command does.
        version += (
            f" (newer than this vmtax, which knows up to {data['schema_head']}: upgrade vmtax)"
        )
    elif data["schema_version"] != data["schema_head"]:
        version += f" (this vmtax: {data['schema_head']}; run 'vmtax db upgrade')"
    table.add_row("schema version", version)
    for name, count in data["counts"].items():
        table.add_row(name.replace("_", " "), f"{count:,}")
    Console(highlight=False).print(table)


@db_app.command("upgrade")
def upgrade(db: DbOption = None) -> None:
    """Create the store or migrate its schema to this vmtax's version.

    Every other command does this on its own; this one does only that.

    Example: vmtax db upgrade --db ~/results/vmtax.db
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import store_info

    url, version = store_info.upgrade(db)
    typer.echo(f"{url}: schema version {version}")


def register(app: typer.Typer) -> None:
    """Add ``vmtax db`` to the app."""
    app.add_typer(db_app, name="db")
