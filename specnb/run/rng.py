"""llama.cpp's random numbers: std::mt19937 seeded with the seed, and libstdc++'s draws from it.

Every llama.cpp sampler that draws (dist, xtc, mirostat, mirostat v2) owns a `std::mt19937`
seeded with `get_rng_seed(seed)` (src/llama-sampler.cpp). NumPy's legacy `RandomState(seed)`
is the same generator with the same seeding (init_genrand), so its 32-bit stream is identical;
on top of it this module draws as GCC's libstdc++ does (the library llama.cpp's Linux builds
use; other C++ libraries may draw differently from the same stream):

- `canonical_double()`: `std::uniform_real_distribution<double>(0, 1)`, two 32-bit outputs
  (generate_canonical<double, 53>);
- `canonical_float()`: `std::uniform_real_distribution<float>(0, 1)`, one 32-bit output;
- `discrete(p)`: `std::discrete_distribution<int>` over the weights p, one canonical double
  and a lower_bound on the normalised cumulative sums; with fewer than two weights it returns
  0 without drawing.

Equal probabilities and an equal seed therefore give the same token as llama.cpp.
"""
from __future__ import annotations

import secrets

import numpy as np

LLAMA_DEFAULT_SEED = 0xFFFFFFFF      # "pick a random seed"
_TWO32 = 4294967296.0
_TWO64 = 18446744073709551616.0
_BELOW_ONE_DOUBLE = float(np.nextafter(1.0, 0.0))
_BELOW_ONE_FLOAT = np.nextafter(np.float32(1.0), np.float32(0.0))


def get_rng_seed(seed: int) -> int:
    """get_rng_seed: the seed itself, or a random 32-bit one for LLAMA_DEFAULT_SEED."""
    return secrets.randbits(32) if seed == LLAMA_DEFAULT_SEED else int(seed)


_SEEDED: dict = {}                   # seed -> init_genrand's state (a draft sampler reseeds every round)
_SEEDED_MAX = 64


def _seeded_state(seed: int) -> dict:
    st = _SEEDED.get(seed)
    if st is None:
        _, key, pos = np.random.RandomState(seed).get_state()[:3]
        key.flags.writeable = False
        if len(_SEEDED) >= _SEEDED_MAX:
            _SEEDED.pop(next(iter(_SEEDED)))
        st = _SEEDED[seed] = {"key": key, "pos": int(pos)}
    return st


class Mt19937:
    """std::mt19937 with libstdc++'s uniform and discrete draws (see the module docstring)."""

    def __init__(self, seed: int):
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """std::mt19937::seed(seed): init_genrand, the same as RandomState(seed)."""
        if not hasattr(self, "_bits"):          # (a new bit generator seeds itself from the OS: 90 us)
            self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937", "state": _seeded_state(int(seed) & 0xFFFFFFFF)}

    def u32(self) -> int:
        """One 32-bit output (operator())."""
        return int(self._bits.random_raw())

    def canonical_double(self) -> float:
        # generate_canonical<double, 53>: sum = g1 + g2 * 2^32 in double, divided by 2^64
        g1, g2 = self._bits.random_raw(2)
        r = (float(g1) + float(g2) * _TWO32) / _TWO64
        return _BELOW_ONE_DOUBLE if r >= 1.0 else r

    def canonical_float(self) -> np.float32:
        # generate_canonical<float, 24>: one output, rounded to float, divided by 2^32
        r = np.float32(self.u32()) / np.float32(_TWO32)
        return _BELOW_ONE_FLOAT if r >= 1.0 else r

    def discrete(self, p) -> int:
        """std::discrete_distribution<int>(p.begin(), p.end())(rng) (llama_sample_dist)."""
        w = np.asarray(p, dtype=np.float64)
        if len(w) < 2:
            return 0                                   # libstdc++: no draw at all
        cum = np.cumsum(w)                             # std::accumulate, left to right
        cp = np.cumsum(w / cum[-1])                    # normalise, then partial_sum
        cp[-1] = 1.0
        return int(np.searchsorted(cp, self.canonical_double(), side="left"))

    # NumPy-Generator-style names, for callers that only need a uniform or a weighted pick
    def random(self) -> float:
        return self.canonical_double()

    def choice(self, n: int, p=None) -> int:
        return self.discrete(np.full(n, 1.0 / n) if p is None else p)
