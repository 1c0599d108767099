"""What crosses the wire, as rules without I/O: URLs (credentials parsed out once, plain http only on
loopback, where a redirect may go), the numbers an answer's headers carry, raw bodies only, and what a
credential may hold. The builder's clients and the registry client apply them; no network code here.
"""
