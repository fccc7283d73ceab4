"""One exception type for bad input: the CLI prints its message on one line and exits 2."""


class UserError(Exception):
    """Bad input named by the message: a path, a key, a value. Never a traceback."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
