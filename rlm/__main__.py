from rlm.cli import main

main()
