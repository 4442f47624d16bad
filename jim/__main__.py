import sys

from jim.cli import main

sys.exit(main())
