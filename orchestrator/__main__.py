"""`python -m orchestrator ...`: the command line of orchestrator/cli/main.py."""
import sys

from orchestrator.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
