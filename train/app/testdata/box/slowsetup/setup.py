# A setup.py that never finishes (TestInstallTimeout): the install's
# timeout must end it.
import time

from setuptools import find_packages, setup

time.sleep(600)
setup(name="trainer", version="0.1", packages=find_packages())
