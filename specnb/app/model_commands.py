"""`specnb models` and `specnb forge`: the model files specnb knows by name, and the GGUF variants it
writes (drafts, mutated vocabs, tiny models)."""
from __future__ import annotations

import json
import sys


def cmd_models(a):
    from ..model import registry
    from ..errors import ParamError
    takes = {"list": "no NAME", "path": "exactly one NAME", "install": "one or more NAMEs"}
    n = len(a.names)
    if (a.action == "list" and n) or (a.action == "path" and n != 1) or not (n or a.action == "list"):
        raise ParamError(f"models {a.action} takes {takes[a.action]}, got {n}")
    if a.action == "list":
        rows = []
        for name, e in registry.REGISTRY.items():
            state, path = registry.status(name)
            rows.append({"name": name, "about": e.about, "size": e.size, "kind": e.kind,
                         "state": state, "installed": path is not None, "path": path,
                         "runnable": e.runnable})
        if a.json:
            print(json.dumps({"models": rows}))
            return 0
        for r in rows:
            print(f"{r['name']:<20} {registry.size_text(r['size']):>7}  {r['state']}")
            print(f"    {r['about']}")
            if r["path"]:
                print(f"    {r['path']}")
        print("\nEvery -m / -md takes one of these names or a GGUF path. "
              "Install one: specnb models install NAME")
        return 0
    if a.action == "path":
        from ..errors import ModelNotFoundError
        try:
            print(registry.installed_path(a.names[0]))
        except ModelNotFoundError as e:
            if a.names[0] not in registry.REGISTRY:
                raise
            print(f"specnb models: {e}", file=sys.stderr)
            return 1
        return 0
    for name in a.names:                     # install
        registry.entry(name)                 # every name is checked before anything is installed
    for name in a.names:
        print(registry.install(name))
    return 0


FORGE_KINDS = ("default-draft", "requantize", "truncate", "mutate", "tiny")


def cmd_forge(a):
    from ..gguf import forge
    from ..errors import ParamError
    from ..model.registry import DEFAULT_DRAFT, default_target_path, model_path
    if a.kind == "default-draft":
        print(model_path(DEFAULT_DRAFT))
        return 0
    if a.output is None:
        raise ParamError(f"forge {a.kind}: give the destination with -o PATH")
    if a.kind == "tiny":
        from ..model.testing import tiny_model
        print(tiny_model(a.output, qtype=a.type, n_layer=a.layers, seed=a.seed))
        return 0
    from ..model.registry import resolve
    src = resolve(a.model) if a.model else default_target_path()
    if a.kind == "requantize":
        out = forge.requantize(src, a.output, a.type)
    elif a.kind == "truncate":
        out = forge.truncate_layers(src, a.output, a.layers)
    else:
        out = forge.mutate_vocab(src, a.output, a.mutation)
    print(out)
    return 0
