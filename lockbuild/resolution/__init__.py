"""Resolution, on the builder: the cut-off, uv's compile of a build's requirements (the only place that
runs it), remembered resolutions, each pin's file, the index's statements about it, and what a locked
package's wheels allow (the manylinux level it needs). Builder-only: the node never imports it.
"""
