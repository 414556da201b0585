"""Numba's cache files made safe for many processes at once (a class opening notebooks together, a
test suite on several workers, a classroom server): one data file per compiled signature, named by
the signature, checked when it loads.

Numba keeps, per cached function, an index (`<function>.nbi`: signature -> data file) and one data
file per signature, numbered 1, 2, ... in the order they were saved (numba/core/caching.py,
IndexDataCacheFile.save). Two processes that save different signatures of one function at the same
moment both read the index before either writes it, both take the same number, and each writes its
own index and its own data under that number. When the last index written is not the last data
written, the index sends one signature to the other's machine code: the next process to load it
unboxes its arguments as the other signature's types and runs the other's code (a TypeError at
best; with a kernel's selection record or a read-only array of the same layout, a crash). Entries
saved by several processes into the same index also overwrite one another, so one of them is
compiled again by every later process.

`use_keyed_cache_files()` replaces IndexDataCacheFile for the functions made after it is called
(specnb.kernels calls it before any kernel is defined):

- a data file is named by a hash of its signature and target (`<function>.k<hash>.nbc`), so two
  signatures never share a file; Numba's own numbered names never collide with it;
- it ends with a trailer (the source stamp and the hash), after the pickle Numba reads (pickle
  ignores bytes past its stream, so an unpatched Numba still loads the file); an entry whose
  trailer is missing, or another's, or that does not unpickle, is compiled again, never loaded;
- a signature is looked up by its file name, not through the index: an index entry lost to a
  concurrent writer costs nothing;
- the index is still written (Numba's tools and an unpatched Numba read it), under a lock file
  where the platform has one, and a damaged index reads as empty.

tests/test_kernel_cache.py::test_processes_saving_signatures_at_once_load_their_own reproduces the
race (several processes compiling signatures of one function into one empty cache at once, then
one loading them all).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import pickle

TRAILER_MAGIC = b"specnb-cache-entry-1"


def entry_digest(key) -> str:
    """A stable name for an index key (signature, target, bytecode and closure hashes): Numba's
    types print the same in every process. An unstable name would only miss the cache."""
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()[:20]


@contextlib.contextmanager
def _locked(path: str):
    try:
        import fcntl
    except ImportError:                  # (Windows: no lock; an entry lost is only recompiled)
        yield
        return
    with open(path + ".lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def keyed_class(base):
    """A subclass of Numba's IndexDataCacheFile with keyed, checked data files."""

    class KeyedIndexDataCacheFile(base):
        def _keyed_name(self, key) -> str:
            return self._data_name_pattern.replace("{number:d}", "k" + entry_digest(key))

        def _trailer(self, key) -> bytes:
            return pickle.dumps((TRAILER_MAGIC, self._version, self._source_stamp, entry_digest(key)),
                                protocol=4)

        def save(self, key, data):
            name = self._keyed_name(key)
            path = self._data_path(name)
            with self._open_for_write(path) as f:           # (a temporary file, then os.replace)
                f.write(self._dump(data))
                f.write(self._trailer(key))
            with _locked(self._index_path):
                overloads = self._load_index()
                if overloads.get(key) != name:
                    overloads[key] = name
                    self._save_index(overloads)

        def load(self, key):
            path = self._data_path(self._keyed_name(key))
            try:
                with open(path, "rb") as f:
                    stream = io.BytesIO(f.read())
                data = pickle.load(stream)
                trailer = pickle.load(stream)
            except FileNotFoundError:
                return None
            except Exception:                 # damaged, or written by another format: compile it
                return None
            if trailer != (TRAILER_MAGIC, self._version, self._source_stamp, entry_digest(key)):
                return None                   # another source, another Numba, another signature
            return data

        def _load_index(self):
            try:
                return super()._load_index()
            except Exception:                 # a damaged index: as if empty
                return {}

    KeyedIndexDataCacheFile.__qualname__ = KeyedIndexDataCacheFile.__name__
    return KeyedIndexDataCacheFile


def use_keyed_cache_files() -> bool:
    """Make the Numba caches created from now on keyed and checked; False (with a warning) where
    this Numba's cache has another shape."""
    from numba.core import caching
    base = getattr(caching, "IndexDataCacheFile", None)
    needed = ("_load_index", "_save_index", "_data_path", "_open_for_write", "_dump")
    if getattr(base, "_specnb_keyed", False):
        return True
    if base is None or not all(hasattr(base, a) for a in needed):
        import warnings
        warnings.warn("specnb.kernels: this Numba's cache has no IndexDataCacheFile of the known shape; "
                      "processes compiling into one cache at once may load one another's kernels "
                      "(give each its own NUMBA_CACHE_DIR)", RuntimeWarning, stacklevel=2)
        return False
    cls = keyed_class(base)
    cls._specnb_keyed = True
    caching.IndexDataCacheFile = cls
    return True
