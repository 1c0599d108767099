"""Known vulnerabilities: OSV records and their matching (``osv``), the CycloneDX report beside a bundle
(``report``) and its signature (``signed``), the offline database and VEX documents an audit reads
(``database``, ``vex``) and the audit itself (``audit``). No network code: the builder asks the service
(``fetch/osvclient.py``); everything here is pure or plain bounded file reads.
"""
