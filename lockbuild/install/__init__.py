"""The installer wing: runs on the air-gapped node. It imports no network code (no httpx, no builder)."""
