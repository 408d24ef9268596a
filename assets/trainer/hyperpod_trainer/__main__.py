"""`python -m hyperpod_trainer` (and `torchrun -m hyperpod_trainer`)."""

from hyperpod_trainer.cli import run

if __name__ == "__main__":
    run()
