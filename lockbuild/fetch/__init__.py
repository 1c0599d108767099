"""Fetching, on the builder: the HTTP clients (the package index, GitHub, the Hub), the one fetcher of
files, its cache and its window ahead of the packer. Network code: the installer never imports it.
"""
