"""Exceptions raised for bad input.

Every message says what was expected, what was found (file, line, key) and, where
possible, how to fix it. The CLI turns :class:`DataError` into exit status 1 with the
message and no traceback.
"""


class DataError(ValueError):
    """Malformed or inconsistent input data (N-best files, text, checkpoints)."""


class HypothesisError(DataError):
    """A :class:`DataError` about one hypothesis of a scored batch: ``index`` its
    position in the batch, for the caller that knows its key to name it."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


def format_location(path, line_no=None) -> str:
    """``"path:line"`` (1-based line) or just ``"path"`` when no line is given."""
    return f"{path}:{line_no}" if line_no is not None else f"{path}"


def examples(items, n: int = 5) -> str:
    """Join the first ``n`` items for an error message, saying how many there are."""
    items = sorted(items)
    head = ", ".join(str(x) for x in items[:n])
    more = f" ... ({len(items)} in all)" if len(items) > n else f" ({len(items)} in all)"
    return head + more
