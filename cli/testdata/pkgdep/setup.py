from setuptools import find_packages, setup

# A dependency no index has: pip fails with "No matching distribution found".
setup(name="trainer", version="0.1", packages=find_packages(),
      install_requires=["trainflow-no-such-dependency==1.0"])
