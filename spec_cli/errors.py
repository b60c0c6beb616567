"""The one user-facing exception type, caught once in the CLI."""

from __future__ import annotations


class SpecError(Exception):
    """An expected failure: says what went wrong and what to do next.

    The CLI prints it without a traceback and exits with `exit_code`.
    """

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"
