"""`python -m pelotonctl`: the same as the pelotonctl console script."""

from pelotonctl.cli import main

main()
