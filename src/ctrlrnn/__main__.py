import sys

from ctrlrnn.cli import main

sys.exit(main())
