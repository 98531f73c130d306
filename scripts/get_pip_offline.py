"""Stand-in for ansible-test's get-pip script where its download host is unreachable.

ansible-test runs it as `python get_pip.py <pip options> <packages>` in a fresh venv with a
clean environment, so the system CA bundle is passed to pip explicitly.
"""

import ensurepip
import os
import subprocess
import sys

CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def main():
    ensurepip.bootstrap(upgrade=True)
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    cert = next((path for path in CA_BUNDLES if os.path.exists(path)), None)
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    if cert:
        cmd += ["--cert", cert]
    sys.exit(subprocess.call(cmd + args))


if __name__ == "__main__":
    main()
