import sys

from dstbench.cli import main

sys.exit(main())
