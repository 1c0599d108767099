"""The builder wing: runs on an online machine. It may talk to the network; the installer never imports it."""
