"""The one base class of the errors a user sees.

Every error that is about the user's inputs or machine — a params file, a model folder, a
bag, an output folder, a data set — derives from `UserError` next to its usual base class
(`ValueError`, `RuntimeError`), with a message that names the file or setting at fault. The
`blockplan` command prints such an error as one line (`error: ...`, exit status 1; `-v`
adds the traceback), as it does an `OSError` (a full disk, a read-only folder); anything
else is a bug and keeps its traceback. What each message means: docs/ERRORS.md.
"""

from __future__ import annotations


class UserError(Exception):
    """An error whose message is meant for the user: the CLI prints it as one line."""


class ConfigError(UserError, ValueError):
    """A configuration value or key is invalid; the message names the field."""
