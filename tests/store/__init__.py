"""Tests of agentrio.store (a package: its test_*.py names repeat other folders')."""
