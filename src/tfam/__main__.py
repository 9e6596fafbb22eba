import sys

from tfam.cli import main

sys.exit(main())
