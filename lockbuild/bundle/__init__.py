"""The bundle format: a manifest, a deterministic zstd tar writer, and a safe streaming reader."""
