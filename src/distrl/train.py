"""``python -m distrl.train ...`` is ``distrl train ...`` (the form torchrun's ``-m`` launches)."""

import sys

from distrl.cli import run

if __name__ == "__main__":
    run(["train", *sys.argv[1:]])
