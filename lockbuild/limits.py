"""Resource bounds for reading untrusted bundles and archives, as named settings with safe defaults."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20  # sizes and bounds are written in MiB; the read size of copy and hash loops is digest.CHUNK


@dataclass(frozen=True)
class Limits:
    max_member: int = 32 << 30  # the largest single file (the largest CUDA wheels are ~1 GB)
    max_bundle: int = 256 << 30  # the most bytes a bundle may unpack to
    max_members: int = 100_000  # the most files a bundle may hold
    zstd_window: int = 1 << 27  # the largest zstd window accepted, in bytes (128 MiB)
    max_path: int = 255  # the longest member path, in bytes
    max_manifest: int = 16 << 20  # bundle.toml's largest size
    max_signature_file: int = 64 << 10  # a .minisig file's largest size
    max_index_files: int = 200_000  # the most files one index project page may list
    max_index_files_total: int = 1_000_000  # the most files all index pages of one plan may list together
    max_image_marker: int = MiB  # an image's marker (lockbuild.json), as `unsquashfs -cat` prints it
    max_gpu_query: int = 64 << 10  # what `nvidia-smi --query-gpu` may print (64 GPUs are a few KiB)
    max_listing_bytes: int = 256 << 20  # a Hub revision's listing, all its answers together (revision and tree pages)
    max_listing_entries: int = 200_000  # the entries (files and folders) of a Hub revision's tree, all pages together


DEFAULT_LIMITS = Limits()
