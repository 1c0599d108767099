from lockbuild.cli import main

main()
