"""Figures measured once per machine and kept: one mechanism for every such record.

Some figures belong to the machine, not to a run: how far ahead the int8 kernels prefetch, the
int8 compute limit, the costs of a pair of models (specnb.measure.costs). Each is measured once,
kept in a JSON file in the stamped kernel-cache folder (kernels/__init__.py's cache_folder: an
edit of any kernel starts a fresh folder, so a figure never outlives the code it measured), and
read back by every later process:

    rec = MachineRecord("prefetch.json", valid=lambda v: ...)
    rec.get(key, measure, on_measure)   remembered in this process, else recorded, else measured
                                        now (one process at a time) and recorded
    rec.read(key) / rec.put(key, v)     the recorded figure (None: missing, damaged, too old) / record one

A record that is missing, unreadable, fails `valid` or is older than `max_age_s` is measured
again, never trusted. Writes are atomic (specnb.cache) and a record is kept beside the other
keys' ones; a read-only cache only means measuring again next time. While one process measures,
another asking for the same file waits on its lock and then reads what the first recorded, so a
classroom of notebooks opened at once measures once.
"""
import contextlib
import json
import os
import time


def cpu_identity() -> dict:
    """{"name", "vendor", "family", "model"} of this CPU as /proc/cpuinfo gives them ("" where it
    does not: another system), the name falling back to LLVM's name for the host."""
    from llvmlite import binding as llvm
    out = {"name": "", "vendor": "", "family": "", "model": ""}
    fields = {"model name": "name", "vendor_id": "vendor", "cpu family": "family", "model": "model"}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                k, _, v = ln.partition(":")
                k = k.strip()
                if k in fields and not out[fields[k]]:
                    out[fields[k]] = v.strip()
                if not ln.strip() and out["name"]:
                    break                  # the first processor's block is enough
    except OSError:
        pass
    out["name"] = out["name"] or llvm.get_host_cpu_name()
    return out


def cpu_name() -> str:
    """'AMD EPYC (family 26 model 2)': the CPU's name with its family and model where the system
    gives them (one name covers several microarchitectures)."""
    c = cpu_identity()
    return c["name"] + (f" (family {c['family']} model {c['model']})" if c["family"] and c["model"] else "")


def machine_key(n_threads: int) -> str:
    """'CPU model (family F model M)|N CPUs|n threads': what a figure measured on these threads
    belongs to."""
    return f"{cpu_name()}|{os.cpu_count()} CPUs|{n_threads} threads"


def _read_all(path: str) -> dict:
    try:
        with open(path) as f:
            v = json.load(f)
        return v if isinstance(v, dict) else {}
    except (OSError, ValueError):
        return {}                      # missing or unreadable: measured again, then rewritten


@contextlib.contextmanager
def _locked(path: str):
    # an exclusive lock on path + ".lock" for the block (where the system has flock; elsewhere
    # two processes may both measure, and the later record wins: still a whole file)
    try:
        import fcntl
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path + ".lock", "a")
    except (ImportError, OSError):
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class MachineRecord:
    """The records of one JSON file in the stamped kernel-cache folder, keyed by the machine."""

    def __init__(self, file_name: str, valid, max_age_s: float | None = None):
        self.file_name = file_name
        self.valid = valid
        self.max_age_s = max_age_s
        self.memo: dict = {}           # key -> this process's figure

    def path(self) -> str:
        from . import cache_folder
        return os.path.join(cache_folder(), self.file_name)

    def read(self, key: str):
        """The recorded figure for key (a dict with "date" and "time"), or None when there is none,
        it is damaged (fails `valid`) or it is older than max_age_s."""
        v = _read_all(self.path()).get(key)
        try:
            ok = isinstance(v, dict) and bool(self.valid(v))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            ok = False
        if ok and self.max_age_s is not None:
            t = v.get("time")
            ok = isinstance(t, (int, float)) and 0 <= time.time() - t <= self.max_age_s
        return v if ok else None

    def put(self, key: str, v: dict) -> dict:
        """Record v for key (stamped with "date" and "time"), beside the other keys' records, and
        remember it in this process. Returns v."""
        from ..cache import write_bytes_atomic
        v.setdefault("date", time.strftime("%Y-%m-%d %H:%M:%S"))
        v.setdefault("time", time.time())
        path = self.path()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            records = _read_all(path)
            records[key] = v
            write_bytes_atomic(path, json.dumps(records, indent=1).encode())
        except OSError:
            pass                       # a read-only cache: measured again next time
        self.memo[key] = v
        return v

    def get(self, key: str, measure, on_measure=None, text: str = "", keep=lambda v: True):
        """The figure for key: remembered in this process, else recorded, else measure() now
        (on_measure(text) first) and recorded where keep(figure) says so (a figure kept out
        serves this process only, and the next one measures again)."""
        if key in self.memo:
            return self.memo[key]
        v = self.read(key)
        if v is None:
            with _locked(self.path()):
                v = self.read(key)     # another process may have measured while this one waited
                if v is None:
                    if on_measure is not None and text:
                        on_measure(text)
                    v = measure()
                    if keep(v):
                        return self.put(key, v)
        self.memo[key] = v
        return v
