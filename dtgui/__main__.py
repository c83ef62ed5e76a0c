import sys

from dtgui.cli import main

sys.exit(main())
