"""HPC sites: an installed engine as one reproducible squashfs image, mounted read-only.

``view`` (PREFIX shown over the staging directory), ``build`` (install, bytecode, pack, placement),
``record`` (``FILE.sqfs.json`` and listing), ``check`` (signing an image and verifying it)."""
