"""Reusable L3 constructs. Each takes keyword-only typed props and exposes typed handles."""
