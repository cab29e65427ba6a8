"""The one error type of the deploy commands."""

from __future__ import annotations


class DeployError(Exception):
    """A failure the user can act on. The CLI prints its message on one line and exits with 1."""
