"""The self-test's defaults, in a module light enough for the CLI to import with every command."""

TIMEOUT = 1800.0  # seconds the verify command and the smoke command may each take
