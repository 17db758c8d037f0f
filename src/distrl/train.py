"""``python -m distrl.train ...`` is ``distrl train ...`` (the form torchrun's ``-m`` launches)."""

import sys

from distrl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
