"""``python -m jim.gram`` is ``jim gram-install``, for when the jim CLI is not at hand."""

import sys

from jim.gram import main

sys.exit(main(sys.argv[1:]))
