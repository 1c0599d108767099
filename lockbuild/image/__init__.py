"""HPC sites: an installed engine as one reproducible squashfs image, mounted read-only.

``view`` (PREFIX shown over the staging directory in a mount namespace), ``build`` (the install, the
deterministic bytecode, the pack, the atomic placement), ``record`` (``FILE.sqfs.json`` and listing),
``check`` (signing an image and verifying it: the signing path and the one policy evaluation of
``lockbuild.trust``).
"""
