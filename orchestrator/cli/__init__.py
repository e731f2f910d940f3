"""Layer 6, cli: the `mlvp` command line (argument parsing in main.py, what each command does in commands.py)."""
