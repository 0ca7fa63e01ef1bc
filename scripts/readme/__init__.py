"""The README's generated blocks (scripts/readme_performance.py): every number
they state is read or computed from a committed results file, and checked."""
