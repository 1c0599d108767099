"""Running other programs: the bubblewrap sandbox, uv with a clean environment, a child's bounded
output, and the bounded hand-offs between threads. No network code; the installer uses it too.
"""
