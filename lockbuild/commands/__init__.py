"""The click commands, one module per wing; ``lockbuild.cli`` registers them on the group."""
