"""Command line: `python -m whosaid <command>` (main), one module per command."""
