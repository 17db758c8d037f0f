import sys

from distrl.cli import main

sys.exit(main())
