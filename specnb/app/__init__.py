"""What people run: the command line (`cli`, `python -m specnb`), the demo (`demo`), the
notebook executor (`notebooks`, `python -m specnb.app.notebooks`) and the capstone's checks
(`exercise/`, docs/exercise.md; `python -m specnb.app.exercise starter` writes its starter file)."""
