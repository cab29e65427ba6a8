"""Create and manage the whosaid Inference Endpoint: `python deploy/endpoint.py create NAME ...`.

A thin entry point for people who run scripts rather than `python -m whosaid deploy`; both run
`whosaid.deploy.main`, so every command, option and message is the same. See deploy/README.md.
"""

import sys
from pathlib import Path

# Run as a script, Python puts deploy/ on the path, not the checkout holding the whosaid package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from whosaid.deploy import main  # noqa: E402 - needs the path above

if __name__ == "__main__":
    sys.exit(main(prog="deploy/endpoint.py"))
