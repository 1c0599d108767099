"""Source distributions on the builder: their build requirements read without running them, their
metadata, their build closure locked, and the ones built here in the sandbox. Never imported by the node.
"""
