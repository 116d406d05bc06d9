"""One exception type for every failure a user should see as a one-line message."""

from __future__ import annotations


class VmtaxError(Exception):
    """A failure to report as one line on stderr with a non-zero exit.

    ``exit_code`` follows the agent's convention: 2 for bad input (usage, suite, parameter),
    1 for a failure while measuring or storing.
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class UsageError(VmtaxError):
    """Bad input from the user: a malformed suite, an unknown probe, a bad option value."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)
