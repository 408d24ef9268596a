"""The `hyperpod-kit` command."""
