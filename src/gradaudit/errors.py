"""Errors that end a run with exit code 2 and one line on stderr."""


class GradauditError(Exception):
    """Usage, load or input error: the CLI prints the message on one line and exits 2."""
