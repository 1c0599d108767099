"""The OCI registry client: references, auth, transport, retries, push and the artifact a node pulls.

It carries signature files and blobs; it decides nothing (the one decision is ``trust/opener.py``). It may
import the core (``bundle``, ``trust``, ``fsio``, ``site``'s store) and never the builder or the installer.
"""
