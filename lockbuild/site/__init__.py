"""The site wing: moving signed content between the machines of a site.

A store on disk (``store``), an import that checks a bundle as ``install`` would (``importer``), media
parts (``parts``), and OCI registry distribution (``oci`` for the protocol, ``registry`` for push and
pull). Every path into the store goes through ``trusted``, the one place that decides what is signed.
This wing may use the network; ``lockbuild.install`` never imports it.
"""
