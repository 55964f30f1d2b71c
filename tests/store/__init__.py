"""Tests of agentrio.store (a package: its test_base and test_writer share names with
other folders' tests)."""
