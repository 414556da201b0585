"""What people run: the command line (`cli`, `python -m specnb`), the demo (`demo`) and the
notebook executor (`notebooks`, `python -m specnb.app.notebooks`)."""
