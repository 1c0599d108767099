"""The site wing: moving signed content between the machines of a site (a store, imports, media parts,
registry distribution). Every path into the store goes through the one trust decision. This wing may use
the network; ``lockbuild.install`` never imports it."""
