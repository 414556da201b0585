"""The starter's runner: each step's check in order, stopping at the first step to do, and saying
what it is (a function still to write, or a check that fails and why)."""
from __future__ import annotations

import ast
import inspect
import textwrap

SECTIONS = {1: "Step 1: the draft", 2: "Step 2: verification", 3: "Step 3: one round",
            4: "Step 4: time it and explain the ratio", 5: "Step 5 (optional): an n-gram drafter"}
OPTIONAL = {5}


def unwritten(fn) -> bool:
    """fn's body is still the starter's: a docstring, then only `raise NotImplementedError(...)`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and "NotImplementedError" in ast.unparse(body[0].exc))


def run_steps(steps) -> bool:
    """steps: [(step number, check, (your functions...)), ...] in order. Runs each check whose
    functions are written; stops at the first function still to write or the first check that
    fails, and says which step to do next. Returns True when every required step passed."""
    for step, check, fns in steps:
        todo = [f.__name__ for f in fns if unwritten(f)]
        if todo and step in OPTIONAL:
            print(f"every required step passed. Optional next: step {step}, write {', '.join(todo)} "
                  f"(docs/exercise.md, \"{SECTIONS[step]}\")")
            return True
        if todo:
            print(f"next: step {step}, write {', '.join(todo)} (docs/exercise.md, \"{SECTIONS[step]}\")")
            return False
        try:
            check(*fns)
        except AssertionError as e:
            print(f"step {step} does not pass yet:\n  {e}\nfix it and run this file again")
            return False
    print("every step passed: write the closing sentences (docs/exercise.md, \"To finish\")")
    return True
