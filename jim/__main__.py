import os
import sys

from jim.ownership import IMPORT_PATH_ENV, import_path

if IMPORT_PATH_ENV in os.environ:  # a background jim (python -I): its parent's vetted import path
    sys.path[:0] = [p for p in import_path() if p not in sys.path]
    del os.environ[IMPORT_PATH_ENV]

from jim.cli import main  # (after the import path is complete: plug-ins may live there)

sys.exit(main())
