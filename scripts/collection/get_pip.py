"""ansible-test's pip bootstrap, from a pip wheel on disk instead of a download.

ansible-test creates each sanity test's virtual environment without pip and runs
~/.ansible/test/cache/get_pip_<version>.py in it: pip's get-pip.py, which it fetches from
its own CI file server. This file stands in for that script (scripts/collection-check.sh
copies it there) and does what get-pip.py does: it runs pip from the pip wheel (a zip
Python can import from), downloaded from PyPI beside this file, to install the packages
ansible-test names (pip==<version>). --no-setuptools / --no-wheel say what not to add.
"""

import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
version = os.path.splitext(os.path.basename(__file__))[0].removeprefix("get_pip_").replace("_", ".")
wheels = glob.glob(os.path.join(here, f"pip-{version}-py3-none-any.whl"))
if not wheels:
    sys.exit(f"pip is unavailable: no pip-{version}-py3-none-any.whl in {here}")
sys.path.insert(0, wheels[0])

from pip._internal.cli.main import main  # noqa: E402

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--upgrade", "--force-reinstall", *args]))
