"""The command line as stored with an experiment or a report: what was typed, with the store
URL's password left out. Its own module, as the report and the run record it and the report
needs nothing else of the run's request (which loads the contract's models)."""

from __future__ import annotations


def command_line(argv: list[str], db_display: str) -> list[str]:
    """The command as typed, with the --db URL replaced by its password-free form."""
    out = ["vmtax"]
    skip = False
    for arg in argv:
        if skip:
            out.append(db_display)
            skip = False
        elif arg == "--db":
            out.append(arg)
            skip = True
        elif arg.startswith("--db="):
            out.append(f"--db={db_display}")
        else:
            out.append(arg)
    return out
