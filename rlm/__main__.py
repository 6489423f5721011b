from rlm.cli.app import main

main()
