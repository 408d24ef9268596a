"""`python -m hyperpod_trainer` (and `torchrun -m hyperpod_trainer`)."""

import sys

from hyperpod_trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
