import sys

from whosaid.cli.main import main

sys.exit(main())
