from rlm.cli.entry import main

main()
