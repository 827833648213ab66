import sys

from edgessm.cli import main

sys.exit(main())
