"""Create and manage the whosaid Inference Endpoint: `python -m deploy.endpoint create NAME ...`.

A thin entry point for people who run scripts rather than `python -m whosaid deploy`; both run
`whosaid.deploy.cli.main`, so every command, option and message is the same. Run it from the
repository root (or with the package installed: `pip install -e .`). See deploy/README.md.
"""

import sys

from whosaid.deploy.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m deploy.endpoint"))
