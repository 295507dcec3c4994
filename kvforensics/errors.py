"""Errors a user can act on. The CLI prints them as one line and exits non-zero."""


class KvfError(Exception):
    """A problem with the user's input or environment (bad file, missing flag...).

    The message must fit on one line and say what to do about it.
    """

    exit_code = 2


class InputError(KvfError):
    """Unreadable, missing or malformed input."""


class MissingConfigError(KvfError):
    """A size the replay needs was neither in the log nor given on the command line."""
