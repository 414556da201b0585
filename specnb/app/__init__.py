"""What people run: the command line (`cli`, `python -m specnb`), the demo (`demo`) and the
notebook executor (`course`, `python -m specnb.app.course`)."""
