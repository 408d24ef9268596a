"""Stacks compose constructs and nothing else; `hyperpod_kit.app` wires them in deploy order."""
