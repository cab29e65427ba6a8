import sys

from whosaid.cli import main

sys.exit(main())
