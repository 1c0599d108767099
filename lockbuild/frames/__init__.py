"""Framed bundles: the tar stream cut into independent zstd frames of a fixed size, a standard seek table
and a table of each frame's sha256 at the end (seektable.py), written and read on a pool of threads
(framepool.py). docs/bundle-format.md describes the layout."""
