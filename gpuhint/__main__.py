import sys

from gpuhint.cli import main

sys.exit(main())
