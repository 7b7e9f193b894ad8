import os
import sys
from pathlib import Path

import pytest
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


@pytest.fixture(autouse=True, scope="session")
def _no_writes_to_the_users_cache(tmp_path_factory):
    """What the tests start writes under a temp dir, never the user's own files: `chatsieve
    serve`'s default response store is $XDG_CACHE_HOME/chatsieve/responses.sqlite3."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before
