"""The test suite never writes into the user's cache folder: conftest points B200C_CACHE_DIR at a
temporary folder for the whole session (the compile caches and the kernel cache live under it)."""
import os
import tempfile
from pathlib import Path

import platformdirs

from b200c.compile_cache import cache_root


def test_the_session_cache_is_temporary():
    root = cache_root()
    assert root != Path(platformdirs.user_cache_dir("b200c"))
    if not os.environ.get("B200C_TEST_CACHE_DIR"):
        assert root.is_relative_to(tempfile.gettempdir()) and root.name.startswith("b200c-test-cache-")
