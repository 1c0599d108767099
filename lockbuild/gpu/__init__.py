"""The GPU vocabulary: compute capabilities, driver versions, architecture names, NVIDIA's table of
CUDA releases and their minimum drivers (``vocab``), and what a build's binaries carry kernels for
(``fatbin``, ``elfread``, ``fit``). Pure, or reading only the files it is given: the recipe, the manifest,
the builder, the node and the doctor all import it; it imports nothing of theirs.
"""
