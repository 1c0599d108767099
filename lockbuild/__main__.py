"""``python -m lockbuild``: the same program as the ``lockbuild`` console script, by name and completion."""

from lockbuild.cli import main
from lockbuild.commands.clikit import COMPLETE_VAR, PROG_NAME

main(prog_name=PROG_NAME, complete_var=COMPLETE_VAR)
