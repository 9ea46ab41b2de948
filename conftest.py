"""Hypothesis profiles for every property test: `ci` (chosen when CI is set) replays the same examples on every run."""
import os
from hypothesis import settings

# no deadline anywhere: on a loaded 2-core machine a slow example is not a failure. "ci" derandomizes (examples come
# from a fixed seed, and no example database carries failures from one run into the next), so the same command passes
# or fails the same way on every run; a failure hypothesis finds elsewhere is pinned with @example in its test.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
