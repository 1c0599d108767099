"""Models on the node: a signed model bundle placed as the exact Hugging Face cache, checked against its
kept record, and the settings an engine reads it with. Node-side: no network, builder, recipe or site code.
"""
