from kvforensics.cli import main

main()
