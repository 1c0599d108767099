"""The node's choice among builds: each candidate judged against the node (pure rules in ``candidates``
and ``ranking``), and the I/O around them (``choose``). Node-side: no network, builder, recipe or site code.
"""
