"""Errors a user can act on. The CLI prints their message (no traceback) and exits with 2."""


class TagrpoError(Exception):
    """A user-facing error: bad input file, row or field, bad config value, missing package."""


class NotYetAvailable(TagrpoError):
    def __init__(self, what: str, issue: str):
        super().__init__(f"`tagrpo {what}` is not available yet in this version (tracked in {issue}).")
