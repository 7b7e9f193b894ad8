import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

# One Hypothesis profile wherever the suite runs. Hypothesis loads its "ci" profile by
# itself when it sees a CI variable (CI, GITHUB_ACTIONS, ...); that profile sets
# database=None, and with it every parametrized case of a @given test adds one more
# level to a settings chain that is then walked uncached: past about 950 cases (the
# fixture chunking test) that is a RecursionError. Built on "default", not on whatever
# profile Hypothesis loaded, so the same examples database is used locally and in CI.
settings.register_profile("chatsieve", parent=settings.get_profile("default"), print_blob=True)
settings.load_profile("chatsieve")
